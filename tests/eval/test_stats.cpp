// Reference values were computed independently with mpmath 1.3 at 30 digits (betainc, erfinv,
// findroot on the t CDF) or by hand / exact enumeration, as noted beside each.
#include "core/error.hpp"
#include "eval/stats.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace npuopt::eval;

TEST_CASE("robust summaries of a small sample") {
    const std::vector<double> values{3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0};
    CHECK(mean(values) == doctest::Approx(3.875));
    CHECK(median(values) == doctest::Approx(3.5));
    CHECK(quantile(values, 0.25) == doctest::Approx(1.75));  // R: quantile(x, 0.25, type = 7)
    CHECK(quantile(values, 1.0) == doctest::Approx(9.0));
    CHECK(mad(values) == doctest::Approx(2.0));               // |x - 3.5| = .5 2.5 .5 2.5 1.5 5.5 1.5 2.5
    CHECK(mad_sigma(values) == doctest::Approx(2.0 * 1.482602218505602));
    CHECK(trimmed_mean(values, 0.25) == doctest::Approx(3.5));  // mean of 2 3 4 5
    CHECK(variance(values) == doctest::Approx(7.553571428571429));  // 52.875 / 7
    CHECK(standard_error(values) == doctest::Approx(std::sqrt(7.553571428571429 / 8.0)));
}

TEST_CASE("summaries reject empty input with a message naming the function") {
    const std::vector<double> empty;
    CHECK_THROWS_WITH_AS(median(empty), "median: expected at least one value", npuopt::Error);
    CHECK_THROWS_AS(variance(std::vector<double>{1.0}), npuopt::Error);
    CHECK_THROWS_AS(quantile(std::vector<double>{1.0}, 1.5), npuopt::Error);
}

TEST_CASE("regularized incomplete beta matches mpmath.betainc") {
    CHECK(regularized_incomplete_beta(2.0, 3.0, 0.3) == doctest::Approx(0.3483).epsilon(1e-12));
    CHECK(regularized_incomplete_beta(0.5, 7.5, 0.9) == doctest::Approx(0.999999993289710347894).epsilon(1e-12));
    CHECK(regularized_incomplete_beta(10.0, 20.0, 0.2) == doctest::Approx(0.0492635173042125006).epsilon(1e-11));
    CHECK(regularized_incomplete_beta(3.0, 4.0, 0.0) == 0.0);
    CHECK(regularized_incomplete_beta(3.0, 4.0, 1.0) == 1.0);
}

TEST_CASE("Student t CDF and quantile match mpmath") {
    CHECK(student_t_cdf(2.0, 3.0) == doctest::Approx(0.930337015720578411576).epsilon(1e-12));
    CHECK(student_t_cdf(-1.5, 7.5) == doctest::Approx(0.0872402852932321174).epsilon(1e-12));
    // t_{0.975,10} = 2.228138851986 (every table); t_{0.95,5} = 2.015048373333 (mpmath; the brief's
    // 2.015048372669 is off in the 10th digit).
    CHECK(student_t_quantile(0.975, 10.0) == doctest::Approx(2.22813885198627474840).epsilon(1e-12));
    CHECK(student_t_quantile(0.95, 5.0) == doctest::Approx(2.01504837333302423784).epsilon(1e-12));
    CHECK(student_t_quantile(0.999, 1.0) == doctest::Approx(318.308838985550445922).epsilon(1e-10));
    CHECK(student_t_quantile(0.01, 2.5) == doctest::Approx(-5.35311117303087431580).epsilon(1e-11));
    CHECK(student_t_quantile(0.5, 4.0) == 0.0);
    CHECK(student_t_cdf(student_t_quantile(0.8, 12.0), 12.0) == doctest::Approx(0.8).epsilon(1e-13));
}

TEST_CASE("normal CDF and quantile match mpmath") {
    CHECK(normal_quantile(0.975) == doctest::Approx(1.95996398454005423552).epsilon(1e-14));
    CHECK(normal_quantile(0.3) == doctest::Approx(-0.524400512708040784038).epsilon(1e-13));
    CHECK(normal_quantile(1e-10) == doctest::Approx(-6.36134090240405620470).epsilon(1e-13));
    CHECK(normal_cdf(-3.0) == doctest::Approx(0.00134989803163009452665).epsilon(1e-13));
    CHECK_THROWS_AS(normal_quantile(0.0), npuopt::Error);
}

