#pragma once
// The speed-of-light guard: the fewest cycles a kernel can take on the measured hardware, and the
// check that rejects a timing below it. A number that cannot be true is an error (DESIGN.md):
// a candidate faster than the bound is recorded as suspect and never accepted.
//
//   bound = max over the target's declared parts (knowledge/<target>/cost_model.yaml,
//           `speed_of_light:`), each an expression over min_bytes, min_macs and hw.*
//   suspect when measured < tolerance x bound

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config/target_config.hpp"
#include "knowledge/hardware_model.hpp"

namespace npuopt::eval {

/// Bytes per element of a kernels.yaml dtype (fp4_e2m1 = 0.5); nullopt for an unknown dtype.
std::optional<double> dtype_bytes(std::string_view dtype);

/// Bytes a kernel must move at least: every weight, input and output tensor once, at `shape`
/// (kernel.shape where `shape` lacks a variable). State tensors (a ring cache) are touched only
/// in part and not counted. Throws Error(invalid_input) for an unknown dtype or dimension.
double kernel_min_bytes(const config::KernelSpec& kernel, const std::map<std::string, std::int64_t>& shape);

/// The bound and where it comes from.
struct SpeedOfLight {
    double cycles = 0.0;                  ///< max of the parts; 0 when nothing is known
    std::map<std::string, double> parts;  ///< cycles of each declared part (0: unknown)
    std::string dominant;                 ///< the part that sets the bound ("" when none)
    std::string basis;                    ///< in words, for reasons
};

/// The bound for `min_bytes` (and `min_macs` when > 0) from the fitted model and the target's
/// declared speed-of-light parts. A part that is not finite or not positive (a parameter the
/// model lacks) is unknown, 0. Zero cycles without a model or a declaration.
SpeedOfLight speed_of_light(const knowledge::HardwareModel* model, double min_bytes, double min_macs = 0.0);

/// Default share of the bound below which a timing is impossible (noise and fit slack).
inline constexpr double k_speed_of_light_tolerance = 0.97;

/// Why `measured_cycles` cannot be true, or nullopt when it can (or the bound is unknown).
std::optional<std::string> speed_of_light_violation(double measured_cycles, const SpeedOfLight& bound,
                                                    double tolerance = k_speed_of_light_tolerance);

}  // namespace npuopt::eval
