#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "core/error.hpp"
#include "report/campaign_series.hpp"
#include "report/kb_section.hpp"
#include "report/progress_plot.hpp"
#include "report/svg_plot.hpp"
#include "search/tree.hpp"

namespace npuopt::report {

namespace fs = std::filesystem;

namespace {

constexpr const char* k_nothing_to_plot = "Nothing to plot yet: the campaign has taken no steps.";
constexpr const char* k_submission_differs =
    "The submission's figures differ from the campaign's because the submission re-measures each champion and "
    "reference from scratch on fresh seeds (the median of its runs), while the campaign's are the medians recorded "
    "when each champion won its race.";

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write", file.string()));
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string cycles_text(const std::optional<double>& cycles) {
    return cycles ? fmt::format("{:.0f}", *cycles) : std::string("-");
}

/// A Markdown table cell: no '|' or line break inside.
std::string md_cell(const std::string& text) {
    std::string out;
    for (char character : text) {
        if (character == '|') {
            out += "\\|";
        } else if (character == '\n') {
            out += ' ';
        } else {
            out += character;
        }
    }
    return out.empty() ? "-" : out;
}

std::string verdict_colour(const std::string& verdict) {
    if (verdict == "accept" || verdict == "accepted") return "#2e8b57";
    if (verdict == "reject" || verdict == "rejected") return "#888888";
    if (verdict == "inconclusive") return "#e69f00";
    return "#d62728";
}

/// Every race of one kernel: the speedup over the champion it raced, with its interval.
std::string races_svg(const KernelSeries& kernel) {
    XyPlot plot("races", fmt::format("{}: races, speedup over the champion with its interval", kernel.kernel),
                PlotAxis{"race (in the order run)", false}, PlotAxis{"speedup over the champion (x)", false});
    plot.set_attributes(fmt::format(R"(data-kernel="{}")", xml_escape(kernel.kernel)));
    std::size_t race_idx = 0;
    for (const auto& race : kernel.races) {
        ++race_idx;
        plot.add_interval(
            {static_cast<double>(race_idx), race.speedup, race.lower, race.upper,
             race.revalidation ? "#1f77b4" : verdict_colour(race.verdict),
             fmt::format("{}{} of design {}{}: {:.4f}x [{:.4f}, {:.4f}]", race.revalidation ? "re-validation " : "",
                         race.verdict, race.design_id, race.step ? fmt::format(" (step {})", *race.step) : "",
                         race.speedup, race.lower, race.upper)});
    }
    plot.add_line({1.0, "no change", "no-change", "#555555"});
    return plot.render();
}

/// The role of each step, counted per window of consecutive steps.
struct RoleWindows {
    std::vector<std::string> roles;  ///< in order of first appearance
    std::vector<StackedColumn> columns;
};

RoleWindows role_windows(const std::vector<RoleStep>& steps) {
    RoleWindows windows;
    std::map<std::string, std::size_t> role_idx;
    for (const auto& step : steps) {
        if (role_idx.emplace(step.role, windows.roles.size()).second) windows.roles.push_back(step.role);
    }
    constexpr std::size_t k_max_windows = 16;
    const std::size_t window = std::max<std::size_t>(1, (steps.size() + k_max_windows - 1) / k_max_windows);
    for (std::size_t first = 0; first < steps.size(); first += window) {
        const std::size_t last = std::min(steps.size(), first + window) - 1;
        StackedColumn column;
        column.label = first == last ? fmt::format("{}", steps[first].step)
                                     : fmt::format("{}-{}", steps[first].step, steps[last].step);
        column.counts.assign(windows.roles.size(), 0.0);
        for (std::size_t step_idx = first; step_idx <= last; ++step_idx)
            column.counts[role_idx[steps[step_idx].role]] += 1;
        windows.columns.push_back(std::move(column));
    }
    return windows;
}

/// What the submission's manifest.json says per kernel.
struct SubmittedKernel {
    std::optional<double> baseline_cycles;
    std::optional<double> champion_cycles;
    double speedup = 0.0;
    double champion_over_min = 0.0;
};

struct SubmissionFigures {
    double geomean = 0.0;
    int runs_per_design = 0;
    std::map<std::string, SubmittedKernel> kernels;
};

std::optional<double> optional_number(const nlohmann::json& object, const char* key) {
    auto found = object.find(key);
    if (found == object.end() || !found->is_number()) return std::nullopt;
    return found->get<double>();
}

/// The manifest's figures, or the reason they cannot be read in `note`.
std::optional<SubmissionFigures> read_submission(const std::optional<fs::path>& manifest, std::string& note) {
    if (!manifest) return std::nullopt;
    std::error_code error_code;
    if (!fs::is_regular_file(*manifest, error_code)) {
        note = fmt::format("no submission at {}", manifest->string());
        return std::nullopt;
    }
    auto json = nlohmann::json::parse(read_text(*manifest), nullptr, false);
    if (!json.is_object() || !json.contains("kernels") || !json["kernels"].is_array()) {
        note = fmt::format("{} is not a submission manifest (no kernels array)", manifest->string());
        return std::nullopt;
    }
    SubmissionFigures figures;
    figures.geomean = optional_number(json, "geomean_speedup").value_or(0.0);
    figures.runs_per_design = static_cast<int>(optional_number(json, "runs_per_design").value_or(0.0));
    for (const auto& kernel : json["kernels"]) {
        if (!kernel.is_object() || !kernel.contains("kernel") || !kernel["kernel"].is_string()) continue;
        SubmittedKernel submitted;
        submitted.baseline_cycles = optional_number(kernel, "baseline_cycles");
        submitted.champion_cycles = optional_number(kernel, "champion_cycles");
        submitted.speedup = optional_number(kernel, "speedup").value_or(0.0);
        submitted.champion_over_min = optional_number(kernel, "champion_over_min").value_or(0.0);
        figures.kernels[kernel["kernel"].get<std::string>()] = submitted;
    }
    return figures;
}

std::string speedup_text(double speedup) {
    return speedup > 0 ? fmt::format("{:.3f}x", speedup) : std::string("-");
}

/// The Graphviz SVG of a tree without its XML prolog, ready to inline ("" when there is none).
std::string inline_tree_svg(const fs::path& file) {
    std::error_code error_code;
    if (!fs::is_regular_file(file, error_code)) return "";
    std::string svg = read_text(file);
    const auto start = svg.find("<svg");
    return start == std::string::npos ? "" : svg.substr(start);
}

std::string params_text(const std::string& params_json) {
    auto json = nlohmann::json::parse(params_json, nullptr, false);
    if (!json.is_object() || json.empty()) return "-";
    std::string text;
    for (const auto& [name, value] : json.items())
        text += fmt::format("{}{}={}", text.empty() ? "" : ", ", name, value.dump());
    return text;
}

/// What the report's sections read.
struct ReportData {
    store::CampaignStore* store = nullptr;
    fs::path out_dir;
    campaign::CampaignStatus status;
    CampaignSeries series;
    std::optional<SubmissionFigures> submission;
    TimeUnit unit;
    std::string svg_note;
};

/// "Geomean speedup: X": the submission's re-verified figure where one exists (the campaign's
/// recorded one beside it), else the campaign's; `bold_open`/`bold_close` mark the number.
std::string geomean_headline(const campaign::CampaignStatus& status, const std::optional<SubmissionFigures>& submission,
                             const char* bold_open, const char* bold_close) {
    if (!submission) return fmt::format("Geomean speedup: {}{:.3f}x{}", bold_open, status.geomean_speedup, bold_close);
    return fmt::format("Geomean speedup: {}{:.3f}x{} (the submission's, re-verified; the campaign recorded {:.3f}x, "
                       "see below)",
                       bold_open, submission->geomean, bold_close, status.geomean_speedup);
}

/// The state, the summary table, the geomean and the submission beside it.
void markdown_summary(std::ostream& markdown, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    const auto& submission = data.submission;
    markdown
        << "# npuopt campaign report\n\n"
        << fmt::format("State: {}{}; steps {}; device runs {} of {}; wall {:.0f} s of {:.0f} s.\n\n", status.state,
                       status.stop_reason.empty() ? "" : " (" + status.stop_reason + ")", status.steps,
                       status.device_runs_used, status.device_runs_budget, status.wall_secs_used,
                       status.wall_secs_budget)
        << "The plots are in [report.html](report.html) (one self-contained file); the tables below hold the same "
           "figures.\n\n"
        << "| kernel | shape | status | reference | reference cycles | champion cycles | speedup | speed of light | "
           "champion | designs | accepted |\n"
        << "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|\n";
    for (const auto& kernel : status.kernels) {
        markdown << fmt::format("| {} | {} | {} | {} | {} | {} | {:.3f}x | {:.0f}% | `{}` | {} | {} |\n",
                                md_cell(kernel.kernel), md_cell(kernel.shape), md_cell(kernel.status),
                                md_cell(kernel.reference), cycles_text(kernel.baseline_cycles),
                                cycles_text(kernel.champion_cycles), kernel.speedup, kernel.sol_fraction * 100.0,
                                md_cell(kernel.champion), kernel.designs, kernel.accepted);
    }
    markdown << "\nSpeedups are over each kernel's reference: its baseline, or, where the baseline failed, the "
                "first correct design the search found.\n";
    for (const auto& kernel : status.kernels) {  // why a kernel is blocked, failed or exhausted
        if (!kernel.reason.empty())
            markdown << fmt::format("\n- **{}** ({}): {}\n", kernel.kernel, kernel.status, kernel.reason);
    }
    markdown << "\n" << geomean_headline(status, submission, "**", "**") << "\n";
    if (submission) {
        markdown << fmt::format(
            "\n## Submission\n\n{}\n\n| kernel | campaign reference | campaign champion | campaign "
            "speedup | submission baseline | submission champion | submission speedup |\n"
            "|---|---:|---:|---:|---:|---:|---:|\n",
            k_submission_differs);
        for (const auto& kernel : status.kernels) {
            auto found = submission->kernels.find(kernel.kernel);
            const SubmittedKernel submitted = found == submission->kernels.end() ? SubmittedKernel{} : found->second;
            markdown << fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", md_cell(kernel.kernel),
                                    cycles_text(kernel.baseline_cycles), cycles_text(kernel.champion_cycles),
                                    speedup_text(kernel.speedup), cycles_text(submitted.baseline_cycles),
                                    cycles_text(submitted.champion_cycles), speedup_text(submitted.speedup));
        }
        markdown << fmt::format("| **geomean** | | | {} | | | {} |\n", speedup_text(status.geomean_speedup),
                                speedup_text(submission->geomean));
    }
}

/// A table per plot: best-so-far changes, fraction of the minimum, races, role windows.
void markdown_plot_tables(std::ostream& markdown, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    const CampaignSeries& series = data.series;
    if (data.series.role_steps.empty()) {
        markdown << fmt::format("\n## Progress\n\n{}\n", k_nothing_to_plot);
    } else {
        markdown << "\n## Progress\n\nEach kernel's best champion so far, at the steps where it changed (all steps are "
                    "plotted in the HTML).\n";
        for (const auto& kernel : series.kernels) {
            markdown << fmt::format("\n### {}\n\n", kernel.kernel);
            if (kernel.progress.empty()) {
                markdown << "No champion yet.\n";
                continue;
            }
            markdown << fmt::format("Reference {} cycles; minimum (speed of light) {}.\n\n",
                                    cycles_text(kernel.reference_cycles),
                                    kernel.minimum_cycles > 0 ? fmt::format("{:.0f} cycles", kernel.minimum_cycles)
                                                              : std::string("unknown"))
                     << "| step | device runs | wall time (s) | best cycles | role | verdict |\n"
                        "|---:|---:|---:|---:|---|---|\n";
            for (std::size_t point_idx = 0; point_idx < kernel.progress.size(); ++point_idx) {
                const auto& point = kernel.progress[point_idx];
                const bool changed = point_idx == 0 || point.best_cycles != kernel.progress[point_idx - 1].best_cycles;
                if (!changed && point_idx + 1 != kernel.progress.size()) continue;
                markdown << fmt::format("| {} | {} | {} | {:.0f} | {} | {} |\n", point.step, point.device_runs,
                                        point.wall_secs ? fmt::format("{:.1f}", *point.wall_secs) : std::string("-"),
                                        point.best_cycles, md_cell(point.role), md_cell(point.verdict));
            }
        }
        if (!series.has_wall_times) markdown << "\n(No wall-time plot: not every step has a timestamp.)\n";

        markdown
            << "\n## Fraction of the minimum\n\n| kernel | minimum cycles | champion cycles | minimum ÷ champion |\n"
               "|---|---:|---:|---:|\n";
        for (const auto& kernel : status.kernels) {
            markdown << fmt::format(
                "| {} | {} | {} | {} |\n", md_cell(kernel.kernel),
                kernel.sol_cycles > 0 ? fmt::format("{:.0f}", kernel.sol_cycles) : std::string("-"),
                cycles_text(kernel.champion_cycles),
                kernel.sol_fraction > 0 ? fmt::format("{:.1f}%", 100.0 * kernel.sol_fraction) : std::string("unknown"));
        }

        markdown << "\n## Races\n\nEvery race, accepted or not: the candidate's speedup over the champion it raced "
                    "and its interval.\n";
        for (const auto& kernel : series.kernels) {
            markdown << fmt::format("\n### {}\n\n", kernel.kernel);
            if (kernel.races.empty()) {
                markdown << "No race with a recorded interval.\n";
                continue;
            }
            markdown << "| race | step | design | verdict | speedup | lower | upper "
                        "|\n|---:|---:|---:|---|---:|---:|---:|\n";
            std::size_t race_idx = 0;
            for (const auto& race : kernel.races) {
                markdown << fmt::format("| {} | {} | {} | {}{} | {:.4f} | {:.4f} | {:.4f} |\n", ++race_idx,
                                        race.step ? fmt::format("{}", *race.step) : std::string("-"), race.design_id,
                                        race.revalidation ? "re-validation " : "", md_cell(race.verdict), race.speedup,
                                        race.lower, race.upper);
            }
            if (kernel.races_without_interval > 0) {
                markdown << fmt::format(
                    "\n({} race(s) without an interval: interrupted, or recorded before "
                    "intervals were.)\n",
                    kernel.races_without_interval);
            }
        }

        const RoleWindows windows = role_windows(series.role_steps);
        markdown << "\n## Roles\n\nWhich role proposed the steps, per window of steps.\n\n| steps |";
        for (const auto& role : windows.roles)
            markdown << " " << md_cell(role) << " |";
        markdown << "\n|---|";
        for (std::size_t role_idx = 0; role_idx < windows.roles.size(); ++role_idx)
            markdown << "---:|";
        markdown << "\n";
        for (const auto& column : windows.columns) {
            markdown << "| " << column.label << " |";
            for (double count : column.counts)
                markdown << fmt::format(" {:.0f} |", count);
            markdown << "\n";
        }
    }
}

/// Each kernel's tree picture (a link) and tree as text.
void markdown_trees(std::ostream& markdown, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    markdown << "\n## Design trees\n\n";
    for (const auto& kernel : status.kernels) {
        markdown << fmt::format("### {}\n\n", kernel.kernel);
        if (fs::exists(data.out_dir / "trees" / (kernel.kernel + ".svg"))) {
            markdown << fmt::format("![{0} design tree](trees/{0}.svg)\n\n", kernel.kernel);
        }
        markdown << "```\n" << search::render_tree_text(*data.store, kernel.kernel) << "```\n\n";
    }
    if (!data.svg_note.empty()) markdown << fmt::format("(No tree pictures: {}.)\n", data.svg_note);
}

/// The page head, the summary table, the geomean and the submission beside it.
void html_summary(std::ostream& html, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    const auto& submission = data.submission;
    html << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>npuopt campaign report</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:4px 10px;"
            "border-bottom:1px solid #ddd}td.n{text-align:right}pre{background:#f6f6f6;padding:8px;overflow:auto}"
            "svg.plot{display:inline-block;vertical-align:top;margin:0.5em 0.5em 0.5em 0;max-width:49%;height:auto}"
            "td code{white-space:normal;word-break:break-all;font-size:85%}div.tree{overflow:auto;max-height:900px;border:1px solid #eee}"
            "div.plots{display:flex;flex-wrap:wrap;gap:1em}figure.kb-figure{margin:0;flex:0 1 540px}"
            "figure.kb-figure svg{width:100%;max-width:100%;height:auto}figcaption{font-size:90%;color:#444}"
            "td.num{text-align:right}"
            "</style></head><body>\n<h1>npuopt campaign report</h1>\n";
    html << fmt::format(
        "<p>State: {}{}; steps {}; device runs {} of {}; wall {:.0f} s of {:.0f} s.</p>\n", xml_escape(status.state),
        status.stop_reason.empty() ? "" : " (" + xml_escape(status.stop_reason) + ")", status.steps,
        status.device_runs_used, status.device_runs_budget, status.wall_secs_used, status.wall_secs_budget);
    html << "<table><tr><th>kernel</th><th>shape</th><th>status</th><th>reference</th><th>reference cycles</th>"
            "<th>champion cycles</th><th>speedup</th><th>speed of light</th><th>champion</th></tr>\n";
    for (const auto& kernel : status.kernels) {
        html << fmt::format(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td>"
            "<td class=n>{:.3f}x</td><td class=n>{:.0f}%</td><td><code>{}</code></td></tr>\n",
            xml_escape(kernel.kernel), xml_escape(kernel.shape.empty() ? "-" : kernel.shape), xml_escape(kernel.status),
            xml_escape(kernel.reference), cycles_text(kernel.baseline_cycles), cycles_text(kernel.champion_cycles),
            kernel.speedup, kernel.sol_fraction * 100.0, xml_escape(kernel.champion));
    }
    html << "</table>\n";
    for (const auto& kernel : status.kernels) {
        if (!kernel.reason.empty()) {
            html << fmt::format("<p><b>{}</b> ({}): {}</p>\n", xml_escape(kernel.kernel), xml_escape(kernel.status),
                                xml_escape(kernel.reason));
        }
    }
    html << "<p>" << geomean_headline(status, submission, "<b>", "</b>") << "</p>\n";
    if (submission) {
        html << fmt::format(
            "<h2>Submission</h2>\n<p>{}</p>\n<table class=\"submission\"><tr><th>kernel</th>"
            "<th>campaign reference cycles</th><th>campaign champion cycles</th><th>campaign speedup</th>"
            "<th>submission baseline cycles</th><th>submission champion cycles</th>"
            "<th>submission speedup</th></tr>\n",
            xml_escape(k_submission_differs));
        for (const auto& kernel : status.kernels) {
            auto found = submission->kernels.find(kernel.kernel);
            const SubmittedKernel submitted = found == submission->kernels.end() ? SubmittedKernel{} : found->second;
            html << fmt::format(
                "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>"
                "<td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>\n",
                xml_escape(kernel.kernel), cycles_text(kernel.baseline_cycles), cycles_text(kernel.champion_cycles),
                speedup_text(kernel.speedup), cycles_text(submitted.baseline_cycles),
                cycles_text(submitted.champion_cycles), speedup_text(submitted.speedup));
        }
        html << fmt::format(
            "<tr><td><b>geomean</b></td><td></td><td></td><td class=n><b>{}</b></td><td></td><td></td>"
            "<td class=n><b>{}</b></td></tr>\n</table>\n",
            speedup_text(status.geomean_speedup), speedup_text(submission->geomean));
    }
}

/// "T of B tokens spent, cost C." over every LLM role.
std::string llm_spent_text(const campaign::CampaignStatus& status) {
    std::int64_t tokens = 0;
    double cost = 0.0;
    for (const auto& role : status.llm_roles) {
        tokens += role.tokens;
        cost += role.cost;
    }
    return fmt::format("{} of {} tokens spent, cost {:.4g}.", tokens, status.llm_tokens_budget, cost);
}

/// The LLM-backed roles' spending and what it bought (none when the campaign used no LLM).
void markdown_llm(std::ostream& markdown, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    if (status.llm_roles.empty()) return;
    markdown << fmt::format("\n## LLM roles\n\n{}\n\n", llm_spent_text(status))
             << "| role | calls | ok | tokens | cost | designs | accepted | accepted speedup per 1k tokens |\n"
             << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& role : status.llm_roles) {
        markdown << fmt::format("| {} | {} | {} | {} | {:.4g} | {} | {} | {:.4f}x |\n", md_cell(role.role), role.calls,
                                role.ok_calls, role.tokens, role.cost, role.designs, role.accepted,
                                role.speedup_per_1k_tokens());
    }
}

