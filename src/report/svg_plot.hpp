#pragma once
// A small writer of inline SVG plots for the HTML report: an x-y plot with axes and tick labels
// (linear or log10), step lines with their points, horizontal reference lines and interval
// markers; horizontal bars; stacked bars. All text is escaped. Elements carry classes and data-
// attributes (the plotted values) so that a reader, or a test, can find what was drawn.

#include <optional>
#include <string>
#include <vector>

namespace npuopt::report {

/// `text` with the five XML special characters escaped (for element text and attribute values).
std::string xml_escape(const std::string& text);

/// A number as a short tick label: 950, 1.5k, 12M, 0.25.
std::string tick_label(double value);

/// How one axis maps values to pixels.
struct PlotAxis {
    std::string label;  ///< with its unit, e.g. "cycles"
    bool log = false;   ///< log10 scale (only positive values are drawn)
};

/// One point of a series; `title` becomes its tooltip.
struct PlotPoint {
    double x = 0.0;
    double y = 0.0;
    std::string title;
};

/// A horizontal line across the plot at `y`, labelled at its right end.
struct PlotLine {
    double y = 0.0;
    std::string label;
    std::string css_class;  ///< e.g. "reference" or "minimum"
    std::string colour = "#444";
};

/// A point estimate with its interval [lower, upper] at `x`.
struct PlotInterval {
    double x = 0.0;
    double centre = 0.0;
    double lower = 0.0;
    double upper = 0.0;
    std::string colour = "#333";
    std::string title;
};

/// How a series is drawn: a step line (holds y until the next x) or a straight polyline, with
/// its points; or its points alone.
enum class SeriesStyle { step, line, points };

/// An x-y plot: call the add_ functions, then render().
class XyPlot {
public:
    XyPlot(std::string css_class, std::string title, PlotAxis x_axis, PlotAxis y_axis);

    /// A step line through `points` (sorted by x): it holds each y until the next point's x.
    void add_step_series(std::string label, std::string colour, std::vector<PlotPoint> points);
    /// A series drawn in `style` (points sorted by x for the line styles).
    void add_series(std::string label, std::string colour, std::vector<PlotPoint> points, SeriesStyle style);
    void add_line(PlotLine line);
    void add_interval(PlotInterval interval);
    /// Extra attributes for the <svg> element, e.g. data-kernel="gemv" (already escaped).
    void set_attributes(std::string attributes) { m_attributes = std::move(attributes); }

    /// The pixel row of value `y` on this plot's y axis (valid after the data are added).
    double y_pixel(double y) const;
    double x_pixel(double x) const;
    std::string render() const;

    static constexpr double k_width = 680.0;
    static constexpr double k_height = 320.0;
    static constexpr double k_left = 72.0;
    static constexpr double k_right = 150.0;
    static constexpr double k_top = 34.0;
    static constexpr double k_bottom = 46.0;

private:
    struct Series {
        std::string label;
        std::string colour;
        std::vector<PlotPoint> points;
        SeriesStyle style = SeriesStyle::step;
    };
    struct Range {
        double low = 0.0;
        double high = 1.0;
    };
    Range x_range() const;
    Range y_range() const;

    std::string m_class;
    std::string m_title;
    PlotAxis m_x_axis;
    PlotAxis m_y_axis;
    std::string m_attributes;
    std::vector<Series> m_series;
    std::vector<PlotLine> m_lines;
    std::vector<PlotInterval> m_intervals;
};

/// One labelled horizontal bar; `note` is printed after the bar ("" prints the value).
struct BarRow {
    std::string label;
    std::optional<double> value;  ///< none: no bar, the note says why
    std::string note;
    std::string colour = "#2e8b57";
};

/// Horizontal bars from 0 to `full_scale` (a dashed line marks it), one row each.
std::string bar_chart(const std::string& css_class, const std::string& title, const std::vector<BarRow>& rows,
                      double full_scale, const std::string& full_scale_label);

/// One column of a stacked bar chart: a count per category.
struct StackedColumn {
    std::string label;
    std::vector<double> counts;  ///< one per category, in the chart's category order
};

/// Columns of stacked shares (each column sums to 100%), with a legend of the categories.
std::string stacked_share_chart(const std::string& css_class, const std::string& title,
                                const std::vector<std::string>& categories, const std::vector<StackedColumn>& columns,
                                const std::string& x_label);

/// The colour of category `index` in a fixed palette.
std::string palette_colour(std::size_t index);

}  // namespace npuopt::report
