#include "eval/race.hpp"

#include "core/error.hpp"

#include <cmath>
#include <fmt/format.h>

namespace npuopt::eval {
namespace {

// A time that cannot be a measurement: the harness is broken, so retrying will not help.
std::optional<std::string> invalid_time(const LaunchResult& launch) {
    if (launch.error) return std::nullopt;
    if (!launch.secs) return "launch reported neither a time nor an error";
    if (!std::isfinite(*launch.secs) || *launch.secs <= 0.0) {
        return fmt::format("launch reported an impossible time {} s", *launch.secs);
    }
    return std::nullopt;
}

}  // namespace

std::string_view side_name(Side side) { return side == Side::champion ? "champion" : "candidate"; }

PairPlan RacePlan::plan_next_pair() {
    PairPlan plan;
    plan.pair_idx = m_next_pair_idx++;
    plan.input_seed = m_rng();
    plan.order = plan.pair_idx % 2 == 0 ? std::array{Side::champion, Side::candidate}
                                        : std::array{Side::candidate, Side::champion};
    return plan;
}

PairPlan RacePlan::plan_retry(const PairPlan& failed) {
    PairPlan plan = failed;
    ++plan.attempt;
    return plan;
}

Race::Race(std::shared_ptr<const SequentialDesign> design, RaceConfig config)
    : m_config(config), m_plan(config.seed), m_test(std::move(design)) {
    m_verdict.test = m_test.result();
    m_verdict.reason = "no pairs yet";
}

std::optional<PairPlan> Race::next_pair() {
    if (is_over()) return std::nullopt;
    if (!m_pending && m_config.max_launches > 0 && m_verdict.launches + 2 > m_config.max_launches) {
        finish(Decision::inconclusive, true,
               fmt::format("inconclusive: the device-run allowance ({} launches) leaves no room for pair {}",
                           m_config.max_launches, m_verdict.pairs_completed));
        return std::nullopt;
    }
    if (!m_pending && m_config.out_of_time && m_config.out_of_time()) {
        m_verdict.out_of_time = true;
        finish(Decision::inconclusive, true,
               fmt::format("inconclusive: the wall-time budget ran out before pair {} (cut at a launch boundary)",
                           m_verdict.pairs_completed));
        return std::nullopt;
    }
    if (!m_pending) m_pending = m_plan.plan_next_pair();
    return m_pending;
}

void Race::record_pair(const PairPlan& plan, const PairOutcome& outcome) {
    if (is_over()) throw Error(ErrorKind::internal, "Race: pair recorded after the race was over");
    if (!m_pending || m_pending->pair_idx != plan.pair_idx || m_pending->attempt != plan.attempt) {
        throw Error(ErrorKind::internal,
                    fmt::format("Race: recorded pair {} attempt {} is not the pending pair", plan.pair_idx,
                                plan.attempt));
    }
    LaunchResult champion = outcome.champion;
    LaunchResult candidate = outcome.candidate;
    for (LaunchResult* launch : {&champion, &candidate}) {
        if (auto problem = invalid_time(*launch)) *launch = LaunchResult::failed(*problem, false);
    }
    for (std::size_t position = 0; position < 2; ++position) {
        const Side side = plan.order[position];
        const LaunchResult& launch = side == Side::champion ? champion : candidate;
        m_observations.push_back({plan.pair_idx, plan.attempt, side, position, plan.input_seed, launch.secs,
                                  launch.error, launch.error && launch.transient});
    }
    m_verdict.launches += 2;

    const bool champion_failed = champion.error.has_value();
    const bool candidate_failed = candidate.error.has_value();
    if (candidate_failed && !candidate.transient) {
        m_verdict.candidate_incorrect = candidate.incorrect;
        finish(Decision::reject, false,
               fmt::format("reject: candidate {} on pair {}: {}", candidate.incorrect ? "incorrect" : "failed",
                           plan.pair_idx, *candidate.error));
        return;
    }
    if (champion_failed && !champion.transient) {
        m_verdict.champion_incorrect = champion.incorrect;
        finish(Decision::inconclusive, true,
               fmt::format("inconclusive: champion {} on pair {}: {}", champion.incorrect ? "incorrect" : "failed",
                           plan.pair_idx, *champion.error));
        return;
    }
    if (champion_failed || candidate_failed) {
        ++m_verdict.transient_failures;
        const std::string what = fmt::format(
            "{} on pair {} attempt {}: {}", champion_failed ? "champion" : "candidate", plan.pair_idx,
            plan.attempt, champion_failed ? *champion.error : *candidate.error);
        if (plan.attempt >= m_config.max_retries_per_pair) {
            finish(Decision::inconclusive, true,
                   fmt::format("inconclusive: retry cap {} reached, transient failure of {}",
                               m_config.max_retries_per_pair, what));
        } else if (m_verdict.transient_failures > m_config.max_failures) {
            finish(Decision::inconclusive, true,
                   fmt::format("inconclusive: {} transient failures exceed the race's cap {}; last: {}",
                               m_verdict.transient_failures, m_config.max_failures, what));
        } else {
            ++m_verdict.retries;
            m_pending = RacePlan::plan_retry(plan);
            m_verdict.reason = "retrying after a transient failure of " + what;
        }
        return;
    }

    m_pending.reset();
    ++m_verdict.pairs_completed;
    const SequentialResult& result = m_test.add_log_ratio(std::log(*candidate.secs / *champion.secs));
    m_verdict.test = result;
    m_verdict.decision = result.decision;
    m_verdict.reason = result.reason;
}

void Race::finish(Decision decision, bool aborted, std::string reason) {
    m_pending.reset();
    m_verdict.test = m_test.result();
    m_verdict.decision = decision;
    m_verdict.aborted = aborted;
    m_verdict.reason = std::move(reason);
}

}  // namespace npuopt::eval
