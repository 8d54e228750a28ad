// The roles and the kernel search are written against the cost-model interface (CyclePredictor),
// not npuopt's roofline model: a fake predictor in memory steers the architect's entry point and
// is the one the kernel search teaches from measured steps and hands to every role.

#include <doctest/doctest.h>

#include <cmath>
#include <fmt/format.h>
#include <map>
#include <string>
#include <vector>

#include "config/template_config.hpp"
#include "search/cost_model.hpp"
#include "search/kernel_search.hpp"
#include "search/roles.hpp"
#include "search_test_util.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;

namespace {

/// Cycles from the parameter values alone: a bowl with its bottom at ENGINES 4, PACKET 1024,
/// ROWS 16 for family tiles (BUFFERS changes nothing); every stream design is far slower.
class FakePredictor final : public search::CyclePredictor {
public:
    struct Observation {
        std::string family;
        double cycles = 0.0;
    };
    std::vector<Observation> observed;

    std::optional<double> predict(const std::string& family, const std::map<std::string, double>&,
                                  const std::map<std::string, double>* params) const override {
        if (!params) return std::nullopt;
        if (family != "tiles") return 1.0e9;
        const auto at = [&](const char* name) { return params->count(name) ? params->at(name) : 0.0; };
        return 1000.0 + 300.0 * std::abs(std::log2(at("PACKET") / 1024.0)) + 40.0 * std::abs(at("ROWS") - 16.0) +
               60.0 * std::abs(at("ENGINES") - 4.0);
    }
    void observe(const std::string& family, const std::map<std::string, double>&, double measured_cycles,
                 const std::map<std::string, double>*) override {
        observed.push_back({family, measured_cycles});
    }
    search::CostTerms terms(const std::map<std::string, double>&) const override { return {}; }
    const config::CostTermSpec* term_spec(const std::string&) const override { return nullptr; }
    std::map<std::string, double> param_effects(const std::string&) const override { return {}; }
};

config::KernelSpec toy_kernel(const std::filesystem::path& dir) {
    config::KernelSpec kernel;
    kernel.name = "toy";
    kernel.shape = {{"n", 1024}};
    kernel.baseline = dir / "baseline_toy.rs";
    return kernel;
}

/// The toy template NAME (test::write_toy_templates wrote it into `dir`) for the toy kernel.
auto toy_template(const std::filesystem::path& dir, const std::string& name) {
    return search::Template::load(config::load_template_config(dir / (name + ".template.yaml")), toy_kernel(dir),
                                  "toy-target");
}

/// A role that remembers which cost model it was handed.
class PeekingRole final : public search::Role {
public:
    explicit PeekingRole(const search::CyclePredictor** seen) : m_seen(seen) {}
    std::string name() const override { return "peek"; }
    std::vector<search::Proposal> propose(const search::SearchContext& context) override {
        *m_seen = context.cost_model;
        search::Proposal proposal;
        proposal.design.content_hash = "p1";
        proposal.design.family = "tiles";
        proposal.design.quantities = {{"weight_bytes", 1.0}};
        proposal.role = "peek";
        return context.is_known("p1") ? std::vector<search::Proposal>{} : std::vector<search::Proposal>{proposal};
    }

private:
    const search::CyclePredictor** m_seen;
};

}  // namespace

