#include <filesystem>
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>

#include <fmt/format.h>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "config/cost_model_config.hpp"
#include "campaign/driver.hpp"
#include "campaign/lock.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "knowledge/rewrites.hpp"
#include "store/knowledge_store.hpp"
#include "search/tree.hpp"
#include "store/tree_store.hpp"
#include "../search/search_test_util.hpp"
#include "campaign_test_util.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;
using npuopt::test::toy_model;
using npuopt::test::write_text;

namespace {

double param_in(const std::string& source, const std::string& name, double fallback) {
    std::smatch match;
    std::regex pattern(name + " ([0-9]+)");
    if (std::regex_search(source, match, pattern)) return std::stod(match[1].str());
    return fallback;
}

/// The toy device's true cycles; BUFFERS and SPLIT matter although no quantity shows them.
double true_cycles(const std::map<std::string, double>& quantities, const std::string& source) {
    if (quantities.empty()) return 5.0e6;  // the baseline
    double engines = quantities.at("engine_index") + 1.0;
    double packet = quantities.at("packet_bytes");
    double packet_penalty = packet >= 4096 ? 0.0 : packet >= 1024 ? 2000.0 : 8000.0;
    if (source.find("stream") != std::string::npos) {
        double split = param_in(source, "split", 1);
        return 1.5 * 1048576.0 / (100.0 * engines) + 64.0 * split * 500.0 / engines + 30000.0 / split;
    }
    double buffers = param_in(source, "buffers", 1);
    double cycles = 1048576.0 / (100.0 * engines) + quantities.at("dma_commands") * 500.0 / engines +
                    quantities.at("passes") * 150.0 + packet_penalty;
    return buffers == 2 ? 0.8 * cycles : cycles;
}

std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// A deterministic evaluator: the true cycles, accept when 1 % faster, hang when passes == 16.
struct FakeEvaluator final : campaign::Evaluator {
    std::map<std::string, int> calls;
    std::string version = "fake 1.0";
    std::function<void(int)> on_evaluate;
    std::function<bool(const std::string& source)> fails_to_compile;  ///< a compile failure: no device run
    std::function<std::optional<double>(const std::string& source)> cycles_of;  ///< overrides true_cycles
    /// Non-empty: the compile fails with E0201 and these misses (the toolchain counted more).
    std::function<std::vector<eval::QuantityMiss>(const eval::Candidate&)> quantity_misses;
    int evaluations = 0;
    int revalidations = 0;
    std::int64_t device_runs = 0;                              ///< reported so far
    std::vector<std::pair<std::int64_t, bool>> strict_calls;  ///< (device runs so far, strict)
    std::function<bool(int evaluation)> cut;  ///< this evaluation is cut by the budget mid-race
    std::vector<std::string> order;           ///< content hashes in evaluation order
    std::optional<std::chrono::steady_clock::time_point> deadline;  ///< the last set_deadline
    void set_deadline(std::optional<std::chrono::steady_clock::time_point> when) override { deadline = when; }

    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext&) override {
        calls[candidate.content_hash] += 1;
        evaluations += 1;
        order.push_back(candidate.content_hash);
        eval::Outcome outcome;
        auto stage = [&](eval::StageKind which, eval::Verdict verdict, const std::string& reason) {
            outcome.stages.push_back({which, verdict, reason, 0.1, 0});
        };
        stage(eval::StageKind::rules, eval::Verdict::pass, "");
        if (fails_to_compile && fails_to_compile(read_file(candidate.source_file))) {
            stage(eval::StageKind::compile, eval::Verdict::fail, "error[E0101]: packet too large");
            outcome.final_reason = "error[E0101]: packet too large";
            if (on_evaluate) on_evaluate(evaluations);
            return outcome;
        }
        if (quantity_misses) {
            outcome.quantity_misses = quantity_misses(candidate);
            if (!outcome.quantity_misses.empty()) {
                stage(eval::StageKind::compile, eval::Verdict::fail, "error[E0201]: DM capacity exceeded");
                outcome.final_reason = "error[E0201]: DM capacity exceeded";
                if (on_evaluate) on_evaluate(evaluations);
                return outcome;
            }
        }
        stage(eval::StageKind::compile, eval::Verdict::pass, "");
        auto passes = candidate.quantities.find("passes");
        if (passes != candidate.quantities.end() && passes->second == 16) {
            stage(eval::StageKind::correctness, eval::Verdict::fail, "timed out after 10 s: the kernel hung");
            outcome.final_reason = "timed out after 10 s: the kernel hung";
            outcome.device_runs = 1;
            outcome.device_secs = 10;
        } else {
            const std::string source = read_file(candidate.source_file);
            const std::optional<double> overridden = cycles_of ? cycles_of(source) : std::nullopt;
            double cycles = overridden ? *overridden : true_cycles(candidate.quantities, source);
            outcome.correct = true;
            outcome.cycles_median = cycles;
            outcome.device_runs = 4;
            outcome.device_secs = 2;
            stage(eval::StageKind::correctness, eval::Verdict::pass, "");
            if (champion && cut && cut(evaluations)) {
                outcome.budget_exhausted = true;
                stage(eval::StageKind::race, eval::Verdict::inconclusive,
                      "inconclusive: the wall-time budget ran out before pair 3 (cut at a launch boundary)");
            } else if (!champion) {
                outcome.accepted = true;
                stage(eval::StageKind::screen, eval::Verdict::pass, "first champion");
            } else {
                outcome.champion_cycles_median = champion->cycles_median;
                outcome.speedup = champion->cycles_median / cycles;
                outcome.accepted = cycles < 0.99 * champion->cycles_median;
                stage(eval::StageKind::race, outcome.accepted ? eval::Verdict::accept : eval::Verdict::reject,
                      outcome.accepted ? "faster" : "not faster by 1%");
            }
        }
        device_runs += outcome.device_runs;
        if (on_evaluate) on_evaluate(evaluations);
        return outcome;
    }
    eval::Outcome revalidate(const eval::Champion&, const eval::Champion&, const eval::KernelContext&) override {
        revalidations += 1;
        eval::Outcome outcome;
        outcome.accepted = true;
        outcome.device_runs = 2;
        return outcome;
    }
    double speed_of_light_cycles(const eval::KernelContext&) override { return 1048576.0 / 1000.0; }
    void set_strict(bool strict) override { strict_calls.emplace_back(device_runs, strict); }
    std::string toolchain_version(std::string* why) override {
        if (version.empty() && why) *why = "npuc not found on PATH or in the target's search paths";
        return version;
    }
    std::string identity = "fake-npuc 1";  ///< what toolchain_identity reports ("" = gone)
    std::string toolchain_identity() override { return identity; }
    std::string toolchain_name() override { return "fake"; }
    /// Set: the static estimate (the search's schedule screen) of a candidate; unset: none.
    std::function<search::ScreenEstimate(const eval::Candidate&)> schedule;
    int schedule_calls = 0;
    search::ScreenEstimate static_estimate(const eval::Candidate& candidate, const eval::KernelContext& kernel) override {
        if (!schedule) return campaign::Evaluator::static_estimate(candidate, kernel);
        ++schedule_calls;
        return schedule(candidate);
    }
};

