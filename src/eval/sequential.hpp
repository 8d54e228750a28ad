#pragma once
// The judge's sequential test on paired log-ratios d = log(t_candidate / t_champion)
// (negative = the candidate is faster). Two one-sided group-sequential Wilcoxon signed-rank
// tests with error-spending boundaries fixed before any data (see src/eval/README.md):
//
//   accept  when  Z_accept = SR(-d - f delta) >= a_k  (median d >= -f delta rejected at level alpha)
//   reject  when  Z_reject = SR(d + delta)    >= r_k  (median d <= -delta rejected at level beta)
//   inconclusive at the last look when neither boundary was crossed
//
// SR(x) is the standardised signed-rank score sum  sum_i a(rank(|x_i|)) sign(x_i) / sqrt(sum_i a^2)
// with scores a(r) = min(r, ceil(score_cap n)) (score_cap 1 by default: the plain signed-rank
// sum, a(r) = r), delta = log(1 + min_effect), f = accept_null_fraction (0.5). Ranks bound the
// influence of any one observation, so a single outlier launch cannot carry an accept; a cap
// below 1 also keeps the largest |x|, where outlier launches land, from outweighing the pairs of
// ordinary size.

#include "eval/stats.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace npuopt::eval {

/// Lan-DeMets error-spending function: how much of alpha (or beta) is spent by information t.
enum class Spending {
    obrien_fleming,  ///< 2 - 2 Phi(z_{1-gamma/2} / sqrt(t)): almost nothing early, most at the end
    pocock,          ///< gamma log(1 + (e - 1) t): evenly spread, stops early on large effects
};

/// Error spent by information fraction t in (0, 1] for a total error `total` (alpha or beta).
double error_spent(Spending spending, double total, double information);

/// The pre-registered parameters of one race's test.
struct SequentialConfig {
    double alpha = 0.05;       ///< P(accept) when the candidate is not faster (median d = 0)
    double beta = 0.10;        ///< P(reject) when the candidate is faster by exactly min_effect
    double min_effect = 0.01;  ///< smallest speedup worth having: t_champion / t_candidate - 1
    std::size_t min_pairs = 4;   ///< first look
    std::size_t max_pairs = 30;  ///< last look (the cap)
    std::vector<std::size_t> looks;  ///< pair counts of the looks; empty: every pair, min..max
    Spending accept_spending = Spending::obrien_fleming;
    Spending reject_spending = Spending::pocock;
    double interval_level = 0.95;  ///< level of the reported (fixed-sample) confidence interval
    /// The accept test's null is "speedup <= accept_null_fraction * min_effect" (in log terms),
    /// so alpha bounds P(accept) for every candidate that is not at least that much faster;
    /// 0.5 is the middle of the indifference zone, as in Wald's SPRT. 0 tests "no gain" itself.
    double accept_null_fraction = 0.5;
    /// Scores of the signed-rank statistic: rank r of n scores min(r, ceil(score_cap * n)) (in
    /// (0, 1]; 1, the default: the plain Wilcoxon signed-rank sum; 0.6: the largest 40 % of |d|
    /// score alike). An outlier launch (a device's occasional 1.1-1.6x slower run) lands at the top
    /// rank, where the plain sum gives it the most weight; capped scores win races of 9 or more
    /// pairs on outlier-heavy devices more often, but not the 5-8-pair races of a 100-run campaign,
    /// and on 67 generated-chip cells they were no better (src/eval/STATISTICS.md).
    double score_cap = 1.0;
    std::size_t calibration_paths = 40000;  ///< Monte-Carlo paths used to place the boundaries
    std::uint64_t calibration_seed = 0x0b0e'5eed'ca11'b8a7ULL;

    /// Late-campaign preset: alpha 0.01, min_pairs 8, max_pairs 40.
    static SequentialConfig strict();
};

/// The same test with its last look at most `max_pairs` pairs (at least 2): the looks past it
/// dropped, the cap made the last look, the first look no later than the cap. Its boundaries,
/// placed from this configuration before any data, spend all of alpha and beta by the cap, so a
/// race that can afford only a few pairs still keeps P(accept | no gain) <= alpha.
SequentialConfig within_pairs(const SequentialConfig& config, std::size_t max_pairs);

/// Throws Error(invalid_config) naming the first bad field and what it expected.
void validate_sequential_config(const SequentialConfig& config);

