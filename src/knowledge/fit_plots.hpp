#pragma once
// What a picture of the hardware model needs: for every entry of the suite's `model:` fitted from
// measurements, the microbenchmark points it was fitted on and the fitted curve through them, in
// the suite's own terms (its response, terms and swept parameters), for any target. The report
// draws them; nothing here knows a parameter or probe by name.

#include <optional>
#include <string>
#include <vector>

#include "config/microbench_config.hpp"
#include "config/target_config.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"

namespace npuopt::knowledge {

struct FitPlotPoint {
    double x = 0.0;
    double y = 0.0;
    std::string title;  ///< the point's parameters and values, for a tooltip
};

/// Points measured at the same values of the parameters other than the x axis's, with the fitted
/// values at the same x (the curve), sorted by x.
struct FitPlotGroup {
    std::string label;  ///< e.g. "packet=1024" ("" when only one group)
    std::vector<FitPlotPoint> measured;
    std::vector<FitPlotPoint> fitted;
};

/// One model entry as a plot.
struct FitPlot {
    std::string form;                 ///< linear, penalty_ratio, saturation
    std::string probe;                ///< the measurements it was fitted on (`measures`)
    std::string x_label;
    std::string y_label;
    std::vector<std::string> params;  ///< the parameters it determined, in suite order
    std::vector<FitPlotGroup> groups;
    std::optional<double> level;      ///< saturation: the fitted level (a horizontal line)
    std::string level_label;
    std::optional<double> r_squared;  ///< of the fit (the worse of two for penalty_ratio)
};

/// The plots of `suite`'s model entries over `run`, fitted as fit_hardware_model does, reading
/// the parameters determined so far from `model`. Entries without measurements, facts, derived
/// and threshold entries have no plot.
std::vector<FitPlot> fit_plots(const MicrobenchRun& run, const config::TargetConfig& target,
                               const config::MicrobenchSuite& suite, const HardwareModel& model);

/// The newest microbenchmark run recorded for `target` at `toolchain_version_id` (the points
/// kept as `measurement` knowledge entries); none when there is none.
std::optional<MicrobenchRun> load_microbench_run(store::CampaignStore& store, const std::string& target,
                                                 std::int64_t toolchain_version_id);
/// The same from knowledge entries already read (the target's, stale ones included).
std::optional<MicrobenchRun> microbench_run_of(const std::vector<store::KnowledgeEntry>& entries,
                                               const std::string& target, std::int64_t toolchain_version_id);

}  // namespace npuopt::knowledge