config::KernelsConfig toy_kernels(const std::filesystem::path& dir) {
    config::KernelsConfig kernels;
    config::KernelSpec kernel;
    kernel.name = "toy";
    kernel.shape = {{"n", 1024}};
    kernel.baseline = dir / "baseline_toy.rs";
    kernels.kernels.push_back(kernel);
    return kernels;
}

campaign::CampaignOptions toy_options(const std::filesystem::path& dir) {
    campaign::CampaignOptions options;
    options.dir = dir;
    options.target = "toy-target";
    options.seed = 7;
    options.wall_budget_secs = 3600;
    options.device_run_budget = 100000;
    options.stop_requested = [] { return false; };
    return options;
}

/// The best design of the toy target by enumeration (hanging designs excluded).
std::string best_toy_hash(const std::filesystem::path& templates_dir, double* best_cycles) {
    auto setups = campaign::prepare_kernels(toy_kernels(templates_dir), {}, templates_dir, "toy-target");
    std::string best;
    *best_cycles = 1e300;
    for (const auto& tmpl : setups.at(0).templates) {
        if (tmpl->is_baseline()) continue;
        std::vector<search::Assignment> assignments = {{}};
        for (const auto& param : tmpl->params()) {
            std::vector<search::Assignment> next;
            for (const auto& partial : assignments) {
                for (double value : param.values) {
                    auto extended = partial;
                    extended[param.name] = value;
                    next.push_back(extended);
                }
            }
            assignments = next;
        }
        for (const auto& assignment : assignments) {
            if (tmpl->check_constraints(assignment)) continue;
            auto design = tmpl->instantiate(assignment);
            if (design.quantities.at("passes") == 16) continue;
            double cycles = true_cycles(design.quantities, design.source);
            if (cycles < *best_cycles) {
                *best_cycles = cycles;
                best = design.content_hash;
            }
        }
    }
    return best;
}

std::string champion_hash(store::CampaignStore& store, const std::string& kernel) {
    auto champion = store::TreeStore(store.database()).current_champion(kernel);
    if (!champion) return "";
    return store.find_design(champion->design_id)->content_hash;
}

campaign::CampaignResult run_toy(const std::filesystem::path& campaign_dir, const std::filesystem::path& templates_dir,
                                 FakeEvaluator& evaluator, campaign::CampaignOptions options) {
    auto store = store::CampaignStore::open(campaign_dir / "campaign.db");
    auto setups = campaign::prepare_kernels(toy_kernels(templates_dir), {}, templates_dir, "toy-target");
    campaign::CampaignDriver driver(store, evaluator, std::move(setups), std::move(options), toy_model());
    return driver.run();
}

}  // namespace

TEST_CASE("a small campaign with a fake evaluator reaches the best design") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    double best_cycles = 0;
    std::string best = best_toy_hash(templates.path, &best_cycles);
    REQUIRE_FALSE(best.empty());

    FakeEvaluator evaluator;
    std::vector<campaign::Progress> progress;
    auto options = toy_options(dir.path);
    options.progress = [&](const campaign::Progress& update) { progress.push_back(update); };
    auto result = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(result.stop == campaign::StopReason::finished);
    for (const auto& [hash, count] : evaluator.calls) CHECK(count == 1);

    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    CHECK(champion_hash(store, "toy") == best);
    REQUIRE(result.kernels.size() == 1);
    CHECK(*result.kernels[0].champion_cycles == doctest::Approx(best_cycles));
    CHECK(*result.kernels[0].baseline_cycles == doctest::Approx(5.0e6));

    // The search spent fewer evaluations than the 97 designs there are... or found the best early.
    REQUIRE_FALSE(progress.empty());
    CHECK(progress.front().role == "baseline");
    CHECK(progress.back().speedup > 10.0);
    CHECK(progress.back().sol_fraction > 0.0);
    CHECK(progress.back().sol_fraction <= 1.0);
    CHECK(progress.back().device_runs_used == result.device_runs_used);

    // Every role acted and the tree shows the champion path.
    auto tree = search::load_tree(store, "toy");
    std::set<std::string> roles;
    for (const auto& node : tree.nodes) roles.insert(node.edge.role);
    CHECK(roles.count("baseline") == 1);
    CHECK(roles.count("architect") == 1);
    CHECK(roles.count("tuner") == 1);
    CHECK(tree.champion_path.size() >= 3);
    CHECK(search::render_tree_text(tree).find("**") != std::string::npos);

    auto status = campaign::campaign_status(store);
    CHECK(status.state == "finished");
    REQUIRE(status.kernels.size() == 1);
    CHECK(status.kernels[0].speedup == doctest::Approx(5.0e6 / best_cycles));
    CHECK(status.kernels[0].sol_fraction > 0.0);
    CHECK(status.geomean_speedup == doctest::Approx(status.kernels[0].speedup));
    CHECK(campaign::render_status_text(status).find("toy") != std::string::npos);
    CHECK(campaign::to_json(status)["kernels"][0]["designs"] == static_cast<std::int64_t>(tree.nodes.size()));
}

