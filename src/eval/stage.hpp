#pragma once
// A stage of the cascade: one object per check, run in order by the cascade (cascade.hpp). A
// stage reads the candidate and what the stages before it found (`StageContext`), may launch on
// the device through the context's gate, and returns a typed `StageResult`; the cascade records
// it (recorder.hpp) and goes on when the result says so (a pass, or a stage skipped for want of
// its inputs, such as the rules stage without a rule book).
//
//   RulesStage ─► EstimateStage ─► CompileStage ─► CorrectnessStage ─► ScreenStage ─► RaceStage

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/evaluation.hpp"
#include "eval/judge.hpp"
#include "eval/launch_log.hpp"
#include "eval/recorder.hpp"
#include "eval/speed_of_light.hpp"
#include "knowledge/rewrites.hpp"
#include "knowledge/rules.hpp"
#include "target/device.hpp"

namespace npuopt::eval {

/// A static estimate: cycles, or why there is none (`illegal`: the schedule found an error).
struct Estimate {
    std::optional<double> cycles;
    std::string why;
    bool illegal = false;
    bool fixable = false;  ///< illegal, but the toolchain suggests machine-applicable fix-its
    std::vector<target::Diagnostic> diagnostics;  ///< the schedule's, when it rejected the design
};

/// What a stage sees: the evaluation's inputs, the services it may use, and what earlier
/// stages left for later ones.
struct StageContext {
    const Candidate& candidate;
    const std::optional<Champion>& champion;
    const KernelContext& kernel;
    const CascadeConfig& config;
    const target::Device& device;
    knowledge::RuleBook* rules;        ///< may be null: no rule book
    Recorder& recorder;
    SpeedOfLight bound;
    knowledge::DesignRef design;       ///< the candidate as the rule book knows it
    LaunchGate may_launch;             ///< counts a launch against the allowance; false when spent
    std::function<std::optional<std::int64_t>()> launches_left;  ///< none: no allowance
    std::function<void()> race_launch_started;  ///< the race's launches are counted by its plan
    std::function<Estimate(const Candidate& design, bool mine)> estimate;  ///< cached static estimates
    std::function<std::shared_ptr<const SequentialDesign>()> sequential_design;
    Outcome& outcome;                  ///< filled as stages run (cycles, correctness, the race)
    std::vector<double> checked_cycles;  ///< correctness → screen: the checked launches' cycles
    knowledge::SourceRules* source_rules = nullptr;  ///< rewrites and known failures (may be null)
    std::function<bool()> out_of_time;  ///< the campaign's wall-time budget has run out (may_launch refuses too)
    /// The race's test placed for at most this many pairs (may be null: the full design only).
    std::function<std::shared_ptr<const SequentialDesign>(std::size_t max_pairs)> sequential_design_within;
    /// Log cycles less their design's median, pooled over this cascade's earlier designs (the
    /// device's launch noise as measured; empty: none yet).
    std::span<const double> launch_residuals = {};

    /// Which budget stopped a launch, for reasons: "wall-time budget" or "device-run budget".
    std::string spent_budget() const { return out_of_time && out_of_time() ? "wall-time budget" : "device-run budget"; }
};

/// How a stage ended.
struct StageResult {
    Verdict verdict = Verdict::pass;
    std::string reason;
    bool go_on = false;                    ///< the cascade runs the next stage (pass; a stage skipped for want of inputs)
    std::optional<StageKind> recorded_as;  ///< another stage's name on the record (a quick reject is the screen's)
    const LaunchLog* launches = nullptr;   ///< the stage's launches, recorded with it
    bool recorded = false;                 ///< the stage recorded itself (a journalled race)
    StageRecord record;                    ///< when recorded: what it recorded (the outcome keeps it)
};

/// One check of the cascade.
class Stage {
public:
    virtual ~Stage() = default;
    virtual StageKind kind() const = 0;
    virtual StageResult run(StageContext& context) = 0;
};

std::unique_ptr<Stage> make_rules_stage();
std::unique_ptr<Stage> make_estimate_stage();
std::unique_ptr<Stage> make_compile_stage();
std::unique_ptr<Stage> make_correctness_stage();
std::unique_ptr<Stage> make_screen_stage();
std::unique_ptr<Stage> make_race_stage();
/// The six stages in order.
std::vector<std::unique_ptr<Stage>> cascade_stages();

/// The verdict of a race decision.
Verdict decision_verdict(Decision decision);

/// A race run with its launches journalled (recorder.hpp) on both sides' rows.
struct RaceOutcome {
    JudgeReport report;
    StageRecord record;                             ///< verdict = the decision; counts and time filled
    std::optional<std::int64_t> candidate_journal;  ///< side B's row
    std::optional<std::int64_t> champion_journal;   ///< side A's row
};

/// Race `side_b` (the candidate) against `side_a` (the champion), journalling every launch;
/// fills the context's outcome with the race's figures. The checked launches are drawn from
/// (`check_seed`, side B's hash, `check_salt`). The journals are left open for the caller to close.
/// `design`: the test to race with (null: the configured one, context.sequential_design()).
RaceOutcome run_journalled_race(StageContext& context, const Candidate& side_a, const Candidate& side_b,
                                const RaceConfig& race_config, std::uint64_t check_seed, const char* check_salt,
                                const std::string& b_note, const std::string& a_note,
                                std::shared_ptr<const SequentialDesign> design = nullptr);

/// Bytes the kernel must move: the caller's figure, else computed from kernels.yaml's tensors
/// (0 when a dtype or dimension is unknown: no bound rather than a wrong one).
double min_bytes(const KernelContext& kernel);

}  // namespace npuopt::eval
