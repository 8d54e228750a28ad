#include "eval/stats.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace npuopt::eval {
namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double k_mad_to_sigma = 1.482602218505602;  // 1 / Phi^-1(3/4)

void require(bool condition, const char* function, const char* expectation) {
    if (!condition) {
        throw Error(ErrorKind::invalid_input, std::string(function) + ": expected " + expectation);
    }
}

using numerics::quantile_of_sorted;
using numerics::sorted_copy;

double log_choose(std::size_t n, std::size_t k) {
    return std::lgamma(static_cast<double>(n) + 1.0) - std::lgamma(static_cast<double>(k) + 1.0) -
           std::lgamma(static_cast<double>(n - k) + 1.0);
}

std::vector<double> walsh_averages_sorted(std::span<const double> values) {
    std::vector<double> walsh;
    walsh.reserve(values.size() * (values.size() + 1) / 2);
    for (std::size_t i = 0; i < values.size(); ++i) {
        for (std::size_t j = i; j < values.size(); ++j) walsh.push_back(0.5 * (values[i] + values[j]));
    }
    std::sort(walsh.begin(), walsh.end());
    return walsh;
}

}  // namespace

// ---- summaries ------------------------------------------------------------------------------

double mean(std::span<const double> values) {
    require(!values.empty(), "mean", "at least one value");
    double sum = 0.0;
    for (double value : values) sum += value;
    return sum / static_cast<double>(values.size());
}

double variance(std::span<const double> values) {
    require(values.size() >= 2, "variance", "at least two values");
    const double centre = mean(values);
    double sum_squares = 0.0;
    for (double value : values) sum_squares += (value - centre) * (value - centre);
    return sum_squares / static_cast<double>(values.size() - 1);
}

double standard_deviation(std::span<const double> values) { return std::sqrt(variance(values)); }

double standard_error(std::span<const double> values) {
    return standard_deviation(values) / std::sqrt(static_cast<double>(values.size()));
}

double mad_sigma(std::span<const double> values) { return k_mad_to_sigma * mad(values); }

double trimmed_mean(std::span<const double> values, double trim_fraction) {
    require(!values.empty(), "trimmed_mean", "at least one value");
    require(trim_fraction >= 0.0 && trim_fraction < 0.5, "trimmed_mean", "a trim fraction in [0, 0.5)");
    const std::vector<double> sorted = sorted_copy(values);
    const auto trimmed_per_end =
        static_cast<std::size_t>(std::floor(trim_fraction * static_cast<double>(sorted.size())));
    const std::span<const double> kept(sorted.data() + trimmed_per_end,
                                       sorted.size() - 2 * trimmed_per_end);
    return mean(kept);
}

// ---- distributions ----------------------------------------------------------------------------

