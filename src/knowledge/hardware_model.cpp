#include "knowledge/hardware_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"
#include "numerics/expression.hpp"
#include "numerics/least_squares.hpp"

namespace npuopt::knowledge {
namespace {

constexpr double k_infinity = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

numerics::Expression compile(const config::ExpressionText& text) {
    return numerics::Expression({text.text, text.location, text.key});
}

/// A fitted straight line (or plane): coefficients with intervals, R² on the response's scale.
struct Fit {
    numerics::LinearFit summary;
    double r_squared = 0.0;
    std::size_t points = 0;
    double coefficient(std::size_t idx) const { return summary.coefficients.at(idx); }
    double lower(std::size_t idx) const { return summary.coefficient_ci95.at(idx).first; }
    double upper(std::size_t idx) const { return summary.coefficient_ci95.at(idx).second; }
    /// Half-width of the 95% interval relative to the coefficient.
    double relative_half_width(std::size_t idx) const {
        return (upper(idx) - lower(idx)) / 2.0 / std::abs(coefficient(idx));
    }
};

/// Weighted least squares y ≈ X b with weights 1/y (the device's noise is multiplicative, so each
/// point counts by its relative error). nullopt with `why` filled when it cannot be fitted.
std::optional<Fit> fit_relative(const std::vector<std::vector<double>>& rows, const std::vector<double>& response,
                                std::string* why) {
    const std::size_t columns = rows.empty() ? 0 : rows.front().size();
    if (rows.size() <= columns) {
        *why = fmt::format("{} usable points for {} unknowns", rows.size(), columns);
        return std::nullopt;
    }
    numerics::Matrix design(rows.size(), columns);
    std::vector<double> scaled(rows.size(), 1.0);
    for (std::size_t row_idx = 0; row_idx < rows.size(); ++row_idx) {
        const double weight = 1.0 / response[row_idx];
        for (std::size_t column_idx = 0; column_idx < columns; ++column_idx) {
            design(row_idx, column_idx) = rows[row_idx][column_idx] * weight;
        }
    }
    Fit fit;
    try {
        fit.summary = numerics::fit_linear(design, scaled);
    } catch (const Error& error) {
        *why = error.what();
        return std::nullopt;
    }
    double mean = 0.0;
    for (double value : response) mean += value;
    mean /= static_cast<double>(response.size());
    double residual_sum = 0.0, total_sum = 0.0;
    for (std::size_t row_idx = 0; row_idx < rows.size(); ++row_idx) {
        double predicted = 0.0;
        for (std::size_t column_idx = 0; column_idx < columns; ++column_idx) {
            predicted += rows[row_idx][column_idx] * fit.summary.coefficients[column_idx];
        }
        residual_sum += (response[row_idx] - predicted) * (response[row_idx] - predicted);
        total_sum += (response[row_idx] - mean) * (response[row_idx] - mean);
    }
    fit.r_squared = total_sum > 0 ? 1.0 - residual_sum / total_sum : 1.0;
    fit.points = rows.size();
    return fit;
}

bool status_in(PointStatus status, const std::vector<std::string>& names) {
    for (const auto& name : names) {
        if (parse_point_status(name) == status) return true;
    }
    return false;
}

std::string format_number(double value) {
    if (std::isnan(value)) return "?";
    if (!std::isfinite(value)) return value > 0 ? "inf" : "-inf";
    if (value == std::floor(value) && std::abs(value) < 1e15) return fmt::format("{:.0f}", value);
    return fmt::format("{:.4g}", value);
}

/// A parameter of the model is needed by an expression but was not determined.
struct Undetermined {
    std::string name;
};

/// Fits the entries of a suite's `model:` section, in order, into a HardwareModel.
class Fitter {
public:
    Fitter(const MicrobenchRun& run, const config::TargetConfig& target, const config::MicrobenchSuite& suite,
           HardwareModel& model)
        : m_run(run), m_target(target), m_suite(suite), m_model(model) {
        for (const auto& name : config::declared_param_names(suite.model)) m_declared.insert(name);
    }

