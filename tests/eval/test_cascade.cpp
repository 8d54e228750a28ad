// The cascade end to end on the fake adversarial toolchain: every stage recorded, each gaming
// kernel rejected with its reason in the store, rules learnt and used, the race and re-validation.

#include "config/cost_model_config.hpp"
#include "test_cascade_fixture.hpp"

#include <filesystem>
#include <algorithm>
#include <optional>

#include "eval/judge.hpp"
#include "eval/seed_stream.hpp"
#include "eval/speed_of_light.hpp"

using namespace npuopt::eval;
using cascade_test::Campaign;
using cascade_test::quick_config;

namespace {

std::optional<npuopt::store::EvaluationRecord> stage_row(const std::vector<npuopt::store::EvaluationRecord>& rows,
                                                        const std::string& stage) {
    auto found = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.stage == stage; });
    if (found == rows.end()) return std::nullopt;
    return *found;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

/// Evaluate a gaming candidate against an honest champion and return its correctness row.
npuopt::store::EvaluationRecord rejected_at_correctness(const std::string& behaviour,
                                                        std::vector<std::string> extra_args = {}) {
    Campaign campaign;
    CascadeConfig config = quick_config();
    config.run_extra_args = std::move(extra_args);
    config.priming_seed = 0;  // the fake's leftovers scenario returns seed 0's output
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Champion champion{campaign.design("honest"), 10000};
    const Candidate candidate = campaign.design(behaviour, 9000);
    const Outcome outcome = cascade.evaluate(candidate, champion, campaign.kernel());
    CHECK_FALSE(outcome.accepted);
    CHECK_FALSE(outcome.correct);
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::correctness);
    const auto rows = campaign.evaluations(candidate);
    REQUIRE(rows.size() == 4);  // rules, estimate, compile, correctness: nothing after the failure
    CHECK(rows.back().stage == "correctness");
    CHECK(rows.back().verdict == "fail");
    CHECK(rows.back().reason == outcome.stages.back().reason);
    return rows.back();
}

}  // namespace

TEST_CASE("a kernel that returns the previous run's output is rejected as leftovers") {
    const auto row = rejected_at_correctness("leftovers", {"--no-poison"});
    INFO(row.reason);
    CHECK(starts_with(row.reason, "leftovers:"));
    CHECK(row.reason.find("previous run") != std::string::npos);
}

TEST_CASE("with poisoned outputs the same kernel fails as non-finite") {
    const auto row = rejected_at_correctness("leftovers");
    INFO(row.reason);
    CHECK(starts_with(row.reason, "nonfinite:"));
}

TEST_CASE("a kernel that ignores its input is rejected as input independent") {
    const auto row = rejected_at_correctness("ignores_input");
    INFO(row.reason);
    CHECK(starts_with(row.reason, "input_independent:"));
}

TEST_CASE("a kernel that writes non-finite values is rejected as nonfinite") {
    const auto row = rejected_at_correctness("nonfinite");
    INFO(row.reason);
    CHECK(starts_with(row.reason, "nonfinite:"));
}

TEST_CASE("all zeros pass a loose tolerance but not the magnitude check") {
    const auto row = rejected_at_correctness("all_zero_loose");
    INFO(row.reason);
    CHECK(starts_with(row.reason, "all_zero:"));
}

TEST_CASE("a result that depends on run order is rejected as order dependent") {
    const auto row = rejected_at_correctness("order_dependent");
    INFO(row.reason);
    CHECK(starts_with(row.reason, "order_dependent:"));
}