TEST_CASE("with search.schedule_screen the static estimate reorders proposals and costs no device run") {
    ScratchDir templates("templates");
    test::write_toy_templates(templates.path);
    double best_cycles = 0;
    const std::string best = best_toy_hash(templates.path, &best_cycles);

    // the same campaign without and with the screen; the schedule here is the truth halved
    // (biased as static schedules are), so the screen can only help the model
    ScratchDir plain_dir("campaign-plain");
    FakeEvaluator plain;
    auto plain_result = run_toy(plain_dir.path, templates.path, plain, toy_options(plain_dir.path));
    CHECK(plain.schedule_calls == 0);

    ScratchDir screened_dir("campaign-screened");
    FakeEvaluator screened;
    screened.schedule = [](const eval::Candidate& candidate) {
        search::ScreenEstimate estimate;
        estimate.cycles = 0.5 * true_cycles(candidate.quantities, read_file(candidate.source_file));
        return estimate;
    };
    auto options = toy_options(screened_dir.path);
    options.schedule_screen = 4;
    auto screened_result = run_toy(screened_dir.path, templates.path, screened, options);
    CHECK(screened_result.stop == campaign::StopReason::finished);
    CHECK(screened.schedule_calls > 0);
    for (const auto& [hash, count] : screened.calls) CHECK(count == 1);

    auto store = store::CampaignStore::open(screened_dir.path / "campaign.db");
    CHECK(champion_hash(store, "toy") == best);
    int screened_edges = 0;
    int reordered = 0;
    for (const auto& edge : store::TreeStore(store.database()).list_edges("toy")) {
        if (edge.reason.find("static schedule screen of") != std::string::npos) ++screened_edges;
        if (edge.reason.find("the model ranked it #") != std::string::npos) ++reordered;
    }
    MESSAGE("evaluations: " << plain.evaluations << " without the screen, " << screened.evaluations << " with it ("
                            << screened.schedule_calls << " schedule calls, " << screened_edges << " screened steps, "
                            << reordered << " reordered)");
    CHECK(screened_edges > 0);
    // the screen's device runs are the evaluations' own: a schedule call spends none
    CHECK(screened_result.device_runs_used == screened.device_runs + 2 * screened.revalidations);
    CHECK(plain_result.device_runs_used == plain.device_runs + 2 * plain.revalidations);
}

TEST_CASE("search.screen_share caps the screen's wall time at its share of the device time, beyond which it spends only slack") {
    ScratchDir templates("templates");
    test::write_toy_templates(templates.path);
    // Each schedule call takes a few milliseconds of real wall time; each evaluation reports 2 s
    // of device time (the fake's). At a share of 0.0002 the screen may spend 0.4 ms per
    // evaluation: about one call in ten evaluations, not a window of 4 in each step.
    auto slow_schedule = [](double* longest) {
        return [longest](const eval::Candidate& candidate) {
            const auto started = std::chrono::steady_clock::now();
            std::this_thread::sleep_for(std::chrono::milliseconds(4));
            search::ScreenEstimate estimate;
            estimate.cycles = 0.5 * true_cycles(candidate.quantities, read_file(candidate.source_file));
            *longest = std::max(*longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            return estimate;
        };
    };

    // a screen window of 4 with the share given (nullopt: no cap)
    auto screened_options = [](const std::filesystem::path& dir, std::optional<double> share) {
        auto options = toy_options(dir);
        options.schedule_screen = 4;
        options.screen_share = share;
        return options;
    };

    double longest_free = 0.0;
    ScratchDir free_dir("campaign-unlimited");
    FakeEvaluator free_screen;
    free_screen.schedule = slow_schedule(&longest_free);
    run_toy(free_dir.path, templates.path, free_screen, screened_options(free_dir.path, std::nullopt));

    double longest = 0.0;
    ScratchDir capped_dir("campaign-capped");
    FakeEvaluator capped;
    capped.schedule = slow_schedule(&longest);
    auto options = screened_options(capped_dir.path, 0.0002);
    // a device-run budget no wall budget could see spent: no slack beyond the share
    options.device_run_budget = 1'000'000'000'000;
    auto result = run_toy(capped_dir.path, templates.path, capped, options);
    CHECK(result.stop == campaign::StopReason::finished);

    auto store = store::CampaignStore::open(capped_dir.path / "campaign.db");
    const campaign::CampaignStatus status = campaign::campaign_status(store);
    MESSAGE("screen calls: " << free_screen.schedule_calls << " unlimited, " << capped.schedule_calls << " capped ("
                             << status.screen_secs << " s against " << status.device_secs_used << " s of device time)");
    CHECK(status.screen_calls == capped.schedule_calls);
    CHECK(status.device_secs_used > 0.0);
    CHECK(capped.schedule_calls > 0);
    CHECK(capped.schedule_calls < free_screen.schedule_calls);
    // checked before every call: it overshoots its share by one call at most
    CHECK(status.screen_secs <= 0.0002 * status.device_secs_used + longest + 1e-3);  // + the call's own overhead
    CHECK(campaign::render_status_text(status).find("static-schedule calls") != std::string::npos);
    CHECK(campaign::to_json(status)["screen_calls"] == capped.schedule_calls);

    // beyond its share the screen spends the wall time the device runs will not need: here the
    // device-run budget would be spent long before an unbounded wall budget, so it screens as
    // freely as without a cap
    double longest_slack = 0.0;
    ScratchDir slack_dir("campaign-slack");
    FakeEvaluator slack;
    slack.schedule = slow_schedule(&longest_slack);
    auto slack_options = screened_options(slack_dir.path, 0.0002);
    slack_options.wall_budget_secs = 1e12;
    run_toy(slack_dir.path, templates.path, slack, slack_options);
    CHECK(slack.schedule_calls == free_screen.schedule_calls);

    // a share of 0 never opens the screen
    ScratchDir closed_dir("campaign-closed");
    FakeEvaluator closed;
    double unused = 0.0;
    closed.schedule = slow_schedule(&unused);
    run_toy(closed_dir.path, templates.path, closed, screened_options(closed_dir.path, 0.0));
    CHECK(closed.schedule_calls == 0);
}

TEST_CASE("a campaign resumes after a step limit without evaluating a design twice") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    double best_cycles = 0;
    std::string best = best_toy_hash(templates.path, &best_cycles);

    FakeEvaluator evaluator;
    auto options = toy_options(dir.path);
    options.max_steps = 6;
    auto first = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(first.stop == campaign::StopReason::step_limit);
    CHECK(first.steps_this_run == 6);
    {
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        auto status = campaign::campaign_status(store);
        CHECK(status.state == "stopped");
        CHECK(status.stop_reason == "step_limit");
        CHECK(status.steps == 6);
        // what the search learnt of the model's word is kept for the resume
        auto learnt = store::TreeStore(store.database()).state("search/toy");
        REQUIRE(learnt.has_value());
        auto learnt_json = nlohmann::json::parse(*learnt);
        CHECK(learnt_json["gain_records"].is_object());
    }
    options.max_steps.reset();
    auto second = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(second.stop == campaign::StopReason::finished);
    for (const auto& [hash, count] : evaluator.calls) CHECK(count == 1);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    CHECK(champion_hash(store, "toy") == best);
    auto events = store.list_events(1000);
    CHECK(std::any_of(events.begin(), events.end(), [](const auto& event) { return event.kind == "campaign_resumed"; }));
}

