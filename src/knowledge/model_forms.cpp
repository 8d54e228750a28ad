// The model forms a microbenchmark suite's `model:` entries choose from (model_fit.hpp): each
// reads the entry's measurements through the fit context and adds the parameters it determines,
// or says why one could not be determined.

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "knowledge/model_fit.hpp"

namespace npuopt::knowledge::model_fit {

void fit_facts(FitContext& context, const config::ModelEntrySpec& entry) {
    for (const auto& param : entry.params) {
        auto found = context.target().facts.find(param.fact);
        if (found == context.target().facts.end() || !(found->second.value > 0)) {
            context.missing(param.name, fmt::format("no positive fact '{}' in target.yaml", param.fact));
            continue;
        }
        const double value = found->second.value;
        context.add(param, value, value, value, std::nullopt, 0, "fact", {});
    }
}

void fit_linear(FitContext& context, const config::ModelEntrySpec& entry) {
    const auto points = context.filtered(context.ok_points(entry), entry.where);
    std::string why;
    auto fit = context.fit_points(entry, points, &why);
    if (!fit) {
        context.all_missing(entry, points.empty() ? context.no_measurements(entry) : why);
        return;
    }
    const std::string source = context.probe_name(points);
    const Extras extras = context.aggregates(points);
    for (const auto& param : entry.params) {
        if (param.coefficient) {
            const std::size_t idx = *param.coefficient;
            if (param.reciprocal) {
                const double value = 1.0 / fit->coefficient(idx);
                const double lower = fit->upper(idx) > 0 ? 1.0 / fit->upper(idx) : 0.0;
                const double upper = fit->lower(idx) > 0 ? 1.0 / fit->lower(idx) : k_infinity;
                context.add(param, value, lower, upper, fit->r_squared, fit->points, source, extras);
            } else {
                context.add(param, fit->coefficient(idx), fit->lower(idx), fit->upper(idx), fit->r_squared, fit->points,
                            source, extras);
            }
        } else if (!param.sum.empty()) {
            // Σ coefficient / divisor, its half-widths combined in quadrature.
            double total = 0.0;
            double spread = 0.0;
            bool first = true;
            for (const auto& share : param.sum) {
                const double divisor =
                    share.divided_by ? context.evaluate(compile(*share.divided_by), nullptr, extras) : 1.0;
                total += fit->coefficient(share.coefficient) / divisor;
                const double half =
                    fit->relative_half_width(share.coefficient) * fit->coefficient(share.coefficient) / divisor;
                spread = first ? half : std::hypot(spread, half);
                first = false;
            }
            const double relative = param.sum.size() == 1 ? std::abs(spread) / total : spread / total;
            if (param.reciprocal) {
                context.add(param, 1.0 / total, 1.0 / (total * (1 + relative)),
                            relative < 1 ? 1.0 / (total * (1 - relative)) : k_infinity, fit->r_squared, fit->points,
                            source, extras);
            } else {
                context.add(param, total, total * (1 - relative), total * (1 + relative), fit->r_squared, fit->points,
                            source, extras);
            }
        } else if (param.ratio) {
            const auto [numerator, denominator] = *param.ratio;
            const double ratio = fit->coefficient(numerator) / fit->coefficient(denominator);
            const double relative =
                std::hypot(fit->relative_half_width(denominator), fit->relative_half_width(numerator));
            context.add(param, param.plus + ratio, param.plus + ratio * (1 - relative),
                        param.plus + ratio * (1 + relative), fit->r_squared, fit->points, source, extras);
        }
    }
}

void fit_penalty_ratio(FitContext& context, const config::ModelEntrySpec& entry) {
    const auto points = context.ok_points(entry);
    const auto base_points = context.filtered(points, entry.base);
    const auto variant_points = context.filtered(points, entry.variant);
    std::string why;
    auto base = context.fit_points(entry, base_points, &why);
    auto variant = context.fit_points(entry, variant_points, &why);
    if (!base || !variant) {
        context.all_missing(entry, points.empty() ? context.no_measurements(entry) : why);
        return;
    }
    for (const auto& param : entry.params) {
        const std::size_t idx = *param.coefficient;
        const double ratio = variant->coefficient(idx) / base->coefficient(idx);
        const double relative = std::hypot(variant->relative_half_width(idx), base->relative_half_width(idx));
        context.add(param, ratio, ratio * (1 - relative), ratio * (1 + relative),
                    std::min(base->r_squared, variant->r_squared), base->points + variant->points,
                    context.probe_name(points), context.aggregates(points));
    }
}

void fit_saturation(FitContext& context, const config::ModelEntrySpec& entry) {
    const auto points = context.ok_points(entry);
    const auto& param = entry.params.front();
    if (points.empty()) {
        context.missing(param.name, context.no_measurements(entry));
        return;
    }
    const auto count = compile(*entry.count);
    const auto rate = compile(*entry.rate);
    std::vector<std::pair<double, double>> throughput;  // (count, rate)
    for (const auto* point : points) {
        const double value = context.evaluate(rate, point);
        if (std::isfinite(value) && value > 0) throughput.emplace_back(context.evaluate(count, point), value);
    }
    std::sort(throughput.begin(), throughput.end());
    if (throughput.empty()) {
        context.missing(param.name, fmt::format("no usable {} point", entry.measures));
        return;
    }
    const double per_unit = throughput.front().second / throughput.front().first;
    std::vector<double> saturated;
    for (const auto& [units, value] : throughput) {
        if (value < entry.knee * units * per_unit) saturated.push_back(value);
    }
    if (saturated.empty()) {
        context.missing(param.name,
                        fmt::format("{} did not saturate up to a count of {}; at least {:.1f}", entry.measures,
                                    format_number(throughput.back().first), throughput.back().second));
        return;
    }
    double value = 0.0, lower = 0.0, upper = 0.0;
    if (saturated.size() >= 2) {
        auto fit = numerics::fit_linear(numerics::Matrix(saturated.size(), 1, 1.0), saturated);
        value = fit.coefficients[0];
        lower = fit.coefficient_ci95[0].first;
        upper = fit.coefficient_ci95[0].second;
    } else {
        value = lower = upper = saturated.front();
    }
    context.add(param, value, lower, upper, std::nullopt, saturated.size(), context.probe_name(points),
                {{"saturated", static_cast<double>(saturated.size())}, {"per_unit", per_unit}});
}

void fit_threshold(FitContext& context, const config::ModelEntrySpec& entry) {
    const auto all = context.run().points_measuring(entry.measures);
    if (all.empty()) {
        context.all_missing(entry, context.no_measurements(entry));
        return;
    }
    const auto value_of = compile(*entry.value);
    double largest_pass = k_nan, smallest_fail = k_infinity;
    bool passed = false;
    for (const auto* point : all) {
        if (status_in(point->status, entry.pass)) {
            const double value = context.evaluate(value_of, point);
            largest_pass = passed ? std::max(largest_pass, value) : value;
            passed = true;
        }
        if (status_in(point->status, entry.fail)) {
            smallest_fail = std::min(smallest_fail, context.evaluate(value_of, point));
            context.claim(point);
        }
    }
    const Extras extras = {{"largest_pass", largest_pass}, {"smallest_fail", smallest_fail}};
    for (const auto& param : entry.params) {
        const double value = context.evaluate(compile(*param.expression), nullptr, extras);
        if (std::isfinite(value)) {
            context.add(param, value, value, value, std::nullopt, all.size(), all.front()->probe, extras);
        } else if (!passed) {
            context.missing(param.name, fmt::format("no {} point passed", entry.measures));
        }
    }
    const std::string& finding = std::isfinite(smallest_fail) ? entry.finding_if_fail : entry.finding_if_no_fail;
    if (!finding.empty()) context.model().findings.push_back(context.fill(finding, extras));
}

void fit_derived(FitContext& context, const config::ModelEntrySpec& entry) {
    for (const auto& param : entry.params) {
        const auto expression = compile(*param.expression);
        std::vector<const HardwareParam*> inputs;
        bool undetermined = false;
        std::string unknown;
        for (const auto& name : expression.variables()) {
            if (const auto* input = context.model().param(name)) {
                inputs.push_back(input);
            } else if (context.declared().contains(name)) {
                undetermined = true;  // its own entry says why
            } else if (!context.target().facts.contains(name)) {
                unknown = name;
            }
        }
        if (undetermined) continue;
        if (!unknown.empty()) {
            context.missing(param.name,
                            fmt::format("needs '{}', which is neither a parameter nor a fact of target.yaml", unknown));
            continue;
        }
        auto at = [&](int end) {
            return expression.evaluate([&](const std::string& name) -> std::optional<double> {
                if (const auto* input = context.model().param(name)) {
                    return end < 0 ? input->ci95_lower : end > 0 ? input->ci95_upper : input->value;
                }
                return context.target().facts.at(name).value;
            });
        };
        std::optional<double> r_squared;
        std::size_t points = 0;
        std::string source;
        for (const auto* input : inputs) {
            if (input->r_squared) r_squared = r_squared ? std::min(*r_squared, *input->r_squared) : *input->r_squared;
            points += input->points;
            if (input->source != "fact" && source.find(input->source) == std::string::npos) {
                source += (source.empty() ? "" : "+") + input->source;
            }
        }
        const double value = at(0);
        if (!std::isfinite(value)) {
            context.missing(param.name, fmt::format("\"{}\" is not finite", param.expression->text));
            continue;
        }
        context.add(param, value, at(-1), at(1), r_squared, points, source.empty() ? "fact" : source, {});
    }
}

}  // namespace npuopt::knowledge::model_fit