TEST_CASE("correctness measurements are recorded with their seeds: priming seed first then fresh ones") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Candidate candidate = campaign.design("honest");
    const Outcome outcome = cascade.evaluate(candidate, std::nullopt, campaign.kernel());
    CHECK(outcome.accepted);  // the first correct design becomes champion after the screen
    const auto rows = campaign.evaluations(candidate);
    const auto correctness = stage_row(rows, "correctness");
    REQUIRE(correctness);
    CHECK(correctness->verdict == "pass");
    const auto measurements = campaign.store.list_measurements(correctness->id);
    REQUIRE(measurements.size() == 4);  // priming + 2 fresh + re-run
    // the priming seed is hashed from the campaign seed and the design, not a constant 0
    CHECK(measurements[0].seed == static_cast<std::int64_t>(derive_seed(7, candidate.content_hash, "priming")));
    CHECK(measurements[0].seed != 0);
    CHECK(measurements[1].seed != measurements[0].seed);
    CHECK(measurements[2].seed != measurements[1].seed);
    CHECK(measurements[3].seed == measurements[1].seed);
    const auto screen = stage_row(rows, "screen");
    REQUIRE(screen);
    CHECK(screen->verdict == "accept");
    // the screen reuses the four timed correctness launches and, with screen_runs = 0, adds none
    CHECK(campaign.store.list_measurements(screen->id).empty());
    CHECK(screen->reason.find("over 4 runs") != std::string::npos);
    CHECK(outcome.device_runs == 4);
    CHECK(outcome.cycles_median.has_value());
}

TEST_CASE("screen_runs adds its own launches to the correctness launches' cycles") {
    Campaign campaign;
    CascadeConfig config = quick_config();
    config.screen_runs = 2;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Candidate candidate = campaign.design("honest");
    const Outcome outcome = cascade.evaluate(candidate, std::nullopt, campaign.kernel());
    const auto screen = stage_row(campaign.evaluations(candidate), "screen");
    REQUIRE(screen);
    CHECK(campaign.store.list_measurements(screen->id).size() == 2);
    CHECK(screen->reason.find("over 6 runs") != std::string::npos);
    CHECK(outcome.device_runs == 6);
}

TEST_CASE("a clear loser is rejected after its first checked launch") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate slow = campaign.design("honest", 14000);  // 1.4x the champion, quick-reject limit 1.25x
    const Outcome outcome = cascade.evaluate(slow, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    CHECK(outcome.device_runs == 1);
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::screen);
    CHECK(outcome.stages.back().verdict == Verdict::reject);
    CHECK(outcome.stages.back().reason.find("quick-reject") != std::string::npos);
    // with the quick reject off, the second look rejects it after two launches
    CascadeConfig off = quick_config();
    off.quick_reject_ratio = 0.0;
    Campaign second;
    Cascade second_look(second.toolchain, second.store, &second.rules, nullptr, off);
    const Outcome slow_second =
        second_look.evaluate(second.design("honest", 14000), Champion{second.design("honest", 10000), 10000}, second.kernel());
    CHECK(slow_second.device_runs == 2);
    CHECK(slow_second.stages.back().reason.find("second-look") != std::string::npos);
    // and with both off, the same design pays the whole correctness stage before the screen
    off.second_look_ratio = 0.0;
    Campaign other;
    Cascade full(other.toolchain, other.store, &other.rules, nullptr, off);
    const Outcome slow_full =
        full.evaluate(other.design("honest", 14000), Champion{other.design("honest", 10000), 10000}, other.kernel());
    CHECK(slow_full.device_runs == 4);
    CHECK(slow_full.stages.back().stage == StageKind::screen);
}

TEST_CASE("a candidate that does not look faster in the screen gets no race") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Outcome outcome = cascade.evaluate(campaign.design("honest", 10300), champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    CHECK(outcome.stages.back().stage == StageKind::screen);
    CHECK(outcome.stages.back().verdict == Verdict::reject);
    // 3 % slower: both first launches are over the champion's median, the second look rejects
    CHECK(outcome.device_runs == 2);
    CHECK(outcome.stages.back().reason.find("second-look") != std::string::npos);
    // without the second look the screen sees all four correctness launches
    CascadeConfig off = quick_config();
    off.second_look_ratio = 0.0;
    Campaign other;
    Cascade full(other.toolchain, other.store, &other.rules, nullptr, off);
    const Outcome screened =
        full.evaluate(other.design("honest", 10300), Champion{other.design("honest", 10000), 10000}, other.kernel());
    CHECK_FALSE(screened.accepted);
    CHECK(screened.stages.back().stage == StageKind::screen);
    CHECK(screened.device_runs == 4);
}

