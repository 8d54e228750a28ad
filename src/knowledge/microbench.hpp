#pragma once
// The microbenchmark runner: instantiates a suite's probe templates for every design point of
// their sweeps, runs them through the target adapter (sandboxed), retries transient failures and
// records every outcome — a hang or a rejected design is a finding, not an error.
//
//   suite.yaml ─► expand sweeps ─► instantiate ${params} ─► Toolchain::run (repeats) ─► points
//                                                            (parallel workers; monotone probes
//                                                             stop at their first failure)

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/microbench_config.hpp"
#include "config/target_config.hpp"
#include "proc/subprocess.hpp"

namespace npuopt::knowledge {

/// How one design point of a probe ended.
enum class PointStatus {
    ok,         ///< cycles measured
    failed,     ///< the toolchain rejected or the device failed the probe (diagnostics kept)
    timed_out,  ///< no answer within the probe's timeout (e.g. a device hang)
    skipped,    ///< not run: a smaller point of a monotone probe failed
};
std::string_view point_status_name(PointStatus status);
std::optional<PointStatus> parse_point_status(std::string_view name);

/// One design point of one probe: what was run and what came back.
struct MicrobenchPoint {
    std::string probe;
    std::string measures;
    config::ProbeParams params;
    PointStatus status = PointStatus::skipped;
    std::vector<double> cycles;          ///< one per repeat
    double cycles_median = 0.0;
    double cycles_mad = 0.0;
    int attempts = 0;                    ///< launches, retries included
    std::uint64_t seed = 0;
    std::string message;                 ///< why it did not succeed
    std::vector<std::string> diagnostic_codes;
    std::string source_sha256;           ///< of the instantiated kernel
    double wall_secs = 0.0;
};

/// Everything one suite run measured.
struct MicrobenchRun {
    std::string target;
    std::string toolchain_name;
    std::string toolchain_version;
    std::filesystem::path suite_file;
    std::vector<MicrobenchPoint> points;  ///< in suite order
    double wall_secs = 0.0;

    /// The points of one measurement kind, in suite order.
    std::vector<const MicrobenchPoint*> points_measuring(std::string_view measures) const;
};

nlohmann::json to_json(const MicrobenchPoint& point);
nlohmann::json to_json(const MicrobenchRun& run);
MicrobenchRun microbench_run_from_json(const nlohmann::json& json);

/// Where and how to run the suite.
struct MicrobenchOptions {
    int parallel = 2;                         ///< concurrent launches (the device may queue them anyway)
    std::filesystem::path work_dir;           ///< instantiated kernels go here; empty: a temp dir, removed after
    std::uint64_t seed = 1;                   ///< base seed; point i runs with seed + i
    std::vector<std::string> only_probes;     ///< run only these (empty: all)
    proc::SandboxPolicy sandbox;              ///< template for every launch
    proc::Limits limits;                      ///< template for every launch (timeout from the probe)
    std::function<void(const MicrobenchPoint&)> on_point;  ///< progress callback (called under a lock)
    /// After each point (under the same lock): points finished and points in the run, for an ETA.
    std::function<void(std::size_t done, std::size_t total)> on_count;
};

/// Replace each ${name} of `text` with values[name]; a name without a value is
/// Error(invalid_config) naming `template_file` and the placeholder.
std::string instantiate_probe(const std::string& text, const std::map<std::string, std::string>& values,
                              const std::filesystem::path& template_file);

/// Run every probe of `suite` on `target`'s toolchain. Toolchain-level failures of single points
/// are recorded in the points; a toolchain that cannot be started at all is Error(toolchain).
MicrobenchRun run_microbench_suite(const config::TargetConfig& target, const config::MicrobenchSuite& suite,
                                   const MicrobenchOptions& options = {});

}  // namespace npuopt::knowledge
