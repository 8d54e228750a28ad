#include "config/template_config.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {

namespace {

using detail::fail;
using detail::location;

bool is_param_name(const std::string& name) {
    static const std::regex k_param_name("[A-Z_][A-Z0-9_]*");
    return std::regex_match(name, k_param_name);
}

bool is_quantity_name(const std::string& name) {
    static const std::regex k_quantity_name("[a-z_][a-z0-9_]*");
    return std::regex_match(name, k_quantity_name);
}

std::vector<TemplateExpression> read_named_expressions(const detail::Fields& top, std::string_view key) {
    std::vector<TemplateExpression> result;
    if (!top.has(key)) return result;
    YAML::Node node = top.node()[std::string(key)];
    if (node.IsNull()) return result;
    if (!node.IsMap()) fail(top.file(), node, key, fmt::format("expected a map of name: expression, got {}", detail::describe(node)));
    std::set<std::string> seen;
    for (const auto& entry : node) {
        const std::string name = entry.first.Scalar();
        std::string key_path = fmt::format("{}.{}", key, name);
        if (!is_quantity_name(name)) fail(top.file(), entry.first, key_path, "names are lower_snake_case");
        if (!seen.insert(name).second) fail(top.file(), entry.first, key_path, "duplicate name");
        std::string text = detail::scalar_string(top.file(), entry.second, key_path);
        if (text.empty()) fail(top.file(), entry.second, key_path, "empty expression");
        result.push_back({name, text, location(top.file(), entry.second)});
    }
    return result;
}

}  // namespace

TemplateSpec load_template_config(const std::filesystem::path& template_yaml) {
    YAML::Node root = detail::load_yaml_file(template_yaml);
    detail::Fields top(template_yaml, root, "",
                       {"template", "kernel", "family", "source", "prelude", "description", "params", "constraints", "quantities",
                        "terms", "features"});
    TemplateSpec spec;
    spec.file = template_yaml;
    spec.name = top.string("template");
    spec.kernel = top.string("kernel");
    spec.family = top.string_or("family", spec.name);
    spec.description = top.string_or("description", "");
    std::string source = top.string("source");
    spec.source = template_yaml.parent_path() / source;
    if (!std::filesystem::is_regular_file(spec.source)) {
        top.fail_at("source", fmt::format("source file '{}' not found next to the template", source));
    }
    if (top.has("prelude")) {
        const std::string prelude = top.string("prelude");
        spec.prelude = template_yaml.parent_path() / prelude;
        if (!std::filesystem::is_regular_file(spec.prelude)) {
            top.fail_at("prelude", fmt::format("prelude file '{}' not found next to the template", prelude));
        }
    }

    if (top.has("params") && !top.node()["params"].IsNull()) {
        YAML::Node params = top.node()["params"];
        if (!params.IsMap()) top.fail_at("params", fmt::format("expected a map of NAME: {{values, default}}, got {}", detail::describe(params)));
        std::set<std::string> seen;
        for (const auto& entry : params) {
            TemplateParam param;
            param.name = entry.first.Scalar();
            std::string key_path = fmt::format("params.{}", param.name);
            param.location = location(template_yaml, entry.first);
            if (!is_param_name(param.name)) fail(template_yaml, entry.first, key_path, "param names are UPPER_SNAKE_CASE");
            if (!seen.insert(param.name).second) fail(template_yaml, entry.first, key_path, "duplicate param");
            detail::Fields fields(template_yaml, entry.second, key_path, {"values", "default"});
            YAML::Node values = fields.required("values", "a non-empty list of numbers");
            if (!values.IsSequence() || values.size() == 0) {
                fail(template_yaml, values, key_path + ".values",
                     fmt::format("expected a non-empty list of numbers, got {}", detail::describe(values)));
            }
            for (std::size_t value_idx = 0; value_idx < values.size(); ++value_idx) {
                double value = detail::scalar_number(template_yaml, values[value_idx],
                                                     fmt::format("{}.values[{}]", key_path, value_idx));
                if (std::find(param.values.begin(), param.values.end(), value) != param.values.end()) {
                    fail(template_yaml, values[value_idx], fmt::format("{}.values[{}]", key_path, value_idx),
                         "duplicate value");
                }
                param.values.push_back(value);
            }
            param.default_value = fields.number("default");
            if (std::find(param.values.begin(), param.values.end(), param.default_value) == param.values.end()) {
                fields.fail_at("default", fmt::format("default {} is not one of the param's values", param.default_value));
            }
            spec.params.push_back(std::move(param));
        }
    }

    if (top.has("constraints") && !top.node()["constraints"].IsNull()) {
        YAML::Node constraints = top.node()["constraints"];
        if (!constraints.IsSequence()) top.fail_at("constraints", "expected a list of boolean expressions");
        for (std::size_t constraint_idx = 0; constraint_idx < constraints.size(); ++constraint_idx) {
            std::string key_path = fmt::format("constraints[{}]", constraint_idx);
            std::string text = detail::scalar_string(template_yaml, constraints[constraint_idx], key_path);
            if (text.empty()) fail(template_yaml, constraints[constraint_idx], key_path, "empty expression");
            spec.constraints.push_back({key_path, text, location(template_yaml, constraints[constraint_idx])});
        }
    }
    spec.quantities = read_named_expressions(top, "quantities");
    spec.features = read_named_expressions(top, "features");
    if (top.has("terms")) spec.terms = parse_cost_terms(template_yaml, top.node()["terms"], "terms");
    return spec;
}

std::vector<TemplateSpec> load_template_dir(const std::filesystem::path& dir, std::vector<std::string>* errors) {
    std::vector<std::filesystem::path> files;
    std::error_code error_code;
    if (!std::filesystem::is_directory(dir, error_code)) {
        throw Error(ErrorKind::invalid_config, fmt::format("{}: templates directory not found", dir.string()));
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::string name = entry.path().filename().string();
        static constexpr std::string_view k_suffix = ".template.yaml";
        if (entry.is_regular_file() && name.size() > k_suffix.size() && name.ends_with(k_suffix)) {
            files.push_back(entry.path());
        }
    }
    std::sort(files.begin(), files.end());
    std::vector<TemplateSpec> result;
    std::set<std::string> names;
    for (const auto& file : files) {
        try {
            TemplateSpec spec = load_template_config(file);
            if (!names.insert(spec.name).second) {
                throw Error(ErrorKind::invalid_config,
                            fmt::format("{}: key 'template': duplicate template name '{}' in {}", file.string(),
                                        spec.name, dir.string()));
            }
            result.push_back(std::move(spec));
        } catch (const Error& error) {
            if (!errors) throw;
            errors->push_back(error.what());
        }
    }
    return result;
}

}  // namespace npuopt::config
