#pragma once
// A kernel's best-so-far plot (against device runs or wall time, with its reference and minimum
// lines): drawn by the report and, live, by the dashboard.

#include <string>

#include "report/campaign_series.hpp"

namespace npuopt::report {

/// Wall time in a unit that keeps the ticks short.
struct TimeUnit {
    double secs_per_unit = 1.0;
    const char* name = "s";
};

/// The unit for a wall time axis that reaches `secs`.
TimeUnit time_unit_for(double secs);

/// The best-so-far plot of one kernel against device runs (`by_wall` false) or wall time: an
/// <svg class="plot progress-runs|progress-wall" data-kernel="…">.
std::string progress_svg(const KernelSeries& kernel, bool by_wall, const TimeUnit& unit);

}  // namespace npuopt::report
