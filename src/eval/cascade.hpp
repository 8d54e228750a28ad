#pragma once
// The evaluation cascade: the checks a candidate design passes, cheapest first — an ordered list
// of Stage objects (stage.hpp), each returning a typed verdict — recorded through one Recorder
// (recorder.hpp) that commits the step in one transaction. Expected failures are data in the
// Outcome, never exceptions.
//
//   rules ──► estimate ──► compile ──► correctness ──► screen ──► race ──► accept / reject
//   (learned   (cost model /  (Builder;   (Runner: fresh  (few device  (interleaved A/B,
//    rules on   Estimator)     rules       seeds, anti-    runs; speed  sequential test
//    quantities)               mined)      gaming)         of light)    vs champion)

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluation.hpp"
#include "eval/recorder.hpp"
#include "eval/stage.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/rewrites.hpp"
#include "knowledge/rules.hpp"
#include "store/campaign_store.hpp"
#include "target/device.hpp"

namespace npuopt::eval {

/// Runs the cascade for one kernel of a campaign.
class Cascade {
public:
    /// `device` builds, estimates and runs; results are recorded in `store`; `rules` (may be null)
    /// is read by the rules stage and learns from diagnostics; `model` (may be null) gives the
    /// speed-of-light bound.
    Cascade(const target::Device& device, store::CampaignStore& store, knowledge::RuleBook* rules,
            const knowledge::HardwareModel* model, CascadeConfig config);

    /// Evaluate `candidate` against `champion` (none: the first correct design becomes champion
    /// after the screen): the stages in order until one does not pass. Records every stage
    /// (committed at the end, or by commit() when deferred). Throws only for conditions that end
    /// the command.
    Outcome evaluate(const Candidate& candidate, const std::optional<Champion>& champion, const KernelContext& kernel);

    /// Re-race the champion against its predecessor (regularly, and after a toolchain change);
    /// returns the race outcome (accepted = the champion is still faster).
    Outcome revalidate(const Champion& champion, const Champion& predecessor, const KernelContext& kernel);

    /// Median cycles of seeded device runs, one per seed, each checked and passing correctness
    /// (submission, baseline, `npuopt eval`). Derive the seeds with SeedStream (seed_stream.hpp).
    struct Measured { std::optional<double> cycles_median; std::vector<double> cycles; bool all_passed = false; std::string reason; };
    Measured measure(const Candidate& candidate, const KernelContext& kernel, const std::vector<std::uint64_t>& seeds);

    /// Speed-of-light bound in cycles from the hardware model (0 when unknown).
    double speed_of_light_cycles(const KernelContext& kernel) const;

    /// The stages evaluate() runs, made afresh for each evaluation (default: cascade_stages()).
    void set_stages(std::function<std::vector<std::unique_ptr<Stage>>()> make_stages) { m_make_stages = std::move(make_stages); }
    /// When deferred, evaluate() and revalidate() keep their records for commit(), so that the
    /// caller's own writes for the step land in the same transaction.
    void set_deferred_commit(bool deferred) { m_deferred = deferred; }
    /// Commit what the last evaluation kept, then `step_writes`, in one transaction.
    void commit(const std::function<void()>& step_writes = {}) { recorder().commit(step_writes); }
    /// Record through `recorder` instead of the store (tests: an in-memory recorder); null
    /// returns to the store. `measure` always records in the store.
    void set_recorder(Recorder* recorder) { m_external_recorder = recorder; }
    /// Rewrites and known failures: the compile stage tries the toolchain's fix-its on a failing
    /// design and records what they taught (null: fix-its are not tried).
    void set_source_rules(knowledge::SourceRules* rules) { m_source_rules = rules; }

