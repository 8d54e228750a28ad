#pragma once
// Typed contents of a target's cost model declaration, knowledge/<target>/cost_model.yaml: the
// roofline terms the search ranks designs by and the speed-of-light bound, as expressions over
// template quantities and hardware parameters (`hw.NAME`; `hw.NAME.lower` / `.upper` for the
// ends of its 95% interval). Expressions stay text here, each with its file:line:column.

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/hardware_model_config.hpp"

namespace YAML {
class Node;
}

namespace npuopt::config {

/// One roofline term: cycles a design spends on one resource.
struct CostTermSpec {
    std::string name;
    ExpressionText expression;
    std::string group;                ///< terms of one group add up before the combine rule (default: own name)
    std::string lever;                ///< in words: what shrinks it
    std::vector<std::string> reduce;  ///< the quantities it is computed from
};

/// One part of the speed-of-light bound (the bound is the largest part).
struct BoundSpec {
    std::string name;
    ExpressionText expression;        ///< over min_bytes, min_macs and hw.*
    std::string basis;                ///< in words; {variable} is replaced by its value
};

/// knowledge/<target>/cost_model.yaml
struct CostModelSpec {
    std::filesystem::path file;
    std::vector<std::pair<std::string, double>> quantities;      ///< quantities the terms read, with their default
    std::vector<std::pair<std::string, ExpressionText>> let;     ///< named intermediate values, in order
    std::vector<CostTermSpec> terms;                             ///< in document order
    double overlap = 0.1;              ///< combined = largest group + overlap × the other groups
    std::vector<BoundSpec> speed_of_light;
    std::optional<ExpressionText> weight_movement_min;           ///< over min_bytes and hw.*
};

/// Parse and validate a cost model declaration. Errors name file:line:column and the key.
CostModelSpec load_cost_model_config(const std::filesystem::path& cost_model_yaml);

/// The cost terms of `node` (a map name: {expression, group, lever, reduce}) under `key` of
/// `file`, in document order: what cost_model.yaml's `terms:` and a template's `terms:` say.
std::vector<CostTermSpec> parse_cost_terms(const std::filesystem::path& file, const YAML::Node& node,
                                           const std::string& key);

}  // namespace npuopt::config