void html_llm(std::ostream& html, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    if (status.llm_roles.empty()) return;
    html << fmt::format("<h2>LLM roles</h2>\n<p>{}</p>\n", xml_escape(llm_spent_text(status)))
         << "<table class=\"llm\"><tr><th>role</th><th>calls</th><th>ok</th><th>tokens</th><th>cost</th>"
            "<th>designs</th><th>accepted</th><th>accepted speedup per 1k tokens</th></tr>\n";
    for (const auto& role : status.llm_roles) {
        html << fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.4g}</td>"
                            "<td class=n>{}</td><td class=n>{}</td><td class=n>{:.4f}x</td></tr>\n",
                            xml_escape(role.role), role.calls, role.ok_calls, role.tokens, role.cost, role.designs,
                            role.accepted, role.speedup_per_1k_tokens());
    }
    html << "</table>\n";
}

/// The inline SVG plots, or why there are none.
void html_plots(std::ostream& html, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    const CampaignSeries& series = data.series;
    const TimeUnit& unit = data.unit;
    if (data.series.role_steps.empty()) {
        html << fmt::format("<h2>Progress</h2>\n<p class=\"nothing-to-plot\">{}</p>\n", k_nothing_to_plot);
    } else {
        html
            << "<h2>Progress</h2>\n<p>Each kernel's lowest champion cycles so far after each of its steps, with the "
               "reference (the first champion) and the minimum (the speed-of-light bound) as dashed lines. Device runs "
               "count the launches of the campaign's steps, all kernels together.</p>\n";
        for (const auto& kernel : series.kernels) {
            if (kernel.progress.empty()) {
                html << fmt::format("<p><b>{}</b>: no champion yet.</p>\n", xml_escape(kernel.kernel));
                continue;
            }
            html << progress_svg(kernel, false, unit) << "\n";
        }
        html << "<h2>Progress by wall time</h2>\n";
        if (!series.has_wall_times) {
            html << "<p class=\"no-wall-time\">No wall-time plot: not every step has a timestamp.</p>\n";
        } else {
            html << "<p>Wall time counts from the campaign's first step; time between runs of a resumed campaign is "
                    "included.</p>\n";
            for (const auto& kernel : series.kernels) {
                if (!kernel.progress.empty()) html << progress_svg(kernel, true, unit) << "\n";
            }
        }

        std::vector<BarRow> rows;
        for (const auto& kernel : status.kernels) {
            BarRow row;
            row.label = kernel.kernel;
            if (kernel.sol_fraction > 0) {
                row.value = kernel.sol_fraction;
                row.note = fmt::format("{:.1f}%", 100.0 * kernel.sol_fraction);
            } else {
                row.note = kernel.champion_cycles ? "minimum unknown" : "no champion";
            }
            rows.push_back(row);
        }
        html << "<h2>Fraction of the minimum</h2>\n<p>Minimum ÷ champion cycles per kernel: 100% is the "
                "speed-of-light bound.</p>\n"
             << bar_chart("sol-fraction", "minimum ÷ champion", rows, 1.0, "100%") << "\n";

        html << "<h2>Races</h2>\n<p>Every race, accepted or not: the candidate's speedup over the champion it raced "
                "with its interval (green accepted, grey rejected, orange inconclusive, red suspect or failed, blue a "
                "champion's re-validation).</p>\n";
        for (const auto& kernel : series.kernels) {
            if (kernel.races.empty()) {
                html << fmt::format("<p><b>{}</b>: no race with a recorded interval.</p>\n", xml_escape(kernel.kernel));
            } else {
                html << races_svg(kernel) << "\n";
            }
            if (kernel.races_without_interval > 0) {
                html << fmt::format(
                    "<p>{}: {} race(s) without an interval (interrupted, or recorded before intervals "
                    "were).</p>\n",
                    xml_escape(kernel.kernel), kernel.races_without_interval);
            }
        }

        const RoleWindows windows = role_windows(series.role_steps);
        html << "<h2>Roles</h2>\n<p>Which role proposed the steps, as shares of each window of steps.</p>\n"
             << stacked_share_chart("roles", "role shares over the campaign", windows.roles, windows.columns, "steps")
             << "\n";
    }
}