    void set_config(CascadeConfig config) { m_config = std::move(config); }
    /// Device runs the next evaluations may spend (the campaign's budget left); none = no cap.
    /// The race stops, inconclusive, rather than run past it.
    /// Every stage stops (inconclusive, budget_exhausted) before a launch that would pass it.
    void set_device_run_allowance(std::optional<std::int64_t> allowance) { m_allowance = allowance; }
    /// When the campaign's wall-time budget ends (none = no limit): from then on no stage starts
    /// another launch and a race ends before its next pair, inconclusive with budget_exhausted, so
    /// a step overruns by at most the launch in flight.
    void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) { m_deadline = deadline; }
    /// Called just before every device launch (retries included), so a caller can persist the
    /// count as launches happen: a killed step's launches are still charged.
    void set_launch_hook(std::function<void()> hook) { m_launch_hook = std::move(hook); }
    const CascadeConfig& config() const { return m_config; }
    /// The toolchain's static schedule of `design` (its cost-model prediction ignored), through
    /// the same cache the estimate stage uses; illegal with the schedule's diagnostics when it
    /// rejects the design. No rules are mined from it (the estimate stage does that).
    Estimate static_estimate(const Candidate& design, const KernelContext& kernel);

private:
    Estimate estimate_cycles(const Candidate& design, const KernelContext& kernel, bool mine);
    std::shared_ptr<const SequentialDesign> sequential_design();
    /// The configured test with its last look at most `max_pairs` (within_pairs), made once per cap.
    std::shared_ptr<const SequentialDesign> sequential_design_within(std::size_t max_pairs);
    std::optional<std::int64_t> toolchain_version_id();
    std::string bench_config_hash(const KernelContext& kernel) const;
    /// The context the stages of one evaluation share.
    StageContext context_for(const Candidate& candidate, const std::optional<Champion>& champion,
                             const KernelContext& kernel, Outcome& outcome);
    /// Whether the allowance has room for another launch; counts it (and calls the hook) when so.
    bool start_launch();
    void finish_recording();
    Recorder& recorder() { return m_external_recorder ? *m_external_recorder : m_recorder; }

    const target::Device* m_device;
    store::CampaignStore* m_store;
    knowledge::RuleBook* m_rules;
    knowledge::SourceRules* m_source_rules = nullptr;
    const knowledge::HardwareModel* m_model;
    StoreRecorder m_recorder;
    Recorder* m_external_recorder = nullptr;
    std::function<std::vector<std::unique_ptr<Stage>>()> m_make_stages;
    bool m_deferred = false;
    std::optional<std::int64_t> m_allowance;
    std::optional<std::chrono::steady_clock::time_point> m_deadline;
    bool out_of_time() const { return m_deadline && std::chrono::steady_clock::now() >= *m_deadline; }
    std::function<void()> m_launch_hook;
    std::int64_t m_launches_started = 0;  ///< launches of the current evaluate/revalidate call
    CascadeConfig m_config;
    std::shared_ptr<const SequentialDesign> m_sequential_design;  ///< for m_sequential_config
    SequentialConfig m_sequential_config;
    std::map<std::size_t, std::shared_ptr<const SequentialDesign>> m_capped_designs;  ///< for m_sequential_config
    std::optional<std::optional<std::int64_t>> m_toolchain_version_id;  ///< looked up once
    std::map<std::string, double> m_estimate_cache;  ///< schedule cycles by content hash
    /// The launch noise measured so far: each evaluated design's checked launches (three or more)
    /// as log cycles less their median, the latest k_launch_noise_pool kept.
    std::vector<double> m_launch_residuals;
    static constexpr std::size_t k_launch_noise_pool = 400;
    void pool_launch_noise(const std::vector<double>& cycles);
    /// Before the first evaluation of a run: the pool refilled from the correctness launches the
    /// store holds (a resumed campaign keeps the noise it measured).
    void restore_launch_noise();
    bool m_launch_noise_restored = false;
};

/// The hash of the benchmark configuration (kernel, shape, acceptance, checks) that tags every
/// evaluation the cascade records under `config` (store: evaluations.bench_config_hash).
std::string bench_config_hash(const CascadeConfig& config, const KernelContext& kernel);

}  // namespace npuopt::eval
