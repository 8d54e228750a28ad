#pragma once
// Descriptive and inferential statistics used by the judge and the hardware model: robust
// summaries, the t / normal / binomial distributions, rank statistics and a seeded bootstrap.
// Median, MAD, quantiles, the normal and t distributions and least squares are numerics/'s,
// re-exported here. Plain functions over spans; empty or malformed input throws
// npuopt::Error(invalid_input) naming the function and what it expected.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "numerics/least_squares.hpp"
#include "numerics/robust.hpp"

namespace npuopt::eval {

/// A closed interval [lower, upper].
struct Interval {
    double lower = 0.0;
    double upper = 0.0;
};

// ---- summaries ------------------------------------------------------------------------------

using numerics::mad;
using numerics::median;
using numerics::quantile;

/// Arithmetic mean.
double mean(std::span<const double> values);
/// Sample variance (divisor n - 1); needs at least two values.
double variance(std::span<const double> values);
/// Sample standard deviation (divisor n - 1).
double standard_deviation(std::span<const double> values);
/// Standard error of the mean: s / sqrt(n).
double standard_error(std::span<const double> values);
/// MAD scaled by 1.482602218505602 so it estimates sigma for normal data.
double mad_sigma(std::span<const double> values);
/// Mean after dropping floor(trim_fraction * n) values from each end; trim_fraction in [0, 0.5).
double trimmed_mean(std::span<const double> values, double trim_fraction);

// ---- distributions ----------------------------------------------------------------------------

using numerics::normal_cdf;
using numerics::normal_quantile;
using numerics::regularized_incomplete_beta;
using numerics::student_t_cdf;
using numerics::student_t_quantile;

/// P(X <= successes) for X ~ Binomial(trials, prob), summed exactly in log space.
double binomial_cdf(std::size_t successes, std::size_t trials, double prob);

/// Wilson score interval for a proportion of `successes` in `trials` at confidence `level`
/// ({0, 1} without trials): what an A/A false-accept rate is reported with.
std::pair<double, double> wilson_interval(std::size_t successes, std::size_t trials, double level = 0.95);

/// Which tail a test looks at.
enum class Alternative { two_sided, less, greater };

/// Exact sign-test p-value from counts of positive and negative differences (zeros dropped).
/// `greater`: the alternative is that positives are more likely than negatives.
double sign_test_p_value(std::size_t positives, std::size_t negatives,
                         Alternative alternative = Alternative::two_sided);

// ---- ranks ------------------------------------------------------------------------------------

/// 1-based ranks with ties given their mid-rank (the average of the ranks they span).
std::vector<double> midranks(std::span<const double> values);
/// Pearson correlation of two equally long vectors (NaN when one of them is constant).
double pearson_correlation(std::span<const double> xs, std::span<const double> ys);
/// Spearman rank correlation: Pearson correlation of the mid-ranks, so ties are handled.
double spearman_correlation(std::span<const double> xs, std::span<const double> ys);
/// Exact null distribution of the Wilcoxon signed-rank statistic W+ for n untied values:
/// element w is P(W+ = w), w = 0 .. n(n+1)/2.
std::vector<double> signed_rank_pmf(std::size_t n);
/// Hodges-Lehmann location estimate: median of the Walsh averages (x_i + x_j) / 2, i <= j.
double hodges_lehmann(std::span<const double> values);
/// Distribution-free confidence interval for the centre of a symmetric distribution, from the
/// Walsh averages and the exact signed-rank distribution (normal approximation above n = 60).
/// When n is too small for the level, the widest interval available (min, max Walsh) is returned.
Interval hodges_lehmann_interval(std::span<const double> values, double level);

// ---- bootstrap --------------------------------------------------------------------------------

/// How a percentile bootstrap resamples: the same seed gives the same interval.
struct BootstrapConfig {
    std::size_t resamples = 2000;
    double level = 0.95;
    std::uint64_t seed = 0x5eed'b007'57a7ULL;
};

/// Percentile bootstrap interval of `statistic` (resampling with replacement, std::mt19937_64).
Interval bootstrap_interval(std::span<const double> values,
                            const std::function<double(std::span<const double>)>& statistic,
                            const BootstrapConfig& config = {});
/// Percentile bootstrap interval of the mean.
Interval bootstrap_interval_mean(std::span<const double> values, const BootstrapConfig& config = {});
/// Percentile bootstrap interval of the median.
Interval bootstrap_interval_median(std::span<const double> values, const BootstrapConfig& config = {});

// ---- least squares ----------------------------------------------------------------------------

using numerics::fit_linear;
using numerics::LinearFit;
using numerics::Matrix;

}  // namespace npuopt::eval
