#include "knowledge/fit_plots.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"
#include "knowledge/model_fit.hpp"

namespace npuopt::knowledge {

namespace {

using model_fit::compile;
using model_fit::FitContext;

constexpr std::size_t k_max_groups = 8;

std::vector<std::string> param_names(const config::ModelEntrySpec& entry) {
    std::vector<std::string> names;
    for (const auto& param : entry.params) names.push_back(param.name);
    return names;
}

std::string point_title(const MicrobenchPoint& point, double measured, double fitted) {
    std::string params;
    for (const auto& [name, value] : point.params) params += fmt::format("{}{}={}", params.empty() ? "" : " ", name, value);
    return fmt::format("{}: measured {:.4g}, fitted {:.4g}", params, measured, fitted);
}

/// Each parameter's distinct values over `points`.
std::map<std::string, std::set<double>> swept_values(const std::vector<const MicrobenchPoint*>& points) {
    std::map<std::string, std::set<double>> values;
    for (const auto* point : points) {
        for (const auto& [name, value] : point->params) values[name].insert(static_cast<double>(value));
    }
    return values;
}

/// The swept parameter with the most distinct values over `points` ("" when none varies).
std::string x_parameter(const std::vector<const MicrobenchPoint*>& points) {
    std::string best;
    std::size_t most = 1;
    for (const auto& [name, seen] : swept_values(points)) {
        if (seen.size() > most) {
            most = seen.size();
            best = name;
        }
    }
    return best;
}

/// The other varying parameters of `point`, as a group label.
std::string group_label(const MicrobenchPoint& point, const std::string& x_name, const std::set<std::string>& varying) {
    std::string label;
    for (const auto& [name, value] : point.params) {
        if (name == x_name || !varying.contains(name)) continue;
        label += fmt::format("{}{}={}", label.empty() ? "" : ", ", name, value);
    }
    return label;
}

std::set<std::string> varying_parameters(const std::vector<const MicrobenchPoint*>& points) {
    std::set<std::string> varying;
    for (const auto& [name, seen] : swept_values(points)) {
        if (seen.size() > 1) varying.insert(name);
    }
    return varying;
}

/// Groups of a linear fit over `points`: measured response and Σ coefficient × term at each
/// point, against the most-swept parameter, one group per combination of the others. With more
/// groups than a plot can tell apart, one group against the fitted value (measured vs fitted).
void add_linear_groups(const FitContext& context, const config::ModelEntrySpec& entry,
                       const std::vector<const MicrobenchPoint*>& points, const model_fit::Fit& fit,
                       const std::string& prefix, bool against_fitted, FitPlot& plot) {
    const auto response = compile(*entry.response);
    std::vector<numerics::Expression> terms;
    for (const auto& term : entry.terms) terms.push_back(compile(term));
    const std::string x_name = plot.x_label;
    const std::set<std::string> varying = varying_parameters(points);
    std::map<std::string, FitPlotGroup> groups;
    for (const auto* point : points) {
        const double measured = context.evaluate(response, point);
        double fitted = 0.0;
        for (std::size_t idx = 0; idx < terms.size(); ++idx) fitted += fit.coefficient(idx) * context.evaluate(terms[idx], point);
        const auto x_value = point->params.find(x_name);
        const double x = !against_fitted && x_value != point->params.end() ? static_cast<double>(x_value->second) : fitted;
        const std::string label = against_fitted ? std::string() : group_label(*point, x_name, varying);
        FitPlotGroup& group = groups[label];
        group.label = prefix.empty() ? label : (label.empty() ? prefix : prefix + ", " + label);
        group.measured.push_back({x, measured, point_title(*point, measured, fitted)});
        group.fitted.push_back({x, fitted, point_title(*point, measured, fitted)});
    }
    for (auto& [label, group] : groups) {
        auto by_x = [](const FitPlotPoint& a, const FitPlotPoint& b) { return a.x < b.x; };
        std::sort(group.measured.begin(), group.measured.end(), by_x);
        std::sort(group.fitted.begin(), group.fitted.end(), by_x);
        plot.groups.push_back(std::move(group));
    }
}

std::optional<FitPlot> linear_plot(const FitContext& context, const config::ModelEntrySpec& entry) {
    const auto points = context.filtered(context.ok_points(entry), entry.where);
    std::string why;
    const auto fit = context.fit_points(entry, points, &why);
    if (!fit) return std::nullopt;
    FitPlot plot;
    plot.form = "linear";
    plot.probe = entry.measures;
    plot.params = param_names(entry);
    plot.r_squared = fit->r_squared;
    plot.y_label = entry.response->text;
    plot.x_label = x_parameter(points);
    add_linear_groups(context, entry, points, *fit, "", false, plot);
    if (plot.groups.size() > k_max_groups || plot.x_label.empty()) {  // every point against its fitted value
        plot.groups.clear();
        add_linear_groups(context, entry, points, *fit, "", true, plot);
        plot.x_label = "fitted " + entry.response->text;
    }
    return plot;
}

std::optional<FitPlot> penalty_plot(const FitContext& context, const config::ModelEntrySpec& entry) {
    const auto points = context.ok_points(entry);
    const auto base_points = context.filtered(points, entry.base);
    const auto variant_points = context.filtered(points, entry.variant);
    std::string why;
    const auto base = context.fit_points(entry, base_points, &why);
    const auto variant = context.fit_points(entry, variant_points, &why);
    if (!base || !variant) return std::nullopt;
    FitPlot plot;
    plot.form = "penalty_ratio";
    plot.probe = entry.measures;
    plot.params = param_names(entry);
    plot.r_squared = std::min(base->r_squared, variant->r_squared);
    plot.y_label = entry.response->text;
    plot.x_label = x_parameter(points);
    add_linear_groups(context, entry, base_points, *base, entry.base->text, false, plot);
    add_linear_groups(context, entry, variant_points, *variant, entry.variant->text, false, plot);
    if (plot.groups.size() > k_max_groups || plot.x_label.empty()) {
        plot.groups.clear();
        add_linear_groups(context, entry, base_points, *base, entry.base->text, true, plot);
        add_linear_groups(context, entry, variant_points, *variant, entry.variant->text, true, plot);
        plot.x_label = "fitted " + entry.response->text;
    }
    return plot;
}

std::optional<FitPlot> saturation_plot(const FitContext& context, const config::ModelEntrySpec& entry,
                                       const HardwareModel& model) {
    const auto points = context.ok_points(entry);
    if (points.empty() || entry.params.empty()) return std::nullopt;
    const auto count = compile(*entry.count);
    const auto rate = compile(*entry.rate);
    FitPlot plot;
    plot.form = "saturation";
    plot.probe = entry.measures;
    plot.params = param_names(entry);
    plot.x_label = entry.count->text;
    plot.y_label = entry.rate->text;
    FitPlotGroup group;
    for (const auto* point : points) {
        const double y = context.evaluate(rate, point);
        if (!std::isfinite(y) || y <= 0) continue;
        const double x = context.evaluate(count, point);
        group.measured.push_back({x, y, point_title(*point, y, y)});
    }
    if (group.measured.empty()) return std::nullopt;
    std::sort(group.measured.begin(), group.measured.end(),
              [](const FitPlotPoint& a, const FitPlotPoint& b) { return a.x < b.x; });
    plot.groups.push_back(std::move(group));
    if (const auto* param = model.param(entry.params.front().name)) {
        plot.level = param->value;
        plot.level_label = param->name;
    }
    return plot;
}

}  // namespace

std::vector<FitPlot> fit_plots(const MicrobenchRun& run, const config::TargetConfig& target,
                               const config::MicrobenchSuite& suite, const HardwareModel& model) {
    HardwareModel known = model;  // expressions read the parameters determined by earlier entries
    FitContext context(run, target, suite, known);
    std::vector<FitPlot> plots;
    for (const auto& entry : suite.model) {
        try {
            std::optional<FitPlot> plot;
            switch (entry.form) {
                case config::ModelForm::linear: plot = linear_plot(context, entry); break;
                case config::ModelForm::penalty_ratio: plot = penalty_plot(context, entry); break;
                case config::ModelForm::saturation: plot = saturation_plot(context, entry, model); break;
                default: break;
            }
            if (plot && !plot->groups.empty()) plots.push_back(std::move(*plot));
        } catch (const model_fit::Undetermined&) {
            // an expression needs a parameter the model does not have: no plot for this entry
        } catch (const Error&) {
        }
    }
    return plots;
}

std::optional<MicrobenchRun> load_microbench_run(store::CampaignStore& store, const std::string& target,
                                                 std::int64_t toolchain_version_id) {
    return microbench_run_of(store.list_knowledge(target, true), target, toolchain_version_id);
}

std::optional<MicrobenchRun> microbench_run_of(const std::vector<store::KnowledgeEntry>& entries,
                                               const std::string& target, std::int64_t toolchain_version_id) {
    std::map<std::string, std::pair<std::int64_t, nlohmann::json>> newest;  // key → (entry id, point)
    for (const auto& entry : entries) {
        if (entry.kind != "measurement" || entry.toolchain_version_id != toolchain_version_id) continue;
        nlohmann::json point = nlohmann::json::parse(entry.evidence_json, nullptr, false);
        if (!point.is_object()) continue;
        auto& slot = newest[entry.key];
        if (entry.id > slot.first) slot = {entry.id, std::move(point)};
    }
    if (newest.empty()) return std::nullopt;
    nlohmann::json points = nlohmann::json::array();
    for (auto& [key, value] : newest) points.push_back(std::move(value.second));
    nlohmann::json run = {{"target", target}, {"points", points}};
    try {
        return microbench_run_from_json(run);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace npuopt::knowledge
