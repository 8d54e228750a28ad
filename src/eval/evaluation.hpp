#pragma once
// The values of an evaluation: the candidate and its kernel, the cascade's settings, each stage's
// record and the outcome. Plain data shared by the stages (stage.hpp), the recorder
// (recorder.hpp) and the cascade (cascade.hpp).

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "config/target_config.hpp"
#include "eval/sequential.hpp"
#include "eval/verdict.hpp"
#include "target/fixits.hpp"

namespace npuopt::eval {

/// A design as evaluation sees it (search/ builds it; eval never includes search/).
struct Candidate {
    std::int64_t design_id = 0;               ///< row in the store's designs table
    std::string content_hash;
    std::string kernel;
    std::string family;                       ///< the template family ("" when unknown)
    std::filesystem::path source_file;        ///< instantiated source on disk
    std::map<std::string, double> quantities; ///< declared by the template for this assignment
    std::map<std::string, double> features;   ///< design features (runtime rules key on them)
    std::optional<double> predicted_cycles;   ///< the search's cost-model prediction, if any
    bool clear_win_only = false;              ///< accepted only on the screen's clear win, never raced
};

/// The kernel being optimised: its spec, shape and the bytes it must move at least.
struct KernelContext {
    config::KernelSpec spec;
    std::map<std::string, std::int64_t> shape;
    double min_bytes_moved = 0.0;  ///< weights + inputs + outputs, from kernels.yaml tensors
};

/// The stages of the cascade, in order (store: evaluations.stage; `measure` is not a stage of it).
enum class StageKind { rules, estimate, compile, correctness, screen, race };
std::string stage_name(StageKind stage);
std::ostream& operator<<(std::ostream& out, StageKind stage);

/// One stage's record (mirrors a store evaluation row).
struct StageRecord {
    StageKind stage = StageKind::rules;
    Verdict verdict = Verdict::pass;
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
    double second_look_ratio = 0.98;    ///< both of the first two checked launches slower than ratio × the
                                        ///< champion's median reject (two launches for a near-tie loser; 0 = off).
                                        ///< At the screen's bar: a median of four under it needs both other
                                        ///< launches under it too (strict(): raised with the screen's bar)
    double clear_win_ratio = 0.90;      ///< screen accepts without a race when the slowest of at least
                                        ///< clear_win_min_launches correct launches is under ratio × the
                                        ///< champion's median (a gain far beyond the noise; 0 = always race)
    int clear_win_min_launches = 3;
    int clear_win_champion_launches = 2;  ///< fresh champion launches that confirm a clear win: the
                                        ///< reference is the lower of the champion's recorded median and
                                        ///< its fastest fresh launch (a median inflated by outliers or
                                        ///< drift since it was recorded fakes no win; 0 = trust the median)
    int transient_retries = 3;
    double race_budget_share = 0.25;    ///< a race may spend at most this share of the launches the
                                        ///< device-run budget has left, or the smallest race whose
                                        ///< placed test can accept where that is more and the launches
                                        ///< left allow it: a near-tie cannot eat a small campaign;
                                        ///< stopping early only makes the race inconclusive (0 = no cap)
    double race_min_accept_probability = 0.3;  ///< a candidate past the screen is raced only when a race of
                                        ///< the pairs it can afford would accept with at least this chance, at
                                        ///< the screen's ratio and the launch noise measured so far (0 = always race)
    int race_noise_min_launches = 12;   ///< launch residuals pooled before that chance is estimated at all
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

/// The toolchain's fix-its tried on a design that failed the check.
struct FixitAttempt {
    std::vector<target::SourceEdit> edits;  ///< what the fix-its replaced
    bool kept = false;                      ///< the fixed source passed the check again
    std::string reason;                     ///< why kept or not
    std::vector<std::string> skipped;       ///< suggestions not applied, with why
};

/// A declared quantity the toolchain reported larger in a diagnostic: the template's formula for
/// it falls short by at least `reported - declared` (e.g. dm_bytes declared 523904, npuc's E0201
/// says 525568).
struct QuantityMiss {
    std::string quantity;
    double declared = 0.0;
    double reported = 0.0;
    std::string code;   ///< the diagnostic's code
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
    std::optional<FixitAttempt> fixit;      ///< the compile stage tried the toolchain's fix-its
    std::vector<QuantityMiss> quantity_misses;  ///< declared quantities the toolchain's diagnostics exceed
};

/// The champion as the cascade needs it.
struct Champion {
    Candidate candidate;
    double cycles_median = 0.0;
};

}  // namespace npuopt::eval
