#pragma once
// The campaign loop's private state and steps (driver.hpp is the public side). The members are
// defined by concern: the loop (driver.cpp), a run's beginning and end (driver_run.cpp), one
// evaluated step (driver_step.cpp), porting and re-validation (driver_port.cpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "campaign/campaign_records.hpp"
#include "campaign/driver.hpp"
#include "campaign/kernel_runtime.hpp"
#include "eval/evaluation.hpp"
#include "knowledge/rewrites.hpp"
#include "search/roles.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

namespace driver_detail {

/// A seed for `kernel` at `step`, derived from the campaign seed (`salt` tells draws apart).
std::uint64_t mix_seed(std::uint64_t seed, const std::string& kernel, std::int64_t step, std::uint64_t salt = 0);
/// The name of the outcome's last stage ("" when none ran).
std::string last_stage(const eval::Outcome& outcome);
/// The outcome's final reason, else its last stage's.
std::string final_reason(const eval::Outcome& outcome);
/// The tree's verdict for a cascade outcome: accepted, or what its last stage's verdict means for the step.
eval::StepVerdict step_verdict(const eval::Outcome& outcome);
/// The tree-state key of the designs users queued for `kernel`.
std::string queue_key(const std::string& kernel);
/// The design ids queued for `kernel`, oldest first.
std::vector<std::int64_t> read_queue(store::TreeStore tree, const std::string& kernel);

/// A step a budget cut short (at a launch boundary), to be evaluated again first when the
/// campaign next runs: kept in the tree state "resume_queue/<kernel>".
struct ResumeEntry {
    std::int64_t design_id = 0;
    std::string role;
    std::string move;
    std::string reason;
};
std::vector<ResumeEntry> read_resume_queue(store::TreeStore tree, const std::string& kernel);
void write_resume_queue(store::TreeStore tree, const std::string& kernel, const std::vector<ResumeEntry>& entries);

}  // namespace driver_detail

/// What one evaluated step decided, computed once and read by learning, bookkeeping and the commit.
struct StepDecision {
    std::int64_t design_id = 0;
    std::optional<std::int64_t> parent;
    eval::Outcome outcome;
    eval::StepVerdict verdict = eval::StepVerdict::error;
    bool is_baseline = false;   ///< the kernel's baseline, before any champion
    bool is_reference = false;  ///< no champion yet: this one is what speedups are measured against
    bool becomes_champion = false;
    bool fix_again = false;            ///< failed, but its fix-its were kept: proposed again, rewritten
    bool baseline_failed_now = false;  ///< the baseline failed as a design (the search goes on)
    double champion_before = 0.0;
    double new_champion_cycles = 0.0;
    store::TreeEdgeRecord edge;
};

/// A step planned for evaluation: the design recorded, its candidate and opponent fixed, the
/// outcome filled in by the evaluator (in a parallel round, on its own thread).
struct PreparedStep {
    KernelRuntime* kernel = nullptr;
    search::Proposal proposal;
    std::int64_t design_id = 0;
    std::optional<std::int64_t> parent;
    eval::Candidate candidate;
    std::optional<eval::Champion> opponent;
    bool measure_only = false;  ///< a port: checked and measured without an opponent
    bool unclear = false;       ///< a port's measurement was not clearly below the baseline's
    /// Raced against a champion that an earlier step of its round replaced: an accept is stale.
    std::optional<std::int64_t> replaced_by;
    eval::Outcome outcome;
};

struct CampaignDriver::Impl {
    Impl(store::CampaignStore& campaign_store, Evaluator& step_evaluator, CampaignOptions campaign_options)
        : evaluator(&step_evaluator),
          options(std::move(campaign_options)),
          records(campaign_store, options.dir, options.target) {
        records.set_listener(options.on_event);
    }

