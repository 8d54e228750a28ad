#pragma once
// Roles: policies over a kernel's design tree that propose the next designs to evaluate. Each
// proposal carries the move and the reason, which the tree records on its edge. The interface is
// all the driver sees, so an LLM-backed role can replace a heuristic one without touching it.
//
//   analyst   — attributes the champion's time to roofline terms of the fitted hardware model and
//               proposes moves that shrink the dominant one (or, when the model explains little,
//               moves on params the model cannot see)
//   architect — other families × promising parameter regions (seeded samples ranked by the cost model)
//   tuner     — one- and two-parameter moves from the champion, ranked by the cost model
//   judge     — the cascade's race; invoked by the driver, proposes nothing

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/verdict.hpp"
#include "search/cost_model.hpp"
#include "search/design.hpp"

namespace npuopt::search {

/// Why known rules forbid a design's quantities and features ("" = allowed).
using RuleCheck = std::function<std::optional<std::string>(const std::map<std::string, double>& quantities)>;

/// What a role sees when it is asked to propose.
struct SearchContext {
    std::string kernel;
    std::vector<std::shared_ptr<Template>> templates;   ///< the kernel's templates (baseline included)
    std::optional<Design> champion;                     ///< none before the baseline is measured
    double champion_cycles = 0.0;                       ///< measured median (0 when unknown)
    double speed_of_light_cycles = 0.0;                 ///< the weight-movement minimum (0 when unknown)
    const CyclePredictor* cost_model = nullptr;           ///< none: roles rank by nothing the model says
    std::function<bool(const std::string& content_hash)> is_known;  ///< evaluated (or in flight) already
    RuleCheck rule_check;                               ///< may be empty: no rules known
    /// designs measured per family so far (a design that failed to compile or was skipped before
    /// a device run does not count: its family is still unmeasured, and entered at its defaults)
    std::map<std::string, std::int64_t> family_designs;
    double age = 0.0;                                   ///< campaign age 0..1 (budget used)
    std::uint64_t seed = 0;                             ///< this step's seed (from the campaign seed)
    int max_proposals = 4;
    /// How many of a role's first proposals the static-schedule screen will estimate before one is
    /// chosen (search.schedule_screen; 0: no screen). The heuristic roles then return that many,
    /// and the tuner makes sure every one-parameter move of the champion is among them: the
    /// schedule sees effects the cost model's quantities do not (which engines a command waits
    /// for), so the moves the model ranks slower get the schedule's word too.
    int screen_width = 0;
    /// Cost terms whose hardware parameters moved at the last toolchain update (e.g. a cheaper
    /// tensor-unit pass): the analyst first re-tunes the parameters that move them.
    std::vector<std::string> reopened_terms;
    /// How far the cost model's predicted gains over the champion have come true in this run,
    /// by the number of parameters a move changes (1, 2): the slope of measured on predicted log
    /// ratios, in [0, 1]. A neighbour's prediction is shrunk towards the champion's by it (absent:
    /// 1, the model as it is). See KernelSearch::prediction_trust.
    std::map<int, double> prediction_trust;
    /// The champion's quantities and the model's prediction for it, computed once per proposal
    /// (prepare_champion_model); empty: score_assignment computes them itself.
    std::optional<std::map<std::string, double>> champion_quantities;
    std::optional<double> champion_model_cycles;
};

/// Before a proposal: the champion's quantities and the model's prediction for it into `context`
/// (nothing for a baseline, a design from source, or without a template).
void prepare_champion_model(SearchContext& context);

/// Where an LLM-written design came from: the call, the hashes of its prompt and reply, its tokens.
struct LlmProvenance {
    std::int64_t call_id = 0;
    std::string prompt_hash;
    std::string reply_hash;
    std::int64_t tokens = 0;   ///< of the call (shared by its n choices)
    std::int64_t charged_tokens = 0;  ///< what the scheduler charges this design: the call's tokens on its first design, 0 on the others
    std::int64_t choice = 0;   ///< which of the call's choices
    std::int64_t turn = 0;     ///< 0: first answer; k: the k-th repair
    std::string model;
};

/// One proposed design with the move that produced it and why.
struct Proposal {
    Design design;
    std::string role;
    std::string move;     ///< e.g. "ENGINES 2→4", "family two_phase_k_outer"
    std::string reason;   ///< in words a person can check
    std::optional<double> predicted_cycles;
    std::optional<LlmProvenance> llm;   ///< set when an LLM wrote the design
    bool reopened = false;  ///< the analyst re-tunes a cost term a toolchain update moved
    /// A check, not a bet (the defaults check): taken on the screen's clear win, never raced, so
    /// that a near tie with the champion costs the screen's launches and no race.
    bool clear_win_only = false;
    /// A move of the champion's neighbourhood: how many parameters it changes (0: not such a
    /// move) and the cost model's own log(predicted / the champion's predicted), before any
    /// prediction_trust shrank it. What the search learns its trust from.
    int changed_params = 0;
    std::optional<double> model_log_gain;
};

/// How a step ended, as the search learns from it (the driver builds it after the judge).
struct StepFeedback {
    std::string kernel;
    Proposal proposal;                       ///< what was tried, by which role
    eval::StepVerdict verdict = eval::StepVerdict::rejected;
    std::optional<double> cycles;            ///< measured median (none: not measured)
    double device_secs = 0.0;
    bool became_champion = false;
    double champion_cycles_before = 0.0;     ///< 0: there was no champion
    bool scored = true;                      ///< false for the baseline and steps against it: no reward
    double speed_of_light_cycles = 0.0;      ///< the bound, for the reward's scale (0 when unknown)
    std::string last_stage;                  ///< the cascade stage the step ended in ("compile", "correctness", …)
    std::string final_reason;                ///< why it ended there, diagnostics included

