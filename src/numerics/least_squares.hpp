#pragma once
// Least squares without Eigen in the interface: a dense row-major matrix of plain doubles, an
// ordinary fit with standard errors and 95% intervals, a ridge solve, and the Student t
// quantile the intervals need. Eigen stays inside least_squares.cpp.

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace npuopt::numerics {

/// A dense matrix, row-major: rows are observations, columns unknowns.
struct Matrix {
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::vector<double> values;  ///< rows × cols, row after row

    Matrix() = default;
    Matrix(std::size_t row_count, std::size_t col_count, double fill = 0.0)
        : rows(row_count), cols(col_count), values(row_count * col_count, fill) {}
    /// From a list of equally long rows.
    static Matrix from_rows(const std::vector<std::vector<double>>& row_values);
    double& operator()(std::size_t row, std::size_t col) { return values[row * cols + col]; }
    double operator()(std::size_t row, std::size_t col) const { return values[row * cols + col]; }
};

/// An ordinary least-squares fit y ≈ X b with its uncertainty.
struct LinearFit {
    std::vector<double> coefficients;
    std::vector<double> standard_errors;
    std::vector<std::pair<double, double>> coefficient_ci95;  ///< [lower, upper]: b ± t(0.975, dof) · se
    double r_squared = 0.0;                  ///< 1 - SSR / SST with SST about the mean of y
    double residual_sigma = 0.0;             ///< sqrt(SSR / dof)
    std::size_t dof = 0;                     ///< rows - columns
};

/// Fit y ≈ X b by column-pivoted QR; standard errors from sigma^2 (X^T X)^-1 (LDLT).
/// Needs more rows than columns and X of full column rank (else Error(invalid_input)).
/// Add a column of ones for an intercept.
LinearFit fit_linear(const Matrix& design, std::span<const double> response);

/// argmin |X w - y|² + lambda |w|² (normal equations, LDLT).
std::vector<double> solve_ridge(const Matrix& design, std::span<const double> response, double lambda);

/// Standard normal CDF.
double normal_cdf(double z);
/// Standard normal quantile (Acklam's rational approximation, polished by Halley steps).
double normal_quantile(double prob);
/// Regularized incomplete beta I_x(a, b) (continued fraction, modified Lentz).
double regularized_incomplete_beta(double a, double b, double x);
/// Student t CDF with `dof` degrees of freedom (dof > 0, need not be an integer).
double student_t_cdf(double t, double dof);
/// Student t quantile (safeguarded Newton on the CDF).
double student_t_quantile(double prob, double dof);

}  // namespace npuopt::numerics
