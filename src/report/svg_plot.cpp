#include "report/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace npuopt::report {

namespace {

constexpr const char* k_svg_open =
    R"(<svg xmlns="http://www.w3.org/2000/svg" class="{}" width="{:.0f}" height="{:.0f}" viewBox="0 0 {:.0f} {:.0f}" )"
    R"(font-family="sans-serif" font-size="11"{}>)";

/// A "nice" step (1, 2 or 5 × 10^k) that cuts `span` into about `count` parts.
double nice_step(double span, int count) {
    if (!(span > 0.0)) return 1.0;
    const double raw = span / count;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    const double fraction = raw / magnitude;
    const double nice = fraction <= 1.0 ? 1.0 : fraction <= 2.0 ? 2.0 : fraction <= 5.0 ? 5.0 : 10.0;
    return nice * magnitude;
}

/// Ticks of a linear axis over [low, high].
std::vector<double> linear_ticks(double low, double high) {
    std::vector<double> ticks;
    const double step = nice_step(high - low, 5);
    for (double tick = std::ceil(low / step) * step; tick <= high + step * 1e-9; tick += step) {
        ticks.push_back(std::abs(tick) < step * 1e-9 ? 0.0 : tick);
    }
    return ticks;
}

/// Ticks of a log axis over [low, high] (both > 0): decades, with 2 and 5 between when few.
std::vector<double> log_ticks(double low, double high) {
    const double first_decade = std::floor(std::log10(low));
    const double last_decade = std::ceil(std::log10(high));
    std::vector<double> ticks;
    if (last_decade - first_decade < 1.5) return linear_ticks(low, high);
    const bool with_halves = last_decade - first_decade <= 3.0;
    for (double decade = first_decade; decade <= last_decade; decade += 1.0) {
        for (double mantissa : {1.0, 2.0, 5.0}) {
            if (mantissa != 1.0 && !with_halves) continue;
            const double tick = mantissa * std::pow(10.0, decade);
            if (tick >= low * (1 - 1e-9) && tick <= high * (1 + 1e-9)) ticks.push_back(tick);
        }
    }
    return ticks;
}

std::string svg_open(const std::string& css_class, double width, double height, const std::string& attributes) {
    return fmt::format(k_svg_open, xml_escape(css_class), width, height, width, height,
                       attributes.empty() ? "" : " " + attributes);
}

std::string title_text(double x, double y, const std::string& title) {
    return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="13" font-weight="bold">{}</text>)", x, y,
                       xml_escape(title));
}

}  // namespace

std::string xml_escape(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char character : text) {
        switch (character) {
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '&':
                out += "&amp;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += character;
        }
    }
    return out;
}

std::string tick_label(double value) {
    const double magnitude = std::abs(value);
    if (magnitude >= 1e9) return fmt::format("{:g}G", value / 1e9);
    if (magnitude >= 1e6) return fmt::format("{:g}M", value / 1e6);
    if (magnitude >= 1e4) return fmt::format("{:g}k", value / 1e3);
    return fmt::format("{:g}", value);
}

std::string palette_colour(std::size_t index) {
    static constexpr std::array<const char*, 10> k_palette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                              "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
    return k_palette[index % k_palette.size()];
}

XyPlot::XyPlot(std::string css_class, std::string title, PlotAxis x_axis, PlotAxis y_axis)
    : m_class(std::move(css_class)),
      m_title(std::move(title)),
      m_x_axis(std::move(x_axis)),
      m_y_axis(std::move(y_axis)) {}

void XyPlot::add_series(std::string label, std::string colour, std::vector<PlotPoint> points, SeriesStyle style) {
    m_series.push_back({std::move(label), std::move(colour), std::move(points), style});
}

void XyPlot::add_step_series(std::string label, std::string colour, std::vector<PlotPoint> points) {
    m_series.push_back({std::move(label), std::move(colour), std::move(points), SeriesStyle::step});
}

void XyPlot::add_line(PlotLine line) {
    m_lines.push_back(std::move(line));
}

void XyPlot::add_interval(PlotInterval interval) {
    m_intervals.push_back(std::move(interval));
}