TEST_CASE("a step cut by the budget at a launch boundary is evaluated again first when the campaign next runs") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator evaluator;
    evaluator.cut = [](int evaluation) { return evaluation == 4; };
    auto options = toy_options(dir.path);
    options.max_steps = 4;
    std::vector<std::string> heard;  // the events as they are recorded (run --message-format json)
    options.on_event = [&](const std::string& kind, const nlohmann::json&) { heard.push_back(kind); };
    auto first = run_toy(dir.path, templates.path, evaluator, options);
    REQUIRE(evaluator.order.size() == 4);
    CHECK(std::find(heard.begin(), heard.end(), "step_cut") != heard.end());
    CHECK(std::find(heard.begin(), heard.end(), "campaign_stopped") != heard.end());
    options.on_event = nullptr;
    const std::string cut_hash = evaluator.order.back();
    {
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        auto events = store.list_events(1000);
        CHECK(std::any_of(events.begin(), events.end(), [](const auto& event) { return event.kind == "step_cut"; }));
    }
    evaluator.cut = nullptr;
    options.max_steps = 1;
    run_toy(dir.path, templates.path, evaluator, options);
    REQUIRE(evaluator.order.size() == 5);
    CHECK(evaluator.order.back() == cut_hash);  // the cut step first, before any new proposal
    CHECK(evaluator.calls[cut_hash] == 2);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto edges = store::TreeStore(store.database()).list_edges("toy");
    REQUIRE_FALSE(edges.empty());
    CHECK(edges.back().reason.rfind("resumed: ", 0) == 0);
    // Resumed once: a third run proposes something new.
    options.max_steps = 1;
    run_toy(dir.path, templates.path, evaluator, options);
    REQUIRE(evaluator.order.size() == 6);
    CHECK(evaluator.order.back() != cut_hash);
}

TEST_CASE("the wall budget less the reserve for after the run sets the evaluator's deadline and ends the run") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator evaluator;
    auto options = toy_options(dir.path);  // 3600 s
    options.max_steps = 2;
    double asked_with = -1.0;
    options.wall_reserve_secs = [&](double mean_launch_secs) {
        asked_with = mean_launch_secs;
        return 600.0;
    };
    const auto start = std::chrono::steady_clock::now();
    run_toy(dir.path, templates.path, evaluator, options);
    REQUIRE(evaluator.deadline.has_value());
    const double deadline_in = std::chrono::duration<double>(*evaluator.deadline - start).count();
    CHECK(deadline_in > 2900.0);
    CHECK(deadline_in < 3001.0);
    CHECK(asked_with == doctest::Approx(0.5));  // the fake's launches: 2 s per 4 runs

    ScratchDir other("campaign2");
    auto tight = toy_options(other.path);
    tight.wall_reserve_secs = [](double) { return 4000.0; };  // more than the budget: no step fits
    FakeEvaluator idle;
    auto result = run_toy(other.path, templates.path, idle, tight);
    CHECK(result.stop == campaign::StopReason::wall_budget);
    CHECK(idle.evaluations == 0);
    CHECK(result.message.find("kept for the submission") != std::string::npos);
}

TEST_CASE("a family whose first design fails to compile is still unmeasured: the architect enters it again") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator evaluator;
    int stream_failures = 0;
    evaluator.fails_to_compile = [&](const std::string& source) {
        if (source.find("stream") == std::string::npos || stream_failures > 0) return false;
        stream_failures += 1;
        return true;
    };
    auto options = toy_options(dir.path);
    options.max_steps = 12;
    run_toy(dir.path, templates.path, evaluator, options);
    REQUIRE(stream_failures == 1);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto edges = store::TreeStore(store.database()).list_edges("toy");
    std::vector<store::TreeEdgeRecord> stream;
    for (const auto& edge : edges) {
        auto design = store.find_design(edge.design_id);
        if (design && design->template_name == "toy_stream") stream.push_back(edge);
    }
    REQUIRE(stream.size() >= 2);
    CHECK(stream[0].verdict == "failed");
    // the failed compile cost no device run and did not count as a measurement of the family
    CHECK(stream[0].device_runs == 0);
    CHECK(stream[1].role == "architect");
    CHECK(stream[1].reason.find("family stream (0 designs so far)") != std::string::npos);
    CHECK(stream[1].cycles.has_value());
}

TEST_CASE("SIGINT finishes the step in flight and a rerun resumes without repeating a design") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int code = 1;
        try {
            install_interrupt_handlers();
            FakeEvaluator evaluator;
            evaluator.on_evaluate = [](int count) {
                if (count == 4) ::raise(SIGINT);
            };
            auto options = toy_options(dir.path);
            options.stop_requested = {};  // the real flag
            auto result = run_toy(dir.path, templates.path, evaluator, options);
            code = result.stop == campaign::StopReason::interrupted && result.steps_this_run == 4 ? 3 : 1;
        } catch (...) {
            code = 2;
        }
        ::_exit(code);
    }
    int wait_status = 0;
    REQUIRE(::waitpid(child, &wait_status, 0) == child);
    REQUIRE(WIFEXITED(wait_status));
    CHECK(WEXITSTATUS(wait_status) == 3);

    std::set<std::string> evaluated_before;
    {
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        CHECK(store.database().integrity_check() == "ok");
        auto tree = search::load_tree(store, "toy");
        CHECK(tree.nodes.size() == 4);
        for (const auto& node : tree.nodes) evaluated_before.insert(node.design.content_hash);
        CHECK(campaign::campaign_status(store).stop_reason == "interrupted");
    }
    FakeEvaluator evaluator;
    auto result = run_toy(dir.path, templates.path, evaluator, toy_options(dir.path));
    CHECK(result.stop == campaign::StopReason::finished);
    for (const auto& [hash, count] : evaluator.calls) {
        CHECK(count == 1);
        CHECK(evaluated_before.count(hash) == 0);
    }
}

TEST_CASE("a run beside a kb build of the same campaign is refused and names the holder") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    auto held = campaign::CampaignLock::acquire(dir.path, "npuopt kb build");
    CHECK(campaign::campaign_locked(dir.path));
    FakeEvaluator evaluator;
    std::string message;
    try {
        run_toy(dir.path, templates.path, evaluator, toy_options(dir.path));
    } catch (const Error& error) {
        message = error.what();
        CHECK(error.kind() == ErrorKind::invalid_input);
    }
    CHECK(message.find("is busy") != std::string::npos);
    CHECK(message.find("npuopt kb build") != std::string::npos);  // the holder's command
    CHECK(message.find("`npuopt run` cannot run") != std::string::npos);
    CHECK(message.find(std::to_string(::getpid())) != std::string::npos);
    CHECK(evaluator.evaluations == 0);
}

