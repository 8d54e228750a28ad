// Every launch is checked: race and screen launches carry the toolchain's check, a wrong or
// unverified launch ends the race as incorrect, the correctness stage never passes on launches
// that failed, the device-run allowance is never overrun, and seeds are hashed, not counted.

#include "test_cascade_fixture.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/anti_gaming.hpp"
#include "eval/check_plan.hpp"
#include "eval/seed_stream.hpp"

using namespace npuopt::eval;
using cascade_test::Campaign;
using cascade_test::checks_toolchain;
using cascade_test::quick_config;
namespace fs = std::filesystem;

namespace {

std::optional<npuopt::store::EvaluationRecord> stage_row(const std::vector<npuopt::store::EvaluationRecord>& rows,
                                                        const std::string& stage) {
    auto found = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.stage == stage; });
    if (found == rows.end()) return std::nullopt;
    return *found;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a kernel correct only while the correctness stage watches is rejected as incorrect in the race") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate sneaky = campaign.design("wrong_after_warmup", 9000);
    const Outcome outcome = cascade.evaluate(sneaky, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    CHECK_FALSE(outcome.correct);
    REQUIRE(outcome.stages.back().stage == StageKind::race);
    CHECK(outcome.stages.back().verdict == Verdict::fail);
    CHECK(has(outcome.stages.back().reason, "candidate incorrect"));
    CHECK(has(outcome.stages.back().reason, "check failed"));
    const auto race = stage_row(campaign.evaluations(sneaky), "race");
    REQUIRE(race);
    CHECK(race->verdict == "fail");
    CHECK(has(race->reason, "incorrect"));
}

TEST_CASE("a race launch that reports no verify line under a check is rejected as incorrect") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate silent = campaign.design("no_verify_after_warmup", 9000);
    const Outcome outcome = cascade.evaluate(silent, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    CHECK_FALSE(outcome.correct);
    CHECK(outcome.stages.back().verdict == Verdict::fail);
    CHECK(has(outcome.stages.back().reason, "no verify line"));
}

TEST_CASE("every launch of the cascade carries --check, so a kernel that detects the check gains nothing") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Champion champion{campaign.design("honest", 10000), 10000};
    // 3% faster when checked, 3x faster (and wrong) whenever unchecked
    const Candidate detector = campaign.design("detects_check", 9700);
    const Outcome outcome = cascade.evaluate(detector, champion, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK(outcome.speedup.value_or(1.0) < 1.1);  // never the unchecked 3x
    const auto lines = campaign.argv_log();
    REQUIRE(lines.size() >= 8);  // correctness launches and at least one race pair
    for (const auto& line : lines) CHECK(has(line, "--check"));
    // the race ran with every launch checked: its measurements are the honest 10000 cycles
    const auto race = stage_row(campaign.evaluations(detector), "race");
    REQUIRE(race);
    for (const auto& row : campaign.store.list_measurements(race->id)) {
        REQUIRE(row.cycles);
        CHECK(*row.cycles > 9000);
    }
}

TEST_CASE("correctness does not pass on a launch that printed a passing verify line and then failed") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Candidate broken = campaign.design("verify_then_fail");
    const Outcome outcome = cascade.evaluate(broken, std::nullopt, campaign.kernel());
    INFO(outcome.final_reason);
    CHECK_FALSE(outcome.accepted);
    CHECK_FALSE(outcome.correct);
    REQUIRE(outcome.stages.back().stage == StageKind::correctness);
    CHECK(outcome.stages.back().verdict == Verdict::fail);
    const auto row = stage_row(campaign.evaluations(broken), "correctness");
    REQUIRE(row);
    CHECK(row->verdict == "fail");
}

TEST_CASE("anti-gaming: no correctness runs at all is a failure, never a pass") {
    const auto verdict = check_correctness_runs({}, AntiGamingConfig{});
    CHECK_FALSE(verdict.passed());
    CHECK(verdict.check == GamingCheck::wrong_result);
}