XyPlot::Range XyPlot::x_range() const {
    double low = std::numeric_limits<double>::infinity();
    double high = -low;
    auto take = [&](double x) {
        if (m_x_axis.log && !(x > 0.0)) return;
        low = std::min(low, x);
        high = std::max(high, x);
    };
    for (const auto& series : m_series) {
        for (const auto& point : series.points)
            take(point.x);
    }
    for (const auto& interval : m_intervals)
        take(interval.x);
    if (!std::isfinite(low)) return {0.0, 1.0};
    if (!m_x_axis.log && low > 0.0 && low < 0.5 * high) low = 0.0;  // start linear axes at 0 when near
    if (high - low <= 0.0) {
        low = m_x_axis.log ? low / 2.0 : low - 1.0;
        high = m_x_axis.log ? high * 2.0 : high + 1.0;
    }
    if (!m_x_axis.log && !m_intervals.empty()) {  // room for the markers at both ends
        low -= 0.5;
        high += 0.5;
    }
    return {low, high};
}

XyPlot::Range XyPlot::y_range() const {
    double low = std::numeric_limits<double>::infinity();
    double high = -low;
    auto take = [&](double y) {
        if (!std::isfinite(y) || (m_y_axis.log && !(y > 0.0))) return;
        low = std::min(low, y);
        high = std::max(high, y);
    };
    for (const auto& series : m_series) {
        for (const auto& point : series.points)
            take(point.y);
    }
    for (const auto& line : m_lines)
        take(line.y);
    for (const auto& interval : m_intervals) {
        take(interval.lower);
        take(interval.upper);
        take(interval.centre);
    }
    if (!std::isfinite(low)) return {m_y_axis.log ? 1.0 : 0.0, m_y_axis.log ? 10.0 : 1.0};
    if (m_y_axis.log) {  // a margin of 10% of a decade on each side
        if (high / low < 1.0001) return {low / 2.0, high * 2.0};
        return {low / 1.25, high * 1.25};
    }
    if (high - low <= 0.0) return {low - 1.0, high + 1.0};
    const double margin = 0.05 * (high - low);
    return {low - margin, high + margin};
}

double XyPlot::x_pixel(double x) const {
    const Range range = x_range();
    const double plot_width = k_width - k_left - k_right;
    const double share =
        m_x_axis.log ? (std::log10(x) - std::log10(range.low)) / (std::log10(range.high) - std::log10(range.low))
                     : (x - range.low) / (range.high - range.low);
    return k_left + share * plot_width;
}

double XyPlot::y_pixel(double y) const {
    const Range range = y_range();
    const double plot_height = k_height - k_top - k_bottom;
    const double share =
        m_y_axis.log ? (std::log10(y) - std::log10(range.low)) / (std::log10(range.high) - std::log10(range.low))
                     : (y - range.low) / (range.high - range.low);
    return k_top + (1.0 - share) * plot_height;
}

