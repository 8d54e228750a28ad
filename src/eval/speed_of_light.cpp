#include "eval/speed_of_light.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "numerics/expression.hpp"

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
    if (!model->cost_model || model->cost_model->speed_of_light.empty()) {
        bound.basis = "the target declares no speed-of-light bound";
        return bound;
    }
    auto lookup = [&](const std::string& name) -> std::optional<double> {
        if (name == "min_bytes") return min_bytes;
        if (name == "min_macs") return min_macs;
        return model->variable(name);
    };
    const config::BoundSpec* dominant = nullptr;
    for (const auto& part : model->cost_model->speed_of_light) {
        const numerics::Expression expression({part.expression.text, part.expression.location, part.expression.key});
        double cycles = expression.evaluate(lookup);
        if (!std::isfinite(cycles) || cycles < 0.0) cycles = 0.0;
        bound.parts[part.name] = cycles;
        if (cycles > bound.cycles) {
            bound.cycles = cycles;
            dominant = &part;
        }
    }
    if (!dominant) {
        bound.basis = "the hardware model lacks the parameters of every declared bound";
        return bound;
    }
    bound.dominant = dominant->name;
    // The basis in words: each {variable} replaced by its value.
    const std::string& text = dominant->basis;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const auto open = text.find('{', pos);
        const auto close = open == std::string::npos ? std::string::npos : text.find('}', open);
        if (close == std::string::npos) break;
        bound.basis.append(text, pos, open - pos);
        const auto value = lookup(text.substr(open + 1, close - open - 1));
        if (value) {
            bound.basis += *value == std::floor(*value) ? fmt::format("{:.0f}", *value) : fmt::format("{:.1f}", *value);
        } else {
            bound.basis += text.substr(open, close - open + 1);
        }
        pos = close + 1;
    }
    bound.basis.append(text, pos, std::string::npos);
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