TEST_CASE("sign test is the exact binomial tail") {
    // 9 of 10 positive: P(X >= 9) = (10 + 1) / 1024.
    CHECK(sign_test_p_value(9, 1, Alternative::greater) == doctest::Approx(11.0 / 1024.0).epsilon(1e-13));
    CHECK(sign_test_p_value(9, 1) == doctest::Approx(22.0 / 1024.0).epsilon(1e-13));
    CHECK(sign_test_p_value(9, 1, Alternative::less) == doctest::Approx(1023.0 / 1024.0).epsilon(1e-13));
    CHECK(sign_test_p_value(5, 5) == 1.0);
    CHECK(sign_test_p_value(0, 0) == 1.0);
    CHECK(binomial_cdf(2, 5, 0.3) == doctest::Approx(0.83692).epsilon(1e-12));  // .16807+.36015+.3087
}

TEST_CASE("Spearman correlation handles ties by mid-ranks") {
    // No ties: 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 6 * 4 / 120 = 0.8.
    CHECK(spearman_correlation(std::vector<double>{1, 2, 3, 4, 5}, std::vector<double>{2, 1, 4, 3, 5}) ==
          doctest::Approx(0.8));
    // Ties in both: Pearson of mid-ranks, computed by hand in Python = 0.8088235294117647.
    CHECK(spearman_correlation(std::vector<double>{10, 20, 20, 30, 40, 50},
                               std::vector<double>{1.5, 1.0, 2.5, 2.5, 4.0, 3.0}) ==
          doctest::Approx(0.8088235294117647).epsilon(1e-13));
    CHECK(midranks(std::vector<double>{5.0, 1.0, 5.0, 3.0}) == std::vector<double>{3.5, 1.0, 3.5, 2.0});
    CHECK(spearman_correlation(std::vector<double>{1, 2, 3}, std::vector<double>{3, 2, 1}) ==
          doctest::Approx(-1.0));
}

TEST_CASE("signed-rank null distribution and Hodges-Lehmann interval") {
    // n = 3: subset sums of {1, 2, 3} give counts 1 1 1 2 1 1 1 over 8.
    const std::vector<double> pmf = signed_rank_pmf(3);
    REQUIRE(pmf.size() == 7);
    CHECK(pmf[3] == doctest::Approx(0.25));
    CHECK(pmf[6] == doctest::Approx(0.125));
    // n = 10, 95%: P(W+ <= 8) = 0.0244 <= 0.025 < P(W+ <= 9), so the interval is the 9th smallest
    // and 9th largest of the 55 Walsh averages (enumerated in Python: 0.15 and 1.95).
    const std::vector<double> data{0.8, -0.3, 1.9, 2.4, 0.1, 1.2, -0.7, 3.1, 0.6, 1.5};
    CHECK(hodges_lehmann(data) == doctest::Approx(1.05));
    const Interval interval = hodges_lehmann_interval(data, 0.95);
    CHECK(interval.lower == doctest::Approx(0.15));
    CHECK(interval.upper == doctest::Approx(1.95));
}

TEST_CASE("bootstrap interval is reproducible from its seed and covers the mean") {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal(5.0, 1.0);
    std::vector<double> sample(40);
    for (double& value : sample) value = normal(rng);
    BootstrapConfig config;
    config.seed = 12345;
    const Interval first = bootstrap_interval_mean(sample, config);
    const Interval again = bootstrap_interval_mean(sample, config);
    CHECK(first.lower == again.lower);
    CHECK(first.upper == again.upper);
    config.seed = 54321;
    const Interval other = bootstrap_interval_mean(sample, config);
    CHECK((other.lower != first.lower || other.upper != first.upper));
    CHECK(first.lower < mean(sample));
    CHECK(first.upper > mean(sample));
    const Interval median_interval = bootstrap_interval_median(sample, config);
    CHECK(median_interval.lower <= median(sample));
    CHECK(median_interval.upper >= median(sample));

    // Coverage over 200 simulated samples of 30 from N(5, 1): nominal 95%, the percentile
    // bootstrap runs a little under; 0.88 is about four binomial standard errors below 0.95.
    std::size_t covered = 0;
    config.resamples = 500;
    for (std::size_t trial = 0; trial < 200; ++trial) {
        std::vector<double> draws(30);
        for (double& value : draws) value = normal(rng);
        config.seed = trial;
        const Interval interval = bootstrap_interval_mean(draws, config);
        covered += interval.lower <= 5.0 && 5.0 <= interval.upper ? 1 : 0;
    }
    MESSAGE("bootstrap 95% coverage over 200 samples: " << static_cast<double>(covered) / 200.0);
    CHECK(covered >= 176);
}

