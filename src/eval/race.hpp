#pragma once
// The race between a champion (A) and a candidate (B): pure scheduling and bookkeeping, no device.
// The caller launches what next_pair() plans and reports back with record_pair(); the race feeds
// log(t_B / t_A) to the sequential test and keeps every launch, failures included.
//
//   next_pair() ─► launch plan.order[0], then plan.order[1] (input_seed for both)
//        ▲                              │
//        └── retry (transient) ◄── record_pair(plan, outcome) ─► SequentialTest ─► verdict

#include "eval/sequential.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace npuopt::eval {

/// Which design a launch ran: the champion (A) or the candidate (B).
enum class Side { champion, candidate };

/// Printable name: "champion" or "candidate".
std::string_view side_name(Side side);

/// One pair of launches: their order and the input seed both of them use.
struct PairPlan {
    std::size_t pair_idx = 0;
    std::size_t attempt = 0;  ///< 0 for the first try, then one more per retry
    std::uint64_t input_seed = 0;
    std::array<Side, 2> order{Side::champion, Side::candidate};
};

/// Interleaved launch order (A B, B A, A B, ...) and a fresh input seed per pair, drawn from a
/// std::mt19937_64 seeded once, so the whole schedule is reproducible from the seed.
class RacePlan {
public:
    explicit RacePlan(std::uint64_t seed) : m_rng(seed) {}

    /// The next pair: champion first on even pair indices, candidate first on odd ones.
    PairPlan plan_next_pair();
    /// The same pair again after a transient failure: same seed and order, attempt + 1.
    static PairPlan plan_retry(const PairPlan& failed);

private:
    std::mt19937_64 m_rng;
    std::size_t m_next_pair_idx = 0;
};

/// What one launch produced: a time, or an error that is transient (retry) or not.
struct LaunchResult {
    std::optional<double> secs;
    std::optional<std::string> error;
    bool transient = true;   ///< only meaningful with an error
    bool incorrect = false;  ///< the error is a failed correctness check (never transient)

    static LaunchResult timed(double secs) { return {secs, std::nullopt, false}; }
    static LaunchResult failed(std::string error, bool transient) { return {std::nullopt, std::move(error), transient}; }
};

/// Both launches of a pair.
struct PairOutcome {
    LaunchResult champion;
    LaunchResult candidate;
};

/// One launch as it happened, kept for the record.
struct Observation {
    std::size_t pair_idx = 0;
    std::size_t attempt = 0;
    Side side = Side::champion;
    std::size_t position = 0;  ///< 0 launched first in its pair, 1 second
    std::uint64_t input_seed = 0;
    std::optional<double> secs;
    std::optional<std::string> error;
    bool transient = false;
};

/// Limits on failures; the seed drives the plan.
struct RaceConfig {
    std::uint64_t seed = 0;
    std::size_t max_retries_per_pair = 3;  ///< transient failures tolerated on one pair
    std::size_t max_failures = 10;         ///< transient failures tolerated in the whole race
    std::size_t max_launches = 0;          ///< launches the race may spend (the campaign's device-run
                                           ///< budget left); 0 = no cap. Stopping early can only turn
                                           ///< an accept into "inconclusive", never the reverse
    /// True once the campaign's wall-time budget has run out: the race ends inconclusive before
    /// its next pair (a launch boundary). Empty: no wall-time limit.
    std::function<bool()> out_of_time = {};
};

/// How the race ended (or stands).
struct RaceVerdict {
    Decision decision = Decision::continue_racing;
    SequentialResult test;               ///< the sequential test's latest result
    std::size_t pairs_completed = 0;
    std::size_t launches = 0;            ///< every launch, failed ones included
    std::size_t transient_failures = 0;
    std::size_t retries = 0;
    bool aborted = false;                ///< ended by failures rather than by the test
    bool out_of_time = false;            ///< ended because the wall-time budget ran out (aborted too)
    bool candidate_incorrect = false;    ///< rejected because a checked candidate launch was wrong
    bool champion_incorrect = false;     ///< inconclusive because a checked champion launch was wrong
    std::string reason;
};

/// One race: plan pairs, take their results, decide.
class Race {
public:
    Race(std::shared_ptr<const SequentialDesign> design, RaceConfig config);

    /// The pair to launch now (the pending one again until it is recorded); empty once over.
    std::optional<PairPlan> next_pair();
    /// Record the outcome of the pending pair. Throws Error(internal) for a plan that is not the
    /// pending one or once the race is over.
    void record_pair(const PairPlan& plan, const PairOutcome& outcome);

    bool is_over() const { return m_verdict.decision != Decision::continue_racing; }
    const RaceVerdict& verdict() const { return m_verdict; }
    std::span<const Observation> observations() const { return m_observations; }
    std::span<const double> log_ratios() const { return m_test.log_ratios(); }

private:
    void finish(Decision decision, bool aborted, std::string reason);

    RaceConfig m_config;
    RacePlan m_plan;
    SequentialTest m_test;
    std::optional<PairPlan> m_pending;
    std::vector<Observation> m_observations;
    RaceVerdict m_verdict;
};

}  // namespace npuopt::eval
