#pragma once
// What a toolchain update changes for a campaign's kernels, apart from the loop: the rewrites
// every template's sources pass through, a design as it would be proposed now, the families a
// known failure closes, and the designs worth porting, best first (driver.cpp runs the port).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "campaign/campaign_records.hpp"
#include "campaign/kernel_runtime.hpp"
#include "knowledge/rewrites.hpp"

namespace npuopt::campaign {

/// Every template of every kernel instantiates through `rewrites` from now on (none: as written).
void install_source_rewrites(std::vector<std::unique_ptr<KernelRuntime>>& kernels,
                             const std::vector<knowledge::SourceRewrite>& rewrites);

/// `design` as it would be proposed now: its template instantiated again (the rewrites applied),
/// or, for a design from a source of its own, `rewrites` applied to that source.
std::optional<search::Design> rewritten_design(const KernelRuntime& kernel, const search::Design& design,
                                               const std::vector<knowledge::SourceRewrite>& rewrites);

/// The kernel's templates minus the families with a known failure on this version (`rules` null:
/// all of them); when none of its families is left, `why` names the failure that closes each.
std::vector<std::shared_ptr<search::Template>> open_templates(const KernelRuntime& kernel, knowledge::SourceRules* rules,
                                                              std::string* why);

/// What to port, best first: the champion, its predecessors on the champion path (newest first),
/// then the kernel's other measured designs by their cycles under the old version; no baseline,
/// at most `max_designs`.
std::vector<search::Design> port_candidates(CampaignRecords& records, const KernelRuntime& kernel, int max_designs);

}  // namespace npuopt::campaign