TEST_CASE("a screened gain the measured launch noise hides is not raced, a larger one is") {
    CascadeConfig config = quick_config();
    config.acceptance.min_pairs = 4;
    config.acceptance.max_pairs = 6;
    config.race_min_accept_probability = 0.95;  // the 3 % gain below comes out near 0.92, the 8 % one near 1
    auto run = [&](CascadeConfig used, double candidate_cycles, bool pool_first) {
        Campaign campaign;
        Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, used);
        if (pool_first) {
            // three designs with no champion: four checked launches each, 12 residuals of +-2 % noise
            for (int idx = 0; idx < 3; ++idx) cascade.evaluate(campaign.design("honest", 10000), std::nullopt, campaign.kernel());
        }
        return cascade.evaluate(campaign.design("honest", candidate_cycles), Champion{campaign.design("honest", 10000), 10000},
                                campaign.kernel());
    };
    // 3 % faster under +-2 % noise: six pairs seldom confirm it
    const Outcome hidden = run(config, 9700, true);
    INFO(hidden.final_reason);
    CHECK_FALSE(hidden.accepted);
    REQUIRE_FALSE(hidden.stages.empty());
    CHECK(hidden.stages.back().stage == StageKind::race);
    CHECK(hidden.stages.back().verdict == Verdict::inconclusive);
    CHECK(hidden.stages.back().reason.find("not raced: at the screen's") != std::string::npos);
    CHECK(hidden.stages.back().reason.find("12 launches") != std::string::npos);
    CHECK(hidden.device_runs == 4);  // the correctness launches only
    // 8 % faster on the same noise: raced and accepted
    const Outcome clear = run(config, 9200, true);
    INFO(clear.final_reason);
    CHECK(clear.accepted);
    CHECK(clear.stages.back().stage == StageKind::race);
    // before any noise is measured, and with the rule off, the small gain is raced
    const Outcome unmeasured = run(config, 9700, false);
    CHECK(unmeasured.device_runs > 4);
    CascadeConfig off = config;
    off.race_min_accept_probability = 0.0;
    const Outcome always = run(off, 9700, true);
    INFO(always.final_reason);
    CHECK(always.device_runs > 4);
    CHECK(always.stages.back().reason.find("not raced") == std::string::npos);
}

