#pragma once
// Typed contents of a design template's declaration, dsl_templates/<target>/<name>.template.yaml
// (docs/template-format.md). Expressions stay text here, each with the file:line:column it was
// read from, so that search/ (which compiles them with muparser) names the place of an error.

#include <filesystem>
#include <string>
#include <vector>

#include "config/cost_model_config.hpp"

namespace npuopt::config {

/// One `${NAME}` parameter: its domain (numbers, in the order written) and default.
struct TemplateParam {
    std::string name;
    std::vector<double> values;
    double default_value = 0.0;
    std::string location;  ///< file:line:column of the param's entry
};

/// A named or anonymous expression over params and shape variables.
struct TemplateExpression {
    std::string name;      ///< quantity/feature name; "constraints[i]" for a constraint
    std::string text;      ///< muparser expression
    std::string location;  ///< file:line:column of the expression
};

/// One <name>.template.yaml.
struct TemplateSpec {
    std::filesystem::path file;         ///< the yaml read
    std::string name;                   ///< `template:`, unique within the target
    std::string kernel;
    std::string family;
    std::filesystem::path source;       ///< resolved against the yaml's directory
    /// Shared code every instantiation carries after the template's own source (`prelude:`, a
    /// file next to the yaml, no ${PARAM}s): the helpers several templates of a target use.
    /// Empty when the template has none.
    std::filesystem::path prelude;
    std::string description;
    std::vector<TemplateParam> params;  ///< in document order
    std::vector<TemplateExpression> constraints;
    std::vector<TemplateExpression> quantities;
    std::vector<TemplateExpression> features;
    /// Cost terms of this template's designs beside the target's (cost_model.yaml), in the same
    /// form: over the target's quantities, its `let` names and hw.NAME. A term named like one of the
    /// target's replaces it for this template's family.
    std::vector<CostTermSpec> terms;
};

/// Parse and validate one template declaration. Throws Error(invalid_config) naming
/// file:line:column and the key on any problem (unknown key, empty domain, default outside
/// its domain, duplicate param, missing source file).
TemplateSpec load_template_config(const std::filesystem::path& template_yaml);

/// Every `*.template.yaml` directly under `dir`, sorted by file name. Files that fail to parse
/// are reported in `errors` (one message each) and skipped when `errors` is given; otherwise
/// the first failure throws.
std::vector<TemplateSpec> load_template_dir(const std::filesystem::path& dir, std::vector<std::string>* errors = nullptr);

}  // namespace npuopt::config
