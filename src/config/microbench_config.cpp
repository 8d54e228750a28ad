#include "config/microbench_config.hpp"

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {
namespace {

using detail::Fields;

const std::regex k_param_name_pattern("[a-z_][a-z0-9_]*");

std::vector<std::int64_t> integer_list(const std::filesystem::path& file, const YAML::Node& node,
                                       const std::string& key) {
    if (!node.IsSequence() || node.size() == 0) {
        detail::fail(file, node, key, fmt::format("expected a non-empty list of integers, got {}", detail::describe(node)));
    }
    std::vector<std::int64_t> values;
    for (std::size_t value_idx = 0; value_idx < node.size(); ++value_idx) {
        values.push_back(detail::scalar_integer(file, node[value_idx], fmt::format("{}[{}]", key, value_idx)));
    }
    return values;
}

std::string param_name(const std::filesystem::path& file, const YAML::Node& node, const std::string& key) {
    std::string name = detail::scalar_string(file, node, key);
    if (!std::regex_match(name, k_param_name_pattern)) {
        detail::fail(file, node, key, fmt::format("'{}' is not a lowercase parameter name", name));
    }
    return name;
}

SweepAxis parse_axis(const std::filesystem::path& file, const YAML::Node& node, const std::string& path) {
    Fields fields(file, node, path, {"param", "params", "values"});
    SweepAxis axis;
    if (fields.has("param") == fields.has("params")) {
        detail::fail(file, node, path, "expected exactly one of 'param' (one name) or 'params' (a list of names)");
    }
    YAML::Node values = fields.required("values", "a list of values");
    if (fields.has("param")) {
        axis.params.push_back(param_name(file, fields.required("param", "a name"), fields.key_path("param")));
        for (std::int64_t value : integer_list(file, values, fields.key_path("values"))) axis.values.push_back({value});
        return axis;
    }
    YAML::Node names = fields.required("params", "a list of names");
    if (!names.IsSequence() || names.size() == 0) {
        fields.fail_at("params", fmt::format("expected a non-empty list of names, got {}", detail::describe(names)));
    }
    for (std::size_t name_idx = 0; name_idx < names.size(); ++name_idx) {
        axis.params.push_back(param_name(file, names[name_idx], fmt::format("{}[{}]", fields.key_path("params"), name_idx)));
    }
    if (!values.IsSequence() || values.size() == 0) {
        fields.fail_at("values", fmt::format("expected a non-empty list of [{}] tuples, got {}",
                                             fmt::join(axis.params, ", "), detail::describe(values)));
    }
    for (std::size_t tuple_idx = 0; tuple_idx < values.size(); ++tuple_idx) {
        std::string tuple_key = fmt::format("{}[{}]", fields.key_path("values"), tuple_idx);
        auto tuple = integer_list(file, values[tuple_idx], tuple_key);
        if (tuple.size() != axis.params.size()) {
            detail::fail(file, values[tuple_idx], tuple_key,
                         fmt::format("expected {} values (one per name in [{}]), got {}", axis.params.size(),
                                     fmt::join(axis.params, ", "), tuple.size()));
        }
        axis.values.push_back(std::move(tuple));
    }
    return axis;
}

std::string read_text(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

ProbeSpec parse_probe(const Fields& suite, const YAML::Node& node, const std::string& path,
                      const std::string& default_kernel, const ProbeSpec& defaults) {
    const auto& file = suite.file();
    Fields fields(file, node, path,
                  {"name", "file", "measures", "description", "kernel", "params", "sweep", "repeats", "retries",
                   "timeout_secs", "monotone_failure", "quick"});
    ProbeSpec probe = defaults;
    probe.name = param_name(file, fields.required("name", "a probe name"), fields.key_path("name"));
    std::string template_name = fields.string("file");
    probe.file = (file.parent_path() / template_name).lexically_normal();
    probe.measures = param_name(file, fields.required("measures", "a measurement kind"), fields.key_path("measures"));
    probe.description = fields.string_or("description", "");
    probe.kernel = fields.string_or("kernel", default_kernel);
    if (probe.kernel.empty()) fields.fail_at("kernel", "expected a kernel entry name (here or at the top level)");
    probe.repeats = static_cast<int>(fields.integer_or("repeats", defaults.repeats));
    if (probe.repeats < 1 || probe.repeats > 1000) fields.fail_at("repeats", "expected an integer in 1..1000");
    probe.retries = static_cast<int>(fields.integer_or("retries", defaults.retries));
    if (probe.retries < 0 || probe.retries > 20) fields.fail_at("retries", "expected an integer in 0..20");
    probe.timeout_secs = fields.number_or("timeout_secs", defaults.timeout_secs);
    if (!(probe.timeout_secs > 0)) fields.fail_at("timeout_secs", "expected a positive number of seconds");
    probe.monotone_failure = fields.boolean_or("monotone_failure", false);
    probe.quick = fields.boolean_or("quick", false);

    std::set<std::string> names;
    if (fields.has("params")) {
        YAML::Node params_node = fields.required("params", "a map of name: integer");
        if (!params_node.IsMap()) {
            fields.fail_at("params", fmt::format("expected a map of name: integer, got {}", detail::describe(params_node)));
        }
        for (const auto& item : params_node) {
            std::string key = fmt::format("{}.{}", fields.key_path("params"), item.first.as<std::string>());
            std::string name = param_name(file, item.first, key);
            probe.params[name] = detail::scalar_integer(file, item.second, key);
            names.insert(name);
        }
    }
    YAML::Node sweep = fields.required("sweep", "a list of axes");
    if (!sweep.IsSequence() || sweep.size() == 0) {
        fields.fail_at("sweep", fmt::format("expected a non-empty list of axes, got {}", detail::describe(sweep)));
    }
    for (std::size_t axis_idx = 0; axis_idx < sweep.size(); ++axis_idx) {
        std::string axis_key = fmt::format("{}[{}]", fields.key_path("sweep"), axis_idx);
        SweepAxis axis = parse_axis(file, sweep[axis_idx], axis_key);
        for (const auto& name : axis.params) {
            if (!names.insert(name).second) {
                detail::fail(file, sweep[axis_idx], axis_key, fmt::format("parameter '{}' is set twice", name));
            }
        }
        probe.sweep.push_back(std::move(axis));
    }

    // The template must exist and use exactly the probe's parameters (plus ${kernel}).
    YAML::Node file_node = fields.required("file", "a template path");
    std::error_code error;
    if (!std::filesystem::is_regular_file(probe.file, error)) {
        detail::fail(file, file_node, fields.key_path("file"),
                     fmt::format("template {} does not exist", probe.file.string()));
    }
    std::set<std::string> used;
    for (const auto& placeholder : template_placeholders(read_text(probe.file))) {
        used.insert(placeholder);
        if (placeholder != "kernel" && !names.contains(placeholder)) {
            detail::fail(file, file_node, fields.key_path("file"),
                         fmt::format("template {} uses ${{{}}}, which is not a parameter of probe '{}' (parameters: {})",
                                     template_name, placeholder, probe.name, fmt::join(names, ", ")));
        }
    }
    for (const auto& name : names) {
        if (!used.contains(name)) {
            detail::fail(file, file_node, fields.key_path("file"),
                         fmt::format("template {} never uses parameter '{}' of probe '{}'", template_name, name,
                                     probe.name));
        }
    }
    return probe;
}

}  // namespace

std::vector<std::string> template_placeholders(const std::string& text) {
    static const std::regex k_placeholder("\\$\\{([A-Za-z_][A-Za-z0-9_]*)\\}");
    std::vector<std::string> names;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), k_placeholder); it != std::sregex_iterator(); ++it) {
        std::string name = (*it)[1].str();
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
}