TEST_CASE("with run_check fraction below 1 the checked launches are drawn reproducibly and a wrong kernel is caught") {
    CheckPlan plan(0.25, 7, "hash-a", "race-check");
    CheckPlan same(0.25, 7, "hash-a", "race-check");
    CheckPlan other(0.25, 7, "hash-b", "race-check");
    int checked = 0;
    int differs = 0;
    for (int launch_idx = 0; launch_idx < 2000; ++launch_idx) {
        const bool draw = plan.next();
        CHECK(draw == same.next());
        differs += draw != other.next() ? 1 : 0;
        checked += draw ? 1 : 0;
    }
    CHECK(checked > 400);
    CHECK(checked < 600);
    CHECK(differs > 0);
    CheckPlan every(1.0, 7, "hash-a", "race-check");
    for (int launch_idx = 0; launch_idx < 100; ++launch_idx) CHECK(every.next());

    Campaign campaign(checks_toolchain());
    CascadeConfig config = quick_config();
    config.check_fraction = 0.25;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Candidate sneaky = campaign.design("wrong_after_warmup", 9000);
    const Outcome outcome = cascade.evaluate(sneaky, champion, campaign.kernel());
    INFO(outcome.final_reason);
    const auto lines = campaign.argv_log();
    const auto checked_lines = std::count_if(lines.begin(), lines.end(), [](const auto& line) { return has(line, "--check"); });
    CHECK(checked_lines >= 4);                                       // the correctness launches always
    CHECK(checked_lines < static_cast<std::ptrdiff_t>(lines.size()));  // some race launches unchecked
    CHECK_FALSE(outcome.accepted);
    CHECK(has(outcome.final_reason, "incorrect"));
}

TEST_CASE("the device-run allowance stops every stage before it would be overrun, and each launch is counted as it starts") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    int hooked = 0;
    cascade.set_launch_hook([&] { ++hooked; });
    cascade.set_device_run_allowance(3);  // the correctness stage needs 4
    const Outcome short_of_runs = cascade.evaluate(campaign.design("honest"), std::nullopt, campaign.kernel());
    CHECK_FALSE(short_of_runs.accepted);
    CHECK(short_of_runs.budget_exhausted);
    CHECK(short_of_runs.device_runs == 3);
    CHECK(hooked == 3);
    CHECK(campaign.argv_log().size() == 3);
    CHECK(short_of_runs.stages.back().verdict == Verdict::inconclusive);

    for (const std::int64_t allowance : {5, 9, 15}) {
        Campaign race_campaign(checks_toolchain());
        CascadeConfig race_always = quick_config();
        race_always.clear_win_ratio = 0.0;  // 0.8x would be a clear win: these allowances are about the race
        race_always.race_budget_share = 0.0;  // the budget itself stops the race, not the race's share of it
        Cascade racing(race_campaign.toolchain, race_campaign.store, &race_campaign.rules, nullptr, race_always);
        int started = 0;
        racing.set_launch_hook([&] { ++started; });
        racing.set_device_run_allowance(allowance);
        const Champion champion{race_campaign.design("honest", 10000), 10000};
        const Outcome outcome = racing.evaluate(race_campaign.design("honest", 8000), champion, race_campaign.kernel());
        INFO("allowance " << allowance << ": " << outcome.final_reason);
        CHECK(outcome.device_runs <= allowance);
        CHECK(started == outcome.device_runs);
        CHECK(static_cast<std::int64_t>(race_campaign.argv_log().size()) == outcome.device_runs);
        CHECK_FALSE(outcome.accepted);  // no allowance here is enough for the test to accept
        CHECK(outcome.budget_exhausted);
    }
}

