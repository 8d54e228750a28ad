#pragma once
// Typed contents of knowledge/<target>/target.yaml and kernels.yaml.
// Parsed and validated by config/ (target_config.cpp); used by target/, knowledge/, search/.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/cost_model_config.hpp"

namespace npuopt::config {

/// The toolchain protocols (docs/toolchain-protocol.md).
inline constexpr std::string_view k_protocol_jsonl_v1 = "npuopt-jsonl/1";
/// check and compile speak cargo's / rustc's JSON messages (a vendor toolchain that is a cargo
/// driver); the other commands npuopt-jsonl/1.
inline constexpr std::string_view k_protocol_rustc_json_v1 = "rustc-json/1";


/// One toolchain command: argv with {placeholders} and its wall-clock limit.
/// Placeholders: {bin} {file} {kernel} {seed} {repeat} {shape} (k=v,k=v) and any {name}
/// the caller supplies. Unknown placeholders are an error at expansion time.
struct CommandSpec {
    std::vector<std::string> argv;
    double timeout_secs = 60.0;
};

/// How to find and call the target's toolchain.
struct ToolchainSpec {
    std::string protocol = "npuopt-jsonl/1";  ///< output format; the only one supported so far
    std::string bin;                           ///< executable name or path ({bin} in argv)
    std::vector<std::filesystem::path> search_paths;  ///< tried in order before PATH; relative to the repo/target dir
    std::map<std::string, std::string> env;    ///< extra environment for every command (no secrets)
    std::vector<std::filesystem::path> read_only_paths;  ///< extra paths the sandbox must expose read-only
    /// toolchain.sandbox.system_paths: the system paths every call sees read-only; nullopt: proc's
    /// default (/usr, /bin, /lib*, the loader's cache and config, /etc/alternatives)
    std::optional<std::vector<std::filesystem::path>> system_paths;
    CommandSpec version;
    CommandSpec check;
    CommandSpec schedule;
    CommandSpec run;
    std::optional<CommandSpec> compile;  ///< writes the compile cache; run before check/schedule/run of a file
    std::optional<CommandSpec> paths;    ///< prints {"type":"paths","read_only":[...]}: what the toolchain needs visible
};

/// A public hardware fact from the vendor's documentation (never a measured value).
struct HardwareFact {
    double value = 0.0;
    std::string unit;         ///< e.g. "bytes/cycle", "GHz", "bytes"
    std::string description;
};

/// knowledge/<target>/target.yaml
struct TargetConfig {
    std::string name;
    std::string description;
    std::filesystem::path dir;            ///< the directory holding target.yaml
    ToolchainSpec toolchain;
    /// run_check.fraction: share of screen and race launches run with the toolchain's correctness
    /// check, chosen at random from the campaign seed (1 = every launch; for targets whose check is
    /// expensive). Correctness-stage and submission launches are always checked.
    double run_check_fraction = 1.0;
    std::map<std::string, HardwareFact> facts;  ///< public facts by key
    std::filesystem::path docs_dir;        ///< resolved against dir
    std::filesystem::path microbench_dir;  ///< resolved against dir (may not exist yet)
    std::filesystem::path templates_dir;   ///< resolved against dir
    std::filesystem::path kernels_file;    ///< resolved against dir
    /// `cost_model:` (default cost_model.yaml beside target.yaml when it exists): the roofline
    /// terms and speed-of-light bound the target declares; null when it declares none.
    std::shared_ptr<const CostModelSpec> cost_model;
};

/// A tensor of a kernel, for byte accounting (speed-of-light) and documentation.
struct TensorSpec {
    std::string name;
    std::string role;                 ///< weight | input | output | state
    std::string dtype;                ///< fp8_e4m3 | fp4_e2m1 | bf16 | f32 | i32 ...
    std::vector<std::string> shape;   ///< dims: integers or names of shape variables
};

/// A named set of shape variables of a kernel (`shapes:` of kernels.yaml), e.g. gemma4-12b.
struct NamedShape {
    std::string name;
    std::map<std::string, std::int64_t> values;  ///< shape variables, e.g. hidden: 3840
};

/// What a kernel's designs can still not do (`limits:` of kernels.yaml): a bound on an integer
/// expression of shape variables (evaluate_dimension's syntax) that every usable shape meets.
struct ShapeLimit {
    std::string dim;                          ///< e.g. "hidden", "q_heads*head_dim"
    std::optional<std::int64_t> multiple_of;
    std::optional<std::int64_t> min;
    std::optional<std::int64_t> max;
    std::string why;                          ///< where the limit comes from (docs, toolchain)
};

/// One kernel of kernels.yaml.
struct KernelSpec {
    std::string name;
    std::string description;
    /// The chosen shape's variables (the default shape until a campaign selects another one:
    /// config::select_shape); everything that sizes the kernel reads this.
    std::map<std::string, std::int64_t> shape;
    std::string shape_name;                    ///< the chosen shape's name
    std::vector<NamedShape> shapes;            ///< every named shape, the default first
    std::vector<ShapeLimit> limits;
    double atol = 0.0;
    double rtol = 0.0;
    std::filesystem::path baseline;   ///< baseline design source, resolved against the templates dir
    std::vector<TensorSpec> tensors;
};

/// knowledge/<target>/kernels.yaml
struct KernelsConfig {
    std::filesystem::path file;
    std::vector<KernelSpec> kernels;
};

/// The name a kernel gets for its shape when kernels.yaml gives a single unnamed `shape:`.
inline constexpr const char* k_default_shape_name = "default";

}  // namespace npuopt::config
