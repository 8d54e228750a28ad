#include "core/error.hpp"
#include "eval/race.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <set>

using namespace npuopt::eval;

namespace {

std::shared_ptr<const SequentialDesign> small_design() {
    SequentialConfig config;
    config.calibration_paths = 5000;
    static const auto design = std::make_shared<const SequentialDesign>(make_sequential_design(config));
    return design;
}

PairOutcome timed(double champion_secs, double candidate_secs) {
    return {LaunchResult::timed(champion_secs), LaunchResult::timed(candidate_secs)};
}

}  // namespace

TEST_CASE("race plan alternates which side launches first and draws a fresh seed per pair") {
    RacePlan plan(99);
    std::set<std::uint64_t> seeds;
    for (std::size_t pair_idx = 0; pair_idx < 6; ++pair_idx) {
        const PairPlan pair = plan.plan_next_pair();
        CHECK(pair.pair_idx == pair_idx);
        CHECK(pair.attempt == 0);
        CHECK(pair.order[0] == (pair_idx % 2 == 0 ? Side::champion : Side::candidate));
        CHECK(pair.order[1] != pair.order[0]);
        seeds.insert(pair.input_seed);
    }
    CHECK(seeds.size() == 6);
    RacePlan same(99);
    CHECK(same.plan_next_pair().input_seed == RacePlan(99).plan_next_pair().input_seed);
    CHECK(RacePlan(100).plan_next_pair().input_seed != RacePlan(99).plan_next_pair().input_seed);
}

TEST_CASE("the pending pair is handed out again until it is recorded") {
    Race race(small_design(), RaceConfig{1, 3, 10});
    const auto first = race.next_pair();
    const auto again = race.next_pair();
    REQUIRE(first);
    REQUIRE(again);
    CHECK(first->pair_idx == again->pair_idx);
    CHECK(first->input_seed == again->input_seed);
    PairPlan stale = *first;
    stale.pair_idx = 5;
    CHECK_THROWS_AS(race.record_pair(stale, timed(1.0, 1.0)), npuopt::Error);
}

TEST_CASE("a transient failure is counted and recorded and the same pair retried") {
    Race race(small_design(), RaceConfig{2, 3, 10});
    const PairPlan plan = *race.next_pair();
    race.record_pair(plan, {LaunchResult::timed(1.0), LaunchResult::failed("device busy", true)});
    CHECK_FALSE(race.is_over());
    CHECK(race.verdict().transient_failures == 1);
    CHECK(race.verdict().retries == 1);
    CHECK(race.verdict().pairs_completed == 0);
    const PairPlan retry = *race.next_pair();
    CHECK(retry.pair_idx == plan.pair_idx);
    CHECK(retry.attempt == 1);
    CHECK(retry.input_seed == plan.input_seed);
    CHECK(retry.order == plan.order);
    race.record_pair(retry, timed(1.0, 0.99));
    CHECK(race.verdict().pairs_completed == 1);
    REQUIRE(race.observations().size() == 4);  // every launch, the failed pair included
    const Observation& failed = race.observations()[1];
    CHECK(failed.side == Side::candidate);
    CHECK(failed.error == std::optional<std::string>("device busy"));
    CHECK(failed.transient);
    CHECK(race.observations()[2].attempt == 1);
    CHECK(race.log_ratios().size() == 1);
}

TEST_CASE("too many retries of one pair end the race inconclusive and marked aborted") {
    Race race(small_design(), RaceConfig{3, 2, 10});
    for (int attempt = 0; attempt < 3; ++attempt) {
        const PairPlan plan = *race.next_pair();
        race.record_pair(plan, {LaunchResult::failed("timeout", true), LaunchResult::timed(1.0)});
    }
    CHECK(race.is_over());
    CHECK(race.verdict().decision == Decision::inconclusive);
    CHECK(race.verdict().aborted);
    CHECK(race.verdict().transient_failures == 3);
    CHECK(race.verdict().reason.find("retry cap 2") != std::string::npos);
    CHECK_FALSE(race.next_pair());
    CHECK(race.observations().size() == 6);
}

TEST_CASE("a persistent candidate failure rejects and an impossible time is such a failure") {
    Race race(small_design(), RaceConfig{4, 3, 10});
    race.record_pair(*race.next_pair(), timed(1.0, 0.98));
    race.record_pair(*race.next_pair(), timed(1.0, 0.0));
    CHECK(race.verdict().decision == Decision::reject);
    CHECK_FALSE(race.verdict().aborted);
    CHECK(race.verdict().reason.find("impossible time") != std::string::npos);
    CHECK_THROWS_AS(race.record_pair(PairPlan{}, timed(1.0, 1.0)), npuopt::Error);

    Race champion_broken(small_design(), RaceConfig{5, 3, 10});
    champion_broken.record_pair(*champion_broken.next_pair(),
                                {LaunchResult::failed("wrong result", false), LaunchResult::timed(1.0)});
    CHECK(champion_broken.verdict().decision == Decision::inconclusive);
    CHECK(champion_broken.verdict().aborted);
}

TEST_CASE("a race with a clearly faster candidate is accepted through the sequential test") {
    Race race(small_design(), RaceConfig{6, 3, 10});
    std::size_t pair_count = 0;
    while (auto plan = race.next_pair()) {
        const double jitter = (pair_count % 3 == 0 ? 0.01 : -0.005);
        race.record_pair(*plan, timed(1.0 + jitter, 0.9 + jitter));
        ++pair_count;
    }
    CHECK(race.verdict().decision == Decision::accept);
    CHECK(race.verdict().pairs_completed == pair_count);
    CHECK(race.verdict().launches == 2 * pair_count);
    CHECK(race.verdict().test.speedup > 1.1);
}

TEST_CASE("a launch cap ends the race inconclusive and aborted before it can overrun, never accepted") {
    // the same clearly faster candidate as above; with room for 3 pairs the test cannot accept yet
    RaceConfig config{6, 3, 10};
    config.max_launches = 7;
    Race race(small_design(), config);
    std::size_t pair_count = 0;
    while (auto plan = race.next_pair()) {
        race.record_pair(*plan, timed(1.0, 0.9));
        ++pair_count;
    }
    CHECK(pair_count == 3);
    CHECK(race.verdict().launches == 6);
    CHECK(race.verdict().decision == Decision::inconclusive);
    CHECK(race.verdict().aborted);
    CHECK(race.verdict().reason.find("allowance") != std::string::npos);
    // without the cap the same race accepts
    Race free_race(small_design(), RaceConfig{6, 3, 10});
    while (auto plan = free_race.next_pair()) free_race.record_pair(*plan, timed(1.0, 0.9));
    CHECK(free_race.verdict().decision == Decision::accept);
}
