#pragma once
// Designs: a template (parsed declaration + compiled muparser expressions + source text) and a
// parameter assignment give an instantiated source, the quantities and features the template
// declares for it, and a content hash (target, kernel, shape, instantiated source). The baseline
// is a template with no params. No design is evaluated twice: the hash is its identity.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/target_config.hpp"
#include "config/template_config.hpp"

namespace npuopt::search {

/// Param name → value.
using Assignment = std::map<std::string, double>;

/// A concrete candidate kernel.
struct Design {
    std::string target;
    std::string kernel;
    std::string template_name;
    std::string family;
    Assignment params;
    std::string shape_text;                    ///< canonical "k=v,k=v"
    std::string source;                        ///< instantiated source text
    std::map<std::string, double> quantities;  ///< declared by the template for this assignment
    std::map<std::string, double> features;
    std::string content_hash;
    std::string source_extension = ".rs";      ///< of the template's source file
    bool is_baseline = false;
    bool from_source = false;                  ///< written (LLM, porter, user), not instantiated from a template

    /// "template{A=1,B=2}", the template name alone without params, "origin@1a2b3c4d" from source.
    std::string label() const;
    /// The params as a JSON object (integers stay integers).
    nlohmann::json params_json() const;
    /// Quantities and features in one map (what the cost model and the rules read); a quantity
    /// wins over a feature of the same name.
    std::map<std::string, double> quantities_and_features() const;
};

/// Text of a param value as substituted into sources: integers without a decimal point.
std::string format_param_value(double value);

/// Content hash of a design: SHA-256 over target, kernel, shape and the instantiated source.
std::string design_hash(const std::string& target, const std::string& kernel, const std::string& shape_text,
                        const std::string& source);

/// A design from a source someone wrote (an LLM role, the porter, a user's `npuopt add`): no
/// params, no declared quantities; `origin` (e.g. "llm-architect", "user") names it in the tree
/// and is its family.
Design design_from_source(const std::string& target, const std::string& kernel, const std::string& shape_text,
                          std::string source, const std::string& origin, const std::string& source_extension = ".rs");

/// Rewrites an instantiated source before it is hashed (the rewrites a toolchain update taught).
using SourceRewriter = std::function<std::string(const std::string&)>;

/// A loaded, compiled template for one kernel shape. Not thread-safe (expressions share storage).
class Template {
public:
    /// Compile `spec` for `kernel`'s shape: reads the source, checks that every ${NAME} is a
    /// declared param and that every expression parses and uses only params and shape variables.
    /// Throws Error(invalid_config) naming file:line:column and the key.
    static std::shared_ptr<Template> load(const config::TemplateSpec& spec, const config::KernelSpec& kernel,
                                          const std::string& target);
    /// The kernel's baseline (kernels.yaml `baseline`): no params, no quantities.
    static std::shared_ptr<Template> baseline(const config::KernelSpec& kernel, const std::string& target);

    ~Template();
    Template(const Template&) = delete;
    Template& operator=(const Template&) = delete;

    const std::string& name() const;
    const std::string& family() const;
    const std::string& kernel() const;
    const config::TemplateSpec& spec() const;
    bool is_baseline() const;
    const std::vector<config::TemplateParam>& params() const;

    /// Every param at its default.
    Assignment default_assignment() const;
    /// Why `assignment` is not in the domain (unknown/missing param, value outside its values), or nullopt.
    std::optional<std::string> check_domain(const Assignment& assignment) const;
    /// The first constraint `assignment` violates, as "constraints[i]: <text>", or nullopt.
    std::optional<std::string> check_constraints(const Assignment& assignment) const;
    /// Declared quantities and features of `assignment` (domain not checked).
    std::map<std::string, double> evaluate_quantities(const Assignment& assignment) const;
    std::map<std::string, double> evaluate_features(const Assignment& assignment) const;
    /// The design of `assignment`; Error(invalid_input) when it is outside the domain.
    /// Constraints are not checked here (check_constraints). The source rewriter, when one is
    /// set and `rewrite`, is applied to the source before it is hashed.
    Design instantiate(const Assignment& assignment, bool rewrite = true) const;
    /// Learnt corrections: every later evaluation of a declared quantity (quantities, and the
    /// constraints that name it) adds `offsets[name]`. The toolchain reported more than the
    /// template declares (a quantity is the template author's model of the toolchain's layout; a
    /// diagnostic is the toolchain's own figure). Names that are not declared quantities are dropped.
    void set_quantity_offsets(std::map<std::string, double> offsets);
    const std::map<std::string, double>& quantity_offsets() const;
    /// Every later instantiation passes its source through `rewriter` (null: none).
    void set_source_rewriter(SourceRewriter rewriter);
    /// Size of the domain (product of value counts; capped at 1e18).
    double domain_size() const;

private:
    struct Impl;
    explicit Template(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

/// Templates of `kernel` from the specs, the kernel's baseline first. A template that fails to
/// compile is skipped and its message appended to `errors`.
std::vector<std::shared_ptr<Template>> load_kernel_templates(const std::vector<config::TemplateSpec>& specs,
                                                             const config::KernelSpec& kernel,
                                                             const std::string& target,
                                                             std::vector<std::string>& errors);

}  // namespace npuopt::search
