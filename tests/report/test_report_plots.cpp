// The report's plots (report/svg_plot.hpp, report/campaign_series.hpp, report/report.hpp) on a
// campaign database built here step by step, so that every plotted point is known.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../search/search_test_util.hpp"
#include "campaign/kb_figures.hpp"
#include "report/campaign_series.hpp"
#include "report/report.hpp"
#include "report/svg_plot.hpp"
#include "search/tree.hpp"
#include "store/llm_store.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;

namespace {

std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// The <svg> elements of the report whose class is "plot <kind>".
std::vector<std::string> plots_of(const std::string& html, const std::string& kind) {
    std::vector<std::string> plots;
    const std::string marker = fmt::format(R"(class="plot {}")", kind);
    for (auto at = html.find(marker); at != std::string::npos; at = html.find(marker, at + 1)) {
        const auto start = html.rfind("<svg", at);
        const auto end = html.find("</svg>", at);
        REQUIRE(start != std::string::npos);
        REQUIRE(end != std::string::npos);
        plots.push_back(html.substr(start, end + 6 - start));
    }
    return plots;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
    std::size_t count = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
        ++count;
    return count;
}

/// The values of attribute `name` on elements that carry `marker`, in document order.
std::vector<double> attribute_values(const std::string& svg, const std::string& marker, const std::string& name) {
    std::vector<double> values;
    const std::regex pattern(" " + name + "=\"([^\"]*)\"");
    for (auto at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
        const auto end = svg.find('>', at);
        const std::string element = svg.substr(at, end - at);
        std::smatch match;
        if (std::regex_search(element, match, pattern)) values.push_back(std::stod(match[1].str()));
    }
    return values;
}

/// A campaign of two kernels whose steps are known:
///   step 1 gemv baseline   accepted 10000 cycles,  4 runs
///   step 2 gemv architect  accepted  5000 cycles, 16 runs  race accept 2.0 [1.8, 2.2]
///   step 3 gemv tuner      rejected  6000 cycles, 10 runs  race reject 0.83 [0.8, 0.87]
///   step 4 gemv tuner      failed    (no cycles),  0 runs
///   step 5 gemv tuner      accepted  4000 cycles, 12 runs  race accept 1.25 [1.1, 1.4] (+ an interrupted race)
///   step 6 norm baseline   accepted  2000 cycles,  4 runs
/// gemv's minimum is 400 cycles, norm's unknown; the steps are a minute apart.
struct KnownCampaign {
    ScratchDir dir{"report"};
    store::CampaignStore store = store::CampaignStore::open(dir.path / "campaign.db");
    std::int64_t step = 0;
    std::map<std::string, std::int64_t> parent;

    explicit KnownCampaign(const std::string& first_timestamp = "") {
        store::TreeStore trees(store.database());
        trees.set_state("run", R"({"state":"finished"})");
        trees.set_state("kernel/gemv", R"({"status":"active","sol_cycles":400,"shape":"n=64"})");
        trees.set_state("kernel/norm", R"({"status":"active","shape":"n=64"})");
        add_step("gemv", "baseline", "", "{}", "accepted", 10000, 4, first_timestamp);
        const auto architect = add_step("gemv", "architect", "family gemv_tiled", R"({"T":4})", "accepted", 5000, 16);
        add_race(architect, "accept", "speedup 2.0000 [1.8000, 2.2000]");
        const auto rejected = add_step("gemv", "tuner", "T 4->8", R"({"T":8})", "rejected", 6000, 10);
        add_race(rejected, "reject", "speedup 0.8300 [0.8000, 0.8700]");
        add_step("gemv", "tuner", "T 4->16", R"({"T":16})", "failed", std::nullopt, 0);
        const auto accepted = add_step("gemv", "tuner", "split 1->2", R"({"T":4,"split":2})", "accepted", 4000, 12);
        add_race(accepted, "accept", "speedup 1.2500 [1.1000, 1.4000]");
        store::EvaluationRecord interrupted;
        interrupted.design_id = accepted;
        interrupted.stage = "race";
        interrupted.verdict = "interrupted";
        interrupted.reason = "raced by design 3 (in progress)";
        store.record_evaluation(interrupted);
        add_step("norm", "baseline", "", "{}", "accepted", 2000, 4);
        trees.set_state("counters", fmt::format(R"({{"step":{},"device_runs":46}})", step));
    }

