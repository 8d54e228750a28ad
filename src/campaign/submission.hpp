#pragma once
// `npuopt submit`: the champions of a campaign as a competition submission — a directory and a
// .tar.gz with each kernel's champion source, manifest.json (content hashes, toolchain version,
// per kernel the median of N seeded runs each passing correctness, the baseline measured the same
// way, the speedup, and the geomean) and replay.log from re-verifying every champion from scratch.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign/workspace.hpp"

namespace npuopt::campaign {

/// One kernel's line of the results table.
struct KernelResult {
    std::string kernel;
    std::string shape;                ///< the kernel's shape name
    std::string reference = "baseline";  ///< what speedup is over: "baseline" or "first correct design (baseline failed: …)"
    std::string champion_hash;
    std::string champion_template;
    std::string source_file;          ///< relative to the submission directory
    std::string source_sha256;
    std::optional<double> baseline_cycles;
    std::optional<double> champion_cycles;
    std::vector<double> champion_runs;
    std::vector<double> baseline_runs;
    bool all_passed = false;
    std::string reason;               ///< why a kernel has no verified champion
    double speedup = 0.0;             ///< reference / champion (0 when unknown)
    double weight_min_cycles = 0.0;   ///< weight-movement minimum (0 when the model is unknown)
    double champion_over_min = 0.0;   ///< champion / weight-movement minimum (0 when unknown)
};

/// Geometric mean of the positive speedups (0 when none).
double geomean_speedup(const std::vector<KernelResult>& results);

/// The table `npuopt demo` and `npuopt submit` print.
std::string render_results_table(const std::vector<KernelResult>& results);
nlohmann::json results_json(const std::vector<KernelResult>& results);

struct SubmitOptions {
    std::filesystem::path out_dir;    ///< the submission directory (must not exist or be empty)
    int runs = 7;                     ///< seeded runs per champion and baseline
    std::function<void(const std::string&)> on_progress;
};

struct Submission {
    std::filesystem::path dir;
    std::filesystem::path tarball;
    std::string toolchain_version;
    std::vector<KernelResult> kernels;
    double geomean = 0.0;
    nlohmann::json manifest;
};

/// Re-verify every champion and baseline from scratch (Cascade::measure) and write the package.
/// Error(invalid_input) when the output directory is not empty or no kernel has a champion.
Submission build_submission(Workspace& workspace, const SubmitOptions& options);

}  // namespace npuopt::campaign