TEST_CASE("a kb build beside a run is refused and names the run") {
    ScratchDir dir("campaign");
    auto held = campaign::CampaignLock::acquire(dir.path, "npuopt run");
    std::string message;
    try {
        auto second = campaign::CampaignLock::acquire(dir.path, "npuopt kb build");
    } catch (const Error& error) {
        message = error.what();
        CHECK(error.kind() == ErrorKind::invalid_input);
    }
    CHECK(message.find(fmt::format("pid {} (npuopt run)", ::getpid())) != std::string::npos);
    CHECK(message.find("`npuopt kb build` cannot run") != std::string::npos);
}

TEST_CASE("a missing toolchain a broken template and a hanging kernel are recorded failures") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    write_text(templates.path / "broken.template.yaml",
               "template: broken\nkernel: toy\nsource: toy_stream.rs\nparams:\n  ENGINES: {values: [1], default: 1}\n"
               "  SPLIT: {values: [1], default: 1}\nquantities:\n  passes: \"nope * 2\"\n");

    SUBCASE("missing toolchain") {
        FakeEvaluator evaluator;
        evaluator.version = "";
        auto result = run_toy(dir.path, templates.path, evaluator, toy_options(dir.path));
        CHECK(result.stop == campaign::StopReason::all_failed);
        CHECK(evaluator.evaluations == 0);
        REQUIRE(result.kernels.size() == 1);
        CHECK(result.kernels[0].status == "failed");
        CHECK(result.kernels[0].reason.find("toolchain missing: npuc not found") != std::string::npos);
        // Once the toolchain is there, the next run starts the kernel.
        FakeEvaluator fixed;
        auto options = toy_options(dir.path);
        options.max_steps = 3;
        auto rerun = run_toy(dir.path, templates.path, fixed, options);
        CHECK(rerun.stop == campaign::StopReason::step_limit);
        CHECK(rerun.kernels[0].champion_cycles.has_value());
    }
    SUBCASE("broken template and hang") {
        FakeEvaluator evaluator;
        auto result = run_toy(dir.path, templates.path, evaluator, toy_options(dir.path));
        CHECK(result.stop == campaign::StopReason::finished);
        CHECK(result.kernels[0].champion_cycles.has_value());
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        auto events = store.list_events(1000);
        auto broken = std::find_if(events.begin(), events.end(), [](const auto& event) {
            return event.kind == "template_failed";
        });
        REQUIRE(broken != events.end());
        CHECK(broken->payload_json.find("broken.template.yaml:8") != std::string::npos);
        CHECK(broken->payload_json.find("quantities.passes") != std::string::npos);
        auto tree = search::load_tree(store, "toy");
        int hung = 0;
        for (const auto& node : tree.nodes) {
            CHECK(node.design.template_name != "broken");
            if (node.edge.verdict == "failed") {
                hung += 1;
                CHECK(node.edge.final_reason.find("hung") != std::string::npos);
                CHECK(node.edge.last_stage == "correctness");
            }
        }
        CHECK(hung >= 1);
    }
}

TEST_CASE("acceptance turns strict once the campaign has spent its configured share of the budget") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator evaluator;
    auto options = toy_options(dir.path);
    options.device_run_budget = 40;  // strict once 32 of the 40 runs are spent, before the next step
    options.strict_after = 0.8;
    options.revalidate_every_accepts = 0;  // re-validation runs would move the threshold
    auto result = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(result.stop == campaign::StopReason::device_budget);
    REQUIRE(evaluator.strict_calls.size() == 1);
    CHECK(evaluator.strict_calls[0].second);
    CHECK(evaluator.strict_calls[0].first >= 32);
    CHECK(evaluator.strict_calls[0].first < 32 + 4);  // no evaluation reports more than 4 runs
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto events = store.list_events(1000);
    CHECK(std::count_if(events.begin(), events.end(), [](const auto& event) { return event.kind == "acceptance_strict"; }) == 1);

    // strict_after = 1 never turns strict.
    ScratchDir other("campaign-never");
    FakeEvaluator never;
    auto never_options = toy_options(other.path);
    never_options.device_run_budget = 40;
    never_options.strict_after = 1.0;
    never_options.revalidate_every_accepts = 0;
    run_toy(other.path, templates.path, never, never_options);
    CHECK(never.strict_calls.empty());
}

TEST_CASE("the champion is re-validated every configured number of accepts and never with 0") {
    ScratchDir templates("templates");
    auto accepts_in = [](store::CampaignStore& store) {
        auto tree = search::load_tree(store, "toy");
        return static_cast<int>(tree.champion_path.size()) - 1;  // the baseline is no accept
    };
    for (int every : {0, 1, 2}) {
        CAPTURE(every);
        ScratchDir dir("campaign-reval");
        test::write_toy_templates(templates.path);
        FakeEvaluator evaluator;
        auto options = toy_options(dir.path);
        options.revalidate_every_accepts = every;
        run_toy(dir.path, templates.path, evaluator, options);
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        int accepts = accepts_in(store);
        REQUIRE(accepts >= 2);
        CHECK(evaluator.revalidations == (every == 0 ? 0 : accepts / every));
    }
}

TEST_CASE("launches counted in the store but never committed with their step are charged on resume") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    {
        // a run killed in the middle of a step: 40 launches counted as they started, no step committed
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        for (int launch_idx = 0; launch_idx < 40; ++launch_idx) store.count_device_launch();
    }
    FakeEvaluator evaluator;
    auto options = toy_options(dir.path);
    options.device_run_budget = 40;
    auto result = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(result.stop == campaign::StopReason::device_budget);
    CHECK(result.device_runs_used == 40);
    CHECK(evaluator.evaluations == 0);  // nothing left to spend
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    CHECK(campaign::campaign_status(store).device_runs_used == 40);
}

namespace {

std::vector<store::EventRecord> events_of(const std::filesystem::path& dir, const std::string& kind) {
    auto store = store::CampaignStore::open(dir / "campaign.db");
    std::vector<store::EventRecord> found;
    for (const auto& event : store.list_events(100000)) {
        if (event.kind == kind) found.push_back(event);
    }
    return found;
}

}  // namespace