    std::int64_t add_step(const std::string& kernel, const std::string& role, const std::string& move,
                          const std::string& params, const std::string& verdict, std::optional<double> cycles,
                          std::int64_t device_runs, const std::string& timestamp = "") {
        step += 1;
        store::DesignRecord design;
        design.content_hash = fmt::format("hash-{}", step);
        design.target = "chip";
        design.kernel = kernel;
        design.shape = "n=64";
        design.template_name = role == "baseline" ? "baseline" : kernel + "_tiled";
        design.params_json = params;
        const std::int64_t design_id = store.record_design(design);
        store::TreeStore trees(store.database());
        store::TreeEdgeRecord edge;
        edge.kernel = kernel;
        edge.design_id = design_id;
        if (parent.count(kernel)) edge.parent_design_id = parent[kernel];
        edge.role = role;
        edge.move = move;
        edge.step = step;
        edge.verdict = verdict;
        edge.cycles = cycles;
        edge.device_runs = device_runs;
        edge.created_at =
            timestamp.empty() ? fmt::format("2026-12-01T10:{:02d}:00.000Z", static_cast<int>(step - 1)) : timestamp;
        trees.record_edge(edge);
        if (verdict == "accepted") {
            store::ChampionRecord link;
            link.kernel = kernel;
            link.design_id = design_id;
            link.step = step;
            link.cycles = *cycles;
            trees.push_champion(link);
            parent[kernel] = design_id;
        }
        return design_id;
    }

    /// A race of `design_id` as the cascade records it: the candidate's row and the champion's.
    void add_race(std::int64_t design_id, const std::string& verdict, const std::string& speedup) {
        const std::string summary = fmt::format(
            "{} after 8 pairs (16 launches, 0 failed, 0 retried): {}, Z_accept 2.10 vs 1.96, Z_reject -3.00 vs "
            "-1.00; clear",
            verdict, speedup);
        store::EvaluationRecord candidate;
        candidate.design_id = design_id;
        candidate.stage = "race";
        candidate.verdict = verdict;
        candidate.reason = summary;
        store.record_evaluation(candidate);
        store::EvaluationRecord champion = candidate;
        champion.design_id = parent.at("gemv");
        champion.verdict = "champion";
        champion.reason = "raced by design " + std::to_string(design_id) + ": " + summary;
        store.record_evaluation(champion);
    }
};

}  // namespace

TEST_CASE("report plots: the best-so-far plot has one point per step of the kernel, monotone, with its lines") {
    KnownCampaign campaign;
    auto files = report::write_report(campaign.store, campaign.dir.path / "report");
    const std::string html = read_file(files.html);

    auto by_runs = plots_of(html, "progress-runs");
    REQUIRE(by_runs.size() == 2);
    const std::string& gemv = by_runs[0];
    CHECK(gemv.find(R"(data-kernel="gemv")") != std::string::npos);
    CHECK(by_runs[1].find(R"(data-kernel="norm")") != std::string::npos);
    CHECK(count_of(gemv, R"(class="point")") == 5);
    CHECK(attribute_values(gemv, R"(class="point")", "data-x") == std::vector<double>{4, 20, 30, 30, 42});
    const auto best = attribute_values(gemv, R"(class="point")", "data-y");
    CHECK(best == std::vector<double>{10000, 5000, 5000, 5000, 4000});
    CHECK(std::is_sorted(best.rbegin(), best.rend()));  // never rises
    // norm's only step comes after all of gemv's device runs: the x axis counts the whole campaign's
    CHECK(attribute_values(by_runs[1], R"(class="point")", "data-x") == std::vector<double>{46});

    // The reference line is where the baseline's point is; the minimum line below every point.
    const auto reference = attribute_values(gemv, R"(class="hline reference")", "y1");
    const auto minimum_value = attribute_values(gemv, R"(class="hline minimum")", "data-value");
    const auto minimum = attribute_values(gemv, R"(class="hline minimum")", "y1");
    const auto point_rows = attribute_values(gemv, R"(class="point")", "cy");
    REQUIRE(reference.size() == 1);
    REQUIRE(minimum.size() == 1);
    CHECK(minimum_value == std::vector<double>{400});
    CHECK(reference[0] == doctest::Approx(point_rows[0]).epsilon(1e-3));
    for (double row : point_rows)
        CHECK(minimum[0] > row + 1.0);
    // log scale (10000 / 400 > 10): 400 sits at the y axis' log position
    const double low = attribute_values(gemv, "<svg", "data-y-low").at(0);
    const double high = attribute_values(gemv, "<svg", "data-y-high").at(0);
    CHECK(gemv.find(R"(data-y-log="1")") != std::string::npos);
    const double share = (std::log10(400.0) - std::log10(low)) / (std::log10(high) - std::log10(low));
    const double plot_height = report::XyPlot::k_height - report::XyPlot::k_top - report::XyPlot::k_bottom;
    CHECK(minimum[0] == doctest::Approx(report::XyPlot::k_top + (1.0 - share) * plot_height).epsilon(1e-3));
    // norm has no known minimum: no minimum line
    CHECK(by_runs[1].find("hline minimum") == std::string::npos);
    CHECK(gemv.find(">cycles (log scale)<") != std::string::npos);
    CHECK(count_of(gemv, R"(class="tick")") >= 4);
}

