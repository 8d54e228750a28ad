// KernelSearch: the role lifecycle (start → propose → notify → finish) and learning through
// notify — the cost model from measured steps, the scheduler from scored ones, every role told.

#include <doctest/doctest.h>

#include "search/kernel_search.hpp"

using namespace npuopt;
using namespace npuopt::search;

namespace {

/// A role that proposes a fixed list and records its lifecycle calls.
class RecordingRole final : public Role {
public:
    RecordingRole(std::string name, std::vector<Proposal> proposals, std::vector<std::string>& calls)
        : m_name(std::move(name)), m_proposals(std::move(proposals)), m_calls(&calls) {}
    std::string name() const override { return m_name; }
    void start(const std::string& kernel) override { m_calls->push_back(m_name + ":start:" + kernel); }
    std::vector<Proposal> propose(const SearchContext& context) override {
        m_calls->push_back(m_name + ":propose");
        std::vector<Proposal> fresh;
        for (const auto& proposal : m_proposals) {
            if (!context.is_known(proposal.design.content_hash)) fresh.push_back(proposal);
        }
        return fresh;
    }
    void notify(const StepFeedback& feedback) override {
        m_calls->push_back(m_name + ":notify:" + feedback.proposal.design.content_hash + ":" +
                           std::string(eval::step_verdict_name(feedback.verdict)));
    }
    void finish() override { m_calls->push_back(m_name + ":finish"); }

private:
    std::string m_name;
    std::vector<Proposal> m_proposals;
    std::vector<std::string>* m_calls;
};

Proposal proposal(const std::string& hash, const std::string& role) {
    Proposal result;
    result.design.content_hash = hash;
    result.design.family = "tiles";
    result.design.quantities = {{"weight_bytes", 1.0e6}};
    result.role = role;
    result.move = "test";
    return result;
}

ProposalRequest request() {
    ProposalRequest result;
    result.age = 0.5;
    result.seed = 11;
    result.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(100 + attempt); };
    return result;
}

}  // namespace

TEST_CASE("kernel search: every role is started, told of every step and finished") {
    std::vector<std::string> calls;
    std::vector<std::unique_ptr<Role>> roles;
    roles.push_back(std::make_unique<RecordingRole>("tuner", std::vector<Proposal>{proposal("a", "tuner")}, calls));
    KernelSearch search("toy", std::move(roles), CostModel());
    search.start();
    auto next = search.next_proposal(request());
    REQUIRE(next.has_value());
    CHECK(next->design.content_hash == "a");

    StepFeedback feedback;
    feedback.kernel = "toy";
    feedback.proposal = *next;
    feedback.verdict = eval::StepVerdict::rejected;
    feedback.cycles = 1200.0;
    feedback.device_secs = 2.0;
    feedback.champion_cycles_before = 1000.0;
    search.notify(feedback);
    search.finish();
    CHECK(calls == std::vector<std::string>{"tuner:start:toy", "tuner:propose", "tuner:notify:a:rejected", "tuner:finish"});
    CHECK(search.is_known("a"));
    CHECK(search.designs() == 1);
    CHECK(search.scheduler().stats().at("tuner").pulls == 1);
    CHECK(search.scheduler().stats().at("tuner").device_secs == doctest::Approx(2.0));
}

TEST_CASE("kernel search: a role with nothing new is recorded empty and the next role is asked") {
    std::vector<std::string> calls;
    std::vector<std::unique_ptr<Role>> roles;
    roles.push_back(std::make_unique<RecordingRole>("architect", std::vector<Proposal>{proposal("x", "architect")}, calls));
    roles.push_back(std::make_unique<RecordingRole>("tuner", std::vector<Proposal>{proposal("y", "tuner")}, calls));
    KernelSearch search("toy", std::move(roles), CostModel());
    search.mark_known("x");
    search.mark_known("y");
    CHECK_FALSE(search.next_proposal(request()).has_value());  // both exhausted: the kernel is done
    CHECK(search.scheduler().stats().at("architect").empty == 1);
    CHECK(search.scheduler().stats().at("tuner").empty == 1);
}

TEST_CASE("kernel search: the reward is the share of the remaining distance to the bound a step closed") {
    StepFeedback feedback;
    feedback.became_champion = true;
    feedback.champion_cycles_before = 2000.0;
    feedback.cycles = 1000.0;
    feedback.speed_of_light_cycles = 500.0;
    // log(2000/1000) / log(2000/500) = 0.5: half the log-distance to the bound
    CHECK(KernelSearch::reward(feedback) == doctest::Approx(0.5));
    feedback.became_champion = false;
    CHECK(KernelSearch::reward(feedback) == 0.0);
}

TEST_CASE("kernel search: unscored steps (the baseline, steps against it) do not pay the scheduler") {
    std::vector<std::string> calls;
    std::vector<std::unique_ptr<Role>> roles;
    roles.push_back(std::make_unique<RecordingRole>("tuner", std::vector<Proposal>{}, calls));
    KernelSearch search("toy", std::move(roles), CostModel());
    StepFeedback feedback;
    feedback.proposal = proposal("b", "tuner");
    feedback.verdict = eval::StepVerdict::accepted;
    feedback.cycles = 900.0;
    feedback.became_champion = true;
    feedback.champion_cycles_before = 1000.0;
    feedback.scored = false;
    search.notify(feedback);
    const auto& stats = search.scheduler().stats();
    const bool unpaid = stats.count("tuner") == 0 || stats.at("tuner").pulls == 0;
    CHECK(unpaid);
    CHECK(search.is_known("b"));
    CHECK(calls == std::vector<std::string>{"tuner:notify:b:accepted"});
}
