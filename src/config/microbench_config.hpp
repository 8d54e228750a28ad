#pragma once
// Typed contents of a target's microbenchmark suite, microbench/<target>/suite.yaml: probe kernel
// templates with ${name} placeholders and the parameter sweeps to run them over.
// Parsed and validated here; run by knowledge/microbench.hpp, fitted by knowledge/hardware_model.hpp
// from the `model:` section (config/hardware_model_config.hpp).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/hardware_model_config.hpp"

namespace npuopt::config {

/// A probe's design point: parameter name → value.
using ProbeParams = std::map<std::string, std::int64_t>;

/// One axis of a sweep: one parameter, or several that move together (`params: [a, b]`).
struct SweepAxis {
    std::vector<std::string> params;                ///< one name, or several tied names
    std::vector<std::vector<std::int64_t>> values;  ///< each entry holds one value per name
};

/// One probe: a kernel template, what it measures, and how to sweep it.
struct ProbeSpec {
    std::string name;
    std::filesystem::path file;      ///< the template, resolved against the suite's directory
    std::string measures;            ///< measurement kind; the `model:` entries select points by it
    std::string description;
    std::string kernel;              ///< kernel entry the template provides (${kernel})
    ProbeParams params;              ///< fixed parameters
    std::vector<SweepAxis> sweep;    ///< cartesian product of the axes
    int repeats = 5;                 ///< repeats per launch
    int retries = 3;                 ///< retries of a transient failure
    double timeout_secs = 60.0;      ///< wall-clock limit of one launch (compile included)
    bool monotone_failure = false;   ///< points run in order; after a failure the rest are skipped
    bool quick = false;              ///< part of a quick build (what the speed-of-light bound and the cost model need)
};

/// microbench/<target>/suite.yaml
struct MicrobenchSuite {
    std::filesystem::path file;
    std::string kernel;                          ///< default kernel entry of the probes
    std::map<std::string, std::int64_t> shape;   ///< the --shape every probe runs with
    std::vector<ProbeSpec> probes;
    std::vector<ModelEntrySpec> model;          ///< `model:`: the hardware parameters and how they are fitted
};

/// Parse and validate suite.yaml: every template exists and each of its ${placeholders} is a
/// parameter of the probe (or `kernel`). Throws Error(invalid_config) naming file:line and key.
MicrobenchSuite load_microbench_suite(const std::filesystem::path& suite_yaml);

/// The design points of a probe in sweep order (first axis outermost), fixed params merged in.
std::vector<ProbeParams> expand_probe_sweep(const ProbeSpec& probe);

/// Names of the ${placeholders} in a template text, in order of first appearance.
std::vector<std::string> template_placeholders(const std::string& text);

}  // namespace npuopt::config
