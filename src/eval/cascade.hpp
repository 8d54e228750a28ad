#pragma once
// The evaluation cascade: the checks a candidate design passes, cheapest first, each stage
// recorded (store: evaluations + measurements, one transaction per stage) with its time,
// verdict and reason. Expected failures are data in the Outcome, never exceptions.
//
//   rules ──► estimate ──► compile ──► correctness ──► screen ──► race ──► accept / reject
//   (learned   (cost model /  (toolchain  (fresh seeds,   (few device  (interleaved A/B,
//    rules on   static         check;      anti-gaming)    runs; speed  sequential test
//    quantities) schedule)     rules mined)                of light)    vs champion)

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/target_config.hpp"
#include "eval/sequential.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/rules.hpp"
#include "store/campaign_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::eval {

/// A design as evaluation sees it (search/ builds it; eval never includes search/).
struct Candidate {
    std::int64_t design_id = 0;               ///< row in the store's designs table
    std::string content_hash;
    std::string kernel;
    std::filesystem::path source_file;        ///< instantiated source on disk
    std::map<std::string, double> quantities; ///< declared by the template for this assignment
    std::map<std::string, double> features;   ///< design features (runtime rules key on them)
    std::optional<double> predicted_cycles;   ///< the search's cost-model prediction, if any
};

/// The kernel being optimised: its spec, shape and the bytes it must move at least.
struct KernelContext {
    config::KernelSpec spec;
    std::map<std::string, std::int64_t> shape;
    double min_bytes_moved = 0.0;  ///< weights + inputs + outputs, from kernels.yaml tensors
};

enum class Stage { rules, estimate, compile, correctness, screen, race };
std::string stage_name(Stage stage);

/// One stage's record (mirrors a store evaluation row).
struct StageRecord {
    Stage stage = Stage::rules;
    std::string verdict;  ///< pass | fail | skip | accept | reject | inconclusive | suspect | error; in the
                          ///< store also running (a race in progress) and interrupted (its process ended)
    std::string reason;   ///< why, in words a person can act on
    double secs = 0.0;
    std::int64_t device_runs = 0;      ///< device launches, failed ones included
    std::int64_t failed_launches = 0;  ///< launches that failed (transiently or not)
    std::int64_t retries = 0;          ///< launches repeated after a transient failure
};

/// The cascade's settings; `strict()` is the late-campaign preset.
struct CascadeConfig {
    SequentialConfig acceptance;        ///< the judge's pre-registered test
    double screen_slack = 1.5;          ///< skip when predicted > slack × champion (estimate stage)
    double exploration_allowance = 0.1; ///< share of screened-out designs let through anyway
    int correctness_seeds = 2;          ///< fresh seeds checked for correctness
    int screen_runs = 0;                ///< device runs the screen adds to the correctness launches' cycles
    double screen_max_ratio = 0.98;     ///< screen rejects when median > ratio × champion median: only a
                                        ///< candidate that already looks clearly faster is worth a race
                                        ///< while exploring (strict(): 0.995, late refinements too)
    double quick_reject_ratio = 1.10;   ///< the first checked launch slower than ratio × the champion's
                                        ///< median rejects at once (one launch for a clear loser; 0 = off)
    int transient_retries = 3;
    std::uint64_t seed = 0;             ///< all random choices derive from it (campaign seed)
    std::optional<std::uint64_t> priming_seed;  ///< correctness: a launch before the fresh seeds, so a kernel
                                        ///< that returns the previous run's output has a correct one to return;
                                        ///< none (the default): derived from the seed and the design's hash
    double check_fraction = 1.0;        ///< share of screen and race launches run with the toolchain's check
                                        ///< (target.yaml run_check.fraction); correctness and measure
                                        ///< launches are always checked
    double magnitude_factor = 4.0;      ///< correctness: mean |out| within this factor of the reference's
    double speed_of_light_tolerance = 0.97;  ///< a median below this share of the bound is suspect
    std::vector<std::string> run_extra_args; ///< appended to every device run's argv (tests: a hidden flag)
    static CascadeConfig strict(CascadeConfig base);
};

