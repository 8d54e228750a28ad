#include "config/cost_model_config.hpp"

#include <regex>
#include <set>

#include <fmt/format.h>

#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {
namespace {

using detail::Fields;

bool is_name(const std::string& name) {
    static const std::regex k_name("[a-z_][a-z0-9_]*");
    return std::regex_match(name, k_name);
}

ExpressionText expression_of(const std::filesystem::path& file, const YAML::Node& node, const std::string& key) {
    ExpressionText text;
    text.key = key;
    text.text = detail::scalar_string(file, node, key);
    text.location = detail::location(file, node);
    if (text.text.empty()) detail::fail(file, node, key, "empty expression");
    return text;
}

/// The entries of a map `key: {...}` in document order, names checked and unique.
std::vector<std::pair<std::string, YAML::Node>> named_entries(const Fields& top, std::string_view key) {
    std::vector<std::pair<std::string, YAML::Node>> result;
    if (!top.has(key)) return result;
    YAML::Node node = top.node()[std::string(key)];
    if (!node.IsMap()) top.fail_at(key, fmt::format("expected a map of name: ..., got {}", detail::describe(node)));
    std::set<std::string> seen;
    for (const auto& entry : node) {
        const std::string name = entry.first.Scalar();
        const std::string path = fmt::format("{}.{}", key, name);
        if (!is_name(name)) detail::fail(top.file(), entry.first, path, "names are lower_snake_case");
        if (!seen.insert(name).second) detail::fail(top.file(), entry.first, path, "duplicate name");
        result.emplace_back(name, entry.second);
    }
    return result;
}

}  // namespace

std::vector<CostTermSpec> parse_cost_terms(const std::filesystem::path& file, const YAML::Node& node,
                                           const std::string& key) {
    std::vector<CostTermSpec> terms;
    if (!node || node.IsNull()) return terms;
    if (!node.IsMap()) detail::fail(file, node, key, fmt::format("expected a map of name: {{expression: ...}}, got {}", detail::describe(node)));
    std::set<std::string> seen;
    for (const auto& entry : node) {
        const std::string name = entry.first.Scalar();
        const std::string path = key + "." + name;
        if (!is_name(name)) detail::fail(file, entry.first, path, "names are lower_snake_case");
        if (!seen.insert(name).second) detail::fail(file, entry.first, path, "duplicate name");
        Fields fields(file, entry.second, path, {"expression", "group", "lever", "reduce"});
        CostTermSpec term;
        term.name = name;
        term.expression = expression_of(file, fields.required("expression", "an expression"), path + ".expression");
        term.group = fields.string_or("group", name);
        term.lever = fields.string_or("lever", "");
        term.reduce = fields.string_list_or("reduce", {});
        terms.push_back(std::move(term));
    }
    return terms;
}

CostModelSpec load_cost_model_config(const std::filesystem::path& cost_model_yaml) {
    YAML::Node root = detail::load_yaml_file(cost_model_yaml);
    Fields top(cost_model_yaml, root, "",
               {"version", "quantities", "let", "terms", "combine", "speed_of_light", "weight_movement_min"});
    if (top.integer("version") != 1) top.fail_at("version", "expected 1 (the only cost model format so far)");
    CostModelSpec spec;
    spec.file = cost_model_yaml;
    for (const auto& [name, node] : named_entries(top, "quantities")) {
        spec.quantities.emplace_back(name, detail::scalar_number(cost_model_yaml, node, "quantities." + name));
    }
    for (const auto& [name, node] : named_entries(top, "let")) {
        spec.let.emplace_back(name, expression_of(cost_model_yaml, node, "let." + name));
    }
    if (top.has("terms")) spec.terms = parse_cost_terms(cost_model_yaml, root["terms"], "terms");
    if (spec.terms.empty()) top.fail_at("terms", "expected at least one cost term");
    if (top.has("combine")) {
        Fields combine = top.map("combine", {"overlap"});
        spec.overlap = combine.number("overlap");
        if (!(spec.overlap >= 0 && spec.overlap <= 1)) combine.fail_at("overlap", "expected a number in [0, 1]");
    }
    for (const auto& [name, node] : named_entries(top, "speed_of_light")) {
        const std::string path = "speed_of_light." + name;
        Fields fields(cost_model_yaml, node, path, {"expression", "basis"});
        BoundSpec bound;
        bound.name = name;
        bound.expression = expression_of(cost_model_yaml, fields.required("expression", "an expression"), path + ".expression");
        bound.basis = fields.string_or("basis", name);
        spec.speed_of_light.push_back(std::move(bound));
    }
    if (top.has("weight_movement_min")) {
        spec.weight_movement_min =
            expression_of(cost_model_yaml, top.required("weight_movement_min", "an expression"), "weight_movement_min");
    }
    return spec;
}

}  // namespace npuopt::config
