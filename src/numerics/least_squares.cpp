#include "numerics/least_squares.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "core/error.hpp"

namespace npuopt::numerics {
namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

void require(bool condition, const char* function, const char* expectation) {
    if (!condition) throw Error(ErrorKind::invalid_input, std::string(function) + ": expected " + expectation);
}

Eigen::MatrixXd to_eigen(const Matrix& matrix) {
    Eigen::MatrixXd result(static_cast<Eigen::Index>(matrix.rows), static_cast<Eigen::Index>(matrix.cols));
    for (std::size_t row = 0; row < matrix.rows; ++row) {
        for (std::size_t col = 0; col < matrix.cols; ++col) {
            result(static_cast<Eigen::Index>(row), static_cast<Eigen::Index>(col)) = matrix(row, col);
        }
    }
    return result;
}

Eigen::VectorXd to_eigen(std::span<const double> values) {
    Eigen::VectorXd result(static_cast<Eigen::Index>(values.size()));
    for (std::size_t idx = 0; idx < values.size(); ++idx) result(static_cast<Eigen::Index>(idx)) = values[idx];
    return result;
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

}  // namespace

Matrix Matrix::from_rows(const std::vector<std::vector<double>>& row_values) {
    Matrix matrix(row_values.size(), row_values.empty() ? 0 : row_values.front().size());
    for (std::size_t row = 0; row < matrix.rows; ++row) {
        require(row_values[row].size() == matrix.cols, "Matrix::from_rows", "rows of equal length");
        for (std::size_t col = 0; col < matrix.cols; ++col) matrix(row, col) = row_values[row][col];
    }
    return matrix;
}

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

// ---- least squares ----------------------------------------------------------------------------


LinearFit fit_linear(const Matrix& design_matrix, std::span<const double> response_values) {
    require(design_matrix.rows == response_values.size(), "fit_linear", "as many rows in X as values in y");
    require(design_matrix.cols >= 1, "fit_linear", "at least one column in X");
    require(design_matrix.rows > design_matrix.cols, "fit_linear", "more rows than columns");
    const Eigen::MatrixXd design = to_eigen(design_matrix);
    const Eigen::VectorXd response = to_eigen(response_values);
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(design);
    require(qr.rank() == design.cols(), "fit_linear", "X of full column rank");

    LinearFit fit;
    const Eigen::VectorXd coefficients = qr.solve(response);
    const Eigen::VectorXd residuals = response - design * coefficients;
    fit.dof = static_cast<std::size_t>(design.rows() - design.cols());
    const double ssr = residuals.squaredNorm();
    fit.residual_sigma = std::sqrt(ssr / static_cast<double>(fit.dof));
    const double sst = (response.array() - response.mean()).square().sum();
    fit.r_squared = sst > 0.0 ? 1.0 - ssr / sst : 1.0;

    const Eigen::MatrixXd gram = design.transpose() * design;
    const Eigen::MatrixXd gram_inverse =
        gram.ldlt().solve(Eigen::MatrixXd::Identity(design.cols(), design.cols()));
    const Eigen::VectorXd standard_errors =
        (gram_inverse.diagonal().array() * ssr / static_cast<double>(fit.dof)).sqrt();
    const double t_critical = student_t_quantile(0.975, static_cast<double>(fit.dof));
    for (Eigen::Index idx = 0; idx < design.cols(); ++idx) {
        const double half_width = t_critical * standard_errors(idx);
        fit.coefficients.push_back(coefficients(idx));
        fit.standard_errors.push_back(standard_errors(idx));
        fit.coefficient_ci95.emplace_back(coefficients(idx) - half_width, coefficients(idx) + half_width);
    }
    return fit;
}

std::vector<double> solve_ridge(const Matrix& design_matrix, std::span<const double> response, double lambda) {
    require(design_matrix.rows == response.size(), "solve_ridge", "as many rows in X as values in y");
    const Eigen::MatrixXd design = to_eigen(design_matrix);
    Eigen::MatrixXd normal = design.transpose() * design;
    normal.diagonal().array() += lambda;
    const Eigen::VectorXd weights = normal.ldlt().solve(design.transpose() * to_eigen(response));
    return std::vector<double>(weights.data(), weights.data() + weights.size());
}

}  // namespace npuopt::numerics
