// The context of a hardware-model fit (model_fit.hpp) and the order it runs the forms in.

#include "knowledge/model_fit.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace npuopt::knowledge::model_fit {

numerics::Expression compile(const config::ExpressionText& text) {
    return numerics::Expression({text.text, text.location, text.key});
}

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
    for (double value : response)
        mean += value;
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

FitContext::FitContext(const MicrobenchRun& run, const config::TargetConfig& target,
                       const config::MicrobenchSuite& suite, HardwareModel& model)
    : m_run(run), m_target(target), m_suite(suite), m_model(model) {
    for (const auto& name : config::declared_param_names(suite.model))
        m_declared.insert(name);
}

std::optional<double> FitContext::lookup(const std::string& name, const MicrobenchPoint* point,
                                         const Extras& extras) const {
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

double FitContext::evaluate(const numerics::Expression& expression, const MicrobenchPoint* point,
                            const Extras& extras) const {
    try {
        return expression.evaluate([&](const std::string& name) { return lookup(name, point, extras); });
    } catch (const Error& error) {
        if (!point) throw;
        throw Error(ErrorKind::invalid_config, fmt::format("{} (probe {} at {})", error.what(), point->probe,
                                                           nlohmann::json(point->params).dump()));
    }
}

std::string FitContext::fill(const std::string& text, const Extras& extras) const {
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

void FitContext::add(const config::ModelParamSpec& spec, double value, double lower, double upper,
                     std::optional<double> r_squared, std::size_t points, const std::string& source,
                     const Extras& extras) {
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

void FitContext::missing(const std::string& name, const std::string& why) {
    m_model.missing.push_back(fmt::format("{}: {}", name, why));
}

void FitContext::all_missing(const config::ModelEntrySpec& entry, const std::string& why) {
    for (const auto& param : entry.params)
        missing(param.name, why);
}

std::vector<const MicrobenchPoint*> FitContext::ok_points(const config::ModelEntrySpec& entry) const {
    std::vector<const MicrobenchPoint*> selected;
    for (const auto* point : m_run.points_measuring(entry.measures)) {
        if (point->status == PointStatus::ok && point->cycles_median > 0) selected.push_back(point);
    }
    return selected;
}

std::vector<const MicrobenchPoint*> FitContext::filtered(const std::vector<const MicrobenchPoint*>& points,
                                                         const std::optional<config::ExpressionText>& where) const {
    if (!where) return points;
    const auto condition = compile(*where);
    std::vector<const MicrobenchPoint*> kept;
    for (const auto* point : points) {
        if (evaluate(condition, point) != 0.0) kept.push_back(point);
    }
    return kept;
}

Extras FitContext::aggregates(const std::vector<const MicrobenchPoint*>& points) {
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

std::optional<Fit> FitContext::fit_points(const config::ModelEntrySpec& entry,
                                          const std::vector<const MicrobenchPoint*>& points, std::string* why) const {
    const auto response = compile(*entry.response);
    std::vector<numerics::Expression> terms;
    for (const auto& term : entry.terms)
        terms.push_back(compile(term));
    std::vector<std::vector<double>> rows;
    std::vector<double> values;
    for (const auto* point : points) {
        std::vector<double> row;
        for (const auto& term : terms)
            row.push_back(evaluate(term, point));
        rows.push_back(std::move(row));
        values.push_back(evaluate(response, point));
    }
    return fit_relative(rows, values, why);
}

std::string FitContext::probe_name(const std::vector<const MicrobenchPoint*>& points) {
    return points.empty() ? std::string() : points.front()->probe;
}

std::string FitContext::no_measurements(const config::ModelEntrySpec& entry) const {
    return fmt::format("no {} measurements", entry.measures);
}

void fit_all(FitContext& context) {
    for (const auto& entry : context.suite().model) {
        try {
            switch (entry.form) {
                case config::ModelForm::fact:
                    fit_facts(context, entry);
                    break;
                case config::ModelForm::linear:
                    fit_linear(context, entry);
                    break;
                case config::ModelForm::penalty_ratio:
                    fit_penalty_ratio(context, entry);
                    break;
                case config::ModelForm::saturation:
                    fit_saturation(context, entry);
                    break;
                case config::ModelForm::threshold:
                    fit_threshold(context, entry);
                    break;
                case config::ModelForm::derived:
                    fit_derived(context, entry);
                    break;
            }
        } catch (const Undetermined& undetermined) {
            for (const auto& param : entry.params) {
                if (!context.model().param(param.name)) {
                    context.missing(param.name, fmt::format("needs {}, which was not determined", undetermined.name));
                }
            }
        }
    }
    for (const auto& point : context.run().points) {
        if (point.status == PointStatus::failed && !context.claimed(&point)) {
            context.model().findings.push_back(fmt::format("probe {} failed at {}: {}", point.probe,
                                                           nlohmann::json(point.params).dump(), point.message));
        }
    }
}

}  // namespace npuopt::knowledge::model_fit
