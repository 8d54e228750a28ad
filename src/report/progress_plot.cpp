#include "report/progress_plot.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "report/svg_plot.hpp"

namespace npuopt::report {

TimeUnit time_unit_for(double secs) {
    if (secs > 36000.0) return {3600.0, "h"};
    if (secs > 600.0) return {60.0, "min"};
    return {1.0, "s"};
}

std::string progress_svg(const KernelSeries& kernel, bool by_wall, const TimeUnit& unit) {
    double low = 1e300;
    double high = 0.0;
    for (const auto& point : kernel.progress) {
        low = std::min(low, point.best_cycles);
        high = std::max(high, point.best_cycles);
    }
    if (kernel.reference_cycles) high = std::max(high, *kernel.reference_cycles);
    if (kernel.minimum_cycles > 0) low = std::min(low, kernel.minimum_cycles);
    const bool log_y = low > 0.0 && high / low > 10.0;
    PlotAxis x_axis{by_wall ? fmt::format("wall time since the first step ({})", unit.name)
                            : std::string("device runs used (the campaign's steps, all kernels)"),
                    false};
    XyPlot plot(by_wall ? "progress-wall" : "progress-runs",
                fmt::format("{}: best champion so far, by {}", kernel.kernel, by_wall ? "wall time" : "device runs"),
                x_axis, PlotAxis{"cycles", log_y});
    plot.set_attributes(fmt::format(R"(data-kernel="{}")", xml_escape(kernel.kernel)));
    std::vector<PlotPoint> points;
    for (const auto& point : kernel.progress) {
        const double x =
            by_wall ? point.wall_secs.value_or(0.0) / unit.secs_per_unit : static_cast<double>(point.device_runs);
        points.push_back({x, point.best_cycles,
                          fmt::format("step {} ({}, {}): best {:.0f} cycles after {} device runs", point.step,
                                      point.role, point.verdict, point.best_cycles, point.device_runs)});
    }
    plot.add_step_series("best so far", "#1f77b4", std::move(points));
    if (kernel.reference_cycles) plot.add_line({*kernel.reference_cycles, "reference", "reference", "#555555"});
    if (kernel.minimum_cycles > 0) plot.add_line({kernel.minimum_cycles, "minimum", "minimum", "#d62728"});
    return plot.render();
}

}  // namespace npuopt::report