TEST_CASE("report plots: wall time, fraction of the minimum, races and roles each get their plot") {
    KnownCampaign campaign;
    auto files = report::write_report(campaign.store, campaign.dir.path / "report");
    const std::string html = read_file(files.html);

    auto by_wall = plots_of(html, "progress-wall");
    REQUIRE(by_wall.size() == 2);
    CHECK(attribute_values(by_wall[0], R"(class="point")", "data-x") == std::vector<double>{0, 60, 120, 180, 240});
    CHECK(attribute_values(by_wall[1], R"(class="point")", "data-x") == std::vector<double>{300});

    auto fraction = plots_of(html, "sol-fraction");
    REQUIRE(fraction.size() == 1);
    CHECK(attribute_values(fraction[0], R"(class="bar")", "data-value") == std::vector<double>{0.1});  // 400 / 4000
    CHECK(fraction[0].find("minimum unknown") != std::string::npos);                                   // norm

    auto races = plots_of(html, "races");
    REQUIRE(races.size() == 1);                             // norm ran no race
    CHECK(count_of(races[0], R"(class="interval")") == 3);  // the champions' rows are not races of their own
    CHECK(attribute_values(races[0], R"(class="interval")", "data-lower") == std::vector<double>{1.8, 0.8, 1.1});
    CHECK(attribute_values(races[0], R"(class="interval")", "data-upper") == std::vector<double>{2.2, 0.87, 1.4});
    CHECK(html.find("1 race(s) without an interval") != std::string::npos);

    auto roles = plots_of(html, "roles");
    REQUIRE(roles.size() == 1);
    const auto counts = attribute_values(roles[0], R"(class="segment")", "data-count");
    double total = 0;
    for (double count : counts)
        total += count;
    CHECK(total == 6);
    CHECK(roles[0].find(R"(data-category="architect")") != std::string::npos);
    CHECK(roles[0].find(R"(data-category="tuner")") != std::string::npos);

    const std::string markdown = read_file(files.markdown);
    CHECK(markdown.find("[report.html](report.html)") != std::string::npos);
    CHECK(markdown.find("| 5 | 42 | 240.0 | 4000 | tuner | accepted |") != std::string::npos);
    CHECK(markdown.find("| 1 | 2 | 2 | accept | 2.0000 | 1.8000 | 2.2000 |") != std::string::npos);
    CHECK(markdown.find("| 2 | 0 | 1 | 0 |") != std::string::npos);  // step 2: baseline, architect, tuner
}

TEST_CASE("report plots: steps without a timestamp skip the wall-time plot and say so") {
    KnownCampaign campaign("not a time");
    auto files = report::write_report(campaign.store, campaign.dir.path / "report");
    const std::string html = read_file(files.html);
    CHECK(plots_of(html, "progress-wall").empty());
    CHECK(html.find("No wall-time plot") != std::string::npos);
    CHECK(plots_of(html, "progress-runs").size() == 2);
}