/// Each kernel's tree picture inlined, its designs' parameters and the tree as text.
void html_trees(std::ostream& html, const ReportData& data) {
    const campaign::CampaignStatus& status = data.status;
    html << "<h2>Design trees</h2>\n";
    for (const auto& kernel : status.kernels) {
        html << fmt::format("<h3>{}</h3>\n", xml_escape(kernel.kernel));
        const std::string tree_svg = inline_tree_svg(data.out_dir / "trees" / (kernel.kernel + ".svg"));
        if (!tree_svg.empty()) html << "<div class=\"tree\">" << tree_svg << "</div>\n";
        const search::DesignTree tree = search::load_tree(*data.store, kernel.kernel);
        html << fmt::format(
            "<details><summary>{} designs: parameters</summary>\n<table class=\"designs\"><tr>"
            "<th>step</th><th>design</th><th>role</th><th>move</th><th>verdict</th><th>cycles</th>"
            "<th>speedup</th><th>template</th><th>parameters</th></tr>\n",
            tree.nodes.size());
        for (const auto& node : tree.nodes) {
            html << fmt::format(
                "<tr><td class=n>{}</td><td class=n>{}</td><td>{}</td><td>{}</td><td>{}{}</td>"
                "<td class=n>{}</td><td class=n>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
                node.edge.step, node.edge.design_id, xml_escape(node.edge.role), xml_escape(node.edge.move),
                xml_escape(node.edge.verdict), node.is_champion ? " (champion)" : "", cycles_text(node.edge.cycles),
                node.edge.speedup ? fmt::format("{:.3f}x", *node.edge.speedup) : std::string("-"),
                xml_escape(node.design.template_name), xml_escape(params_text(node.design.params_json)));
        }
        html << "</table></details>\n<details><summary>as text</summary><pre>"
             << xml_escape(search::render_tree_text(tree)) << "</pre></details>\n";
    }
    if (!data.svg_note.empty()) html << fmt::format("<p>(No tree pictures: {}.)</p>\n", xml_escape(data.svg_note));
}

}  // namespace

