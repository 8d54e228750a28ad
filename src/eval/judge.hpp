#pragma once
// The judge: drives a race (race.hpp) on the device through the toolchain. Every launch is its
// own process (`repeat 1`), the two sides alternate which goes first, both launches of a pair
// use the pair's fresh seed, and the sequential test (sequential.hpp) decides. Transient
// failures are retried by the race and counted; every launch is kept for the record.
//
//   Race::next_pair ─► launch order[0] ─► launch order[1] ─► Race::record_pair ─► ... ─► verdict

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/race.hpp"
#include "eval/sequential.hpp"
#include "target/device.hpp"

namespace npuopt::eval {

/// What one side of a race launches.
struct LaunchSpec {
    std::filesystem::path file;
    std::string kernel;
    std::map<std::string, std::int64_t> shape;
    std::vector<std::string> extra_args;  ///< appended to the run argv (RunRequest::extra_args)
};

/// One launch as the judge saw it: the race's view plus the device time it cost.
struct JudgedLaunch {
    LaunchResult result;        ///< secs holds cycles (the race only uses ratios)
    double device_secs = 0.0;   ///< wall time of the process
    std::optional<double> wall_ms;
};

/// Launches one side with one input seed (a fake in tests, the toolchain in `Judge`).
using Launcher = std::function<JudgedLaunch(Side side, std::uint64_t seed)>;

/// A finished race with everything it measured.
struct JudgeReport {
    RaceVerdict verdict;
    std::vector<Observation> observations;   ///< every launch in order, failed ones included
    std::vector<std::optional<double>> wall_ms;  ///< per observation
    std::vector<double> champion_cycles;     ///< successful launches only
    std::vector<double> candidate_cycles;
    double device_secs = 0.0;
};

/// Told of every launch as soon as its pair is recorded (index in the race's launch order), so a
/// caller can persist it before the next launch: a killed process loses no completed launch.
using LaunchObserver = std::function<void(std::size_t launch_idx, const Observation& observation,
                                          std::optional<double> wall_ms)>;

/// Run a race to its end, launching through `launcher`.
JudgeReport run_race(std::shared_ptr<const SequentialDesign> design, const RaceConfig& config,
                     const Launcher& launcher, const LaunchObserver& observer = {});

/// Map a toolchain run to a launch result: cycles of its one repeat, or an error that is
/// transient (CallStatus transient or crashed) or persistent (failure, hang, unparsable). A
/// `checked` launch whose verify line failed, or that printed none, is a persistent failure
/// marked `incorrect`, whatever its cycles: a wrong kernel's time is never raced.
JudgedLaunch to_judged_launch(const target::RunResult& result, bool checked = false);

/// Why a checked launch is not correct (empty when its verify line passed).
std::string incorrect_reason(const target::RunResult& result);

/// Whether a launch of the race is checked: asked once per launch, in launch order.
using CheckChooser = std::function<bool(Side side)>;

/// The judge on a device's runner (the toolchain, or a fake in tests).
class Judge {
public:
    Judge(const target::Runner& runner, std::shared_ptr<const SequentialDesign> design);

    /// One process launch of `spec` with `seed`, repeat 1, with the toolchain's correctness
    /// check when `check` (an incorrect result is a persistent, `incorrect` failure).
    JudgedLaunch launch(const LaunchSpec& spec, std::uint64_t seed, bool check = true) const;

    /// Race `candidate` against `champion`; the config's seed drives the plan. `check` chooses
    /// the checked launches (empty: every launch is checked). A candidate launch that fails its
    /// check ends the race: rejected as incorrect.
    JudgeReport race(const LaunchSpec& champion, const LaunchSpec& candidate, const RaceConfig& config,
                     const LaunchObserver& observer = {}, const CheckChooser& check = {}) const;

    const SequentialDesign& design() const { return *m_design; }

private:
    const target::Runner* m_runner;
    std::shared_ptr<const SequentialDesign> m_design;
};

}  // namespace npuopt::eval