TEST_CASE("report plots: the knowledge base's fits are drawn as points and curves with their parameters, or the report says why not") {
    KnownCampaign campaign("2026-01-01T00:00:00Z");
    campaign::KbFigures kb;
    kb.built = true;
    kb.toolchain_version = "9.9.9";
    knowledge::HardwareParam slope;
    slope.name = "copy_bytes_per_cycle";
    slope.unit = "bytes/cycle";
    slope.value = 50.0;
    slope.ci95_lower = 48.0;
    slope.ci95_upper = 52.5;
    slope.r_squared = 0.9991;
    slope.points = 4;
    slope.method = "1 / slope";
    kb.params.push_back(slope);
    kb.missing.push_back("hidden_param: no probe_x measurements");
    knowledge::FitPlot plot;
    plot.form = "linear";
    plot.probe = "probe_copy";
    plot.x_label = "bytes";
    plot.y_label = "cycles";
    plot.params = {"copy_bytes_per_cycle"};
    plot.r_squared = 0.9991;
    for (const std::string label : {"packet=512", "packet=4096"}) {
        knowledge::FitPlotGroup group;
        group.label = label;
        for (double bytes : {1000.0, 2000.0, 4000.0, 8000.0}) {
            group.measured.push_back({bytes, 100 + bytes / 50.0 * 1.01, "measured"});
            group.fitted.push_back({bytes, 100 + bytes / 50.0, "fitted"});
        }
        plot.groups.push_back(group);
    }
    kb.plots.push_back(plot);
    auto files = report::write_report(campaign.store, campaign.dir.path / "report", std::nullopt, &kb);
    const std::string html = read_file(files.html);
    const auto fits = plots_of(html, "kb-fit");
    REQUIRE(fits.size() == 1);
    CHECK(fits[0].find(R"(data-probe="probe_copy")") != std::string::npos);
    CHECK(count_of(fits[0], "<circle class=\"point\"") == 8);  // every measured point
    CHECK(count_of(fits[0], "<path class=\"line\"") == 2);      // one fitted curve per group
    CHECK(fits[0].find("packet=4096") != std::string::npos);
    CHECK(html.find("copy_bytes_per_cycle = 50 bytes/cycle (95% [48, 52.5])") != std::string::npos);
    CHECK(html.find("R² 0.9991") != std::string::npos);
    CHECK(html.find("not determined: hidden_param") != std::string::npos);
    const std::string markdown = read_file(files.markdown);
    CHECK(markdown.find("| copy_bytes_per_cycle | 50 | bytes/cycle | [48, 52.5] | 0.9991 | 4 | 1 / slope |") !=
          std::string::npos);

    campaign::KbFigures none;
    none.note = "no knowledge base built: `npuopt kb build --campaign C` fits the hardware model";
    auto without = report::write_report(campaign.store, campaign.dir.path / "report2", std::nullopt, &none);
    const std::string html_none = read_file(without.html);
    CHECK(plots_of(html_none, "kb-fit").empty());
    CHECK(html_none.find("no knowledge base built") != std::string::npos);
    auto unknown = report::write_report(campaign.store, campaign.dir.path / "report3");
    CHECK(read_file(unknown.html).find("Knowledge-base figures are not available") != std::string::npos);
}