TEST_CASE("the launch noise a campaign measured is pooled again when it resumes") {
    CascadeConfig config = quick_config();
    config.acceptance.min_pairs = 4;
    config.acceptance.max_pairs = 6;
    config.race_min_accept_probability = 0.95;
    Campaign campaign;
    {
        Cascade first(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
        for (int idx = 0; idx < 3; ++idx) first.evaluate(campaign.design("honest", 10000), std::nullopt, campaign.kernel());
    }
    // a new cascade on the same store (the campaign run again) knows the 12 residuals at once
    Cascade resumed(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Outcome hidden =
        resumed.evaluate(campaign.design("honest", 9700), Champion{campaign.design("honest", 10000), 10000}, campaign.kernel());
    INFO(hidden.final_reason);
    REQUIRE_FALSE(hidden.stages.empty());
    CHECK(hidden.stages.back().reason.find("not raced: at the screen's") != std::string::npos);
    CHECK(hidden.stages.back().reason.find("12 launches") != std::string::npos);
    CHECK(hidden.device_runs == 4);
    // what the pool is refilled from: each correctness evaluation's launches, the latest ones
    auto pooled = campaign.store.recent_stage_cycles("correctness", 100);
    CHECK(pooled.size() == 4);  // the three designs and the candidate
    for (const auto& cycles : pooled) CHECK(cycles.size() == 4);
    CHECK(campaign.store.recent_stage_cycles("correctness", 2).size() == 2);
}

TEST_CASE("a timing below the speed-of-light bound is suspect and never accepted") {
    Campaign campaign;
    npuopt::knowledge::HardwareModel model;
    model.set("sustained_bytes_per_cycle", 100.0);  // bound = 2,000,000 bytes / 100 = 20,000 cycles
    model.cost_model = std::make_shared<npuopt::config::CostModelSpec>(npuopt::config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, &model, quick_config());
    auto kernel = campaign.kernel();
    kernel.min_bytes_moved = 2'000'000.0;
    CHECK(cascade.speed_of_light_cycles(kernel) == doctest::Approx(20000.0));
    const Candidate candidate = campaign.design("fast", 10000);
    const Outcome outcome = cascade.evaluate(candidate, Champion{campaign.design("honest", 30000), 30000}, kernel);
    CHECK_FALSE(outcome.accepted);
    const auto rows = campaign.evaluations(candidate);
    REQUIRE_FALSE(rows.empty());
    CHECK(rows.back().verdict == "suspect");
    INFO(rows.back().reason);
    CHECK(starts_with(rows.back().reason, "speed_of_light:"));
}

TEST_CASE("a compile error is mined into a rule that rejects the next design before compiling") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Candidate illegal = campaign.design("illegal", 10000, 0, {{"dm_bytes", 786432}});
    Outcome first = cascade.evaluate(illegal, std::nullopt, campaign.kernel());
    CHECK_FALSE(first.accepted);
    REQUIRE(first.stages.back().stage == StageKind::compile);
    CHECK(first.stages.back().verdict == Verdict::fail);
    CHECK(first.stages.back().reason.find("E0201") != std::string::npos);

    const Candidate again = campaign.design("illegal", 10000, 0, {{"dm_bytes", 600000}});
    Outcome second = cascade.evaluate(again, std::nullopt, campaign.kernel());
    REQUIRE(second.stages.size() == 1);
    CHECK(second.stages[0].stage == StageKind::rules);
    CHECK(second.stages[0].verdict == Verdict::reject);
    CHECK(second.stages[0].reason.find("dm_bytes") != std::string::npos);
    CHECK(campaign.evaluations(again).size() == 1);

    const Candidate small = campaign.design("honest", 10000, 0, {{"dm_bytes", 4096}});
    Outcome third = cascade.evaluate(small, std::nullopt, campaign.kernel());
    CHECK(third.accepted);
}

TEST_CASE("the estimate stage skips designs predicted far slower except for the exploration allowance") {
    Campaign campaign;
    CascadeConfig config = quick_config();
    config.exploration_allowance = 0.0;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate slow = campaign.design("honest", 10000, 20000);
    Outcome outcome = cascade.evaluate(slow, champion, campaign.kernel());
    REQUIRE(outcome.stages.size() == 2);
    CHECK(outcome.stages[1].stage == StageKind::estimate);
    CHECK(outcome.stages[1].verdict == Verdict::skip);
    CHECK(outcome.stages[1].reason.find("2.00x") != std::string::npos);

    config.exploration_allowance = 1.0;  // everything screened out is let through
    cascade.set_config(config);
    const Candidate explored = campaign.design("honest", 30000, 20000);
    outcome = cascade.evaluate(explored, champion, campaign.kernel());
    REQUIRE(outcome.stages.size() >= 2);
    CHECK(outcome.stages[1].verdict == Verdict::pass);
    CHECK(outcome.stages[1].reason.find("exploration") != std::string::npos);
    CHECK(outcome.stages.back().stage == StageKind::screen);  // then rejected by the screen: 3x slower
    CHECK(outcome.stages.back().verdict == Verdict::reject);
}

TEST_CASE("a clear win is accepted at the screen without a race and a modest gain is still raced") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate twice = campaign.design("honest", 5000);
    const Outcome outcome = cascade.evaluate(twice, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK(outcome.accepted);
    CHECK(outcome.device_runs == 6);  // the correctness launches and two confirming champion launches
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::screen);
    CHECK(outcome.stages.back().verdict == Verdict::accept);
    CHECK(outcome.stages.back().reason.find("clear win") != std::string::npos);
    REQUIRE(outcome.speedup.has_value());
    CHECK(*outcome.speedup == doctest::Approx(2.0).epsilon(0.05));
    CHECK_FALSE(stage_row(campaign.evaluations(twice), "race"));
    // 5 % faster is no clear win: the race decides
    const Outcome modest = cascade.evaluate(campaign.design("honest", 9500), champion, campaign.kernel());
    REQUIRE_FALSE(modest.stages.empty());
    CHECK(modest.stages.back().stage == StageKind::race);
    // and with clear_win_ratio 0 even a twice-as-fast design is raced
    CascadeConfig off = quick_config();
    off.clear_win_ratio = 0.0;
    Campaign other;
    Cascade raced(other.toolchain, other.store, &other.rules, nullptr, off);
    const Outcome always = raced.evaluate(other.design("honest", 5000), Champion{other.design("honest", 10000), 10000},
                                          other.kernel());
    REQUIRE_FALSE(always.stages.empty());
    CHECK(always.stages.back().stage == StageKind::race);
    CHECK(always.accepted);
}

