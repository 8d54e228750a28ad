#include "eval/stats.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
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

std::vector<double> sorted_copy(std::span<const double> values) {
    std::vector<double> sorted(values.begin(), values.end());
    std::sort(sorted.begin(), sorted.end());
    return sorted;
}

double quantile_of_sorted(const std::vector<double>& sorted, double prob) {
    const double position = prob * static_cast<double>(sorted.size() - 1);
    const auto lower_idx = static_cast<std::size_t>(std::floor(position));
    const std::size_t upper_idx = std::min(lower_idx + 1, sorted.size() - 1);
    const double weight = position - static_cast<double>(lower_idx);
    return sorted[lower_idx] + weight * (sorted[upper_idx] - sorted[lower_idx]);
}

// Continued fraction for I_x(a, b), evaluated with the modified Lentz method
// (Numerical Recipes 3rd ed., section 6.4).
double incomplete_beta_fraction(double a, double b, double x) {
    constexpr int k_max_iterations = 500;
    constexpr double k_epsilon = 1e-16;
    constexpr double k_tiny = 1e-300;
    const double sum_ab = a + b;
    const double a_plus_one = a + 1.0;
    const double a_minus_one = a - 1.0;
    double c = 1.0;
    double d = 1.0 - sum_ab * x / a_plus_one;
    if (std::fabs(d) < k_tiny) d = k_tiny;
    d = 1.0 / d;
    double fraction = d;
    for (int m = 1; m <= k_max_iterations; ++m) {
        const double m_real = m;
        const double two_m = 2.0 * m_real;
        double term = m_real * (b - m_real) * x / ((a_minus_one + two_m) * (a + two_m));
        d = 1.0 + term * d;
        if (std::fabs(d) < k_tiny) d = k_tiny;
        c = 1.0 + term / c;
        if (std::fabs(c) < k_tiny) c = k_tiny;
        d = 1.0 / d;
        fraction *= d * c;
        term = -(a + m_real) * (sum_ab + m_real) * x / ((a + two_m) * (a_plus_one + two_m));
        d = 1.0 + term * d;
        if (std::fabs(d) < k_tiny) d = k_tiny;
        c = 1.0 + term / c;
        if (std::fabs(c) < k_tiny) c = k_tiny;
        d = 1.0 / d;
        const double delta = d * c;
        fraction *= delta;
        if (std::fabs(delta - 1.0) < k_epsilon) break;
    }
    return fraction;
}

// Upper tail P(T > t) for t >= 0.
double student_t_upper_tail(double t, double dof) {
    const double x = dof / (dof + t * t);
    return 0.5 * regularized_incomplete_beta(0.5 * dof, 0.5, x);
}

double student_t_pdf(double t, double dof) {
    const double log_norm = std::lgamma(0.5 * (dof + 1.0)) - std::lgamma(0.5 * dof) -
                            0.5 * std::log(dof * std::numbers::pi);
    return std::exp(log_norm - 0.5 * (dof + 1.0) * std::log1p(t * t / dof));
}

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

double median(std::span<const double> values) {
    require(!values.empty(), "median", "at least one value");
    return quantile_of_sorted(sorted_copy(values), 0.5);
}

double quantile(std::span<const double> values, double prob) {
    require(!values.empty(), "quantile", "at least one value");
    require(prob >= 0.0 && prob <= 1.0, "quantile", "a probability in [0, 1]");
    return quantile_of_sorted(sorted_copy(values), prob);
}

