#pragma once
// The report's time series, read from the campaign database alone: each kernel's best-so-far
// champion over the campaign's steps (against device runs and wall time), every race with its
// speedup interval, and which role proposed each step.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/campaign_store.hpp"

namespace npuopt::report {

/// A kernel's champion after one of its steps.
struct ProgressPoint {
    std::int64_t step = 0;
    std::int64_t device_runs = 0;     ///< the campaign's steps' device runs so far, all kernels
    std::optional<double> wall_secs;  ///< since the campaign's first step (none: no timestamp)
    double best_cycles = 0.0;         ///< lowest champion cycles on the champion path so far
    std::string role;
    std::string verdict;
};

/// A race's speedup and its interval, as the cascade recorded it in the race's reason.
struct RacePoint {
    std::int64_t evaluation_id = 0;
    std::int64_t design_id = 0;
    std::optional<std::int64_t> step;  ///< the step that proposed the design
    std::string verdict;               ///< accept | reject | inconclusive | suspect | fail
    bool revalidation = false;         ///< a champion re-raced against its predecessor
    double speedup = 0.0;
    double lower = 0.0;
    double upper = 0.0;
};

/// One kernel's series.
struct KernelSeries {
    std::string kernel;
    std::vector<ProgressPoint> progress;      ///< one per step of the kernel once it has a champion
    std::optional<double> reference_cycles;   ///< the first champion's cycles
    double minimum_cycles = 0.0;              ///< the speed-of-light bound (0 when unknown)
    std::vector<RacePoint> races;             ///< in the order they were run
    std::int64_t races_without_interval = 0;  ///< race rows with no interval in their reason
};

/// The role of one campaign step.
struct RoleStep {
    std::int64_t step = 0;
    std::string role;
};

/// Everything the report plots.
struct CampaignSeries {
    std::vector<KernelSeries> kernels;  ///< sorted by name
    std::vector<RoleStep> role_steps;   ///< every step of every kernel, in step order
    bool has_wall_times = false;        ///< every step has a timestamp
    std::int64_t steps = 0;
};

/// Read the series from the database.
CampaignSeries load_campaign_series(store::CampaignStore& store);

/// The speedup and interval in a race's reason ("… speedup 1.2345 [1.1000, 1.3000] …"); none
/// when the reason holds no interval (an interrupted race, a database from before intervals).
std::optional<RacePoint> parse_race_reason(const std::string& reason);

/// Seconds since the epoch of a UTC ISO-8601 timestamp ("2026-11-29T21:07:25.123Z"); none when
/// the text is not one.
std::optional<double> parse_utc_timestamp(const std::string& text);

}  // namespace npuopt::report