    /// Whether the step measured its design (its cycles teach the cost model).
    bool measured() const { return cycles.has_value() && eval::step_measured(verdict); }
};

/// A role of the search, with a lifecycle (after MetaSchedule's SearchStrategy):
///
///   start(kernel) ─► propose(context) ─► [driver evaluates] ─► notify(feedback) ─► … ─► finish()
class Role {
public:
    virtual ~Role() = default;
    virtual std::string name() const = 0;
    /// Once per kernel and run, before the first proposal (resume: after the replay of the tree).
    virtual void start(const std::string& kernel) { (void)kernel; }
    /// Designs to try next, best first; none that is known or that known rules forbid.
    virtual std::vector<Proposal> propose(const SearchContext& context) = 0;
    /// Whether a role that just proposed nothing may have something when asked again (an LLM
    /// role whose call went wrong); false: nothing until the search learns more.
    virtual bool may_propose_more() const { return false; }
    /// The result of every step of the kernel (its own proposals' and other roles').
    virtual void notify(const StepFeedback& feedback) { (void)feedback; }
    /// Once when the run ends.
    virtual void finish() {}
};

/// The analyst's reading of the champion.
struct Attribution {
    CostTerms terms;
    double measured_cycles = 0.0;
    double predicted_cycles = 0.0;
    double explained = 0.0;          ///< predicted / measured (1 = the model explains it all)
    double sol_ratio = 0.0;          ///< measured / speed of light (0 when unknown)
    std::string dominant;            ///< largest term, or "unexplained"
    std::vector<std::string> reduce; ///< quantities to reduce
    std::string text;                ///< one paragraph for the tree and the log
};

/// Roofline attribution of the champion (no champion quantities: a baseline; says so).
Attribution attribute(const SearchContext& context);

std::unique_ptr<Role> make_analyst();
std::unique_ptr<Role> make_architect(int samples_per_family = 96);
std::unique_ptr<Role> make_tuner();
/// analyst, architect, tuner (the judge is the driver's cascade).
std::vector<std::unique_ptr<Role>> make_heuristic_roles();

/// A candidate before instantiation (shared by the heuristic roles).
struct ScoredAssignment {
    const Template* source_template = nullptr;
    Assignment assignment;
    std::map<std::string, double> quantities;  ///< quantities and features together
    std::optional<double> predicted;
    /// Optimism, in log cycles, that the ranking subtracts from the prediction: the tuner's and the
    /// analyst's credit for a move to a parameter value the family has never measured.
    double explore = 0.0;
    std::string move;
    int changed_params = 0;                ///< parameters changed from the champion's (0: unknown)
    std::optional<double> model_log_gain;  ///< the model's log(predicted / champion's), unshrunk
};

/// The template of `context` named `name`, or null.
const Template* find_template(const SearchContext& context, const std::string& name);

/// Score `assignment` of `tmpl`: nullopt when it breaks the domain, a constraint or a known rule.
std::optional<ScoredAssignment> score_assignment(const SearchContext& context, const Template& tmpl,
                                                 const Assignment& assignment, std::string move);

/// One-parameter moves (every other value) and two-parameter moves (neighbouring values) of `base`.
std::vector<std::pair<Assignment, std::string>> neighbour_assignments(const Template& tmpl, const Assignment& base);

}  // namespace npuopt::search