TEST_CASE("cycle predictor: the architect enters a family at a fake predictor's best point") {
    ScratchDir dir("predictor");
    test::write_toy_templates(dir.path);
    auto tiles = toy_template(dir.path, "toy_tiles");
    auto stream = toy_template(dir.path, "toy_stream");
    FakePredictor predictor;
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {stream, tiles};
    context.cost_model = &predictor;
    context.max_proposals = 8;
    context.seed = 3;
    auto proposals = search::make_architect()->propose(context);
    REQUIRE_FALSE(proposals.empty());
    const auto& entry = proposals.front();
    CHECK(entry.design.family == "tiles");  // predicted faster than every stream design
    CHECK(entry.move.find("model's best point") != std::string::npos);
    CHECK(entry.design.params.at("ENGINES") == 4.0);
    CHECK(entry.design.params.at("PACKET") == 1024.0);
    CHECK(entry.design.params.at("ROWS") == 16.0);
    CHECK(entry.design.params.at("BUFFERS") == 1.0);  // the fake cannot see it: its declared default
    REQUIRE(entry.predicted_cycles.has_value());
    CHECK(*entry.predicted_cycles == doctest::Approx(1000.0));

    // Move the fake's bowl: the entry point follows it, nothing else changed.
    class Shifted final : public search::CyclePredictor {
    public:
        std::optional<double> predict(const std::string& family, const std::map<std::string, double>& quantities,
                                      const std::map<std::string, double>* params) const override {
            if (!params || family != "tiles") return base.predict(family, quantities, params);
            std::map<std::string, double> moved = *params;
            moved["ROWS"] = 16.0 * 32.0 / std::max(1.0, params->at("ROWS"));  // best at ROWS 32 now
            return base.predict(family, quantities, &moved);
        }
        void observe(const std::string&, const std::map<std::string, double>&, double,
                     const std::map<std::string, double>*) override {}
        search::CostTerms terms(const std::map<std::string, double>&) const override { return {}; }
        const config::CostTermSpec* term_spec(const std::string&) const override { return nullptr; }
        std::map<std::string, double> param_effects(const std::string&) const override { return {}; }
        FakePredictor base;
    } shifted;
    context.cost_model = &shifted;
    proposals = search::make_architect()->propose(context);
    REQUIRE_FALSE(proposals.empty());
    CHECK(proposals.front().design.family == "tiles");
    CHECK(proposals.front().design.params.at("ROWS") == 32.0);
    CHECK(proposals.front().design.params.at("PACKET") == 1024.0);
}

TEST_CASE("cycle predictor: the kernel search hands its predictor to the roles and teaches it what was measured") {
    const search::CyclePredictor* seen = nullptr;
    std::vector<std::unique_ptr<search::Role>> roles;
    roles.push_back(std::make_unique<PeekingRole>(&seen));
    auto owned = std::make_unique<FakePredictor>();
    FakePredictor* predictor = owned.get();
    search::KernelSearch search("toy", std::move(roles), std::move(owned));
    search::ProposalRequest request;
    request.seed = 5;
    request.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(attempt + 1); };
    auto next = search.next_proposal(request);
    REQUIRE(next.has_value());
    CHECK(seen == predictor);
    CHECK(&search.cost_model() == predictor);

    search::StepFeedback feedback;
    feedback.kernel = "toy";
    feedback.proposal = *next;
    feedback.verdict = eval::StepVerdict::rejected;
    feedback.cycles = 1234.0;
    search.notify(feedback);
    REQUIRE(predictor->observed.size() == 1);
    CHECK(predictor->observed.front().family == "tiles");
    CHECK(predictor->observed.front().cycles == 1234.0);

    feedback.cycles.reset();  // nothing measured (it failed to compile): nothing to learn
    feedback.verdict = eval::StepVerdict::failed;
    search.notify(feedback);
    CHECK(predictor->observed.size() == 1);
}

