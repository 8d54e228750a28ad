#pragma once
// The campaign loop: all kernels of a campaign, the one furthest from its speed of light first,
// until the budgets are spent, every kernel is exhausted, or a signal asks it to stop.
//
//   per kernel, once: baseline ──► evaluate ──► first champion; when it fails, the search goes
//                     on and the first correct design becomes the reference (marked as such)
//   loop:  pick kernel (furthest from speed of light) ──► scheduler picks role ──► role proposes
//          ──► record design ──► Evaluator (cascade: rules … race) ──► ONE transaction: tree edge,
//          champion path, role stats, counters, event ──► every N accepts: re-validate champion
//
// The cascade commits each of its stages itself, so a SIGKILL loses at most the step in flight
// (its design has no edge and is evaluated again on resume). SIGINT/SIGTERM end the loop after
// the current step. Every random choice derives from the campaign seed and the step number.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign/evaluator.hpp"
#include "config/target_config.hpp"
#include "config/template_config.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/rewrites.hpp"
#include "llm/budget.hpp"
#include "search/llm_roles.hpp"
#include "search/roles.hpp"
#include "search/scheduler.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::campaign {

/// What the CLI's live display shows after each step.
struct Progress {
    std::string kernel;
    std::int64_t step = 0;
    std::string role;
    std::string design;                   ///< label of the design just evaluated
    std::string verdict;
    std::optional<double> champion_cycles;
    std::optional<double> baseline_cycles;  ///< the reference's cycles (see `reference`)
    std::string reference = "baseline";   ///< what speedup is measured against (KernelRuntime::reference)
    double speedup = 0.0;                 ///< reference / champion (0 when unknown)
    double sol_fraction = 0.0;            ///< speed of light / champion (1 = at the bound; 0 when unknown)
    std::int64_t device_runs_used = 0;
    std::int64_t device_runs_budget = 0;
    double wall_secs_used = 0.0;
    double wall_secs_budget = 0.0;
    std::optional<double> eta_secs;       ///< until a budget runs out
};

/// How a run of the loop ended.
/// toolchain_changed: another toolchain version appeared under the running loop (the run ends so
/// that it is restarted on the new version); toolchain_missing: the toolchain disappeared.
/// token_budget: the LLM's token budget (budgets.llm_tokens) is spent.
enum class StopReason { finished, wall_budget, device_budget, interrupted, step_limit, all_failed, toolchain_changed,
                        toolchain_missing, token_budget };
std::string stop_reason_name(StopReason reason);

struct CampaignOptions {
    std::filesystem::path dir;            ///< campaign directory: lock file, designs/ sources
    std::string target;
    std::uint64_t seed = 1;
    double wall_budget_secs = 7200.0;     ///< whole campaign, across resumed runs
    /// Seconds of the wall budget kept back for work after this run (a submission), given the
    /// campaign's mean launch wall time so far (0 when none yet); asked before every step. The
    /// run ends, and a step is cut at a launch boundary, where budget minus reserve is spent.
    std::function<double(double mean_launch_secs)> wall_reserve_secs;
    /// Every event the run records (kind, payload), as it is recorded; empty: none.
    std::function<void(const std::string& kind, const nlohmann::json& payload)> on_event;
    std::int64_t device_run_budget = 2000;
    std::int64_t llm_token_budget = 0;    ///< budgets.llm_tokens (recorded with the budgets)
    /// The LLM's shared token budget; the loop stops once it is spent (null: no LLM).
    std::shared_ptr<llm::TokenBudget> llm_budget;
    double device_secs_per_1k_tokens = 0.0;  ///< the scheduler's price of tokens (llm.device_secs_per_1k_tokens)
    /// Only evaluate the designs users queued (`npuopt add`), then stop.
    bool only_queued = false;
    int revalidate_every_accepts = 5;     ///< re-race the champion against its predecessor (0: only after
                                          ///< a toolchain change)
    double strict_after = 0.75;           ///< campaign age (share of the budget) from which acceptance is strict
    std::optional<std::int64_t> max_steps;///< stop this run after so many steps (tests, demos)
    /// Template proposals per step the evaluator's static estimate screens (search.schedule_screen;
    /// 0: the cost model's order).
    std::int64_t schedule_screen = 0;
    /// The screen's wall time as a share of the device runs' wall time it may always reach, and
    /// beyond it while the device-run budget would be spent well inside the wall budget
    /// (search.screen_share); nullopt: no cap; 0: no screen.
    std::optional<double> screen_share;
    std::function<void(const Progress&)> progress;
    bool take_lock = true;                ///< exclusive flock on <dir>/campaign.lock
    /// Polled between steps; default: SIGINT/SIGTERM arrived (core/interrupt).
    std::function<bool()> stop_requested;
    /// Rewrites learnt from fix-its and known failures of families, under the running version
    /// (null: designs are used as instantiated and no family is blocked).
    knowledge::SourceRules* source_rules = nullptr;
    int port_attempts = 4;                ///< designs tried per kernel when its champion is ported
    /// The LLM porter of a kernel, asked to port a design the new toolchain rejects where no
    /// fix-it mended it (empty, or null for a kernel: only fix-its port, as without an LLM).
    std::function<std::unique_ptr<search::LlmPorter>(const std::string& kernel)> porter_factory = {};
    int porter_turns = 3;                 ///< porter calls per failing design (the first and its repairs)
    /// The pipeline (campaign.yaml `parallel:`): with two or more, the loop plans a round of up to
    /// that many search steps of different kernels, evaluates them at once (step k on
    /// `parallel_evaluators[k]`, each compiling its own design; device runs through the
    /// evaluators' shared device slots), and commits them in the order planned, so that a fixed
    /// seed gives the same tree whatever order the results arrive in. Baselines, ports, resumed
    /// and queued steps and re-validations stay serial (on the main evaluator). Empty or one: the
    /// serial loop.
    std::vector<Evaluator*> parallel_evaluators = {};
};