std::pair<double, double> wilson_interval(std::size_t successes, std::size_t trials, double level) {
    if (trials == 0) return {0.0, 1.0};
    const double z = normal_quantile(0.5 + level / 2.0);
    const double n = static_cast<double>(trials);
    const double p = static_cast<double>(successes) / n;
    const double centre = (p + z * z / (2 * n)) / (1 + z * z / n);
    const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
    return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

double binomial_cdf(std::size_t successes, std::size_t trials, double prob) {
    require(prob >= 0.0 && prob <= 1.0, "binomial_cdf", "a probability in [0, 1]");
    if (successes >= trials) return 1.0;
    if (prob == 0.0) return 1.0;
    if (prob == 1.0) return 0.0;
    double total = 0.0;
    for (std::size_t k = 0; k <= successes; ++k) {
        total += std::exp(log_choose(trials, k) + static_cast<double>(k) * std::log(prob) +
                          static_cast<double>(trials - k) * std::log1p(-prob));
    }
    return std::min(1.0, total);
}

double sign_test_p_value(std::size_t positives, std::size_t negatives, Alternative alternative) {
    const std::size_t trials = positives + negatives;
    if (trials == 0) return 1.0;
    const double p_greater = binomial_cdf(negatives, trials, 0.5);  // P(X >= positives)
    const double p_less = binomial_cdf(positives, trials, 0.5);     // P(X <= positives)
    switch (alternative) {
        case Alternative::greater: return p_greater;
        case Alternative::less: return p_less;
        case Alternative::two_sided: break;
    }
    return std::min(1.0, 2.0 * std::min(p_greater, p_less));
}

// ---- ranks ------------------------------------------------------------------------------------

std::vector<double> midranks(std::span<const double> values) {
    std::vector<std::size_t> order(values.size());
    for (std::size_t idx = 0; idx < order.size(); ++idx) order[idx] = idx;
    std::sort(order.begin(), order.end(),
              [&](std::size_t left, std::size_t right) { return values[left] < values[right]; });
    std::vector<double> ranks(values.size());
    std::size_t run_start = 0;
    while (run_start < order.size()) {
        std::size_t run_end = run_start + 1;
        while (run_end < order.size() && values[order[run_end]] == values[order[run_start]]) ++run_end;
        const double rank = 0.5 * static_cast<double>(run_start + run_end + 1);  // mean of 1-based
        for (std::size_t pos = run_start; pos < run_end; ++pos) ranks[order[pos]] = rank;
        run_start = run_end;
    }
    return ranks;
}

double pearson_correlation(std::span<const double> xs, std::span<const double> ys) {
    require(xs.size() == ys.size(), "pearson_correlation", "vectors of equal length");
    require(xs.size() >= 2, "pearson_correlation", "at least two pairs");
    const double x_mean = mean(xs);
    const double y_mean = mean(ys);
    double sxy = 0.0, sxx = 0.0, syy = 0.0;
    for (std::size_t idx = 0; idx < xs.size(); ++idx) {
        sxy += (xs[idx] - x_mean) * (ys[idx] - y_mean);
        sxx += (xs[idx] - x_mean) * (xs[idx] - x_mean);
        syy += (ys[idx] - y_mean) * (ys[idx] - y_mean);
    }
    if (sxx == 0.0 || syy == 0.0) return k_nan;
    return sxy / std::sqrt(sxx * syy);
}

double spearman_correlation(std::span<const double> xs, std::span<const double> ys) {
    require(xs.size() == ys.size(), "spearman_correlation", "vectors of equal length");
    const std::vector<double> x_ranks = midranks(xs);
    const std::vector<double> y_ranks = midranks(ys);
    return pearson_correlation(x_ranks, y_ranks);
}

std::vector<double> signed_rank_pmf(std::size_t n) {
    const std::size_t max_sum = n * (n + 1) / 2;
    std::vector<double> pmf(max_sum + 1, 0.0);
    pmf[0] = 1.0;
    std::size_t reach = 0;
    for (std::size_t rank = 1; rank <= n; ++rank) {
        reach += rank;
        for (std::size_t sum = reach; sum >= rank; --sum) pmf[sum] = 0.5 * (pmf[sum] + pmf[sum - rank]);
        for (std::size_t sum = 0; sum < rank && sum <= reach; ++sum) pmf[sum] *= 0.5;
    }
    return pmf;
}

double hodges_lehmann(std::span<const double> values) {
    require(!values.empty(), "hodges_lehmann", "at least one value");
    return quantile_of_sorted(walsh_averages_sorted(values), 0.5);
}

Interval hodges_lehmann_interval(std::span<const double> values, double level) {
    require(!values.empty(), "hodges_lehmann_interval", "at least one value");
    require(level > 0.0 && level < 1.0, "hodges_lehmann_interval", "a level in (0, 1)");
    const std::vector<double> walsh = walsh_averages_sorted(values);
    const std::size_t n = values.size();
    const std::size_t count = walsh.size();
    const double tail = 0.5 * (1.0 - level);
    // CI = [W_(c+1), W_(M-c)] (1-based order statistics of the M Walsh averages) with c the
    // largest value with P(W+ <= c) <= tail: c averages are dropped from each end.
    std::size_t cut = 0;
    if (n <= 60) {
        const std::vector<double> pmf = signed_rank_pmf(n);
        double cumulative = 0.0;
        for (std::size_t w = 0; w < pmf.size(); ++w) {
            cumulative += pmf[w];
            if (cumulative > tail) break;
            cut = w;
        }
    } else {
        const double n_real = static_cast<double>(n);
        const double centre = n_real * (n_real + 1.0) / 4.0;
        const double spread = std::sqrt(n_real * (n_real + 1.0) * (2.0 * n_real + 1.0) / 24.0);
        cut = static_cast<std::size_t>(
            std::max(0.0, std::floor(centre + normal_quantile(tail) * spread - 0.5)));
    }
    cut = std::min(cut, (count - 1) / 2);
    return {walsh[cut], walsh[count - 1 - cut]};
}

// ---- bootstrap --------------------------------------------------------------------------------

Interval bootstrap_interval(std::span<const double> values,
                            const std::function<double(std::span<const double>)>& statistic,
                            const BootstrapConfig& config) {
    require(!values.empty(), "bootstrap_interval", "at least one value");
    require(config.resamples >= 10, "bootstrap_interval", "at least 10 resamples");
    require(config.level > 0.0 && config.level < 1.0, "bootstrap_interval", "a level in (0, 1)");
    std::mt19937_64 rng(config.seed);
    std::uniform_int_distribution<std::size_t> pick(0, values.size() - 1);
    std::vector<double> resample(values.size());
    std::vector<double> replicates;
    replicates.reserve(config.resamples);
    for (std::size_t resample_idx = 0; resample_idx < config.resamples; ++resample_idx) {
        for (double& slot : resample) slot = values[pick(rng)];
        replicates.push_back(statistic(resample));
    }
    std::sort(replicates.begin(), replicates.end());
    const double tail = 0.5 * (1.0 - config.level);
    return {quantile_of_sorted(replicates, tail), quantile_of_sorted(replicates, 1.0 - tail)};
}

Interval bootstrap_interval_mean(std::span<const double> values, const BootstrapConfig& config) {
    return bootstrap_interval(values, [](std::span<const double> sample) { return mean(sample); }, config);
}

Interval bootstrap_interval_median(std::span<const double> values, const BootstrapConfig& config) {
    return bootstrap_interval(values, [](std::span<const double> sample) { return median(sample); },
                              config);
}

}  // namespace npuopt::eval
