#include "eval/speed_of_light.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "config/target_loader.hpp"
#include "core/error.hpp"

namespace npuopt::eval {

std::optional<double> dtype_bytes(std::string_view dtype) {
    if (dtype == "fp4_e2m1") return 0.5;
    if (dtype == "fp8_e4m3" || dtype == "fp8_e5m2" || dtype == "i8" || dtype == "u8") return 1.0;
    if (dtype == "bf16" || dtype == "f16" || dtype == "fp16" || dtype == "i16") return 2.0;
    if (dtype == "f32" || dtype == "fp32" || dtype == "i32" || dtype == "u32") return 4.0;
    if (dtype == "f64" || dtype == "i64") return 8.0;
    return std::nullopt;
}

double kernel_min_bytes(const config::KernelSpec& kernel, const std::map<std::string, std::int64_t>& shape) {
    std::map<std::string, std::int64_t> merged = kernel.shape;
    for (const auto& [name, value] : shape) merged[name] = value;
    double bytes = 0.0;
    for (const auto& tensor : kernel.tensors) {
        if (tensor.role == "state") continue;
        const auto element_bytes = dtype_bytes(tensor.dtype);
        if (!element_bytes) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("kernel '{}' tensor '{}': unknown dtype '{}' (expected fp4_e2m1, fp8_e4m3, bf16, "
                                    "f32, i32, ...)",
                                    kernel.name, tensor.name, tensor.dtype));
        }
        double elements = 1.0;
        for (const auto& dim : tensor.shape) {
            std::string why;
            const auto extent = config::evaluate_dimension(dim, merged, &why);
            if (!extent) {
                throw Error(ErrorKind::invalid_input,
                            fmt::format("kernel '{}' tensor '{}': dimension '{}' {} (expected an integer, a shape "
                                        "variable, or a product/quotient of them such as hidden/16)",
                                        kernel.name, tensor.name, dim, why));
            }
            elements *= static_cast<double>(*extent);
        }
        bytes += elements * *element_bytes;
    }
    return bytes;
}

SpeedOfLight speed_of_light(const knowledge::HardwareModel* model, double min_bytes, double min_macs) {
    SpeedOfLight bound;
    if (model == nullptr) {
        bound.basis = "no hardware model";
        return bound;
    }
    double bandwidth = model->sustained_bytes_per_cycle;
    if (const auto* param = model->param("sustained_bytes_per_cycle")) {
        bandwidth = std::max({bandwidth, param->value, param->ci95_upper});
    }
    if (bandwidth > 0.0 && min_bytes > 0.0) {
        bound.bytes_per_cycle = bandwidth;
        bound.memory_cycles = min_bytes / bandwidth;
    }
    if (const auto* macs = model->param("chip_macs_per_cycle"); macs && min_macs > 0.0) {
        const double rate = std::max(macs->value, macs->ci95_upper);
        if (rate > 0.0) bound.compute_cycles = min_macs / rate;
    }
    bound.cycles = std::max(bound.memory_cycles, bound.compute_cycles);
    if (bound.cycles <= 0.0) {
        bound.basis = "the hardware model has no sustained bandwidth";
    } else if (bound.memory_cycles >= bound.compute_cycles) {
        bound.basis = fmt::format("{:.0f} bytes / {:.1f} bytes/cycle sustained", min_bytes, bandwidth);
    } else {
        bound.basis = fmt::format("{:.0f} MACs / chip MAC rate", min_macs);
    }
    return bound;
}

std::optional<std::string> speed_of_light_violation(double measured_cycles, const SpeedOfLight& bound,
                                                    double tolerance) {
    if (bound.cycles <= 0.0) return std::nullopt;
    if (measured_cycles >= tolerance * bound.cycles) return std::nullopt;
    return fmt::format("faster than the speed of light: {:.0f} cycles measured, but the bound is {:.0f} cycles ({}); "
                       "below {:.2f}x the bound the measurement or the kernel is not honest",
                       measured_cycles, bound.cycles, bound.basis, tolerance);
}

}  // namespace npuopt::eval