TEST_CASE("cycle predictor: once every family is measured, the champion's family is measured once at its defaults") {
    ScratchDir dir("defaults-check");
    test::write_toy_templates(dir.path);
    auto tiles = toy_template(dir.path, "toy_tiles");
    auto stream = toy_template(dir.path, "toy_stream");
    search::KernelSearch search("toy", search::make_heuristic_roles(), std::make_unique<FakePredictor>());
    // the champion: family tiles at the fake's best point (ENGINES 4, PACKET 1024, ROWS 16), not
    // at its defaults (ENGINES 1, PACKET 256, ROWS 8)
    search::Assignment entry = tiles->default_assignment();
    entry["ENGINES"] = 4.0;
    entry["PACKET"] = 1024.0;
    entry["ROWS"] = 16.0;
    const search::Design champion = tiles->instantiate(entry);
    const search::Design defaults = tiles->instantiate(tiles->default_assignment());
    search::ProposalRequest request;
    request.templates = {tiles, stream};
    request.champion = champion;
    request.champion_cycles = 1500.0;
    request.age = 0.1;
    request.seed = 11;
    request.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(3 + attempt); };
    auto told = [](search::KernelSearch& into, const search::Design& design, const std::string& role, double cycles) {
        search::StepFeedback feedback;
        feedback.kernel = "toy";
        feedback.proposal.design = design;
        feedback.proposal.role = role;
        feedback.verdict = eval::StepVerdict::rejected;
        feedback.cycles = cycles;
        feedback.champion_cycles_before = 1500.0;
        feedback.device_secs = 1.0;
        into.notify(feedback);
    };
    auto measured = [&](const search::Design& design, const std::string& role, double cycles) {
        told(search, design, role, cycles);
    };
    measured(champion, "architect", 1500.0);
    // family stream has no measurement yet: no defaults check (the other families are entered first)
    for (int step = 0; step < 4; ++step) {
        request.seed = static_cast<std::uint64_t>(20 + step);
        auto next = search.next_proposal(request);
        REQUIRE(next.has_value());
        INFO(next->reason);
        CHECK(next->design.content_hash != defaults.content_hash);
        CHECK(next->reason.find("defaults are measured once") == std::string::npos);
        measured(next->design, next->role, 9000.0);
        if (next->design.family == "stream") break;
    }
    // every family measured: the defaults of the champion's family come next, whatever the scheduler
    request.seed = 40;
    auto check = search.next_proposal(request);
    REQUIRE(check.has_value());
    INFO(check->reason);
    CHECK(check->design.content_hash == defaults.content_hash);
    CHECK(check->role == "architect");
    CHECK(check->clear_win_only);  // a near tie with the champion is not raced
    CHECK(check->reason.find("ENGINES 4 (defaults 1)") != std::string::npos);
    CHECK(check->reason.find("ROWS 16 (defaults 8)") != std::string::npos);
    CHECK(check->reason.find("BUFFERS") == std::string::npos);  // the champion keeps its default
    REQUIRE(check->predicted_cycles.has_value());
    // measured once: never proposed again
    measured(check->design, "architect", 1600.0);
    for (int step = 0; step < 3; ++step) {
        request.seed = static_cast<std::uint64_t>(50 + step);
        auto next = search.next_proposal(request);
        if (!next) break;
        CHECK(next->design.content_hash != defaults.content_hash);
        measured(next->design, next->role, 1700.0);
    }
    // a champion at its family's defaults has nothing to check
    request.champion = defaults;
    search::KernelSearch fresh("toy", search::make_heuristic_roles(), std::make_unique<FakePredictor>());
    fresh.mark_known(defaults.content_hash);
    for (const auto& design : {champion, stream->instantiate(stream->default_assignment())}) {
        told(fresh, design, "architect", 2000.0);
    }
    auto next = fresh.next_proposal(request);
    if (next) CHECK(next->reason.find("defaults are measured once") == std::string::npos);
}

TEST_CASE("cycle predictor: predicted gains are believed as far as they have come true, by move size") {
    ScratchDir dir("trust");
    test::write_toy_templates(dir.path);
    auto tiles = toy_template(dir.path, "toy_tiles");
    FakePredictor predictor;
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tiles};
    context.cost_model = &predictor;
    context.champion = tiles->instantiate({{"ENGINES", 2.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 1.0}});
    context.champion_cycles = 1000.0;
    // the fake's bowl: ENGINES 4 predicts 1000 cycles against the champion's 1120
    const auto gain = search::score_assignment(context, *tiles,
                                               {{"ENGINES", 4.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 1.0}},
                                               "ENGINES 2→4");
    REQUIRE(gain.has_value());
    CHECK(gain->changed_params == 1);
    REQUIRE(gain->model_log_gain.has_value());
    CHECK(*gain->model_log_gain == doctest::Approx(std::log(1000.0 / 1120.0)));
    CHECK(*gain->predicted == doctest::Approx(1000.0));
    const auto pair = search::score_assignment(context, *tiles,
                                               {{"ENGINES", 4.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 2.0}},
                                               "ENGINES 2→4, BUFFERS 1→2");
    REQUIRE(pair.has_value());
    CHECK(pair->changed_params == 2);

    // half believed for one-parameter moves, not at all for pairs; a predicted loss is left as it is
    context.prediction_trust = {{1, 0.5}, {2, 0.0}};
    const auto half = search::score_assignment(context, *tiles,
                                               {{"ENGINES", 4.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 1.0}}, "");
    CHECK(*half->predicted == doctest::Approx(1120.0 * std::sqrt(1000.0 / 1120.0)));
    CHECK(*half->model_log_gain == doctest::Approx(*gain->model_log_gain));  // learnt from, unshrunk
    const auto none = search::score_assignment(context, *tiles,
                                               {{"ENGINES", 4.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 2.0}}, "");
    CHECK(*none->predicted == doctest::Approx(1120.0));  // the pair ranks as the champion does
    const auto loss = search::score_assignment(context, *tiles,
                                               {{"ENGINES", 8.0}, {"PACKET", 1024.0}, {"ROWS", 16.0}, {"BUFFERS", 1.0}}, "");
    CHECK(*loss->predicted == doctest::Approx(1240.0));

    // the kernel search learns the trust from measured moves the model predicted faster
    search::KernelSearch search("toy", {}, std::make_unique<FakePredictor>());
    CHECK(search.prediction_trust().empty());
    auto feed = [&](int changed, double model_log_gain, double measured, int count) {
        for (int idx = 0; idx < count; ++idx) {
            search::StepFeedback feedback;
            feedback.kernel = "toy";
            feedback.proposal.design.content_hash = fmt::format("d{}-{}-{}", changed, model_log_gain, idx);
            feedback.proposal.design.family = "tiles";
            feedback.proposal.changed_params = changed;
            feedback.proposal.model_log_gain = model_log_gain;
            feedback.verdict = eval::StepVerdict::rejected;
            feedback.champion_cycles_before = 1000.0;
            feedback.cycles = measured;
            search.notify(feedback);
        }
    };
    feed(2, -0.06, 1000.0, 5);  // pairs promised 6 % and measured as the champion
    CHECK(search.prediction_trust().count(2) == 0);  // five are not enough to judge by
    feed(2, -0.06, 1000.0, 1);
    REQUIRE(search.prediction_trust().count(2) == 1);
    CHECK(search.prediction_trust().at(2) == doctest::Approx(0.0));
    feed(1, -0.04, 1000.0 * std::exp(-0.02), 6);  // singles: half of the promised gain came true
    CHECK(search.prediction_trust().at(1) == doctest::Approx(0.5));
    feed(1, 0.05, 2000.0, 6);  // moves predicted slower teach nothing about its optimism
    CHECK(search.prediction_trust().at(1) == doctest::Approx(0.5));
    feed(2, -0.06, 1200.0, 6);  // measured slower than the champion: the trust stays at 0, not below
    CHECK(search.prediction_trust().at(2) == doctest::Approx(0.0));
}