TEST_CASE("a toolchain that disappears under the running loop stops it with a clear message and keeps every step") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator evaluator;
    evaluator.on_evaluate = [&](int n) {
        if (n == 4) evaluator.identity = "";  // npuc removed while the fourth step ran
    };
    auto result = run_toy(dir.path, templates.path, evaluator, toy_options(dir.path));
    CHECK(result.stop == campaign::StopReason::toolchain_missing);
    CHECK(result.message.find("disappeared") != std::string::npos);
    CHECK(result.message.find("fake 1.0") != std::string::npos);
    CHECK(evaluator.evaluations == 4);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    CHECK(search::load_tree(store, "toy").nodes.size() == 4);  // every evaluated step kept
    CHECK(events_of(dir.path, "toolchain_moved").size() == 1);

    SUBCASE("the same version reinstalled goes on") {
        FakeEvaluator again;
        again.on_evaluate = [&](int n) {
            if (n == 2) again.identity = "fake-npuc 2";  // another file, same version
        };
        auto options = toy_options(dir.path);
        options.max_steps = 4;
        auto rerun = run_toy(dir.path, templates.path, again, options);
        CHECK(rerun.stop == campaign::StopReason::step_limit);
    }
    SUBCASE("another version under the loop ends the run as toolchain_changed") {
        FakeEvaluator again;
        again.on_evaluate = [&](int n) {
            if (n == 2) {
                again.identity = "fake-npuc 2";
                again.version = "fake 1.1";
            }
        };
        auto rerun = run_toy(dir.path, templates.path, again, toy_options(dir.path));
        CHECK(rerun.stop == campaign::StopReason::toolchain_changed);
        CHECK(rerun.message.find("from fake 1.0 to fake 1.1") != std::string::npos);
    }
}

TEST_CASE("after a toolchain update the baseline and the champion are measured again and old records are kept stale") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator old_toolchain;
    auto options = toy_options(dir.path);
    options.max_steps = 12;
    auto first = run_toy(dir.path, templates.path, old_toolchain, options);
    REQUIRE(first.kernels.at(0).champion_cycles.has_value());
    const std::string old_champion = first.kernels[0].champion;
    REQUIRE(old_champion != "baseline");

    FakeEvaluator new_toolchain;
    new_toolchain.version = "fake 1.1";
    options.max_steps = 1;  // the port is one step of the loop
    auto second = run_toy(dir.path, templates.path, new_toolchain, options);
    auto finished = events_of(dir.path, "port_finished");
    REQUIRE(finished.size() == 1);
    auto event = nlohmann::json::parse(finished[0].payload_json);
    CHECK(event["from"] == "fake 1.0");
    CHECK(event["to"] == "fake 1.1");
    CHECK(event["champion_ported"] == true);
    CHECK(event["lost"] == "");
    CHECK(event["before"]["champion"] == old_champion);
    CHECK(second.kernels.at(0).champion == old_champion);  // ported, re-measured, still the champion
    CHECK(new_toolchain.evaluations == 2);                  // the baseline, then the champion
    CHECK(second.kernels[0].baseline_cycles.has_value());
    auto changed = events_of(dir.path, "toolchain_changed");
    REQUIRE(changed.size() == 1);
    CHECK(nlohmann::json::parse(changed[0].payload_json).value("records_marked_stale", 0) >= 0);
}

/// The LLM porter as the driver sees it: the first port of a design still fails, its repair
/// (the same conversation, the new diagnostics) compiles.
struct ScriptedPorter final : search::LlmPorter {
    std::vector<search::PortRequest>* seen = nullptr;
    int* notified = nullptr;
    search::LlmRoleStats counters;
    std::vector<search::Proposal> port(const search::PortRequest& request) override {
        seen->push_back(request);
        const bool repair = !request.repair_of.empty();
        search::Proposal proposal;
        proposal.design = search::design_from_source("toy-target", "toy", "n=1024",
                                                     request.source + (repair ? "// ported to fake 1.1\n" : "// half-ported\n"),
                                                     "llm-porter");
        proposal.role = "llm-porter";
        proposal.move = "port to " + request.to;
        proposal.reason = repair ? "renamed the call the diagnostic names" : "first try";
        return {proposal};
    }
    void notify(const search::StepFeedback& feedback) override {
        if (feedback.proposal.role == "llm-porter") ++*notified;
    }
    const search::LlmRoleStats& stats() const override { return counters; }
};

TEST_CASE("after an update a design no fix-it mends is ported by the LLM porter and repaired with the new diagnostics") {
    ScratchDir templates("templates");
    test::write_toy_templates(templates.path);
    auto old_options = [&](const std::filesystem::path& dir) {
        auto options = toy_options(dir);
        options.max_steps = 12;
        return options;
    };
    // Under the new version every non-baseline source fails to compile with no fix-it, unless ported.
    auto new_toolchain = [](double ported_cycles) {
        FakeEvaluator evaluator;
        evaluator.version = "fake 1.1";
        evaluator.fails_to_compile = [](const std::string& source) {
            return source.find("baseline toy kernel") == std::string::npos &&
                   source.find("// ported to fake 1.1\n") == std::string::npos;
        };
        evaluator.cycles_of = [ported_cycles](const std::string& source) -> std::optional<double> {
            if (source.find("// ported to fake 1.1\n") != std::string::npos) return ported_cycles;
            return std::nullopt;
        };
        return evaluator;
    };

    // With the porter: the champion's port fails once, its repair is kept as the champion.
    ScratchDir dir("campaign");
    FakeEvaluator old_toolchain;
    auto first = run_toy(dir.path, templates.path, old_toolchain, old_options(dir.path));
    REQUIRE(first.kernels.at(0).champion_cycles.has_value());
    const std::string old_champion = first.kernels[0].champion;
    REQUIRE(old_champion != "baseline");
    std::vector<search::PortRequest> requests;
    int notified = 0;
    auto options = toy_options(dir.path);
    options.max_steps = 1;
    options.porter_factory = [&](const std::string& kernel) -> std::unique_ptr<search::LlmPorter> {
        CHECK(kernel == "toy");
        auto porter = std::make_unique<ScriptedPorter>();
        porter->seen = &requests;
        porter->notified = &notified;
        return porter;
    };
    FakeEvaluator updated = new_toolchain(*first.kernels[0].champion_cycles);
    auto second = run_toy(dir.path, templates.path, updated, options);
    REQUIRE(requests.size() == 2);
    CHECK(requests[0].repair_of.empty());
    CHECK(requests[0].from == "fake 1.0");
    CHECK(requests[0].to == "fake 1.1");
    CHECK(requests[0].design_label == old_champion);
    CHECK(requests[0].diagnostics.find("E0101") != std::string::npos);
    CHECK_FALSE(requests[1].repair_of.empty());
    CHECK(requests[1].source.find("// half-ported") != std::string::npos);
    CHECK(second.kernels.at(0).champion.rfind("llm-porter@", 0) == 0);
    REQUIRE(second.kernels[0].champion_cycles.has_value());
    CHECK(*second.kernels[0].champion_cycles == doctest::Approx(*first.kernels[0].champion_cycles));
    auto finished = events_of(dir.path, "port_finished");
    REQUIRE(finished.size() == 1);
    auto event = nlohmann::json::parse(finished[0].payload_json);
    CHECK(event["champion_ported"] == true);
    CHECK(event["ported_by"] == "llm-porter");
    CHECK(event["lost"] == "");
    CHECK(notified == 2);  // it learns what became of both of its ports

    // Without one (no LLM): the same update loses the champion to the baseline, and says why.
    ScratchDir plain("campaign-plain");
    FakeEvaluator old_again;
    auto before = run_toy(plain.path, templates.path, old_again, old_options(plain.path));
    REQUIRE(before.kernels.at(0).champion != "baseline");
    auto plain_options = toy_options(plain.path);
    plain_options.max_steps = 1;
    FakeEvaluator updated_again = new_toolchain(*before.kernels[0].champion_cycles);
    auto after = run_toy(plain.path, templates.path, updated_again, plain_options);
    CHECK(after.kernels.at(0).champion == "baseline");
    auto lost = events_of(plain.path, "port_finished");
    REQUIRE(lost.size() == 1);
    auto lost_event = nlohmann::json::parse(lost[0].payload_json);
    CHECK(lost_event["champion_ported"] == false);
    CHECK(lost_event["lost"].get<std::string>().find("could not be ported") != std::string::npos);
}