/// The boundaries of a configuration, computed from the config alone before any data.
struct SequentialDesign {
    SequentialConfig config;
    std::vector<std::size_t> looks;     ///< strictly increasing pair counts, last = max_pairs
    std::vector<double> accept_bounds;  ///< a_k per look (+inf: no accept possible there)
    std::vector<double> reject_bounds;  ///< r_k per look
    std::vector<double> accept_spent;   ///< cumulative alpha actually spent by look k (null paths)
    std::vector<double> reject_spent;   ///< cumulative beta actually spent by look k
};

/// Place the boundaries: the signed-rank statistic's joint null law across looks is
/// distribution-free, so it is simulated exactly (up to Monte-Carlo error) with a fixed seed.
SequentialDesign make_sequential_design(const SequentialConfig& config);

/// The fewest pairs after which this design can accept at all: the first look whose accept
/// bound the signed-rank statistic can reach (every pair favourable, no ties: Z = sqrt(3n(n+1)/(2n+1))).
/// nullopt when no look can accept. A race capped below twice this many launches can only
/// reject or end inconclusive.
std::optional<std::size_t> earliest_accept_pairs(const SequentialDesign& design);

/// What the test says after the latest pair.
enum class Decision { continue_racing, accept, reject, inconclusive };

/// Printable name: "continue", "accept", "reject", "inconclusive".
std::string_view decision_name(Decision decision);

/// The test's state after some pairs: decision, statistics, boundaries and the estimate.
struct SequentialResult {
    Decision decision = Decision::continue_racing;
    std::size_t pairs = 0;
    std::optional<std::size_t> look_idx;  ///< index into design.looks when this was a look
    double accept_statistic = 0.0;        ///< Z_accept
    double accept_bound = 0.0;            ///< a_k at this look (next look's when not a look)
    double reject_statistic = 0.0;        ///< Z_reject
    double reject_bound = 0.0;            ///< r_k
    double log_ratio_estimate = 0.0;      ///< Hodges-Lehmann estimate of the median d
    Interval log_ratio_interval;          ///< signed-rank CI at interval_level (not sequentially adjusted)
    double speedup = 1.0;                 ///< exp(-estimate): t_champion / t_candidate
    Interval speedup_interval;            ///< the CI mapped through exp(-d)
    std::string reason;
};

/// Standardised signed-rank statistic of `values` about 0 (mid-ranks for ties, zeros contribute
/// nothing) with scores min(rank, ceil(score_cap * n)), n = values.size(); score_cap 1 is the
/// Wilcoxon signed-rank statistic. 0 when every value is 0.
double signed_rank_z(std::span<const double> values, double score_cap = 1.0);

/// One race's test: feed log-ratios one pair at a time until the decision is final.
class SequentialTest {
public:
    explicit SequentialTest(std::shared_ptr<const SequentialDesign> design);

    /// Add the next pair's log-ratio (must be finite); returns the updated result.
    /// Throws Error(internal) once the decision is final.
    const SequentialResult& add_log_ratio(double log_ratio);

    const SequentialResult& result() const { return m_result; }
    bool is_final() const { return m_result.decision != Decision::continue_racing; }
    std::span<const double> log_ratios() const { return m_log_ratios; }
    const SequentialDesign& design() const { return *m_design; }

private:
    std::shared_ptr<const SequentialDesign> m_design;
    std::vector<double> m_log_ratios;
    std::size_t m_next_look_idx = 0;
    SequentialResult m_result;
};

/// Replay a whole sequence through a fresh test; stops at the first final decision.
SequentialResult run_sequential_test(std::shared_ptr<const SequentialDesign> design,
                                     std::span<const double> log_ratios);

/// The chance that a race run under `design` and stopped after `max_pairs` pairs accepts, when
/// the candidate's true log-ratio is `log_ratio` (negative: faster) and each launch's log cycles
/// scatter as `launch_residuals` do (log cycles less their median, pooled over earlier designs'
/// launches: outliers included as they came). Each simulated pair is
/// log_ratio + r_candidate - r_champion, both drawn from the residuals; `paths` races run through
/// the design's own test (its reject bound stops a path too). Deterministic in `seed`. 0 when
/// there are no residuals or pairs.
double accept_probability(std::shared_ptr<const SequentialDesign> design, std::size_t max_pairs,
                          std::span<const double> launch_residuals, double log_ratio, std::uint64_t seed,
                          std::size_t paths = 400);

}  // namespace npuopt::eval