TEST_CASE("a race spends at most its share of the launches left, with the test placed for the pairs it can afford, or else the smallest race that can accept, and is not run only where the launches left are too few for that") {
    auto race_with = [](double share, std::int64_t allowance) {
        Campaign campaign(checks_toolchain());
        CascadeConfig config = quick_config();
        config.clear_win_ratio = 0.0;
        config.race_budget_share = share;
        Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
        cascade.set_device_run_allowance(allowance);
        const Champion champion{campaign.design("honest", 10000), 10000};
        return cascade.evaluate(campaign.design("honest", 8000), champion, campaign.kernel());
    };
    const auto full = make_sequential_design(quick_config().acceptance);
    const auto full_first = earliest_accept_pairs(full);
    REQUIRE(full_first.has_value());
    // No cap: 200 launches are enough for the configured test to accept a 1.25x speedup.
    const Outcome uncapped = race_with(0.0, 200);
    INFO("uncapped: " << uncapped.final_reason);
    CHECK(uncapped.accepted);
    REQUIRE(uncapped.stages.back().stage == StageKind::race);
    CHECK(uncapped.stages.back().device_runs >= static_cast<std::int64_t>(2 * *full_first));
    // A quarter of what is left after the correctness launches: fewer launches than the configured
    // test's first possible accept, but the test placed for those pairs can still accept a clear gain.
    const Outcome capped = race_with(0.25, 60);
    INFO("capped: " << capped.final_reason);
    REQUIRE(capped.stages.back().stage == StageKind::race);
    const std::int64_t left = 60 - (capped.device_runs - capped.stages.back().device_runs);
    const auto cap = static_cast<std::int64_t>(0.25 * static_cast<double>(left));
    REQUIRE(cap < static_cast<std::int64_t>(2 * *full_first));
    const auto within = make_sequential_design(within_pairs(quick_config().acceptance, static_cast<std::size_t>(cap / 2)));
    REQUIRE(earliest_accept_pairs(within).has_value());
    CHECK(within.accept_spent.back() <= quick_config().acceptance.alpha);
    CHECK(capped.stages.back().device_runs <= cap);
    CHECK(capped.stages.back().device_runs > 0);
    CHECK(capped.accepted);
    CHECK_FALSE(capped.budget_exhausted);
    // The smallest race whose placed test can accept: the fewest pairs n with an accept by n.
    std::size_t floor_pairs = 2;
    while (!earliest_accept_pairs(make_sequential_design(within_pairs(quick_config().acceptance, floor_pairs))).has_value()) {
        ++floor_pairs;
        REQUIRE(floor_pairs <= quick_config().acceptance.max_pairs);
    }
    // A share too small for any accept, with launches enough left for that smallest race: the race
    // gets it (more than its share, no more than the floor) and accepts the clear gain.
    const Outcome floored = race_with(0.25, 30);
    INFO("floored: " << floored.final_reason);
    REQUIRE(floored.stages.back().stage == StageKind::race);
    const std::int64_t before_race = floored.device_runs - floored.stages.back().device_runs;
    const auto share = static_cast<std::int64_t>(0.25 * static_cast<double>(30 - before_race));
    REQUIRE(share < static_cast<std::int64_t>(2 * floor_pairs));
    CHECK(floored.stages.back().device_runs > share);
    CHECK(floored.stages.back().device_runs <= static_cast<std::int64_t>(2 * floor_pairs));
    CHECK(floored.accepted);
    CHECK_FALSE(floored.budget_exhausted);
    // Fewer launches left than that smallest race: no race launch at all, inconclusive, budget not spent.
    const Outcome small = race_with(0.25, before_race + static_cast<std::int64_t>(2 * floor_pairs) - 1);
    INFO("small: " << small.final_reason);
    REQUIRE(small.stages.back().stage == StageKind::race);
    CHECK(small.device_runs == before_race);
    CHECK(small.stages.back().device_runs == 0);
    CHECK(small.stages.back().verdict == Verdict::inconclusive);
    CHECK_FALSE(small.accepted);
    CHECK_FALSE(small.budget_exhausted);
    CHECK(has(small.final_reason, "not raced"));
}