    void fit_all() {
        for (const auto& entry : m_suite.model) {
            try {
                switch (entry.form) {
                    case config::ModelForm::fact: fit_facts(entry); break;
                    case config::ModelForm::linear: fit_linear(entry); break;
                    case config::ModelForm::penalty_ratio: fit_penalty_ratio(entry); break;
                    case config::ModelForm::saturation: fit_saturation(entry); break;
                    case config::ModelForm::threshold: fit_threshold(entry); break;
                    case config::ModelForm::derived: fit_derived(entry); break;
                }
            } catch (const Undetermined& undetermined) {
                for (const auto& param : entry.params) {
                    if (!m_model.param(param.name)) {
                        missing(param.name, fmt::format("needs {}, which was not determined", undetermined.name));
                    }
                }
            }
        }
        for (const auto& point : m_run.points) {
            if (point.status == PointStatus::failed && !m_claimed.contains(&point)) {
                m_model.findings.push_back(fmt::format("probe {} failed at {}: {}", point.probe,
                                                       nlohmann::json(point.params).dump(), point.message));
            }
        }
    }

private:
    using Extras = std::map<std::string, double>;

    /// A variable's value: `extras`, then the point's `cycles` and params, then the parameters
    /// determined so far, then the target's facts.
    std::optional<double> lookup(const std::string& name, const MicrobenchPoint* point, const Extras& extras) const {
        if (auto found = extras.find(name); found != extras.end()) return found->second;
        if (point) {
            if (name == "cycles") return point->cycles_median;
            if (auto found = point->params.find(name); found != point->params.end()) {
                return static_cast<double>(found->second);
            }
        }
        if (const auto* param = m_model.param(name)) return param->value;
        if (m_declared.contains(name)) throw Undetermined{name};
        if (auto found = m_target.facts.find(name); found != m_target.facts.end()) return found->second.value;
        return std::nullopt;
    }

    double evaluate(const numerics::Expression& expression, const MicrobenchPoint* point, const Extras& extras = {}) const {
        try {
            return expression.evaluate([&](const std::string& name) { return lookup(name, point, extras); });
        } catch (const Error& error) {
            if (!point) throw;
            throw Error(ErrorKind::invalid_config, fmt::format("{} (probe {} at {})", error.what(), point->probe,
                                                               nlohmann::json(point->params).dump()));
        }
    }

    /// `text` with each {name} replaced by that variable's value (unknown names stay as written).
    std::string fill(const std::string& text, const Extras& extras) const {
        std::string out;
        std::size_t pos = 0;
        while (pos < text.size()) {
            const auto open = text.find('{', pos);
            const auto close = open == std::string::npos ? std::string::npos : text.find('}', open);
            if (close == std::string::npos) break;
            out.append(text, pos, open - pos);
            const std::string name = text.substr(open + 1, close - open - 1);
            std::optional<double> value;
            try {
                value = lookup(name, nullptr, extras);
            } catch (const Undetermined&) {
            }
            out += value ? format_number(*value) : text.substr(open, close - open + 1);
            pos = close + 1;
        }
        out.append(text, pos, std::string::npos);
        return out;
    }

    void add(const config::ModelParamSpec& spec, double value, double lower, double upper,
             std::optional<double> r_squared, std::size_t points, const std::string& source, const Extras& extras) {
        HardwareParam param;
        param.name = spec.name;
        param.unit = spec.unit;
        param.value = value;
        param.ci95_lower = std::min(lower, upper);
        param.ci95_upper = std::max(lower, upper);
        param.r_squared = r_squared;
        param.points = points;
        param.source = spec.source.empty() ? source : spec.source;
        param.method = fill(spec.method, extras);
        m_model.params.push_back(std::move(param));
    }

    void missing(const std::string& name, const std::string& why) {
        m_model.missing.push_back(fmt::format("{}: {}", name, why));
    }
    void all_missing(const config::ModelEntrySpec& entry, const std::string& why) {
        for (const auto& param : entry.params) missing(param.name, why);
    }

    std::vector<const MicrobenchPoint*> ok_points(const config::ModelEntrySpec& entry) const {
        std::vector<const MicrobenchPoint*> selected;
        for (const auto* point : m_run.points_measuring(entry.measures)) {
            if (point->status == PointStatus::ok && point->cycles_median > 0) selected.push_back(point);
        }
        return selected;
    }

    std::vector<const MicrobenchPoint*> filtered(const std::vector<const MicrobenchPoint*>& points,
                                                 const std::optional<config::ExpressionText>& where) const {
        if (!where) return points;
        const auto condition = compile(*where);
        std::vector<const MicrobenchPoint*> kept;
        for (const auto* point : points) {
            if (evaluate(condition, point) != 0.0) kept.push_back(point);
        }
        return kept;
    }