TEST_CASE("report plots: a campaign with no steps still writes a report saying there is nothing to plot yet") {
    ScratchDir dir("report-empty");
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto files = report::write_report(store, dir.path / "report");
    const std::string html = read_file(files.html);
    CHECK(html.find("Nothing to plot yet") != std::string::npos);
    CHECK(html.find(R"(class="plot )") == std::string::npos);
    CHECK(read_file(files.markdown).find("Nothing to plot yet") != std::string::npos);
}

TEST_CASE("report plots: the submission's re-verified figures stand beside the campaign's") {
    KnownCampaign campaign;
    const auto manifest = campaign.dir.path / "submission" / "manifest.json";
    std::filesystem::create_directories(manifest.parent_path());
    std::ofstream(manifest) << nlohmann::json{
        {"geomean_speedup", 2.345},
        {"runs_per_design", 7},
        {"kernels",
         {{{"kernel", "gemv"},
           {"baseline_cycles", 10100.0},
           {"champion_cycles", 4150.0},
           {"speedup", 2.434}}}}}.dump();
    auto files = report::write_report(campaign.store, campaign.dir.path / "report", manifest);
    CHECK(files.submission_note.empty());
    const std::string html = read_file(files.html);
    CHECK(html.find("<h2>Submission</h2>") != std::string::npos);
    CHECK(html.find("2.345x") != std::string::npos);
    // the headline geomean is the submission's, the campaign's beside it
    CHECK(html.find("Geomean speedup: <b>2.345x</b> (the submission's, re-verified") != std::string::npos);
    CHECK(html.find("4150") != std::string::npos);
    CHECK(html.find("2.434x") != std::string::npos);
    CHECK(html.find("fresh seeds") != std::string::npos);
    CHECK(read_file(files.markdown).find("| gemv | 10000 | 4000 | 2.500x | 10100 | 4150 | 2.434x |") !=
          std::string::npos);

    auto without = report::write_report(campaign.store, campaign.dir.path / "report2",
                                        campaign.dir.path / "elsewhere" / "manifest.json");
    CHECK_FALSE(without.submission_note.empty());
    CHECK(read_file(without.html).find("<h2>Submission</h2>") == std::string::npos);
}

TEST_CASE("report plots: tree nodes show the move and the cycles, the parameters go to the tooltip and a table") {
    KnownCampaign campaign;
    const std::string dot = search::tree_dot(search::load_tree(campaign.store, "gemv"));
    CHECK(dot.find(R"(label="#2 family gemv_tiled\n5000 cyc")") != std::string::npos);
    CHECK(dot.find(R"(label="#4 T 4->16\nfailed")") != std::string::npos);
    CHECK(dot.find("tooltip=\"design 2: gemv_tiled{T=4}") != std::string::npos);
    CHECK(dot.find(R"(label="#2 gemv_tiled{)") == std::string::npos);

    auto files = report::write_report(campaign.store, campaign.dir.path / "report");
    const std::string html = read_file(files.html);
    CHECK(html.find("<code>T=4, split=2</code>") != std::string::npos);
    CHECK(html.find("<img") == std::string::npos);  // one self-contained file
}

TEST_CASE("report plots: a race's reason gives its speedup and interval") {
    auto race = report::parse_race_reason(
        "accept after 12 pairs (24 launches, 1 failed, 1 retried): speedup 1.0712 [1.0400, 1.1003], Z_accept 2.31 "
        "vs 2.05, Z_reject -4.00 vs -1.20; B faster");
    REQUIRE(race);
    CHECK(race->speedup == doctest::Approx(1.0712));
    CHECK(race->lower == doctest::Approx(1.04));
    CHECK(race->upper == doctest::Approx(1.1003));
    CHECK_FALSE(race->revalidation);
    auto revalidation = report::parse_race_reason(
        "re-validation against design 4: accept after 8 pairs (16 launches, 0 failed, 0 retried): speedup 1.3000 "
        "[1.2000, 1.4000]; holds");
    REQUIRE(revalidation);
    CHECK(revalidation->revalidation);
    CHECK_FALSE(report::parse_race_reason("raced by design 3 (in progress)"));
    CHECK_FALSE(report::parse_race_reason("speedup 1.2 [1.4, 1.1]"));  // an upside-down interval is no interval
}

TEST_CASE("svg plot: text is escaped and values map onto the axes") {
    CHECK(report::xml_escape(R"(<a href="x">&'</a>)") == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
    CHECK(report::tick_label(1500000) == "1.5M");
    CHECK(report::tick_label(25000) == "25k");
    CHECK(report::tick_label(950) == "950");

    report::XyPlot plot("test", "a <title> & more", {"x (runs)", false}, {"y (cycles)", true});
    plot.add_step_series("s", "#000", {{0, 100, "<p>"}, {10, 10000, ""}});
    const double bottom = report::XyPlot::k_height - report::XyPlot::k_bottom;
    // log scale: the geometric middle of the data is the middle of the plot
    CHECK(plot.y_pixel(1000) == doctest::Approx((report::XyPlot::k_top + bottom) / 2));
    CHECK(plot.y_pixel(100) > plot.y_pixel(10000));
    CHECK(plot.x_pixel(0) == doctest::Approx(report::XyPlot::k_left));
    const std::string svg = plot.render();
    CHECK(svg.find("a &lt;title&gt; &amp; more") != std::string::npos);
    CHECK(svg.find("<title>&lt;p&gt;</title>") != std::string::npos);
    CHECK(svg.find("<p>") == std::string::npos);
    CHECK(svg.find(R"(class="step" d="M)") != std::string::npos);
}

TEST_CASE("report: the LLM roles' tokens, cost and accepts are shown, and nothing of the kind without an LLM") {
    KnownCampaign campaign;
    auto plain = report::write_report(campaign.store, campaign.dir.path / "plain");
    CHECK(read_file(plain.html).find("LLM roles") == std::string::npos);
    CHECK(read_file(plain.markdown).find("LLM roles") == std::string::npos);
    {
        store::Transaction transaction = campaign.store.database().transaction();
        store::LlmStore calls(campaign.store.database());
        for (const std::string role : {"llm-architect", "llm-architect", "llm-porter"}) {
            store::LlmCallRecord call;
            call.kernel = "project_qkv";
            call.role = role;
            call.model = "scripted-model";
            call.status = "ok";
            call.prompt = "[]";
            call.prompt_hash = std::string(64, 'a');
            call.prompt_tokens = 1000;
            call.completion_tokens = 500;
            call.cost = 0.25;
            calls.record_call(call);
        }
        transaction.commit();
    }
    auto files = report::write_report(campaign.store, campaign.dir.path / "llm");
    const std::string markdown = read_file(files.markdown);
    CHECK(markdown.find("## LLM roles") != std::string::npos);
    CHECK(markdown.find("4500 of") != std::string::npos);  // three calls of 1500 tokens
    CHECK(markdown.find("| llm-architect | 2 | ") != std::string::npos);
    CHECK(markdown.find("| llm-porter | 1 | ") != std::string::npos);
    const std::string html = read_file(files.html);
    CHECK(html.find("<h2>LLM roles</h2>") != std::string::npos);
    CHECK(html.find("<td>llm-porter</td>") != std::string::npos);
}