/// The result of evaluating one candidate.
struct Outcome {
    bool accepted = false;                  ///< becomes the new champion
    bool correct = false;                   ///< passed the correctness stage
    std::vector<StageRecord> stages;
    std::optional<double> cycles_median;    ///< from the screen/race (candidate)
    std::optional<double> champion_cycles_median;
    std::optional<double> speedup;          ///< champion / candidate estimate (race)
    std::optional<double> speedup_lower;    ///< the race's distribution-free interval on the speedup
    std::optional<double> speedup_upper;
    std::size_t race_pairs = 0;             ///< pairs the race completed
    std::int64_t device_runs = 0;
    double device_secs = 0.0;
    std::string final_reason;
    bool budget_exhausted = false;          ///< a stage stopped at the device-run allowance, undecided
};

/// The champion as the cascade needs it.
struct Champion {
    Candidate candidate;
    double cycles_median = 0.0;
};

/// Runs the cascade for one kernel of a campaign.
class Cascade {
public:
    Cascade(const target::Toolchain& toolchain, store::CampaignStore& store, knowledge::RuleBook* rules,
            const knowledge::HardwareModel* model, CascadeConfig config);

    /// Evaluate `candidate` against `champion` (none: the first correct design becomes champion
    /// after the screen). Records every stage. Throws only for conditions that end the command.
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

    void set_config(CascadeConfig config) { m_config = std::move(config); }
    /// Device runs the next evaluations may spend (the campaign's budget left); none = no cap.
    /// The race stops, inconclusive, rather than run past it.
    /// Every stage stops (inconclusive, budget_exhausted) before a launch that would pass it.
    void set_device_run_allowance(std::optional<std::int64_t> allowance) { m_allowance = allowance; }
    /// Called just before every device launch (retries included), so a caller can persist the
    /// count as launches happen: a killed step's launches are still charged.
    void set_launch_hook(std::function<void()> hook) { m_launch_hook = std::move(hook); }
    const CascadeConfig& config() const { return m_config; }

private:
    /// A static estimate: cycles, or why there is none (`illegal`: the schedule found an error).
    struct Estimate { std::optional<double> cycles; std::string why; bool illegal = false; };
    Estimate estimate_cycles(const Candidate& design, const KernelContext& kernel, bool mine);
    std::shared_ptr<const SequentialDesign> sequential_design();
    std::optional<std::int64_t> toolchain_version_id();
    std::string bench_config_hash(const KernelContext& kernel) const;
    std::int64_t record_stage(const Candidate& candidate, const StageRecord& record, const KernelContext& kernel,
                              const std::vector<store::MeasurementRecord>& measurements);
    /// A stage recorded as it goes: its row with verdict "running" now, its final record later.
    std::int64_t begin_stage(const Candidate& candidate, Stage stage, const KernelContext& kernel,
                             const std::string& reason);
    void complete_stage(std::int64_t evaluation_id, const StageRecord& record);
    /// Whether the allowance has room for another launch; counts it (and calls the hook) when so.
    bool start_launch();
    std::uint64_t priming_seed(const Candidate& candidate) const;

    const target::Toolchain* m_toolchain;
    store::CampaignStore* m_store;
    knowledge::RuleBook* m_rules;
    const knowledge::HardwareModel* m_model;
    std::optional<std::int64_t> m_allowance;
    std::function<void()> m_launch_hook;
    std::int64_t m_launches_started = 0;  ///< launches of the current evaluate/revalidate call
    CascadeConfig m_config;
    std::shared_ptr<const SequentialDesign> m_sequential_design;  ///< for m_sequential_config
    SequentialConfig m_sequential_config;
    std::optional<std::optional<std::int64_t>> m_toolchain_version_id;  ///< looked up once
    std::map<std::string, double> m_estimate_cache;  ///< schedule cycles by content hash
};

}  // namespace npuopt::eval