std::string XyPlot::render() const {
    const Range xr = x_range();
    const Range yr = y_range();
    const double plot_right = k_width - k_right;
    const double plot_bottom = k_height - k_bottom;
    std::string svg =
        svg_open("plot " + m_class, k_width, k_height,
                 fmt::format(R"({}data-y-log="{}" data-y-low="{}" data-y-high="{}")",
                             m_attributes.empty() ? "" : m_attributes + " ", m_y_axis.log ? 1 : 0, yr.low, yr.high));
    svg += title_text(k_left, 18, m_title);
    svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#999"/>)",
                       k_left, k_top, plot_right - k_left, plot_bottom - k_top);
    for (double tick : m_y_axis.log ? log_ticks(yr.low, yr.high) : linear_ticks(yr.low, yr.high)) {
        const double y = y_pixel(tick);
        svg += fmt::format(R"(<line class="grid" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#eee"/>)",
                           k_left, y, plot_right, y);
        svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)", k_left - 4, y + 4,
                           xml_escape(tick_label(tick)));
    }
    for (double tick : m_x_axis.log ? log_ticks(xr.low, xr.high) : linear_ticks(xr.low, xr.high)) {
        const double x = x_pixel(tick);
        svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#999"/>)", x,
                           plot_bottom, plot_bottom + 4);
        svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)", x,
                           plot_bottom + 16, xml_escape(tick_label(tick)));
    }
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)", (k_left + plot_right) / 2,
                       k_height - 8, xml_escape(m_x_axis.label));
    svg += fmt::format(R"svg(<text transform="translate(14,{:.1f}) rotate(-90)" text-anchor="middle">{}{}</text>)svg",
                       (k_top + plot_bottom) / 2, xml_escape(m_y_axis.label), m_y_axis.log ? " (log scale)" : "");
    for (const auto& line : m_lines) {
        if (m_y_axis.log && !(line.y > 0.0)) continue;
        const double y = y_pixel(line.y);
        svg += fmt::format(
            R"(<line class="hline {}" data-value="{}" x1="{:.1f}" y1="{:.2f}" x2="{:.1f}" y2="{:.2f}" stroke="{}" )"
            R"(stroke-dasharray="6 3"><title>{}</title></line>)",
            xml_escape(line.css_class), line.y, k_left, y, plot_right, y, xml_escape(line.colour),
            xml_escape(fmt::format("{}: {}", line.label, tick_label(line.y))));
        svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="{}">{} {}</text>)", plot_right + 4, y + 4,
                           xml_escape(line.colour), xml_escape(line.label), xml_escape(tick_label(line.y)));
    }
    double legend_y = k_top + 8;
    for (const auto& series : m_series) {
        std::string path;
        std::optional<double> previous_y;
        for (const auto& point : series.points) {
            const double x = x_pixel(point.x);
            const double y = y_pixel(point.y);
            if (series.style == SeriesStyle::points) break;
            if (!previous_y) {
                path += fmt::format("M{:.1f},{:.1f}", x, y);
            } else if (series.style == SeriesStyle::line) {
                path += fmt::format(" L{:.1f},{:.1f}", x, y);
            } else {
                path += fmt::format(" H{:.1f} V{:.1f}", x, y);
            }
            previous_y = y;
        }
        svg += fmt::format(R"(<g class="series" data-label="{}" data-points="{}">)", xml_escape(series.label),
                           series.points.size());
        if (!path.empty()) {
            svg += fmt::format(R"(<path class="{}" d="{}" fill="none" stroke="{}" stroke-width="2"/>)",
                               series.style == SeriesStyle::line ? "line" : "step", path, xml_escape(series.colour));
        }
        for (const auto& point : series.points) {
            if (series.style == SeriesStyle::line) break;  // a fitted line: its points are the curve's
            svg += fmt::format(R"(<circle class="point" data-x="{}" data-y="{}" cx="{:.1f}" cy="{:.2f}" r="3" )"
                               R"(fill="{}"><title>{}</title></circle>)",
                               point.x, point.y, x_pixel(point.x), y_pixel(point.y), xml_escape(series.colour),
                               xml_escape(point.title));
        }
        svg += "</g>";
        if (series.label.empty()) continue;  // no legend entry
        svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="{}">{}</text>)", plot_right + 4, legend_y,
                           xml_escape(series.colour), xml_escape(series.label));
        legend_y += 14;
    }
    for (const auto& interval : m_intervals) {
        const double x = x_pixel(interval.x);
        const double y_low = y_pixel(interval.lower);
        const double y_high = y_pixel(interval.upper);
        svg += fmt::format(
            R"(<g class="interval" data-x="{}" data-centre="{}" data-lower="{}" data-upper="{}"><title>{}</title>)"
            R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="2"/>)"
            R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>)"
            R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>)"
            R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/></g>)",
            interval.x, interval.centre, interval.lower, interval.upper, xml_escape(interval.title), x, y_low, x,
            y_high, xml_escape(interval.colour), x - 3, y_low, x + 3, y_low, xml_escape(interval.colour), x - 3, y_high,
            x + 3, y_high, xml_escape(interval.colour), x, y_pixel(interval.centre), xml_escape(interval.colour));
    }
    return svg + "</svg>";
}