TEST_CASE("after a port the cost terms the refit moved are re-opened and the analyst re-tunes them first") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    FakeEvaluator old_toolchain;
    auto options = toy_options(dir.path);
    options.max_steps = 12;
    auto first = run_toy(dir.path, templates.path, old_toolchain, options);
    REQUIRE(first.kernels.at(0).champion != "baseline");
    {
        // what run_once records when the refreshed knowledge base moved the DMA command cost
        auto store = store::CampaignStore::open(dir.path / "campaign.db");
        store.record_event("hardware_model_changed",
                           R"({"from":"fake 1.0","to":"fake 1.1","moved":[{"param":"dma_startup_cycles","change":-0.4}],)"
                           R"("terms":[{"term":"dma_startup","lever":"fewer DMA commands"}]})");
    }
    FakeEvaluator new_toolchain;
    new_toolchain.version = "fake 1.1";
    options.max_steps = 4;  // the port, then three steps of the search
    run_toy(dir.path, templates.path, new_toolchain, options);
    auto reopened = events_of(dir.path, "parameters_reopened");
    REQUIRE(reopened.size() == 1);
    auto event = nlohmann::json::parse(reopened[0].payload_json);
    CHECK(event["terms"] == nlohmann::json::array({"dma_startup"}));
    CHECK(event["steps"] == 8);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto edges = store::TreeStore(store.database()).list_edges("toy");
    int reopened_steps = 0;
    for (const auto& edge : edges) {
        if (edge.move.find("(re-opened: dma_startup)") == std::string::npos) continue;
        CHECK(edge.role == "analyst");
        ++reopened_steps;
    }
    CHECK(reopened_steps >= 1);
    // the steps left are kept with the kernel across runs
    const auto state = store::TreeStore(store.database()).state("kernel/toy");
    REQUIRE(state.has_value());
    const auto kernel_state = nlohmann::json::parse(*state);
    CHECK(kernel_state["reopen_steps_left"].get<int>() <= 8 - 1);
    CHECK(kernel_state["reopened_terms"] == nlohmann::json::array({"dma_startup"}));
}

TEST_CASE("a kernel whose every family has a known failure is blocked instead of burning steps") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    store::KnowledgeStore knowledge(store.database());
    knowledge::SourceRules rules(knowledge, "toy-target", "fake 1.0", "fake");
    target::Diagnostic renamed{"error", "E0401", "`vtrf` was renamed to `to_trf`", std::nullopt, {}, {}, {}};
    for (const std::string family : {"tiles", "stream"}) {
        rules.record_failure(family, renamed, {family + "-a", "", {}});
        if (family == "tiles") rules.record_failure(family, renamed, {family + "-b", "", {}});
    }
    CHECK(rules.known_failures(2).size() == 1);  // one design of `stream` is not yet a known failure

    FakeEvaluator evaluator;
    auto options = toy_options(dir.path);
    options.source_rules = &rules;
    options.max_steps = 40;
    {
        auto setups = campaign::prepare_kernels(toy_kernels(templates.path), {}, templates.path, "toy-target");
        campaign::CampaignDriver driver(store, evaluator, std::move(setups), options, toy_model());
        auto result = driver.run();
        CHECK(result.kernels.at(0).status != "blocked");  // `stream` is still open
    }
    rules.record_failure("stream", renamed, {"stream-b", "", {}});
    FakeEvaluator later;
    auto setups = campaign::prepare_kernels(toy_kernels(templates.path), {}, templates.path, "toy-target");
    campaign::CampaignDriver driver(store, later, std::move(setups), options, toy_model());
    auto result = driver.run();
    CHECK(later.evaluations == 0);
    CHECK(result.kernels.at(0).status == "blocked");
    CHECK(result.kernels[0].reason.find("every family fails under fake 1.0") != std::string::npos);
    CHECK(result.kernels[0].reason.find("tiles") != std::string::npos);
    CHECK(result.kernels[0].reason.find("stream") != std::string::npos);
    CHECK(events_of(dir.path, "kernel_blocked").size() == 1);
    // A design of a family passing the check again opens it.
    rules.record_pass("stream", {"stream-c", "", {}});
    CHECK(rules.known_failures(2).size() == 1);
}

