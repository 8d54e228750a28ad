// The evaluation pipeline (campaign/pipeline.hpp, CampaignOptions::parallel_evaluators): several
// kernels' steps evaluated at once on their own evaluators and committed in the order planned,
// and the device slots a step's launches hold. Fakes only: no toolchain.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "campaign/pipeline.hpp"
#include "config/cost_model_config.hpp"
#include "core/hash.hpp"
#include "store/tree_store.hpp"
#include "../search/search_test_util.hpp"
#include "campaign_test_util.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;
using npuopt::test::toy_model;
using npuopt::test::write_text;

namespace {

const std::vector<std::string> k_kernels = {"toy_a", "toy_b", "toy_c"};

std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// The toy templates of search_test_util for three kernels (the same families, another name each).
void write_templates(const std::filesystem::path& dir) {
    ScratchDir toy("toy-templates");
    test::write_toy_templates(toy.path);
    for (const auto& kernel : k_kernels) {
        for (const auto& entry : std::filesystem::directory_iterator(toy.path)) {
            const std::string name = entry.path().filename().string();
            std::string text = read_file(entry.path());
            if (name.ends_with(".template.yaml")) {
                text = std::regex_replace(text, std::regex("kernel: toy"), "kernel: " + kernel);
                text = std::regex_replace(text, std::regex("template: (\\w+)"), "template: $1_" + kernel);
                write_text(dir / (kernel + "_" + name), text);
            } else if (name == "baseline_toy.rs") {
                write_text(dir / ("baseline_" + kernel + ".rs"), text + "// " + kernel + "\n");
            } else {
                write_text(dir / name, text);
            }
        }
    }
}

config::KernelsConfig kernels_config(const std::filesystem::path& dir) {
    config::KernelsConfig kernels;
    for (const auto& name : k_kernels) {
        config::KernelSpec kernel;
        kernel.name = name;
        kernel.shape = {{"n", 1024}};
        kernel.baseline = dir / ("baseline_" + name + ".rs");
        kernels.kernels.push_back(kernel);
    }
    return kernels;
}

/// What every evaluator of one campaign shares: the order results arrived in, how many
/// evaluations were in flight at most, and the delays that scramble the arrival order.
struct Shared {
    std::mutex mutex;
    std::vector<std::string> arrivals;  ///< content hashes in the order their results came back
    std::map<std::string, int> calls;   ///< evaluations per content hash
    std::atomic<int> in_flight{0};
    std::atomic<int> most_in_flight{0};
    std::uint64_t delay_seed = 0;       ///< a delay of 0–15 ms per design, drawn from it and the hash
};

/// A deterministic, thread-safe evaluator: the toy cycles from the design's quantities, accepted
/// when 1 % faster than the champion; it sleeps a while first, so that results arrive out of order.
struct DelayedEvaluator final : campaign::Evaluator {
    explicit DelayedEvaluator(Shared& shared) : m_shared(&shared) {}

    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext&) override {
        const int now = ++m_shared->in_flight;
        for (int most = m_shared->most_in_flight.load(); now > most && !m_shared->most_in_flight.compare_exchange_weak(most, now);) {
        }
        std::mt19937_64 draw(m_shared->delay_seed ^ std::hash<std::string>{}(candidate.content_hash));
        std::this_thread::sleep_for(std::chrono::milliseconds(draw() % 16));
        eval::Outcome outcome;
        outcome.stages.push_back({eval::StageKind::compile, eval::Verdict::pass, "", 0.1, 0});
        double cycles = 5.0e6;
        if (!candidate.quantities.empty()) {
            const double engines = candidate.quantities.at("engine_index") + 1.0;
            cycles = 1048576.0 / (100.0 * engines) + candidate.quantities.at("dma_commands") * 500.0 / engines +
                     candidate.quantities.at("passes") * 150.0 +
                     (candidate.quantities.at("packet_bytes") >= 4096 ? 0.0 : 3000.0);
        }
        outcome.correct = true;
        outcome.cycles_median = cycles;
        outcome.device_runs = 4;
        outcome.device_secs = 0.01;
        if (!champion) {
            outcome.accepted = true;
            outcome.stages.push_back({eval::StageKind::screen, eval::Verdict::pass, "first champion", 0.1, 4});
        } else {
            outcome.champion_cycles_median = champion->cycles_median;
            outcome.speedup = champion->cycles_median / cycles;
            outcome.accepted = cycles < 0.99 * champion->cycles_median;
            outcome.stages.push_back({eval::StageKind::race,
                                      outcome.accepted ? eval::Verdict::accept : eval::Verdict::reject,
                                      outcome.accepted ? "faster" : "not faster by 1%", 0.1, 4});
        }
        {
            std::lock_guard lock(m_shared->mutex);
            m_shared->arrivals.push_back(candidate.content_hash);
            m_shared->calls[candidate.content_hash] += 1;
        }
        --m_shared->in_flight;
        return outcome;
    }
    eval::Outcome revalidate(const eval::Champion&, const eval::Champion&, const eval::KernelContext&) override {
        eval::Outcome outcome;
        outcome.accepted = true;
        outcome.device_runs = 2;
        return outcome;
    }
    double speed_of_light_cycles(const eval::KernelContext&) override { return 1048576.0 / 1000.0; }
    std::string toolchain_version(std::string*) override { return "fake 1.0"; }
    std::string toolchain_identity() override { return "fake 1"; }
    std::string toolchain_name() override { return "fake"; }

private:
    Shared* m_shared;
};