TEST_CASE("a clear win against an inflated champion median is not confirmed and the race decides") {
    // The champion's recorded median is 15 % over its true cycles (two outliers among few launches,
    // or drift since): an equal design's launches are all under 0.90x of it. The screen's fresh
    // champion launches show the truth, the win is not confirmed, the race rejects the equal design.
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion inflated{campaign.design("honest", 10000), 11500};
    const Candidate equal = campaign.design("honest", 10000);
    const Outcome outcome = cascade.evaluate(equal, inflated, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::race);
    const auto screen = stage_row(campaign.evaluations(equal), "screen");
    REQUIRE(screen);
    INFO(screen->reason);
    CHECK(screen->verdict == "pass");
    CHECK(screen->reason.find("not confirmed") != std::string::npos);
    // the champion's two launches are the screen's, logged as its side
    const auto rows = campaign.store.list_measurements(screen->id);
    CHECK(std::count_if(rows.begin(), rows.end(), [](const auto& row) { return row.side == "champion"; }) == 2);
    // with the confirmation off the same comparison is (wrongly) a clear win: the check is what stops it
    CascadeConfig trusting = quick_config();
    trusting.clear_win_champion_launches = 0;
    Campaign other;
    Cascade naive(other.toolchain, other.store, &other.rules, nullptr, trusting);
    const Outcome fooled =
        naive.evaluate(other.design("honest", 10000), Champion{other.design("honest", 10000), 11500}, other.kernel());
    CHECK(fooled.accepted);
    REQUIRE_FALSE(fooled.stages.empty());
    CHECK(fooled.stages.back().stage == StageKind::screen);
}

TEST_CASE("a faster candidate wins the race and every launch is recorded for both designs") {
    Campaign campaign;
    CascadeConfig race_always = quick_config();
    race_always.clear_win_ratio = 0.0;  // 10 % faster may pass as a clear win: this test is about the race
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, race_always);
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate faster = campaign.design("honest", 9000);
    const Outcome outcome = cascade.evaluate(faster, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK(outcome.accepted);
    REQUIRE(outcome.speedup.has_value());
    CHECK(*outcome.speedup == doctest::Approx(10000.0 / 9000.0).epsilon(0.01));
    const auto race = stage_row(campaign.evaluations(faster), "race");
    REQUIRE(race);
    CHECK(race->verdict == "accept");
    const auto candidate_launches = campaign.store.list_measurements(race->id);
    const auto champion_race = stage_row(campaign.evaluations(champion.candidate), "race");
    REQUIRE(champion_race);
    CHECK(champion_race->verdict == "champion");
    const auto champion_launches = campaign.store.list_measurements(champion_race->id);
    CHECK(candidate_launches.size() == champion_launches.size());
    CHECK(static_cast<std::int64_t>(candidate_launches.size() + champion_launches.size()) ==
          outcome.stages.back().device_runs);
    CHECK(candidate_launches.front().seed == champion_launches.front().seed);  // one fresh seed per pair
}

