#pragma once
// One kernel of a running campaign: its setup, its search (search/kernel_search.hpp), its
// champion and the counters the driver schedules by. Plain state; persisted by
// campaign_records, changed by the driver.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "eval/evaluation.hpp"
#include "search/kernel_search.hpp"

namespace npuopt::campaign {

/// Where a kernel stands in the campaign.
/// blocked: every family of the kernel fails under this toolchain with a known failure.
enum class KernelState { active, exhausted, failed, blocked };
std::string_view kernel_state_name(KernelState state);
/// The state named `name`; active for an unknown name (an old database's state is re-examined).
KernelState parse_kernel_state(std::string_view name);

/// A declared quantity corrected by what the toolchain reported (KernelRuntime::learn_quantity_misses).
struct QuantityCorrection {
    std::string template_name;
    std::string quantity;
    double declared = 0.0;   ///< what the design declared (with the offset learnt before it)
    double reported = 0.0;   ///< what the toolchain's diagnostic said
    double offset = 0.0;     ///< the template's offset for the quantity from now on
    std::string code;
};

struct KernelRuntime {
    KernelRuntime(KernelSetup kernel_setup, std::vector<std::unique_ptr<search::Role>> roles, search::CostModel cost_model);

    KernelSetup setup;
    std::map<std::string, std::shared_ptr<search::Template>> templates_by_name;
    search::KernelSearch search;
    std::optional<search::Design> champion;
    std::int64_t champion_design_id = 0;
    std::int64_t champion_link_id = 0;
    double champion_cycles = 0.0;
    std::optional<double> baseline_cycles;
    double sol_cycles = 0.0;
    KernelState state = KernelState::active;
    std::string reason;
    std::string failure_kind;               ///< baseline | toolchain | template (with state failed)
    /// The baseline was evaluated (and did not end in a toolchain error or for want of budget).
    bool baseline_tried = false;
    /// Why the baseline did not become champion; empty when it did (or was not tried yet). The
    /// search goes on without it: the first correct design becomes the reference.
    std::string baseline_failure;
    std::int64_t steps_since_accept = 0;
    std::int64_t runs_since_accept = 0;     ///< device runs spent on the kernel since its last accept
    std::int64_t accepts_since_revalidation = 0;
    bool revalidate_pending = false;
    bool port_pending = false;              ///< the toolchain changed: baseline and champion are ported first
    std::string ported_from;                ///< the version the last port started from
    bool port_baseline_done = false;        ///< the port measured the baseline again (it resumes from there)
    nlohmann::json port_before;             ///< champion and baseline before the port (for its report)
    std::vector<std::string> reopened_terms;  ///< cost terms a toolchain update moved (the refit says)
    std::int64_t reopen_steps_left = 0;       ///< steps the analyst re-tunes them first
    std::unique_ptr<search::LlmPorter> porter;  ///< made on the first port that needs it (LLM only)
    bool porter_made = false;

    const std::string& name() const { return setup.spec.name; }
    bool active() const { return state == KernelState::active; }
    /// The persisted part of the state (tree_state "kernel/<name>").
    nlohmann::json state_json() const;
    /// What speedups are measured against: "baseline", or "first correct design (baseline
    /// failed: <reason>)" when the baseline did not become champion.
    std::string reference() const;
    /// Learn from a design's quantity misses: each adds its shortfall to its template's offset for
    /// that quantity, so the search's constraints and rules see what the toolchain counts from
    /// the next proposal on. Returns the corrections made (none for the baseline or a miss that
    /// is not one).
    std::vector<QuantityCorrection> learn_quantity_misses(const std::string& template_name,
                                                          const std::vector<eval::QuantityMiss>& misses);
    /// Every template's learnt offsets, {template: {quantity: offset}} (part of state_json).
    nlohmann::json quantity_offsets_json() const;
    void restore_quantity_offsets(const nlohmann::json& offsets);
    /// Forget every learnt offset (another toolchain lays memory out its own way); returns what was dropped.
    nlohmann::json clear_quantity_offsets();
    /// The family of a template name (the name itself when the template is gone).
    std::string family_of(const std::string& template_name) const;
};

}  // namespace npuopt::campaign