ReportFiles write_report(store::CampaignStore& store, const fs::path& out_dir,
                         const std::optional<fs::path>& submission_manifest, const campaign::KbFigures* kb) {
    fs::create_directories(out_dir);
    ReportFiles files;
    ReportData data;
    data.store = &store;
    data.out_dir = out_dir;
    data.status = campaign::campaign_status(store);
    data.series = load_campaign_series(store);
    auto tree_export = search::export_trees(store, out_dir / "trees");
    files.trees = tree_export.files;
    files.svg_note = tree_export.svg_note;
    data.svg_note = files.svg_note;
    data.submission = read_submission(submission_manifest, files.submission_note);
    double max_wall_secs = 0.0;
    for (const auto& kernel : data.series.kernels) {
        for (const auto& point : kernel.progress) {
            max_wall_secs = std::max(max_wall_secs, point.wall_secs.value_or(0.0));
        }
    }
    data.unit = time_unit_for(max_wall_secs);

    std::ostringstream markdown;
    markdown_summary(markdown, data);
    markdown_llm(markdown, data);
    markdown_plot_tables(markdown, data);
    markdown_kb(markdown, kb);
    markdown_trees(markdown, data);
    files.markdown = out_dir / "report.md";
    write_text(files.markdown, markdown.str());

    std::ostringstream html;
    html_summary(html, data);
    html_llm(html, data);
    html_plots(html, data);
    html_kb(html, kb);
    html_trees(html, data);
    html << "</body></html>\n";
    files.html = out_dir / "report.html";
    write_text(files.html, html.str());
    return files;
}

}  // namespace npuopt::report
