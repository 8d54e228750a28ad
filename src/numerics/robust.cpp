#include "numerics/robust.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace npuopt::numerics {
namespace {

void require(bool condition, const char* function, const char* expectation) {
    if (!condition) throw Error(ErrorKind::invalid_input, std::string(function) + ": expected " + expectation);
}

}  // namespace

double quantile_of_sorted(const std::vector<double>& sorted, double prob) {
    const double position = prob * static_cast<double>(sorted.size() - 1);
    const auto lower_idx = static_cast<std::size_t>(std::floor(position));
    const std::size_t upper_idx = std::min(lower_idx + 1, sorted.size() - 1);
    const double weight = position - static_cast<double>(lower_idx);
    return sorted[lower_idx] + weight * (sorted[upper_idx] - sorted[lower_idx]);
}

std::vector<double> sorted_copy(std::span<const double> values) {
    std::vector<double> sorted(values.begin(), values.end());
    std::sort(sorted.begin(), sorted.end());
    return sorted;
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

}  // namespace npuopt::numerics
