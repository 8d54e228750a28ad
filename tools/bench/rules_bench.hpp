#pragma once
// The rules section of `bench kb`: a sweep over many designs (the design templates'
// parameter grids, the rule probes of tools/bench/rules_probes, the simulator's illegal
// fixtures, the microbenchmark kernels, the baselines) checked by npuc; npuopt mines a rule from
// every diagnostic (knowledge/rule_sweep.hpp), then the rule book's precision (no enforced rule
// rejects a design the toolchain accepted, checked on every accepted design's declared
// quantities) and its coverage of the toolchain's diagnostic codes. Only this benchmark reads
// the true list of codes (tools/npu-sim/API.md); npuopt never does.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/target_config.hpp"

namespace npuopt::bench {

struct RulesBenchOptions {
    std::filesystem::path source_dir;           ///< the npuopt source tree
    std::vector<std::filesystem::path> npucs;   ///< one sweep per toolchain release, in order
    int parallel = 2;
    bool quick = false;                         ///< probes, fixtures and template defaults only
    std::size_t max_grid = 64;                  ///< a template with a larger domain is swept one param at a time
    bool progress = false;                      ///< one line per design on stderr
};

/// The documented diagnostic codes of npu-sim (tools/npu-sim/API.md, "Diagnostics" table).
std::vector<std::string> documented_codes(const std::filesystem::path& api_md);

/// Run the sweeps and return the section as JSON (figures, counts, per-rule and per-code detail).
nlohmann::json run_rules_bench(const config::TargetConfig& target, const RulesBenchOptions& options);

/// Human-readable lines of the section.
std::string rules_bench_text(const nlohmann::json& section);

}  // namespace npuopt::bench