TEST_CASE("least-squares fit matches the closed-form simple regression") {
    // y = a + b x on x = 1..5: closed forms (Python): a = 0.05, b = 0.99, se(a) = 0.198074060223,
    // se(b) = 0.0597215762238, R^2 = 0.989200645943, sigma = 0.188856206323, t(0.975, 3) = 3.18244630528.
    Matrix design(5, 2);
    std::vector<double> response(5);
    const double ys[] = {1.1, 1.9, 3.2, 3.8, 5.1};
    for (int row = 0; row < 5; ++row) {
        const auto row_idx = static_cast<std::size_t>(row);
        design(row_idx, 0) = 1.0;
        design(row_idx, 1) = row + 1.0;
        response[row_idx] = ys[row];
    }
    const LinearFit fit = fit_linear(design, response);
    CHECK(fit.coefficients[0] == doctest::Approx(0.05).epsilon(1e-10));
    CHECK(fit.coefficients[1] == doctest::Approx(0.99).epsilon(1e-12));
    CHECK(fit.standard_errors[0] == doctest::Approx(0.19807406022327448).epsilon(1e-10));
    CHECK(fit.standard_errors[1] == doctest::Approx(0.05972157622389641).epsilon(1e-10));
    CHECK(fit.r_squared == doctest::Approx(0.9892006459426725).epsilon(1e-12));
    CHECK(fit.residual_sigma == doctest::Approx(0.18885620632287065).epsilon(1e-12));
    CHECK(fit.dof == 3);
    CHECK(fit.coefficient_ci95[1].first == doctest::Approx(0.99 - 3.18244630528371 * 0.05972157622389641));
    CHECK(fit.coefficient_ci95[1].second == doctest::Approx(0.99 + 3.18244630528371 * 0.05972157622389641));
}

TEST_CASE("least-squares fit refuses a rank-deficient or too small design") {
    const Matrix collinear = Matrix::from_rows({{1, 2}, {2, 4}, {3, 6}, {4, 8}});
    CHECK_THROWS_WITH_AS(fit_linear(collinear, std::vector<double>(4, 1.0)),
                         "fit_linear: expected X of full column rank", npuopt::Error);
    CHECK_THROWS_AS(fit_linear(Matrix(2, 2, 1.0), std::vector<double>(2, 1.0)), npuopt::Error);
}

TEST_CASE("Wilson interval for a proportion matches the closed form's published values") {
    // 0 of 100 at 95 %: [0, 0.0370]; 5 of 100: [0.0215, 0.1118]; 50 of 100: [0.4038, 0.5962].
    auto [lo0, hi0] = wilson_interval(0, 100);
    CHECK(lo0 < 1e-12);
    CHECK(hi0 == doctest::Approx(0.0370).epsilon(2e-3));
    auto [lo5, hi5] = wilson_interval(5, 100);
    CHECK(lo5 == doctest::Approx(0.0215).epsilon(3e-3));
    CHECK(hi5 == doctest::Approx(0.1118).epsilon(3e-3));
    auto [lo50, hi50] = wilson_interval(50, 100);
    CHECK(lo50 == doctest::Approx(0.4038).epsilon(1e-3));
    CHECK(hi50 == doctest::Approx(0.5962).epsilon(1e-3));
    auto [lo_none, hi_none] = wilson_interval(0, 0);
    CHECK(lo_none == 0.0);
    CHECK(hi_none == 1.0);
    auto [lo99, hi99] = wilson_interval(5, 100, 0.99);
    CHECK(lo99 < lo5);
    CHECK(hi99 > hi5);
}