struct RunResult {
    std::vector<std::string> edges;  ///< "kernel step hash parent verdict" in step order
    std::vector<std::string> plan;   ///< content hashes in step order (the order planned)
    campaign::CampaignResult result;
};

/// A campaign of the three toy kernels with `builders` evaluators in flight (1: the serial loop).
RunResult run_campaign(const std::filesystem::path& dir, const std::filesystem::path& templates, Shared& shared,
                       int builders, std::optional<std::int64_t> max_steps) {
    auto store = store::CampaignStore::open(dir / "campaign.db");
    DelayedEvaluator main(shared);
    std::vector<std::unique_ptr<DelayedEvaluator>> workers;
    campaign::CampaignOptions options;
    options.dir = dir;
    options.target = "toy-target";
    options.seed = 11;
    options.wall_budget_secs = 3600;
    options.device_run_budget = 100000;
    options.max_steps = max_steps;
    options.stop_requested = [] { return false; };
    if (builders > 1) {
        for (int idx = 0; idx < builders; ++idx) {
            workers.push_back(std::make_unique<DelayedEvaluator>(shared));
            options.parallel_evaluators.push_back(workers.back().get());
        }
    }
    auto setups = campaign::prepare_kernels(kernels_config(templates), {}, templates, "toy-target");
    campaign::CampaignDriver driver(store, main, std::move(setups), options, toy_model());
    RunResult out;
    out.result = driver.run();
    store::TreeStore trees(store.database());
    std::vector<store::TreeEdgeRecord> edges;
    for (const auto& kernel : k_kernels) {
        for (const auto& edge : trees.list_edges(kernel)) edges.push_back(edge);
    }
    std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    for (const auto& edge : edges) {
        const std::string hash = store.find_design(edge.design_id)->content_hash;
        std::string parent = "-";
        if (edge.parent_design_id) parent = store.find_design(*edge.parent_design_id)->content_hash;
        out.edges.push_back(fmt::format("{} {} {} {} {} {}", edge.kernel, edge.step, hash, parent, edge.verdict,
                                        edge.cycles.value_or(0.0)));
        out.plan.push_back(hash);
    }
    return out;
}

}  // namespace

TEST_CASE("a parallel round gives the same tree whatever order its results arrive in") {
    ScratchDir templates("templates");
    write_templates(templates.path);
    std::vector<RunResult> runs;
    std::vector<std::vector<std::string>> arrivals;
    int most_in_flight = 0;
    for (std::uint64_t delays : {1u, 2u, 3u}) {
        ScratchDir dir("campaign");
        Shared shared;
        shared.delay_seed = delays;
        runs.push_back(run_campaign(dir.path, templates.path, shared, 3, 40));
        arrivals.push_back(shared.arrivals);
        most_in_flight = std::max(most_in_flight, shared.most_in_flight.load());
        for (const auto& [hash, count] : shared.calls) CHECK(count == 1);
    }
    REQUIRE(runs[0].edges.size() == 40);
    CHECK(most_in_flight == 3);  // the rounds did run three kernels at once
    // The delays made the results arrive in another order than planned, and differently per run...
    CHECK(arrivals[0] != runs[0].plan);
    CHECK((arrivals[0] != arrivals[1] || arrivals[1] != arrivals[2]));
    // ...and yet every run committed the same steps, in the same order, with the same outcomes.
    CHECK(runs[0].edges == runs[1].edges);
    CHECK(runs[1].edges == runs[2].edges);
    std::set<std::string> kernels_stepped;
    for (const auto& edge : runs[0].edges) kernels_stepped.insert(edge.substr(0, edge.find(' ')));
    CHECK(kernels_stepped.size() == 3);
}

TEST_CASE("a pipeline campaign stopped between rounds resumes without losing or repeating a step") {
    ScratchDir templates("templates");
    write_templates(templates.path);
    ScratchDir dir("campaign");
    Shared shared;
    shared.delay_seed = 5;
    const RunResult first = run_campaign(dir.path, templates.path, shared, 3, 10);
    CHECK(first.result.stop == campaign::StopReason::step_limit);
    const RunResult second = run_campaign(dir.path, templates.path, shared, 3, std::nullopt);
    CHECK(second.result.stop == campaign::StopReason::finished);
    for (const auto& [hash, count] : shared.calls) CHECK(count == 1);  // no design evaluated twice
    // Every step of the first run is still there, and the counters hold what the steps spent.
    REQUIRE(second.edges.size() >= first.edges.size());
    for (std::size_t idx = 0; idx < first.edges.size(); ++idx) CHECK(second.edges[idx] == first.edges[idx]);
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    const auto status = campaign::campaign_status(store);
    CHECK(status.steps == static_cast<std::int64_t>(second.edges.size()));
    std::int64_t edge_runs = 0;
    store::TreeStore trees(store.database());
    for (const auto& kernel : k_kernels) {
        for (const auto& edge : trees.list_edges(kernel)) edge_runs += edge.device_runs;
    }
    CHECK(status.device_runs_used == edge_runs);
}