TEST_CASE("identical designs do not win the race") {
    Campaign campaign;
    CascadeConfig config = quick_config();
    config.screen_max_ratio = 1.10;  // let the twin through the screen, so that the race itself decides
    config.second_look_ratio = 0.0;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Outcome outcome = cascade.evaluate(campaign.design("honest", 10000), champion, campaign.kernel());
    CHECK_FALSE(outcome.accepted);
    CHECK(outcome.stages.back().stage == StageKind::race);
    CHECK(outcome.stages.back().verdict != Verdict::accept);
}

TEST_CASE("transient failures are retried and counted in the reason") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Outcome outcome = cascade.evaluate(campaign.design("flaky"), std::nullopt, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK(outcome.accepted);
    bool counted = false;
    for (const auto& stage : outcome.stages) counted = counted || stage.reason.find("transient") != std::string::npos;
    CHECK(counted);
}

TEST_CASE("a race against a flaky candidate records every launch with its side and error") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate flaky = campaign.design("flaky", 9000);  // every third launch fails transiently
    const Outcome outcome = cascade.evaluate(flaky, champion, campaign.kernel());
    INFO(outcome.final_reason);
    REQUIRE(outcome.stages.back().stage == StageKind::race);
    CHECK(outcome.accepted);

    const auto race = stage_row(campaign.evaluations(flaky), "race");
    const auto champion_race = stage_row(campaign.evaluations(champion.candidate), "race");
    REQUIRE(race);
    REQUIRE(champion_race);
    const auto candidate_rows = campaign.store.list_measurements(race->id);
    const auto champion_rows = campaign.store.list_measurements(champion_race->id);
    std::int64_t failed = 0;
    std::int64_t retried = 0;
    for (const auto& row : candidate_rows) {
        CHECK(row.side == "candidate");
        REQUIRE(row.pair_idx.has_value());
        if (row.outcome != "ok") {
            ++failed;
            CHECK(row.outcome == "transient");
            REQUIRE(row.error.has_value());
            CHECK(row.error->find("device busy") != std::string::npos);
            CHECK_FALSE(row.cycles);
            // the pair is launched again with the same seed, one attempt later
            const bool retried_later = std::any_of(candidate_rows.begin(), candidate_rows.end(), [&](const auto& other) {
                return other.pair_idx == row.pair_idx && other.attempt == row.attempt + 1 && other.seed == row.seed;
            });
            CHECK(retried_later);
        } else {
            CHECK(row.cycles.has_value());
            CHECK_FALSE(row.error);
        }
        retried += row.attempt > 0 ? 1 : 0;
    }
    for (const auto& row : champion_rows) {
        CHECK(row.side == "champion");
        CHECK(row.outcome == "ok");  // the honest champion never fails
        retried += row.attempt > 0 ? 1 : 0;
    }
    CHECK(failed > 0);
    // both sides of a retried pair launch again; the stage's counts are the rows' counts
    CHECK(race->launches == std::optional<std::int64_t>(static_cast<std::int64_t>(candidate_rows.size() + champion_rows.size())));
    CHECK(race->failed_launches == std::optional<std::int64_t>(failed));
    CHECK(race->retries == std::optional<std::int64_t>(retried));
    CHECK(retried == 2 * failed);
    CHECK(champion_race->launches == race->launches);
    CHECK(race->reason.find(fmt::format("{} failed, {} retried", failed, retried)) != std::string::npos);
    CHECK(outcome.stages.back().failed_launches == failed);

    // launch order interleaves both sides without gaps
    std::vector<std::int64_t> orders;
    for (const auto& row : candidate_rows) orders.push_back(row.launch_order);
    for (const auto& row : champion_rows) orders.push_back(row.launch_order);
    std::sort(orders.begin(), orders.end());
    for (std::size_t index = 0; index < orders.size(); ++index) CHECK(orders[index] == static_cast<std::int64_t>(index));

    // the single-design stages keep their failed launches too
    std::int64_t failed_rows = 0;
    std::int64_t failed_counted = 0;
    for (const auto& evaluation : campaign.evaluations(flaky)) {
        for (const auto& row : campaign.store.list_measurements(evaluation.id)) failed_rows += row.outcome != "ok" ? 1 : 0;
        failed_counted += evaluation.failed_launches.value_or(0);
    }
    CHECK(failed_rows == failed_counted);
    CHECK(failed_rows > failed);
}