TEST_CASE("a kernel whose baseline fails still searches and its first correct design is the marked reference") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    double best_cycles = 0;
    const std::string best = best_toy_hash(templates.path, &best_cycles);

    FakeEvaluator evaluator;
    evaluator.fails_to_compile = [](const std::string& source) {
        return source.find("baseline toy kernel") != std::string::npos;
    };
    std::vector<campaign::Progress> progress;
    auto options = toy_options(dir.path);
    options.progress = [&](const campaign::Progress& update) { progress.push_back(update); };
    auto result = run_toy(dir.path, templates.path, evaluator, options);
    CHECK(result.stop == campaign::StopReason::finished);
    REQUIRE(result.kernels.size() == 1);
    const auto& kernel = result.kernels[0];
    CHECK(kernel.status != "failed");
    REQUIRE(kernel.champion_cycles);
    CHECK(*kernel.champion_cycles == doctest::Approx(best_cycles));
    // The reference is the first correct design, not the (never measured) baseline.
    REQUIRE(kernel.baseline_cycles);
    CHECK(*kernel.baseline_cycles < 5.0e6);
    CHECK(kernel.reference.find("first correct design (baseline failed: failed at compile") == 0);
    CHECK(kernel.reference.find("E0101") != std::string::npos);

    REQUIRE(progress.size() >= 2);
    CHECK(progress.front().role == "baseline");
    CHECK(progress.front().verdict == "failed");
    CHECK(progress.back().reference == kernel.reference);

    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    CHECK(champion_hash(store, "toy") == best);
    auto path = store::TreeStore(store.database()).champion_path("toy");
    REQUIRE_FALSE(path.empty());
    CHECK(path.front().reason.find("reference: first correct design") == 0);
    std::set<std::string> kinds;
    for (const auto& event : store.list_events(1000)) kinds.insert(event.kind);
    CHECK(kinds.count("baseline_failed") == 1);
    CHECK(kinds.count("reference_chosen") == 1);
    CHECK(kinds.count("kernel_failed") == 0);

    auto status = campaign::campaign_status(store);
    REQUIRE(status.kernels.size() == 1);
    CHECK(status.kernels[0].reference == kernel.reference);
    CHECK(status.kernels[0].speedup == doctest::Approx(*kernel.baseline_cycles / best_cycles));
    const std::string text = campaign::render_status_text(status);
    CHECK(text.find("x reference") != std::string::npos);
    CHECK(text.find("reference: first correct design (baseline failed:") != std::string::npos);
    CHECK(campaign::to_json(status)["kernels"][0]["reference"] == kernel.reference);

    // A resumed run keeps the reference and does not try the baseline again.
    FakeEvaluator again;
    int baseline_evaluations = 0;
    again.fails_to_compile = [&](const std::string& source) {
        const bool is_baseline = source.find("baseline toy kernel") != std::string::npos;
        baseline_evaluations += is_baseline ? 1 : 0;
        return is_baseline;
    };
    auto rerun = run_toy(dir.path, templates.path, again, toy_options(dir.path));
    REQUIRE(rerun.kernels.size() == 1);
    CHECK(rerun.kernels[0].reference == kernel.reference);
    CHECK(*rerun.kernels[0].baseline_cycles == doctest::Approx(*kernel.baseline_cycles));
    CHECK(baseline_evaluations == 0);
}

TEST_CASE("a quantity the toolchain counts higher than the template declares is corrected, kept, and restored") {
    ScratchDir templates("templates");
    ScratchDir dir("campaign");
    test::write_toy_templates(templates.path);
    // The tiles family declares its data-memory use and a budget over it; the "toolchain" counts
    // 16 KiB more (its own layout) and rejects what goes over 64 KiB.
    std::string yaml = read_file(templates.path / "toy_tiles.template.yaml");
    const std::string constraint = "  - \"ROWS * n * BUFFERS <= 65536\"\n";
    REQUIRE(yaml.find(constraint) != std::string::npos);
    yaml.replace(yaml.find(constraint), constraint.size(), "  - \"dm_bytes <= 65536\"\n");
    yaml.replace(yaml.find("quantities:\n"), 12, "quantities:\n  dm_bytes: \"ROWS * n * BUFFERS\"\n");
    write_text(templates.path / "toy_tiles.template.yaml", yaml);
    constexpr double hidden = 16384;
    double counted = hidden;  // what the running toolchain adds (another toolchain, another figure)
    FakeEvaluator evaluator;
    std::vector<double> rejected;  // declared dm_bytes of each design the toolchain rejected
    std::vector<double> declared_seen;
    evaluator.quantity_misses = [&](const eval::Candidate& candidate) {
        std::vector<eval::QuantityMiss> misses;
        auto dm = candidate.quantities.find("dm_bytes");
        if (dm == candidate.quantities.end()) return misses;
        declared_seen.push_back(dm->second);
        // The toolchain's figure: the formula's part of the declared value plus the hidden 16 KiB.
        const double formula = candidate.quantities.at("dm_bytes_formula");
        if (formula + counted > 65536) {
            rejected.push_back(dm->second);
            misses.push_back({"dm_bytes", dm->second, formula + counted, "E0201"});
        }
        return misses;
    };
    // The formula's own value travels beside the declared one (offsets change only dm_bytes).
    yaml = read_file(templates.path / "toy_tiles.template.yaml");
    yaml.replace(yaml.find("quantities:\n"), 12, "quantities:\n  dm_bytes_formula: \"ROWS * n * BUFFERS\"\n");
    write_text(templates.path / "toy_tiles.template.yaml", yaml);
    auto options = toy_options(dir.path);
    options.max_steps = 40;
    run_toy(dir.path, templates.path, evaluator, options);
    // One miss teaches the whole 16 KiB: every later design the search proposed fits.
    REQUIRE_FALSE(rejected.empty());
    CHECK(rejected.size() == 1);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    auto events = store.list_events(1000);
    auto corrected = std::find_if(events.begin(), events.end(), [](const auto& event) { return event.kind == "quantity_corrected"; });
    REQUIRE(corrected != events.end());
    auto payload = nlohmann::json::parse(corrected->payload_json);
    CHECK(payload["quantity"] == "dm_bytes");
    CHECK(payload["offset"].get<double>() == doctest::Approx(hidden));
    CHECK(payload["code"] == "E0201");
    auto state = nlohmann::json::parse(store::TreeStore(store.database()).state("kernel/toy").value_or("{}"));
    CHECK(state["quantity_offsets"]["toy_tiles"]["dm_bytes"].get<double>() == doctest::Approx(hidden));
    // A resumed campaign starts from the learnt offset: no design it proposes goes over again.
    const std::size_t before = rejected.size();
    declared_seen.clear();
    options.max_steps = 20;
    run_toy(dir.path, templates.path, evaluator, options);
    CHECK(rejected.size() == before);
    for (double declared : declared_seen) CHECK(declared <= 65536);

    // Another toolchain that counts only 8 KiB extra: the old offset is dropped (and said so), not
    // kept as a needless 16 KiB margin; what is learnt afterwards is the new toolchain's own figure.
    evaluator.version = "fake 1.1";
    counted = 8192;
    run_toy(dir.path, templates.path, evaluator, options);
    auto cleared = events_of(dir.path, "quantity_offsets_cleared");
    REQUIRE(cleared.size() == 1);
    auto dropped = nlohmann::json::parse(cleared[0].payload_json);
    CHECK(dropped["from"] == "fake 1.0");
    CHECK(dropped["to"] == "fake 1.1");
    CHECK(dropped["offsets"]["toy_tiles"]["dm_bytes"].get<double>() == doctest::Approx(hidden));
    auto after = nlohmann::json::parse(store::TreeStore(store.database()).state("kernel/toy").value_or("{}"));
    const double relearnt = after["quantity_offsets"].value("toy_tiles", nlohmann::json::object()).value("dm_bytes", 0.0);
    CHECK((relearnt == 0.0 || relearnt == doctest::Approx(8192)));
}