    /// max_<param> and min_<param> over `points`.
    static Extras aggregates(const std::vector<const MicrobenchPoint*>& points) {
        Extras extras;
        for (const auto* point : points) {
            for (const auto& [name, raw] : point->params) {
                const double value = static_cast<double>(raw);
                auto [max_it, max_new] = extras.emplace("max_" + name, value);
                if (!max_new) max_it->second = std::max(max_it->second, value);
                auto [min_it, min_new] = extras.emplace("min_" + name, value);
                if (!min_new) min_it->second = std::min(min_it->second, value);
            }
        }
        return extras;
    }

    std::optional<Fit> fit_points(const config::ModelEntrySpec& entry, const std::vector<const MicrobenchPoint*>& points,
                                  std::string* why) const {
        const auto response = compile(*entry.response);
        std::vector<numerics::Expression> terms;
        for (const auto& term : entry.terms) terms.push_back(compile(term));
        std::vector<std::vector<double>> rows;
        std::vector<double> values;
        for (const auto* point : points) {
            std::vector<double> row;
            for (const auto& term : terms) row.push_back(evaluate(term, point));
            rows.push_back(std::move(row));
            values.push_back(evaluate(response, point));
        }
        return fit_relative(rows, values, why);
    }

    static std::string probe_name(const std::vector<const MicrobenchPoint*>& points) {
        return points.empty() ? std::string() : points.front()->probe;
    }

    std::string no_measurements(const config::ModelEntrySpec& entry) const {
        return fmt::format("no {} measurements", entry.measures);
    }

    void fit_facts(const config::ModelEntrySpec& entry) {
        for (const auto& param : entry.params) {
            auto found = m_target.facts.find(param.fact);
            if (found == m_target.facts.end() || !(found->second.value > 0)) {
                missing(param.name, fmt::format("no positive fact '{}' in target.yaml", param.fact));
                continue;
            }
            const double value = found->second.value;
            add(param, value, value, value, std::nullopt, 0, "fact", {});
        }
    }

    void fit_linear(const config::ModelEntrySpec& entry) {
        const auto points = filtered(ok_points(entry), entry.where);
        std::string why;
        auto fit = fit_points(entry, points, &why);
        if (!fit) {
            all_missing(entry, points.empty() ? no_measurements(entry) : why);
            return;
        }
        const std::string source = probe_name(points);
        const Extras extras = aggregates(points);
        for (const auto& param : entry.params) {
            if (param.coefficient) {
                const std::size_t idx = *param.coefficient;
                if (param.reciprocal) {
                    const double value = 1.0 / fit->coefficient(idx);
                    const double lower = fit->upper(idx) > 0 ? 1.0 / fit->upper(idx) : 0.0;
                    const double upper = fit->lower(idx) > 0 ? 1.0 / fit->lower(idx) : k_infinity;
                    add(param, value, lower, upper, fit->r_squared, fit->points, source, extras);
                } else {
                    add(param, fit->coefficient(idx), fit->lower(idx), fit->upper(idx), fit->r_squared, fit->points,
                        source, extras);
                }
            } else if (!param.sum.empty()) {
                // Σ coefficient / divisor, its half-widths combined in quadrature.
                double total = 0.0;
                double spread = 0.0;
                bool first = true;
                for (const auto& share : param.sum) {
                    const double divisor = share.divided_by ? evaluate(compile(*share.divided_by), nullptr, extras) : 1.0;
                    total += fit->coefficient(share.coefficient) / divisor;
                    const double half = fit->relative_half_width(share.coefficient) * fit->coefficient(share.coefficient) / divisor;
                    spread = first ? half : std::hypot(spread, half);
                    first = false;
                }
                const double relative = param.sum.size() == 1 ? std::abs(spread) / total : spread / total;
                if (param.reciprocal) {
                    add(param, 1.0 / total, 1.0 / (total * (1 + relative)),
                        relative < 1 ? 1.0 / (total * (1 - relative)) : k_infinity, fit->r_squared, fit->points, source,
                        extras);
                } else {
                    add(param, total, total * (1 - relative), total * (1 + relative), fit->r_squared, fit->points,
                        source, extras);
                }
            } else if (param.ratio) {
                const auto [numerator, denominator] = *param.ratio;
                const double ratio = fit->coefficient(numerator) / fit->coefficient(denominator);
                const double relative = std::hypot(fit->relative_half_width(denominator), fit->relative_half_width(numerator));
                add(param, param.plus + ratio, param.plus + ratio * (1 - relative), param.plus + ratio * (1 + relative),
                    fit->r_squared, fit->points, source, extras);
            }
        }
    }

