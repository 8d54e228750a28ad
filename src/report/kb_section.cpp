#include "report/kb_section.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report/svg_plot.hpp"

namespace npuopt::report {

namespace {

constexpr const char* k_not_available =
    "Knowledge-base figures are not available: the report was written without the campaign's target.";

std::string number(double value) {
    if (!std::isfinite(value)) return value > 0 ? "∞" : "-";
    return fmt::format("{:.4g}", value);
}

std::string interval_text(const knowledge::HardwareParam& param) {
    if (param.ci95_lower == param.value && param.ci95_upper == param.value) return "exact";
    return fmt::format("[{}, {}]", number(param.ci95_lower), number(param.ci95_upper));
}

std::string r_squared_text(const std::optional<double>& r_squared) {
    return r_squared ? fmt::format("{:.4f}", *r_squared) : std::string("-");
}

bool any_positive_only(const knowledge::FitPlot& plot, bool x) {
    for (const auto& group : plot.groups) {
        for (const auto* points : {&group.measured, &group.fitted}) {
            for (const auto& point : *points) {
                if ((x ? point.x : point.y) <= 0) return false;
            }
        }
    }
    return true;
}

/// Log axes when the values are positive and span more than a factor of 50.
bool wide_range(const knowledge::FitPlot& plot, bool x) {
    if (!any_positive_only(plot, x)) return false;
    double low = INFINITY, high = 0.0;
    for (const auto& group : plot.groups) {
        for (const auto& point : group.measured) {
            const double value = x ? point.x : point.y;
            low = std::min(low, value);
            high = std::max(high, value);
        }
    }
    return high > 50.0 * low;
}

std::string caption(const knowledge::FitPlot& plot, const campaign::KbFigures& kb) {
    std::vector<std::string> parts;
    for (const auto& name : plot.params) {
        auto found = std::find_if(kb.params.begin(), kb.params.end(),
                                  [&](const knowledge::HardwareParam& param) { return param.name == name; });
        if (found == kb.params.end()) {
            parts.push_back(fmt::format("{} not determined", name));
        } else {
            parts.push_back(fmt::format("{} = {} {} (95% {})", name, number(found->value), found->unit,
                                        interval_text(*found)));
        }
    }
    return fmt::format("{} fit of {}: {}; R² {}", plot.form, plot.probe, fmt::join(parts, "; "),
                       r_squared_text(plot.r_squared));
}

}  // namespace

std::string fit_plot_svg(const knowledge::FitPlot& plot) {
    XyPlot svg("kb-fit", fmt::format("{}: {} against {}", plot.probe, plot.y_label, plot.x_label),
               {plot.x_label, wide_range(plot, true)}, {plot.y_label, wide_range(plot, false)});
    svg.set_attributes(fmt::format(R"(data-probe="{}" data-form="{}" data-params="{}")", xml_escape(plot.probe),
                                   xml_escape(plot.form), xml_escape(fmt::format("{}", fmt::join(plot.params, ",")))));
    for (std::size_t idx = 0; idx < plot.groups.size(); ++idx) {
        const auto& group = plot.groups[idx];
        const std::string colour = palette_colour(idx);
        auto convert = [](const std::vector<knowledge::FitPlotPoint>& points) {
            std::vector<PlotPoint> out;
            for (const auto& point : points) out.push_back({point.x, point.y, point.title});
            return out;
        };
        const std::string label = group.label.empty() ? "measured" : group.label;
        svg.add_series(label, colour, convert(group.measured), SeriesStyle::points);
        if (!group.fitted.empty()) svg.add_series("", colour, convert(group.fitted), SeriesStyle::line);
    }
    if (plot.level) svg.add_line({*plot.level, plot.level_label, "fitted-level", "#c0392b"});
    return svg.render();
}

void markdown_kb(std::ostream& markdown, const campaign::KbFigures* kb) {
    markdown << "\n## Knowledge base: the fitted hardware model\n\n";
    if (!kb) {
        markdown << k_not_available << "\n";
        return;
    }
    if (!kb->built) {
        markdown << kb->note << "\n";
        return;
    }
    markdown << fmt::format("Toolchain {}. Each parameter with its 95% interval, the R² of the fit it came from and how "
                            "it was derived.\n\n",
                            kb->toolchain_version);
    markdown << "| parameter | value | unit | 95% interval | R² | points | derived |\n|---|---:|---|---|---:|---:|---|\n";
    for (const auto& param : kb->params) {
        markdown << fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", param.name, number(param.value), param.unit,
                                interval_text(param), r_squared_text(param.r_squared), param.points, param.method);
    }
    for (const auto& missing : kb->missing) markdown << fmt::format("\n- not determined: {}", missing);
    markdown << "\n";
    if (!kb->note.empty()) markdown << "\n" << kb->note << "\n";
    for (const auto& plot : kb->plots) {
        std::size_t points = 0;
        for (const auto& group : plot.groups) points += group.measured.size();
        markdown << fmt::format("\n- plot (HTML report): {} — {} points", caption(plot, *kb), points);
    }
    markdown << "\n";
}

void html_kb(std::ostream& html, const campaign::KbFigures* kb) {
    html << "<h2 id=\"kb\">Knowledge base: the fitted hardware model</h2>\n";
    if (!kb) {
        html << "<p class=\"kb-none\">" << xml_escape(k_not_available) << "</p>\n";
        return;
    }
    if (!kb->built) {
        html << "<p class=\"kb-none\">" << xml_escape(kb->note) << "</p>\n";
        return;
    }
    html << fmt::format(
        "<p>Toolchain {}. Each plot shows the microbenchmark points one model entry was fitted on (dots) and the "
        "fitted curve (lines, one per combination of the other swept parameters); the caption gives the parameters "
        "it determined with their 95% intervals.</p>\n<div class=\"plots\">\n",
        xml_escape(kb->toolchain_version));
    for (const auto& plot : kb->plots) {
        html << "<figure class=\"kb-figure\">" << fit_plot_svg(plot) << "<figcaption>" << xml_escape(caption(plot, *kb))
             << "</figcaption></figure>\n";
    }
    html << "</div>\n";
    if (!kb->note.empty()) html << "<p class=\"kb-note\">" << xml_escape(kb->note) << "</p>\n";
    html << "<table class=\"kb-params\"><tr><th>parameter</th><th>value</th><th>unit</th><th>95% interval</th>"
            "<th>R²</th><th>points</th><th>derived</th></tr>\n";
    for (const auto& param : kb->params) {
        html << fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>"
                            "<td class=\"num\">{}</td><td>{}</td></tr>\n",
                            xml_escape(param.name), number(param.value), xml_escape(param.unit),
                            xml_escape(interval_text(param)), r_squared_text(param.r_squared), param.points,
                            xml_escape(param.method));
    }
    html << "</table>\n";
    for (const auto& missing : kb->missing) html << "<p class=\"kb-missing\">not determined: " << xml_escape(missing) << "</p>\n";
}

}  // namespace npuopt::report
