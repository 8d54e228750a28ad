#pragma once
// Robust summaries over plain spans: median, quantile, median absolute deviation. Empty input
// throws npuopt::Error(invalid_input) naming the function and what it expected.

#include <span>
#include <vector>

namespace npuopt::numerics {

/// Median (mean of the two middle values for even n).
double median(std::span<const double> values);
/// Quantile with linear interpolation between order statistics (Hyndman-Fan type 7, R's default).
double quantile(std::span<const double> values, double prob);
/// Median absolute deviation from the median, unscaled.
double mad(std::span<const double> values);

/// The values in ascending order.
std::vector<double> sorted_copy(std::span<const double> values);
/// The type-7 quantile of values already sorted (non-empty; not checked).
double quantile_of_sorted(const std::vector<double>& sorted, double prob);

}  // namespace npuopt::numerics