    void fit_penalty_ratio(const config::ModelEntrySpec& entry) {
        const auto points = ok_points(entry);
        const auto base_points = filtered(points, entry.base);
        const auto variant_points = filtered(points, entry.variant);
        std::string why;
        auto base = fit_points(entry, base_points, &why);
        auto variant = fit_points(entry, variant_points, &why);
        if (!base || !variant) {
            all_missing(entry, points.empty() ? no_measurements(entry) : why);
            return;
        }
        for (const auto& param : entry.params) {
            const std::size_t idx = *param.coefficient;
            const double ratio = variant->coefficient(idx) / base->coefficient(idx);
            const double relative = std::hypot(variant->relative_half_width(idx), base->relative_half_width(idx));
            add(param, ratio, ratio * (1 - relative), ratio * (1 + relative), std::min(base->r_squared, variant->r_squared),
                base->points + variant->points, probe_name(points), aggregates(points));
        }
    }

    void fit_saturation(const config::ModelEntrySpec& entry) {
        const auto points = ok_points(entry);
        const auto& param = entry.params.front();
        if (points.empty()) {
            missing(param.name, no_measurements(entry));
            return;
        }
        const auto count = compile(*entry.count);
        const auto rate = compile(*entry.rate);
        std::vector<std::pair<double, double>> throughput;  // (count, rate)
        for (const auto* point : points) {
            const double value = evaluate(rate, point);
            if (std::isfinite(value) && value > 0) throughput.emplace_back(evaluate(count, point), value);
        }
        std::sort(throughput.begin(), throughput.end());
        if (throughput.empty()) {
            missing(param.name, fmt::format("no usable {} point", entry.measures));
            return;
        }
        const double per_unit = throughput.front().second / throughput.front().first;
        std::vector<double> saturated;
        for (const auto& [units, value] : throughput) {
            if (value < entry.knee * units * per_unit) saturated.push_back(value);
        }
        if (saturated.empty()) {
            missing(param.name, fmt::format("{} did not saturate up to a count of {}; at least {:.1f}", entry.measures,
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
        add(param, value, lower, upper, std::nullopt, saturated.size(), probe_name(points),
            {{"saturated", static_cast<double>(saturated.size())}, {"per_unit", per_unit}});
    }

    void fit_threshold(const config::ModelEntrySpec& entry) {
        const auto all = m_run.points_measuring(entry.measures);
        if (all.empty()) {
            all_missing(entry, no_measurements(entry));
            return;
        }
        const auto value_of = compile(*entry.value);
        double largest_pass = k_nan, smallest_fail = k_infinity;
        bool passed = false;
        for (const auto* point : all) {
            if (status_in(point->status, entry.pass)) {
                const double value = evaluate(value_of, point);
                largest_pass = passed ? std::max(largest_pass, value) : value;
                passed = true;
            }
            if (status_in(point->status, entry.fail)) {
                smallest_fail = std::min(smallest_fail, evaluate(value_of, point));
                m_claimed.insert(point);
            }
        }
        const Extras extras = {{"largest_pass", largest_pass}, {"smallest_fail", smallest_fail}};
        for (const auto& param : entry.params) {
            const double value = evaluate(compile(*param.expression), nullptr, extras);
            if (std::isfinite(value)) {
                add(param, value, value, value, std::nullopt, all.size(), all.front()->probe, extras);
            } else if (!passed) {
                missing(param.name, fmt::format("no {} point passed", entry.measures));
            }
        }
        const std::string& finding = std::isfinite(smallest_fail) ? entry.finding_if_fail : entry.finding_if_no_fail;
        if (!finding.empty()) m_model.findings.push_back(fill(finding, extras));
    }

    void fit_derived(const config::ModelEntrySpec& entry) {
        for (const auto& param : entry.params) {
            const auto expression = compile(*param.expression);
            std::vector<const HardwareParam*> inputs;
            bool undetermined = false;
            std::string unknown;
            for (const auto& name : expression.variables()) {
                if (const auto* input = m_model.param(name)) {
                    inputs.push_back(input);
                } else if (m_declared.contains(name)) {
                    undetermined = true;  // its own entry says why
                } else if (!m_target.facts.contains(name)) {
                    unknown = name;
                }
            }
            if (undetermined) continue;
            if (!unknown.empty()) {
                missing(param.name, fmt::format("needs '{}', which is neither a parameter nor a fact of target.yaml", unknown));
                continue;
            }
            auto at = [&](int end) {
                return expression.evaluate([&](const std::string& name) -> std::optional<double> {
                    if (const auto* input = m_model.param(name)) {
                        return end < 0 ? input->ci95_lower : end > 0 ? input->ci95_upper : input->value;
                    }
                    return m_target.facts.at(name).value;
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
                missing(param.name, fmt::format("\"{}\" is not finite", param.expression->text));
                continue;
            }
            add(param, value, at(-1), at(1), r_squared, points, source.empty() ? "fact" : source, {});
        }
    }

    const MicrobenchRun& m_run;
    const config::TargetConfig& m_target;
    const config::MicrobenchSuite& m_suite;
    HardwareModel& m_model;
    std::set<std::string> m_declared;
    std::set<const MicrobenchPoint*> m_claimed;  ///< failures a threshold entry counts as its sweep's end
};

nlohmann::json finite_or_null(double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

double number_or_infinity(const nlohmann::json& json, const char* key) {
    auto found = json.find(key);
    if (found == json.end() || found->is_null()) return k_infinity;
    return found->get<double>();
}


}  // namespace

const HardwareParam* HardwareModel::param(std::string_view name) const {
    for (const auto& entry : params) {
        if (entry.name == name) return &entry;
    }
    return nullptr;
}

double HardwareModel::value(std::string_view name, double fallback) const {
    const auto* found = param(name);
    return found ? found->value : fallback;
}

void HardwareModel::set(std::string_view name, double value, std::string unit, std::string source) {
    HardwareParam entry;
    entry.name = std::string(name);
    entry.unit = std::move(unit);
    entry.value = entry.ci95_lower = entry.ci95_upper = value;
    entry.source = std::move(source);
    entry.method = "given";
    for (auto& existing : params) {
        if (existing.name == name) {
            existing = std::move(entry);
            return;
        }
    }
    params.push_back(std::move(entry));
}

std::optional<double> HardwareModel::variable(std::string_view name) const {
    constexpr std::string_view k_prefix = "hw.";
    if (!name.starts_with(k_prefix)) return std::nullopt;
    std::string_view rest = name.substr(k_prefix.size());
    int end = 0;
    if (rest.ends_with(".upper")) {
        end = 1;
        rest.remove_suffix(6);
    } else if (rest.ends_with(".lower")) {
        end = -1;
        rest.remove_suffix(6);
    }
    const auto* found = param(rest);
    if (!found) return 0.0;
    if (end > 0) return std::max(found->value, found->ci95_upper);
    if (end < 0) return std::min(found->value, found->ci95_lower);
    return found->value;
}

double HardwareModel::weight_movement_min_cycles(double bytes) const {
    if (!cost_model || !cost_model->weight_movement_min) return 0.0;
    const auto& text = *cost_model->weight_movement_min;
    const numerics::Expression expression({text.text, text.location, text.key});
    const double cycles = expression.evaluate([&](const std::string& name) -> std::optional<double> {
        if (name == "min_bytes") return bytes;
        return variable(name);
    });
    return std::isfinite(cycles) && cycles > 0 ? cycles : 0.0;
}

HardwareModel fit_hardware_model(const MicrobenchRun& run, const config::TargetConfig& target,
                                 const config::MicrobenchSuite& suite) {
    HardwareModel model;
    model.target = run.target.empty() ? target.name : run.target;
    model.toolchain_version = run.toolchain_version;
    model.cost_model = target.cost_model;
    Fitter(run, target, suite, model).fit_all();
    return model;
}

nlohmann::json to_json(const HardwareModel& model) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& param : model.params) {
        params.push_back({{"name", param.name},
                          {"unit", param.unit},
                          {"value", finite_or_null(param.value)},
                          {"ci95_lower", finite_or_null(param.ci95_lower)},
                          {"ci95_upper", finite_or_null(param.ci95_upper)},
                          {"r_squared", param.r_squared ? nlohmann::json(*param.r_squared) : nlohmann::json(nullptr)},
                          {"points", param.points},
                          {"source", param.source},
                          {"method", param.method}});
    }
    return {{"target", model.target},         {"toolchain_version", model.toolchain_version},
            {"params", params},               {"findings", model.findings},
            {"missing", model.missing}};
}

HardwareModel hardware_model_from_json(const nlohmann::json& json) {
    try {
        HardwareModel model;
        model.target = json.at("target").get<std::string>();
        model.toolchain_version = json.value("toolchain_version", "");
        for (const auto& item : json.at("params")) {
            HardwareParam param;
            param.name = item.at("name").get<std::string>();
            param.unit = item.value("unit", "");
            param.value = number_or_infinity(item, "value");
            const double lower =
                item.contains("ci95_lower") && !item.at("ci95_lower").is_null() ? item.at("ci95_lower").get<double>() : 0.0;
            const double upper = number_or_infinity(item, "ci95_upper");
            param.ci95_lower = std::min(lower, upper);
            param.ci95_upper = std::max(lower, upper);
            if (item.contains("r_squared") && !item.at("r_squared").is_null()) param.r_squared = item.at("r_squared").get<double>();
            param.points = item.value("points", std::size_t{0});
            param.source = item.value("source", "");
            param.method = item.value("method", "");
            model.params.push_back(std::move(param));
        }
        model.findings = json.value("findings", std::vector<std::string>{});
        model.missing = json.value("missing", std::vector<std::string>{});
        return model;
    } catch (const nlohmann::json::exception& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("hardware model JSON: {}", error.what()));
    }
}

std::vector<store::KnowledgeEntry> hardware_knowledge_entries(const HardwareModel& model, const MicrobenchRun& run,
                                                              std::optional<std::int64_t> toolchain_version_id) {
    std::vector<store::KnowledgeEntry> entries;
    auto entry = [&](std::string kind, std::string key, std::string text, std::optional<double> value,
                     nlohmann::json evidence) {
        store::KnowledgeEntry item;
        item.target = model.target;
        item.kind = std::move(kind);
        item.key = std::move(key);
        item.text = std::move(text);
        item.value = value;
        item.evidence_json = evidence.dump();
        item.toolchain_version_id = toolchain_version_id;
        entries.push_back(std::move(item));
    };
    for (const auto& param : model.params) {
        nlohmann::json evidence = to_json(model).at("params").at(&param - model.params.data());
        evidence["toolchain_version"] = model.toolchain_version;
        entry("hardware_param", param.name,
              fmt::format("{} = {:.4g} {} (95% CI {:.4g} .. {:.4g}{}); {}", param.name, param.value, param.unit,
                          param.ci95_lower, param.ci95_upper,
                          param.r_squared ? fmt::format(", R² {:.4f}", *param.r_squared) : std::string(), param.method),
              param.value, evidence);
    }
    for (const auto& finding : model.findings) {
        entry("runtime_finding", fmt::format("microbench:{}", entries.size()), finding, std::nullopt,
              {{"toolchain_version", model.toolchain_version}});
    }
    for (const auto& point : run.points) {
        entry("measurement", fmt::format("{}:{}", point.probe, nlohmann::json(point.params).dump()),
              fmt::format("{} {} {}: {}", point.probe, nlohmann::json(point.params).dump(), point_status_name(point.status),
                          point.status == PointStatus::ok ? fmt::format("median {:.0f} cycles (MAD {:.0f})",
                                                                        point.cycles_median, point.cycles_mad)
                                                          : point.message),
              point.status == PointStatus::ok ? std::optional<double>(point.cycles_median) : std::nullopt,
              to_json(point));
    }
    entry("hardware_model", model.target, to_json(model).dump(), std::nullopt,
          {{"toolchain_version", model.toolchain_version}, {"suite_file", run.suite_file.string()},
           {"wall_secs", run.wall_secs}});
    return entries;
}

std::size_t record_hardware_model(store::CampaignStore& store, const HardwareModel& model, const MicrobenchRun& run) {
    const std::int64_t version_id =
        store.record_toolchain_version(model.target, run.toolchain_name, model.toolchain_version);
    auto entries = hardware_knowledge_entries(model, run, version_id);
    for (const auto& entry : entries) store.record_knowledge(entry);
    return entries.size();
}

std::optional<HardwareModel> load_hardware_model(store::CampaignStore& store, const config::TargetConfig& target_config,
                                                 const std::string& toolchain_version) {
    const std::string& target = target_config.name;
    std::optional<std::int64_t> version_id;
    for (const auto& version : store.list_toolchain_versions()) {
        if (version.target == target && version.version == toolchain_version) version_id = version.id;
    }
    if (!version_id) return std::nullopt;
    std::optional<HardwareModel> newest;
    std::int64_t newest_id = -1;
    for (const auto& entry : store.list_knowledge(target, false)) {
        if (entry.kind == "hardware_model" && entry.toolchain_version_id == version_id && entry.id > newest_id) {
            newest = hardware_model_from_json(nlohmann::json::parse(entry.text));
            newest_id = entry.id;
        }
    }
    if (newest) newest->cost_model = target_config.cost_model;
    return newest;
}

}  // namespace npuopt::knowledge
