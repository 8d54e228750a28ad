#pragma once
// The knowledge base's hardware model as the report shows it: the newest fitted model recorded in
// the campaign's store, its parameters with intervals and fit quality, and one plot per fitted
// model entry (microbenchmark points and the fitted curve), from the store and the target's
// microbenchmark suite alone — nothing is measured.

#include <optional>
#include <string>
#include <vector>

#include "campaign/workspace.hpp"
#include "knowledge/fit_plots.hpp"
#include "knowledge/hardware_model.hpp"

namespace npuopt::campaign {

struct KbFigures {
    bool built = false;                            ///< a hardware model was recorded
    std::string toolchain_version;                 ///< the model's
    std::vector<knowledge::HardwareParam> params;  ///< in suite order
    std::vector<std::string> missing;              ///< parameters not determined, with why
    std::vector<knowledge::FitPlot> plots;
    std::string note;                              ///< why there are no plots ("" when there are)
};

/// The newest hardware model of `workspace`'s target in its store, with its plots.
KbFigures kb_figures(Workspace& workspace);

}  // namespace npuopt::campaign