    Evaluator* evaluator;
    CampaignOptions options;
    CampaignRecords records;
    search::RuleCheck rule_check;
    std::vector<std::unique_ptr<KernelRuntime>> kernels;
    Counters counters;
    bool strict_phase = false;  ///< the evaluator runs its strict preset (campaign age ≥ strict_after)
    std::string toolchain_version;
    std::string toolchain_identity;                  ///< Evaluator::toolchain_identity at the last check
    std::string last_step_reason;                    ///< the final reason of the last evaluated step
    bool port_measure_only = false;                  ///< evaluate_step checks and measures without an opponent (a port)
    bool port_unclear = false;                       ///< the last measure-only step was not clearly below the baseline
    std::vector<knowledge::SourceRewrite> rewrites;  ///< applied to every source before it is hashed

    // ---- rewrites and known failures --------------------------------------------------------

    /// Every template's instantiations pass through the rewrites of this toolchain version.
    void install_rewrites();

    std::optional<search::Design> ported(const KernelRuntime& kernel, const search::Design& design) const;

    std::vector<std::shared_ptr<search::Template>> open_templates(const KernelRuntime& kernel, std::string* why) const;

    void block_kernel(KernelRuntime& kernel, const std::string& why);

    double age() const { return counters.age(options.wall_budget_secs, options.device_run_budget); }
    /// The wall budget this run may use up to: the budget less the reserve (0: no wall budget).
    double wall_limit() const;

    /// Device runs the budget still allows (none: no device-run budget).
    std::optional<std::int64_t> device_runs_left() const;
    /// Hand `to` what the budgets leave (device runs divided by `share`, the evaluations in
    /// flight together) and the wall-time deadline.
    void apply_budgets(Evaluator& to, std::int64_t share = 1);

    // ---- evaluation ------------------------------------------------------------------------

    std::optional<eval::Champion> champion_of(KernelRuntime& kernel);

    /// The evaluator's outcome; an error that does not end the command becomes an error stage.
    eval::Outcome evaluate(Evaluator& by, const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const KernelRuntime& kernel);

    store::TreeEdgeRecord edge_of(const KernelRuntime& kernel, const search::Proposal& proposal, std::int64_t design_id,
                                  std::optional<std::int64_t> parent, eval::StepVerdict verdict,
                                  const eval::Outcome& outcome) const;

    /// Evaluate one design of `kernel`, let the search learn from it and commit the step. A
    /// design that failed but whose fix-its were kept is proposed again at once, rewritten
    /// (`fixit_depth` bounds how often in a row).
    eval::StepVerdict evaluate_step(KernelRuntime& kernel, const search::Proposal& proposal, int fixit_depth = 0);

    /// The design recorded and its candidate and opponent fixed (orchestrator only).
    PreparedStep prepare_step(KernelRuntime& kernel, const search::Proposal& proposal);
    /// The outcome of a prepared step from `by` (thread-safe for steps of different kernels: it
    /// touches only the step and its kernel); a port (`measure_only`) is checked without an
    /// opponent and kept only when clearly below the re-measured baseline.
    void measure_step(PreparedStep& step, Evaluator& by);
    /// A measured step decided, learnt from and committed through `by` (orchestrator only).
    eval::StepVerdict finish_step(PreparedStep& step, Evaluator& by, int fixit_depth);
    /// What the outcome means for the kernel: verdict, champion change, the tree edge.
    StepDecision decide_step(const KernelRuntime& kernel, const search::Proposal& proposal, std::int64_t design_id,
                             std::optional<std::int64_t> parent, eval::Outcome outcome, int fixit_depth) const;
    /// The search learns from the step (cost model, scheduler, roles) before it is committed.
    void learn_from_step(KernelRuntime& kernel, const search::Proposal& proposal, const StepDecision& decision);
    /// The kernel's and the campaign's counters and the baseline's state after the step.
    void account_step(KernelRuntime& kernel, StepDecision& decision);
    /// The step's records in one transaction (edge, champion link, counters, kernel, events);
    /// the new champion link's id (0: none).
    std::int64_t commit_step_records(KernelRuntime& kernel, const search::Proposal& proposal,
                                     const StepDecision& decision);

    /// The fix-its of `attempt` were kept as rewrites: the design proposed again, rewritten.
    eval::StepVerdict evaluate_fixed(KernelRuntime& kernel, const search::Proposal& failed,
                                     const eval::FixitAttempt& attempt, int fixit_depth);