double mad(std::span<const double> values) {
    require(!values.empty(), "mad", "at least one value");
    const double centre = median(values);
    std::vector<double> deviations;
    deviations.reserve(values.size());
    for (double value : values) deviations.push_back(std::fabs(value - centre));
    return median(deviations);
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

double regularized_incomplete_beta(double a, double b, double x) {
    require(a > 0.0 && b > 0.0, "regularized_incomplete_beta", "a > 0 and b > 0");
    require(x >= 0.0 && x <= 1.0, "regularized_incomplete_beta", "x in [0, 1]");
    if (x == 0.0) return 0.0;
    if (x == 1.0) return 1.0;
    const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                             b * std::log1p(-x);
    const double front = std::exp(log_front);
    if (x < (a + 1.0) / (a + b + 2.0)) return front * incomplete_beta_fraction(a, b, x) / a;
    return 1.0 - front * incomplete_beta_fraction(b, a, 1.0 - x) / b;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

double normal_quantile(double prob) {
    require(prob > 0.0 && prob < 1.0, "normal_quantile", "a probability in (0, 1)");
    // P. J. Acklam's rational approximation (relative error 1.15e-9).
    static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                   -2.759285104469687e+02, 1.383577518672690e+02,
                                   -3.066479806614716e+01, 2.506628277459239e+00};
    static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                   -1.556989798598866e+02, 6.680131188771972e+01,
                                   -1.328068155288572e+01};
    static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                   -2.400758277161838e+00, -2.549732539343734e+00,
                                   4.374664141464968e+00,  2.938163982698783e+00};
    static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                   2.445134137142996e+00, 3.754408661907416e+00};
    constexpr double k_low = 0.02425;
    double x = 0.0;
    if (prob < k_low) {
        const double q = std::sqrt(-2.0 * std::log(prob));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
    } else if (prob <= 1.0 - k_low) {
        const double q = prob - 0.5;
        const double r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
    } else {
        const double q = std::sqrt(-2.0 * std::log1p(-prob));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
    }
    // Halley steps on the CDF bring it to full double precision. In the upper half the error is
    // measured on the upper tail, which keeps precision where 1 - prob is small.
    for (int step = 0; step < 2; ++step) {
        const double error = prob < 0.5 ? normal_cdf(x) - prob : (1.0 - prob) - normal_cdf(-x);
        const double u = error * std::sqrt(2.0 * std::numbers::pi) * std::exp(0.5 * x * x);
        x -= u / (1.0 + 0.5 * x * u);
    }
    return x;
}

double student_t_cdf(double t, double dof) {
    require(dof > 0.0, "student_t_cdf", "dof > 0");
    if (std::isnan(t)) return k_nan;
    const double upper_tail = student_t_upper_tail(std::fabs(t), dof);
    return t >= 0.0 ? 1.0 - upper_tail : upper_tail;
}

double student_t_quantile(double prob, double dof) {
    require(prob > 0.0 && prob < 1.0, "student_t_quantile", "a probability in (0, 1)");
    require(dof > 0.0, "student_t_quantile", "dof > 0");
    if (prob == 0.5) return 0.0;
    const double tail = prob < 0.5 ? prob : 1.0 - prob;  // solve P(T > t) = tail for t > 0
    double lower = 0.0;
    double upper = std::max(1.0, std::fabs(normal_quantile(tail)));
    while (student_t_upper_tail(upper, dof) > tail) {
        lower = upper;
        upper *= 2.0;
        require(upper < 1e300, "student_t_quantile", "a probability the t distribution reaches");
    }
    double t = 0.5 * (lower + upper);
    for (int iteration = 0; iteration < 200; ++iteration) {
        const double excess = student_t_upper_tail(t, dof) - tail;  // decreasing in t
        if (excess > 0.0) lower = t; else upper = t;
        double next = t + excess / student_t_pdf(t, dof);            // Newton step
        if (!(next > lower && next < upper)) next = 0.5 * (lower + upper);  // fall back to bisection
        if (std::fabs(next - t) <= 1e-15 * std::max(1.0, std::fabs(t))) {
            t = next;
            break;
        }
        t = next;
    }
    return prob < 0.5 ? -t : t;
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

// ---- least squares ----------------------------------------------------------------------------

LinearFit fit_linear(const Eigen::MatrixXd& design, const Eigen::VectorXd& response) {
    require(design.rows() == response.rows(), "fit_linear", "as many rows in X as values in y");
    require(design.cols() >= 1, "fit_linear", "at least one column in X");
    require(design.rows() > design.cols(), "fit_linear", "more rows than columns");
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(design);
    require(qr.rank() == design.cols(), "fit_linear", "X of full column rank");

    LinearFit fit;
    fit.coefficients = qr.solve(response);
    const Eigen::VectorXd residuals = response - design * fit.coefficients;
    fit.dof = static_cast<std::size_t>(design.rows() - design.cols());
    const double ssr = residuals.squaredNorm();
    fit.residual_sigma = std::sqrt(ssr / static_cast<double>(fit.dof));
    const double sst = (response.array() - response.mean()).square().sum();
    fit.r_squared = sst > 0.0 ? 1.0 - ssr / sst : 1.0;

    const Eigen::MatrixXd gram = design.transpose() * design;
    const Eigen::MatrixXd gram_inverse =
        gram.ldlt().solve(Eigen::MatrixXd::Identity(design.cols(), design.cols()));
    fit.standard_errors = (gram_inverse.diagonal().array() * ssr / static_cast<double>(fit.dof)).sqrt();
    const double t_critical = student_t_quantile(0.975, static_cast<double>(fit.dof));
    for (Eigen::Index idx = 0; idx < design.cols(); ++idx) {
        const double half_width = t_critical * fit.standard_errors(idx);
        fit.coefficient_ci95.push_back({fit.coefficients(idx) - half_width, fit.coefficients(idx) + half_width});
    }
    return fit;
}

}  // namespace npuopt::eval
