#pragma once
// Parse and validate knowledge/<target>/target.yaml and kernels.yaml into target_config.hpp's
// structs, and find targets in the repository's knowledge/ directory.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/target_config.hpp"

namespace npuopt::config {

/// The only toolchain output protocol supported so far.

/// Parse target.yaml; paths are resolved against its directory, ${VAR}s expanded.
/// Throws Error(invalid_config) naming file:line and key on any problem.
TargetConfig load_target_config(const std::filesystem::path& target_yaml);

/// Parse kernels.yaml; baselines are resolved against `templates_dir`.
KernelsConfig load_kernels_config(const std::filesystem::path& kernels_yaml,
                                  const std::filesystem::path& templates_dir);

/// Value of a tensor dimension: an integer, a shape variable, or a product/quotient of them
/// ("q_heads*head_dim", "hidden/16"); nullopt with `error` filled when a name is unknown, the
/// syntax is wrong or a division is not exact.
std::optional<std::int64_t> evaluate_dimension(std::string_view dim, const std::map<std::string, std::int64_t>& shape,
                                               std::string* error = nullptr);

/// The first of `kernel`'s limits that `shape` breaks, as "hidden = 5120 must be at most 4096
/// (why)"; nullopt when the shape is within all of them.
std::optional<std::string> shape_limit_violation(const KernelSpec& kernel,
                                                 const std::map<std::string, std::int64_t>& shape);

/// The shape names of all kernels, each once, in the order kernels.yaml first names them.
std::vector<std::string> shape_names(const KernelsConfig& kernels);

/// Make the shape `name` the chosen one (KernelSpec::shape, shape_name) of every kernel in
/// `selected` (all when empty; a kernel outside it keeps its default when it lacks the shape).
/// Error(invalid_config) "<origin>: unknown shape 'x' for kernel k (known shapes in <file>: a, b)".
void select_shape(KernelsConfig& kernels, const std::string& name, const std::vector<std::string>& selected,
                  const std::string& origin);

/// Expand ${NAME} from the environment, falling back to the compile-time NPUOPT_SOURCE_DIR and
/// NPUOPT_BUILD_DIR; an undefined variable is an error (message without location; callers add it).
/// Returns nullopt and fills `undefined` with the variable name when one is undefined.
std::optional<std::string> expand_variables(std::string_view text, std::string* undefined = nullptr);

/// The knowledge/ directory: `flag` when given, else $NPUOPT_KNOWLEDGE_DIR, else
/// NPUOPT_SOURCE_DIR/knowledge. Throws Error(invalid_config) when it is not a directory.
std::filesystem::path locate_knowledge_dir(const std::optional<std::filesystem::path>& flag);

/// Names of targets under `knowledge_dir` (subdirectories holding a target.yaml), sorted.
std::vector<std::string> list_targets(const std::filesystem::path& knowledge_dir);

/// Load knowledge_dir/<name>/target.yaml; an unknown name is Error(invalid_input) listing the known ones.
TargetConfig load_target(const std::filesystem::path& knowledge_dir, const std::string& name);

}  // namespace npuopt::config