std::string bar_chart(const std::string& css_class, const std::string& title, const std::vector<BarRow>& rows,
                      double full_scale, const std::string& full_scale_label) {
    const double row_height = 26.0;
    const double label_width = 190.0;
    const double bar_width = 380.0;
    const double top = 30.0;
    double scale = full_scale;
    for (const auto& row : rows) {
        if (row.value) scale = std::max(scale, *row.value);
    }
    if (!(scale > 0.0)) scale = 1.0;
    const double height = top + row_height * static_cast<double>(rows.size()) + 24.0;
    const double width = label_width + bar_width + 180.0;
    std::string svg = svg_open("plot " + css_class, width, height, "");
    svg += title_text(0, 18, title);
    double y = top;
    for (const auto& row : rows) {
        svg += fmt::format(R"(<text x="0" y="{:.1f}">{}</text>)", y + 14, xml_escape(row.label));
        const double length = row.value ? std::max(0.0, *row.value) / scale * bar_width : 0.0;
        if (row.value) {
            svg += fmt::format(R"(<rect class="bar" data-label="{}" data-value="{}" x="{:.1f}" y="{:.1f}" )"
                               R"(width="{:.1f}" height="18" fill="{}"><title>{}</title></rect>)",
                               xml_escape(row.label), *row.value, label_width, y, length, xml_escape(row.colour),
                               xml_escape(fmt::format("{}: {:.3g}", row.label, *row.value)));
        }
        const std::string note = !row.note.empty() ? row.note : row.value ? fmt::format("{:.3g}", *row.value) : "-";
        svg +=
            fmt::format(R"(<text x="{:.1f}" y="{:.1f}">{}</text>)", label_width + length + 6, y + 14, xml_escape(note));
        y += row_height;
    }
    const double full_x = label_width + full_scale / scale * bar_width;
    svg += fmt::format(R"(<line class="full-scale" x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#444" )"
                       R"(stroke-dasharray="4"/><text x="{0:.1f}" y="{3:.1f}" text-anchor="middle">{4}</text>)",
                       full_x, top - 4, y, y + 14, xml_escape(full_scale_label));
    return svg + "</svg>";
}

std::string stacked_share_chart(const std::string& css_class, const std::string& title,
                                const std::vector<std::string>& categories, const std::vector<StackedColumn>& columns,
                                const std::string& x_label) {
    const double left = 48.0;
    const double top = 34.0;
    const double plot_height = 220.0;
    const double legend_width = 150.0;
    const double column_width =
        std::clamp(560.0 / std::max<double>(1.0, static_cast<double>(columns.size())), 8.0, 60.0);
    const double plot_width = column_width * static_cast<double>(columns.size());
    const double width = left + std::max(plot_width, 200.0) + legend_width;
    const double height = top + plot_height + 60.0;
    std::string svg = svg_open("plot " + css_class, width, height, "");
    svg += title_text(0, 18, title);
    for (int percent = 0; percent <= 100; percent += 25) {
        const double y = top + plot_height * (1.0 - percent / 100.0);
        svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="end">{}%</text>)", left - 4, y + 4,
                           percent);
        svg += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#eee"/>)", left, y,
                           left + plot_width, y);
    }
    const std::size_t label_every = std::max<std::size_t>(1, (columns.size() + 7) / 8);
    for (std::size_t column_idx = 0; column_idx < columns.size(); ++column_idx) {
        const StackedColumn& column = columns[column_idx];
        double total = 0.0;
        for (double count : column.counts)
            total += count;
        const double x = left + column_width * static_cast<double>(column_idx);
        svg += fmt::format(R"(<g class="column" data-label="{}" data-total="{}">)", xml_escape(column.label), total);
        double y = top + plot_height;
        for (std::size_t category_idx = 0; category_idx < column.counts.size() && category_idx < categories.size();
             ++category_idx) {
            const double count = column.counts[category_idx];
            if (!(count > 0.0) || !(total > 0.0)) continue;
            const double segment = plot_height * count / total;
            y -= segment;
            svg += fmt::format(R"(<rect class="segment" data-category="{}" data-count="{}" x="{:.1f}" y="{:.1f}" )"
                               R"(width="{:.1f}" height="{:.1f}" fill="{}"><title>{}</title></rect>)",
                               xml_escape(categories[category_idx]), count, x + 1, y, column_width - 2, segment,
                               palette_colour(category_idx),
                               xml_escape(fmt::format("{}: {} of {} ({:.0f}%)", categories[category_idx], count, total,
                                                      100.0 * count / total)));
        }
        svg += "</g>";
        if (column_idx % label_every == 0) {
            svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)",
                               x + column_width / 2, top + plot_height + 14, xml_escape(column.label));
        }
    }
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)", left + plot_width / 2,
                       top + plot_height + 36, xml_escape(x_label));
    for (std::size_t category_idx = 0; category_idx < categories.size(); ++category_idx) {
        const double x = left + std::max(plot_width, 200.0) + 12;
        const double y = top + 14.0 * static_cast<double>(category_idx);
        svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="10" height="10" fill="{}"/>)"
                           R"(<text x="{:.1f}" y="{:.1f}">{}</text>)",
                           x, y, palette_colour(category_idx), x + 14, y + 9, xml_escape(categories[category_idx]));
    }
    return svg + "</svg>";
}

}  // namespace npuopt::report