TEST_CASE("a wall-time deadline cuts a step at its next launch boundary: nothing starts after it, a race ends before its next pair") {
    {
        Campaign campaign(checks_toolchain());
        Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
        cascade.set_deadline(std::chrono::steady_clock::now() - std::chrono::seconds(1));
        const Outcome late = cascade.evaluate(campaign.design("honest"), std::nullopt, campaign.kernel());
        INFO(late.final_reason);
        CHECK(late.budget_exhausted);
        CHECK_FALSE(late.accepted);
        CHECK(late.device_runs == 0);
        CHECK(campaign.argv_log().empty());
        CHECK(has(late.final_reason, "wall-time budget"));
    }
    // The deadline passes during the race (set from the launch hook at the 10th launch): the
    // pair in flight finishes, no other starts, and the race is inconclusive, not a verdict.
    Campaign campaign(checks_toolchain());
    CascadeConfig race_always = quick_config();
    race_always.clear_win_ratio = 0.0;
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, race_always);
    int started = 0;
    constexpr int k_cut_at = 10;
    cascade.set_launch_hook([&] {
        if (++started == k_cut_at) cascade.set_deadline(std::chrono::steady_clock::now() - std::chrono::seconds(1));
    });
    const Champion champion{campaign.design("honest", 10000), 10000};
    const Outcome outcome = cascade.evaluate(campaign.design("honest", 9000), champion, campaign.kernel());
    INFO(outcome.final_reason);
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::race);
    CHECK(outcome.stages.back().verdict == Verdict::inconclusive);
    CHECK(outcome.budget_exhausted);
    CHECK_FALSE(outcome.accepted);
    CHECK(outcome.device_runs >= k_cut_at);
    CHECK(outcome.device_runs <= k_cut_at + 1);  // at most the other half of the pair in flight
    CHECK(has(outcome.final_reason, "wall-time budget"));

    // Without a deadline the same race runs on past that point.
    Campaign uncut(checks_toolchain());
    Cascade free_cascade(uncut.toolchain, uncut.store, &uncut.rules, nullptr, race_always);
    const Champion free_champion{uncut.design("honest", 10000), 10000};
    const Outcome full = free_cascade.evaluate(uncut.design("honest", 9000), free_champion, uncut.kernel());
    CHECK(full.device_runs > k_cut_at + 1);
    CHECK_FALSE(full.budget_exhausted);
}

TEST_CASE("a launch counted by the hook is charged even when the step dies in the middle of its stage") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    int started = 0;
    cascade.set_launch_hook([&] {
        campaign.store.count_device_launch();
        if (++started == 3) throw std::runtime_error("killed");  // the process dies before launch 3 runs
    });
    CHECK_THROWS(cascade.evaluate(campaign.design("honest"), std::nullopt, campaign.kernel()));
    CHECK(campaign.store.device_launches() == 3);
    // the correctness stage never completed: no row holds those launches, the counter does
    CHECK(campaign.argv_log().size() == 2);
}

TEST_CASE("seeds are hashed from the campaign seed: the priming seed is not 0 and measure seeds are not sequential") {
    Campaign campaign(checks_toolchain());
    Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, quick_config());
    const Candidate candidate = campaign.design("honest");
    cascade.evaluate(candidate, std::nullopt, campaign.kernel());
    const auto correctness = stage_row(campaign.evaluations(candidate), "correctness");
    REQUIRE(correctness);
    const auto rows = campaign.store.list_measurements(correctness->id);
    REQUIRE_FALSE(rows.empty());
    const auto priming = static_cast<std::uint64_t>(rows.front().seed);
    CHECK(priming != 0);
    CHECK(priming == derive_seed(7, candidate.content_hash, "priming"));
    CHECK(has(correctness->reason, fmt::format("priming seed {}", priming)));

    SeedStream stream(1, "attention_output", "submission 1.0.0");
    std::set<std::uint64_t> seeds;
    std::uint64_t previous = stream.next();
    seeds.insert(previous);
    for (int run_idx = 0; run_idx < 6; ++run_idx) {
        const std::uint64_t seed = stream.next();
        CHECK(seed != previous + 1);
        CHECK(seed <= static_cast<std::uint64_t>(INT64_MAX));
        seeds.insert(seed);
        previous = seed;
    }
    CHECK(seeds.size() == 7);
    CHECK(SeedStream(1, "attention_output", "submission 1.0.0").next() != SeedStream(2, "attention_output", "submission 1.0.0").next());
}