TEST_CASE("a device error in the correctness stage fails it and names the error") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Outcome outcome = cascade.evaluate(campaign.design("device_error"), std::nullopt, campaign.kernel());
    CHECK_FALSE(outcome.accepted);
    CHECK(outcome.stages.back().stage == StageKind::correctness);
    CHECK(outcome.stages.back().verdict == Verdict::fail);
    CHECK(outcome.stages.back().reason.find("DMA fault") != std::string::npos);
}

TEST_CASE("re-validation races the champion against its predecessor") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion predecessor{campaign.design("honest", 10000), 10000};
    const Champion champion{campaign.design("honest", 9000), 9000};
    const Outcome still = cascade.revalidate(champion, predecessor, campaign.kernel());
    CHECK(still.accepted);
    const auto row = stage_row(campaign.evaluations(champion.candidate), "race");
    REQUIRE(row);
    CHECK(row->reason.find("re-validation") != std::string::npos);
    const Outcome reversed = cascade.revalidate(predecessor, champion, campaign.kernel());
    CHECK_FALSE(reversed.accepted);
}

TEST_CASE("measure: median of seeded checked runs") {
    Campaign campaign;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const auto measured = cascade.measure(campaign.design("honest", 10000), campaign.kernel(), {11, 12, 13, 14, 15, 16, 17});
    CHECK(measured.all_passed);
    CHECK(measured.cycles.size() == 7);
    REQUIRE(measured.cycles_median.has_value());
    CHECK(*measured.cycles_median == doctest::Approx(10000.0).epsilon(0.03));
    const auto bad = cascade.measure(campaign.design("nonfinite"), campaign.kernel(), {11, 12});
    CHECK_FALSE(bad.all_passed);
    CHECK(bad.reason.find("non-finite") != std::string::npos);
}

TEST_CASE("strict config tightens the acceptance test, screens with more runs and races smaller gains") {
    const CascadeConfig base;
    const CascadeConfig strict = CascadeConfig::strict(base);
    CHECK(strict.acceptance.alpha <= 0.01);
    CHECK(strict.acceptance.min_pairs >= 8);
    CHECK(strict.acceptance.max_pairs == base.acceptance.max_pairs);  // the user's cap on a race holds
    CHECK(strict.correctness_seeds >= base.correctness_seeds);
    CHECK(strict.screen_runs > base.screen_runs);
    // late in a campaign the big gains are found: a candidate that looks only slightly faster is
    // worth a race (under the stricter test), which the exploring screen would not spend
    CHECK(strict.screen_max_ratio > base.screen_max_ratio);
    CHECK(strict.screen_max_ratio < 1.0);
    CHECK(strict.exploration_allowance < base.exploration_allowance);
}

TEST_CASE("judge: a transient launch failure is retried with the same seed and counted") {
    SequentialConfig sequential;
    sequential.calibration_paths = 4000;
    const auto design = std::make_shared<const SequentialDesign>(make_sequential_design(sequential));
    int calls = 0;
    const auto report = run_race(design, RaceConfig{3, 3, 10}, [&](Side side, std::uint64_t) {
        ++calls;
        JudgedLaunch launch;
        if (calls == 3) {
            launch.result = LaunchResult::failed("device busy", true);
        } else {
            launch.result = LaunchResult::timed(side == Side::champion ? 1000.0 : 800.0 + calls % 7);
        }
        return launch;
    });
    CHECK(report.verdict.decision == Decision::accept);
    CHECK(report.verdict.transient_failures == 1);
    CHECK(report.observations.size() == report.verdict.launches);
    CHECK(report.wall_ms.size() == report.observations.size());
}