/// One kernel as the driver needs it.
struct KernelSetup {
    config::KernelSpec spec;
    eval::KernelContext context;
    std::vector<std::shared_ptr<search::Template>> templates;  ///< baseline first
    std::vector<std::string> template_errors;                  ///< broken templates (recorded as failures)
};

/// Queue a design a user wrote (`npuopt add`) for `kernel`: recorded as a design now, evaluated
/// and raced by the next run's first step of that kernel. Returns its design id.
std::int64_t queue_user_design(store::CampaignStore& store, const std::string& target, const config::KernelSpec& kernel,
                               const std::string& source, const std::string& file_name);

/// Queue the recorded design `design_id` of `kernel` to be evaluated and raced first by the next
/// run (what `npuopt add` and `npuopt import` do); false when it is queued already.
bool queue_design(store::CampaignStore& store, const std::string& kernel, std::int64_t design_id);

/// Templates of every kernel, broken ones reported per kernel (never thrown).
std::vector<KernelSetup> prepare_kernels(const config::KernelsConfig& kernels,
                                         const std::vector<std::string>& selected,
                                         const std::filesystem::path& templates_dir, const std::string& target);

/// The result of one run of the loop.
struct KernelOutcome {
    std::string kernel;
    std::string status;                   ///< active | exhausted | failed | blocked
    std::string reason;
    std::string shape;                    ///< the kernel's shape name
    std::optional<double> baseline_cycles;  ///< the reference's cycles (see `reference`)
    std::string reference = "baseline";   ///< "baseline" or "first correct design (baseline failed: …)"
    std::optional<double> champion_cycles;
    std::string champion;                 ///< label
    std::int64_t designs = 0;
};

/// What a kernel's speedups are measured against, given why its baseline failed ("" when it
/// did not): "baseline" or "first correct design (baseline failed: <why>)".
std::string reference_text(const std::string& baseline_failure);

struct CampaignResult {
    StopReason stop = StopReason::finished;
    std::string message;
    std::int64_t steps_this_run = 0;
    std::int64_t device_runs_used = 0;
    std::vector<KernelOutcome> kernels;
};

/// Builds the roles of a kernel; the default gives the heuristic analyst, architect and tuner.
using RoleFactory = std::function<std::vector<std::unique_ptr<search::Role>>(const std::string& kernel)>;

class CampaignDriver {
public:
    CampaignDriver(store::CampaignStore& store, Evaluator& evaluator, std::vector<KernelSetup> kernels,
                   CampaignOptions options, std::optional<knowledge::HardwareModel> model = std::nullopt,
                   search::RuleCheck rule_check = {}, RoleFactory roles = {});
    ~CampaignDriver();
    CampaignDriver(const CampaignDriver&) = delete;
    CampaignDriver& operator=(const CampaignDriver&) = delete;

    /// Run (or resume) the campaign until a stop condition; takes the campaign lock first.
    CampaignResult run();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

/// `npuopt status`: a campaign's state from its database alone.
struct KernelStatus {
    std::string kernel;
    std::string status;
    std::string reason;
    std::string shape;                    ///< the kernel's shape name ("" in a database from before shapes)
    std::optional<double> baseline_cycles;  ///< the reference's cycles (first champion)
    std::string reference = "baseline";   ///< what speedup is measured against
    std::optional<double> champion_cycles;
    std::string champion;
    double speedup = 0.0;
    double sol_cycles = 0.0;
    double sol_fraction = 0.0;
    std::int64_t designs = 0;
    std::int64_t accepted = 0;
};

/// An LLM-backed role's spending and what it bought (`status`, the report).
struct LlmRoleStatus {
    std::string role;
    std::int64_t calls = 0;
    std::int64_t ok_calls = 0;
    std::int64_t tokens = 0;
    double cost = 0.0;
    std::int64_t designs = 0;     ///< tree edges of the role
    std::int64_t accepted = 0;
    double accepted_log_gain = 0.0;  ///< Σ ln(speedup over the champion it beat)
    /// Accepted speedup bought per 1k tokens: exp(Σ ln speedup × 1000 / tokens) (1 = nothing).
    double speedup_per_1k_tokens() const;
};

struct CampaignStatus {
    std::string state = "not started";   ///< not started | running | stopped | finished
    std::string stop_reason;
    std::string started_at;
    std::string heartbeat_at;
    std::int64_t pid = 0;
    std::int64_t steps = 0;
    std::int64_t device_runs_used = 0;
    std::int64_t device_runs_budget = 0;
    double wall_secs_used = 0.0;
    double wall_secs_budget = 0.0;
    double device_secs_used = 0.0;       ///< the device runs' wall time
    std::int64_t screen_calls = 0;       ///< the static-schedule screen's calls (search.schedule_screen)
    double screen_secs = 0.0;            ///< their wall time (capped at search.screen_share of device_secs_used)
    double geomean_speedup = 0.0;        ///< over kernels with a champion (0 when none)
    std::vector<KernelStatus> kernels;
    std::vector<LlmRoleStatus> llm_roles;  ///< empty without LLM calls
    std::int64_t llm_tokens_budget = 0;
};

CampaignStatus campaign_status(store::CampaignStore& store);
nlohmann::json to_json(const CampaignStatus& status);
std::string render_status_text(const CampaignStatus& status);

}  // namespace npuopt::campaign
