#pragma once
// A new campaign directory, as `npuopt init` makes it: a commented campaign.yaml and a fresh
// campaign.db with its meta rows and a campaign_created event. Used for the scratch campaign of
// `npuopt eval` (without --campaign).

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/target_config.hpp"

namespace npuopt::campaign {

/// Write campaign.yaml and campaign.db into `dir` (which must exist and be empty) for `target`.
void init_campaign_dir(const std::filesystem::path& dir, const config::TargetConfig& target,
                       const std::vector<std::string>& kernel_names, std::uint64_t seed);

}  // namespace npuopt::campaign
