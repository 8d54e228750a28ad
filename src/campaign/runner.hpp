#pragma once
// `npuopt run DIR`: everything a campaign run needs, wired from the campaign directory — config,
// target, kernels and templates, store, toolchain (sandboxed), rule book, fitted hardware model,
// the evaluation cascade — then the driver. One call for the CLI.

#include <filesystem>
#include <functional>
#include <optional>

#include "campaign/driver.hpp"

namespace npuopt::campaign {

struct RunOptions {
    std::optional<std::filesystem::path> knowledge_dir;  ///< --knowledge-dir (else the default)
    std::optional<std::int64_t> max_steps;               ///< stop after so many steps
    std::function<void(const Progress&)> progress;       ///< live display
};

/// Run or resume the campaign in `campaign_dir` (holding campaign.yaml and campaign.db). Throws
/// Error(invalid_input) when it is already running, Error(invalid_config) for a bad campaign.yaml
/// or target; a missing toolchain, a broken template or a hanging kernel are recorded failures in
/// the result, not exceptions. The CLI maps StopReason::interrupted to exit code 3.
CampaignResult run_campaign(const std::filesystem::path& campaign_dir, const RunOptions& options = {});

}  // namespace npuopt::campaign
