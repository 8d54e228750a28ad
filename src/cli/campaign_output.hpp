#pragma once
// Shared by `npuopt run` and `npuopt demo`: the live progress line and the end-of-run summary.

#include <string>

#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "cli/commands.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {

/// One line: kernel, champion cycles, speedup, fraction of speed of light, device runs, ETA.
std::string progress_line(const campaign::Progress& progress);
/// The same as one JSON object {"event":"progress",...} (`run --message-format json`).
nlohmann::json progress_json(const campaign::Progress& progress);
/// How the run ended, each kernel's state included, as JSON (`run --json`; "finished" event).
nlohmann::json result_json(const campaign::CampaignResult& result);
/// Run the campaign with the progress line on stderr (rewritten in place on a terminal).
campaign::CampaignResult run_with_progress(campaign::Workspace& workspace, const RunOptions& options, bool json);
/// How the run ended and each kernel's state, for people.
std::string outcome_text(const campaign::CampaignResult& result);

}  // namespace npuopt::cli