MicrobenchSuite load_microbench_suite(const std::filesystem::path& suite_yaml) {
    YAML::Node root = detail::load_yaml_file(suite_yaml);
    Fields fields(suite_yaml, root, "", {"version", "kernel", "shape", "repeats", "retries", "timeout_secs", "probes", "model"});
    if (fields.integer("version") != 1) fields.fail_at("version", "expected 1 (the only suite format so far)");
    MicrobenchSuite suite;
    suite.file = suite_yaml;
    suite.kernel = fields.string_or("kernel", "");
    if (fields.has("shape")) {
        YAML::Node shape = fields.required("shape", "a map of name: integer");
        if (!shape.IsMap()) fields.fail_at("shape", fmt::format("expected a map of name: integer, got {}", detail::describe(shape)));
        for (const auto& item : shape) {
            std::string key = fmt::format("shape.{}", item.first.as<std::string>());
            suite.shape[param_name(suite_yaml, item.first, key)] = detail::scalar_integer(suite_yaml, item.second, key);
        }
    }
    ProbeSpec defaults;
    defaults.repeats = static_cast<int>(fields.integer_or("repeats", defaults.repeats));
    if (defaults.repeats < 1 || defaults.repeats > 1000) fields.fail_at("repeats", "expected an integer in 1..1000");
    defaults.retries = static_cast<int>(fields.integer_or("retries", defaults.retries));
    if (defaults.retries < 0 || defaults.retries > 20) fields.fail_at("retries", "expected an integer in 0..20");
    defaults.timeout_secs = fields.number_or("timeout_secs", defaults.timeout_secs);
    if (!(defaults.timeout_secs > 0)) fields.fail_at("timeout_secs", "expected a positive number of seconds");

    YAML::Node probes = fields.required("probes", "a list of probes");
    if (!probes.IsSequence() || probes.size() == 0) {
        fields.fail_at("probes", fmt::format("expected a non-empty list of probes, got {}", detail::describe(probes)));
    }
    std::set<std::string> probe_names;
    for (std::size_t probe_idx = 0; probe_idx < probes.size(); ++probe_idx) {
        std::string path = fmt::format("probes[{}]", probe_idx);
        ProbeSpec probe = parse_probe(fields, probes[probe_idx], path, suite.kernel, defaults);
        if (!probe_names.insert(probe.name).second) {
            detail::fail(suite_yaml, probes[probe_idx]["name"], path + ".name",
                         fmt::format("probe name '{}' is used twice", probe.name));
        }
        suite.probes.push_back(std::move(probe));
    }
    suite.model = parse_model_section(fields);
    return suite;
}

std::vector<ProbeParams> expand_probe_sweep(const ProbeSpec& probe) {
    std::vector<ProbeParams> points = {probe.params};
    for (const auto& axis : probe.sweep) {
        std::vector<ProbeParams> next;
        for (const auto& point : points) {
            for (const auto& tuple : axis.values) {
                ProbeParams extended = point;
                for (std::size_t name_idx = 0; name_idx < axis.params.size(); ++name_idx) {
                    extended[axis.params[name_idx]] = tuple[name_idx];
                }
                next.push_back(std::move(extended));
            }
        }
        points = std::move(next);
    }
    return points;
}

}  // namespace npuopt::config