    void report(const KernelRuntime& kernel, const search::Proposal& proposal, const std::string& verdict);

    // ---- revalidation ----------------------------------------------------------------------

    void revalidate(KernelRuntime& kernel, const std::string& why);

    // ---- porting across a toolchain update ---------------------------------------------------

    /// The toolchain changed: the baseline is measured again under the new version (speedups are
    /// against it from now on), then the old champion is ported — rewritten where fix-its taught
    /// how, re-verified, re-measured and raced against the new baseline. When it cannot be
    /// ported, the next best portable design takes its place, and the event says why.
    void port_kernel(KernelRuntime& kernel);
    /// The LLM porter's ports of `failing` (which failed under the new version as the last
    /// step says), each evaluated as a port, repaired with the next diagnostics; true when one
    /// became the champion. False at once without an LLM porter.
    /// After a port: the cost terms the refit moved (the hardware_model_changed event of this
    /// version) are re-opened for the kernel's next steps, the analyst first (event parameters_reopened).
    void reopen_moved_terms(KernelRuntime& kernel);
    bool port_with_llm(KernelRuntime& kernel, const search::Design& failing, const std::string& label,
                       const std::string& from, std::int64_t baseline_id);

    // ---- the loop --------------------------------------------------------------------------

    /// The kernel to step next (none: every kernel is done); `taken` are passed over.
    KernelRuntime* pick_kernel(const std::vector<const KernelRuntime*>& taken = {});

    void step_baseline(KernelRuntime& kernel);

    /// The oldest design a user queued for `kernel` (`npuopt add`), evaluated and raced; false when none.
    bool step_queued(KernelRuntime& kernel);

    /// The oldest step a budget cut short in an earlier run, evaluated again; false when none.
    bool step_resumed(KernelRuntime& kernel);

    void step_kernel(KernelRuntime& kernel);

    /// The search's next proposal for `kernel`, its seeds drawn for step `step`; none when the
    /// kernel is blocked or exhausted (then recorded so, unless `may_exhaust` is false: a further
    /// candidate of a kernel with a step already in flight, whose outcome may give the search more).
    std::optional<search::Proposal> propose(KernelRuntime& kernel, std::int64_t step, bool may_exhaust = true);
    /// The search may screen now: under search.screen_share of the device time (always without one).
    bool screen_budget_open() const;
    /// After an accept: the champion re-raced against its predecessor when enough accepts passed.
    void revalidate_when_due(KernelRuntime& kernel);
    /// A kernel whose next step is a plain search step (no baseline, port, resumed or queued
    /// step first): the kind a parallel round may take.
    bool plain_search_step(const KernelRuntime& kernel);
    /// A round of the pipeline, `first` first: up to parallel_evaluators.size() search steps,
    /// taken from the kernels in the serial loop's order, round-robin (several candidates of one
    /// kernel when builders outnumber kernels), evaluated at once and committed in the order
    /// planned. A candidate accepted against a champion that an earlier step of the same round
    /// replaced is stale: recorded inconclusive and raced again against the new champion next.
    void step_round(KernelRuntime& first);

    /// Late in the campaign (age ≥ strict_after) the evaluator switches to its strict preset: a
    /// false champion costs more the less budget is left to undo it. Recorded as an event.
    void enter_strict_phase_when_due();

    /// The run starts: counters read back, budgets and run state written, interrupted stages marked.
    void begin_run();

    /// Every kernel's state restored; a toolchain change re-validates the champions.
    void restore_kernels();

    /// The toolchain under the running loop: the same (nullopt), gone, or another version.
    std::optional<CampaignResult> toolchain_moved();

    /// Why the loop must stop before the next step; nullopt to go on.
    std::optional<CampaignResult> stop_condition() const;

    /// The run ends: counters and run state saved, every kernel's search finished, the result.
    CampaignResult end_run(CampaignResult result);

    CampaignResult run_loop();

    std::string why_toolchain_missing;  ///< why evaluator->toolchain_version came back empty
};

}  // namespace npuopt::campaign