TEST_CASE("target.yaml run_check.fraction is read, defaults to every launch and is validated") {
    cascade_test::TempDir dir("runcheck");
    const fs::path target_dir = dir.path() / "chk";
    fs::create_directories(target_dir);
    auto write_target = [&](const std::string& run_check) {
        std::ofstream(target_dir / "target.yaml")
            << "name: chk\ndescription: d\n"
            << run_check
            << "toolchain:\n  bin: npuc\n  commands:\n    version: {argv: [\"{bin}\", --version]}\n"
               "    check: {argv: [\"{bin}\", check, \"{file}\"]}\n"
               "    schedule: {argv: [\"{bin}\", schedule, \"{file}\"]}\n"
               "    run: {argv: [\"{bin}\", run, \"{file}\"]}\n"
               "facts:\n  clock_ghz: {value: 1, unit: GHz, description: c}\n"
               "docs: docs\nmicrobench: mb\ntemplates: t\nkernels: kernels.yaml\n";
        return npuopt::config::load_target_config(target_dir / "target.yaml");
    };
    CHECK(write_target("").run_check_fraction == 1.0);
    CHECK(write_target("run_check: {fraction: 0.25}\n").run_check_fraction == doctest::Approx(0.25));
    std::string message;
    try {
        write_target("run_check: {fraction: 1.5}\n");
    } catch (const npuopt::Error& error) {
        message = error.what();
    }
    CHECK(message.find("run_check.fraction") != std::string::npos);
}

TEST_CASE("a check proposal is taken on the screen's clear win, raced only where its screen median is under half the clear-win margin") {
    auto evaluate = [](double cycles) {
        Campaign campaign(checks_toolchain());
        CascadeConfig config = quick_config();
        Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
        cascade.set_device_run_allowance(200);
        const Champion champion{campaign.design("honest", 10000), 10000};
        Candidate candidate = campaign.design("honest", cycles);
        candidate.clear_win_only = true;
        return cascade.evaluate(candidate, champion, campaign.kernel());
    };
    // 0.97x the champion: through the screen, no clear win, a near tie (over 0.95x, half the
    // clear-win margin), and no race launch at all
    const Outcome near = evaluate(9700);
    INFO("near tie: " << near.final_reason);
    REQUIRE(near.stages.back().stage == StageKind::race);
    CHECK(near.stages.back().device_runs == 0);
    CHECK(near.stages.back().verdict == Verdict::reject);
    CHECK_FALSE(near.accepted);
    CHECK(near.final_reason.find("not raced: a check") != std::string::npos);
    // predicted far slower than the champion: a check of the predictions is not skipped by them
    {
        Campaign campaign;
        CascadeConfig config = quick_config();
        config.exploration_allowance = 0.0;  // no draw lets a far slower prediction through
        Cascade cascade(campaign.toolchain, campaign.store, &campaign.rules, nullptr, config);
        cascade.set_device_run_allowance(200);
        const Champion champion{campaign.design("honest", 10000), 10000};
        Candidate check = campaign.design("honest", 5000, 40000);
        const Outcome unchecked = cascade.evaluate(check, champion, campaign.kernel());
        INFO("an ordinary candidate: " << unchecked.final_reason);
        CHECK(unchecked.stages.back().stage == StageKind::estimate);
        CHECK(unchecked.stages.back().verdict == Verdict::skip);
        check = campaign.design("honest", 5000, 40000);
        check.clear_win_only = true;
        const Outcome checked = cascade.evaluate(check, champion, campaign.kernel());
        INFO("the check: " << checked.final_reason);
        CHECK(checked.accepted);
        CHECK(checked.stages.back().stage == StageKind::screen);
    }
    // 0.92x: no clear win (its slowest launch is not under 0.90x), but under 0.95x: no tie,
    // raced and accepted (before session 28: dropped unraced, as the near tie above)
    const Outcome gain = evaluate(9200);
    INFO("a gain short of a clear win: " << gain.final_reason);
    REQUIRE(gain.stages.back().stage == StageKind::race);
    CHECK(gain.stages.back().device_runs > 0);
    CHECK(gain.accepted);
    // 0.5x: the screen's clear win takes it without a race
    const Outcome clear = evaluate(5000);
    INFO("clear win: " << clear.final_reason);
    CHECK(clear.accepted);
    CHECK(clear.stages.back().stage == StageKind::screen);
}