TEST_CASE("cycle predictor: the trust learnt in a campaign is kept across a resume") {
    search::KernelSearch search("toy", {}, std::make_unique<FakePredictor>());
    int serial = 0;
    auto feed = [&](int changed, double model_log_gain, double measured_log_gain) {
        search::StepFeedback feedback;
        feedback.kernel = "toy";
        feedback.proposal.design.content_hash = fmt::format("m{}", serial++);
        feedback.proposal.design.family = "tiles";
        feedback.proposal.changed_params = changed;
        feedback.proposal.model_log_gain = model_log_gain;
        feedback.verdict = eval::StepVerdict::rejected;
        feedback.champion_cycles_before = 1000.0;
        feedback.cycles = 1000.0 * std::exp(measured_log_gain);
        search.notify(feedback);
    };
    for (int idx = 0; idx < 6; ++idx) feed(1, -0.04, -0.02);
    for (int idx = 0; idx < 7; ++idx) feed(2, -0.06, 0.0);
    REQUIRE(search.prediction_trust().size() == 2);
    // a fresh search given the state trusts the same
    search::KernelSearch resumed("toy", {}, std::make_unique<FakePredictor>());
    resumed.restore_learnt_state(nlohmann::json::parse(search.learnt_state().dump()));
    REQUIRE(resumed.prediction_trust().size() == 2);
    CHECK(resumed.prediction_trust().at(1) == doctest::Approx(0.5));
    CHECK(resumed.prediction_trust().at(2) == doctest::Approx(0.0));
    // a damaged state loses only what cannot be read
    search::KernelSearch damaged("toy", {}, std::make_unique<FakePredictor>());
    auto state = search.learnt_state();
    state["gain_records"]["1"].push_back("not a record");
    state["gain_records"]["1"].push_back({0.1});
    state["gain_records"]["x"] = nlohmann::json::array({{0.1, 0.2}});
    state["gain_records"]["2"] = "not a list";
    damaged.restore_learnt_state(state);
    REQUIRE(damaged.prediction_trust().count(1) == 1);
    CHECK(damaged.prediction_trust().at(1) == doctest::Approx(0.5));
    CHECK(damaged.prediction_trust().count(2) == 0);
    damaged.restore_learnt_state(nlohmann::json("garbage"));
    CHECK(damaged.prediction_trust().at(1) == doctest::Approx(0.5));
}