TEST_CASE("builders outnumbering kernels take several candidates of one kernel and a stale accept is raced again") {
    ScratchDir templates("templates");
    write_templates(templates.path);
    std::vector<RunResult> runs;
    int most_in_flight = 0;
    ScratchDir dirs[2] = {ScratchDir("campaign"), ScratchDir("campaign")};
    for (std::uint64_t delays : {7u, 8u}) {
        Shared shared;
        shared.delay_seed = delays;
        runs.push_back(run_campaign(dirs[delays - 7].path, templates.path, shared, 6, 48));
        most_in_flight = std::max(most_in_flight, shared.most_in_flight.load());
    }
    CHECK(most_in_flight > 3);              // more steps in flight than there are kernels
    CHECK(runs[0].edges == runs[1].edges);  // still the same tree whatever the arrival order
    auto store = store::CampaignStore::open(dirs[0].path / "campaign.db");
    store::TreeStore trees(store.database());
    // A stale accept's edge is replaced by its re-race (one edge per design), and an event says so.
    int stale = 0;
    for (const auto& event : store.list_events(100000)) {
        if (event.kind != "step_stale") continue;
        ++stale;
        const auto payload = nlohmann::json::parse(event.payload_json);
        const auto edge = trees.find_edge(payload.at("kernel"), payload.at("design_id"));
        REQUIRE(edge.has_value());
        CHECK(edge->final_reason.rfind("stale: ", 0) != 0);   // raced again since
        CHECK(edge->parent_design_id != payload.at("opponent").get<std::int64_t>());  // against a newer champion
    }
    CHECK(runs[0].edges.size() + static_cast<std::size_t>(stale) == 48);
    for (const auto& kernel : k_kernels) {
        // Every accept, in commit order, was raced against the champion of its commit.
        std::optional<std::int64_t> champion;
        for (const auto& edge : trees.list_edges(kernel)) {
            if (edge.verdict != "accepted") continue;
            if (champion) CHECK_MESSAGE(edge.parent_design_id == champion, kernel, " step ", edge.step);
            champion = edge.design_id;
        }
    }
    CHECK(stale > 0);  // the toy search does make two faster candidates of one kernel in a round
}

/// A thread-safe device that records which slot (the `{device}` placeholder) each launch ran on.
struct SlotRecordingDevice final : target::Device {
    std::string name = "slot-recording";
    mutable std::mutex mutex;
    mutable std::map<std::string, std::set<std::string>> slots_of;  ///< request.kernel → slots its launches used
    mutable std::atomic<int> running{0};
    mutable std::atomic<int> most{0};

    target::CheckResult build(const std::filesystem::path&, const std::string&,
                              const std::map<std::string, std::int64_t>&) const override {
        return {};
    }
    target::ScheduleResult estimate(const std::filesystem::path&, const std::string&,
                                    const std::map<std::string, std::int64_t>&) const override {
        return {};
    }
    target::VersionResult version() const override { return {}; }
    const std::string& target_name() const override { return name; }
    target::RunResult run(const target::RunRequest& request) const override {
        const int now = ++running;
        for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        {
            std::lock_guard lock(mutex);
            slots_of[request.kernel].insert(request.extra.count("device") ? request.extra.at("device") : "none");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --running;
        target::RunResult result;
        result.call.status = target::CallStatus::ok;
        return result;
    }
};

TEST_CASE("device slots: a step's launches stay on one slot and no more steps launch at once than there are slots") {
    SlotRecordingDevice inner;
    campaign::DeviceSlots slots(2);
    {
        std::vector<std::jthread> builders;
        for (int builder = 0; builder < 4; ++builder) {
            builders.emplace_back([&inner, &slots, builder] {
                for (int step = 0; step < 3; ++step) {
                    campaign::SlottedDevice device(inner, slots);
                    CHECK(device.build("x.rs", "k", {}).ok == false);  // a build takes no slot (and is the inner device's)
                    for (int launch = 0; launch < 4; ++launch) {
                        target::RunRequest request;
                        request.kernel = fmt::format("{}-{}", builder, step);
                        device.run(request);
                    }
                    device.release();
                }
            });
        }
    }
    CHECK(inner.most.load() == 2);  // two slots: two launches at once, never three
    REQUIRE(inner.slots_of.size() == 12);
    for (const auto& [step, used] : inner.slots_of) {
        CHECK_MESSAGE(used.size() == 1, step);  // every launch of a step on the slot it took first
        CHECK((*used.begin() == "0" || *used.begin() == "1"));
    }
    CHECK(slots.held_secs() > 0.0);
}
