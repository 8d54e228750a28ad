#include "config/target_loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {
namespace {

using detail::Fields;

const std::regex k_identifier_pattern("[A-Za-z_][A-Za-z0-9_]*");
const std::regex k_target_name_pattern("[a-z0-9][a-z0-9_.-]*");
const std::regex k_shape_name_pattern("[a-z0-9][a-z0-9_.-]*");

std::filesystem::path resolve_against(const std::filesystem::path& base, const std::filesystem::path& path) {
    if (path.is_absolute()) return path.lexically_normal();
    return (base / path).lexically_normal();
}

/// A string value with ${VAR}s expanded; errors name the key.
std::string expanded_string(const std::filesystem::path& file, const YAML::Node& node, const std::string& key) {
    std::string raw = detail::scalar_string(file, node, key);
    std::string undefined;
    auto expanded = expand_variables(raw, &undefined);
    if (!expanded) {
        detail::fail(file, node, key,
                     fmt::format("variable ${{{}}} is not defined (set it in the environment)", undefined));
    }
    return *expanded;
}

std::vector<std::filesystem::path> path_list(const Fields& fields, std::string_view key,
                                             const std::filesystem::path& base) {
    std::vector<std::filesystem::path> paths;
    if (!fields.has(key)) return paths;
    YAML::Node list = fields.required(key, "a list of paths");
    if (!list.IsSequence()) fields.fail_at(key, fmt::format("expected a list of paths, got {}", detail::describe(list)));
    for (std::size_t item_idx = 0; item_idx < list.size(); ++item_idx) {
        std::string item_key = fmt::format("{}[{}]", fields.key_path(key), item_idx);
        std::string text = expanded_string(fields.file(), list[item_idx], item_key);
        if (text.empty()) detail::fail(fields.file(), list[item_idx], item_key, "expected a path, got ''");
        paths.push_back(resolve_against(base, text));
    }
    return paths;
}

/// Placeholders must be {name} with a lowercase identifier; braces must balance.
void check_placeholders(const std::filesystem::path& file, const YAML::Node& node, const std::string& key,
                        const std::string& arg) {
    static const std::regex k_placeholder_pattern("[a-z_][a-z0-9_]*");
    std::size_t pos = 0;
    while (pos < arg.size()) {
        std::size_t open = arg.find_first_of("{}", pos);
        if (open == std::string::npos) break;
        std::size_t close = arg[open] == '{' ? arg.find('}', open) : std::string::npos;
        if (close == std::string::npos) {
            detail::fail(file, node, key, fmt::format("unbalanced brace in '{}' (expected {{placeholder}})", arg));
        }
        std::string name = arg.substr(open + 1, close - open - 1);
        if (!std::regex_match(name, k_placeholder_pattern)) {
            detail::fail(file, node, key,
                         fmt::format("placeholder '{{{}}}' in '{}' is not a lowercase name", name, arg));
        }
        pos = close + 1;
    }
}

CommandSpec parse_command(const Fields& commands, std::string_view name) {
    Fields command = commands.map(name, {"argv", "timeout_secs"});
    CommandSpec spec;
    spec.argv = command.string_list("argv");
    if (spec.argv.empty()) command.fail_at("argv", "expected a non-empty list (the command and its arguments)");
    YAML::Node argv_node = command.required("argv", "a list");
    for (std::size_t arg_idx = 0; arg_idx < spec.argv.size(); ++arg_idx) {
        check_placeholders(command.file(), argv_node[arg_idx], fmt::format("{}[{}]", command.key_path("argv"), arg_idx),
                           spec.argv[arg_idx]);
    }
    spec.timeout_secs = command.number_or("timeout_secs", spec.timeout_secs);
    if (!(spec.timeout_secs > 0)) command.fail_at("timeout_secs", "expected a positive number of seconds");
    return spec;
}

ToolchainSpec parse_toolchain(const Fields& target, const std::filesystem::path& dir) {
    Fields toolchain =
        target.map("toolchain", {"protocol", "bin", "search_paths", "env", "read_only_paths", "sandbox", "commands"});
    ToolchainSpec spec;
    spec.protocol = toolchain.string_or("protocol", spec.protocol);
    if (spec.protocol != k_protocol_jsonl_v1 && spec.protocol != k_protocol_rustc_json_v1) {
        toolchain.fail_at("protocol", fmt::format("unsupported protocol '{}' (supported: {}, {})", spec.protocol,
                                                  k_protocol_jsonl_v1, k_protocol_rustc_json_v1));
    }
    spec.bin = expanded_string(toolchain.file(), toolchain.required("bin", "a string"), toolchain.key_path("bin"));
    if (spec.bin.empty()) toolchain.fail_at("bin", "expected the toolchain executable's name or path, got ''");
    spec.search_paths = path_list(toolchain, "search_paths", dir);
    spec.read_only_paths = path_list(toolchain, "read_only_paths", dir);
    if (toolchain.has("env")) {
        YAML::Node env = toolchain.required("env", "a map");
        if (!env.IsMap()) toolchain.fail_at("env", fmt::format("expected a map of NAME: value, got {}", detail::describe(env)));
        for (const auto& entry : env) {
            std::string name = entry.first.Scalar();
            std::string key = fmt::format("{}.{}", toolchain.key_path("env"), name);
            if (!std::regex_match(name, k_identifier_pattern)) {
                detail::fail(toolchain.file(), entry.first, key, "expected an environment variable name");
            }
            spec.env[name] = expanded_string(toolchain.file(), entry.second, key);
        }
    }
    if (toolchain.has("sandbox")) {
        Fields sandbox = toolchain.map("sandbox", {"system_paths"});
        if (sandbox.has("system_paths")) spec.system_paths = path_list(sandbox, "system_paths", dir);
    }
    Fields commands = toolchain.map("commands", {"version", "check", "schedule", "run", "compile", "paths"});
    spec.version = parse_command(commands, "version");
    spec.check = parse_command(commands, "check");
    spec.schedule = parse_command(commands, "schedule");
    spec.run = parse_command(commands, "run");
    if (commands.has("compile")) spec.compile = parse_command(commands, "compile");
    if (commands.has("paths")) spec.paths = parse_command(commands, "paths");
    return spec;
}

std::string path_string(const Fields& fields, std::string_view key) {
    std::string text = expanded_string(fields.file(), fields.required(key, "a path"), fields.key_path(key));
    if (text.empty()) fields.fail_at(key, "expected a path, got ''");
    return text;
}

}  // namespace

std::optional<std::int64_t> evaluate_dimension(std::string_view dim, const std::map<std::string, std::int64_t>& shape,
                                               std::string* error) {
    auto fail_with = [&](std::string reason) -> std::optional<std::int64_t> {
        if (error != nullptr) *error = std::move(reason);
        return std::nullopt;
    };
    std::int64_t result = 1;
    char op = '*';
    std::size_t pos = 0;
    while (true) {
        std::size_t end = dim.find_first_of("*/", pos);
        std::string term(dim.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
        std::int64_t value = 0;
        if (!term.empty() && std::all_of(term.begin(), term.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            value = std::stoll(term);
        } else if (auto found = shape.find(term); found != shape.end()) {
            value = found->second;
        } else {
            return fail_with(term.empty() ? "has an empty term" : fmt::format("names unknown variable '{}'", term));
        }
        if (value <= 0) return fail_with("has a term that is not positive");
        if (op == '*') {
            result *= value;
        } else {
            if (result % value != 0) return fail_with(fmt::format("does not divide exactly ({} / {})", result, value));
            result /= value;
        }
        if (end == std::string_view::npos) break;
        op = dim[end];
        pos = end + 1;
    }
    return result;
}

std::optional<std::string> shape_limit_violation(const KernelSpec& kernel,
                                                 const std::map<std::string, std::int64_t>& shape) {
    for (const auto& limit : kernel.limits) {
        std::string why;
        const auto value = evaluate_dimension(limit.dim, shape, &why);
        if (!value) return fmt::format("{} {} ({})", limit.dim, why, limit.why);
        std::string broken;
        if (limit.multiple_of && *value % *limit.multiple_of != 0) {
            broken = fmt::format("a multiple of {}", *limit.multiple_of);
        } else if (limit.min && *value < *limit.min) {
            broken = fmt::format("at least {}", *limit.min);
        } else if (limit.max && *value > *limit.max) {
            broken = fmt::format("at most {}", *limit.max);
        }
        if (!broken.empty()) {
            return fmt::format("{} = {} must be {} ({})", limit.dim, *value, broken, limit.why);
        }
    }
    return std::nullopt;
}

std::vector<std::string> shape_names(const KernelsConfig& kernels) {
    std::vector<std::string> names;
    for (const auto& kernel : kernels.kernels) {
        for (const auto& named : kernel.shapes) {
            if (std::find(names.begin(), names.end(), named.name) == names.end()) names.push_back(named.name);
        }
    }
    return names;
}

void select_shape(KernelsConfig& kernels, const std::string& name, const std::vector<std::string>& selected,
                  const std::string& origin) {
    for (auto& kernel : kernels.kernels) {
        const bool wanted =
            selected.empty() || std::find(selected.begin(), selected.end(), kernel.name) != selected.end();
        auto found = std::find_if(kernel.shapes.begin(), kernel.shapes.end(),
                                  [&](const NamedShape& named) { return named.name == name; });
        if (found == kernel.shapes.end()) {
            if (!wanted) continue;
            std::vector<std::string> known;
            for (const auto& named : kernel.shapes) known.push_back(named.name);
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: unknown shape '{}' for kernel {} (known shapes in {}: {})", origin, name,
                                    kernel.name, kernels.file.string(), fmt::join(known, ", ")));
        }
        kernel.shape_name = found->name;
        kernel.shape = found->values;
    }
}

std::optional<std::string> expand_variables(std::string_view text, std::string* undefined) {
    std::string result;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t start = text.find("${", pos);
        if (start == std::string_view::npos) {
            result.append(text.substr(pos));
            break;
        }
        std::size_t end = text.find('}', start);
        if (end == std::string_view::npos) {
            result.append(text.substr(pos));
            break;
        }
        result.append(text.substr(pos, start - pos));
        std::string name(text.substr(start + 2, end - start - 2));
        if (const char* value = std::getenv(name.c_str()); value != nullptr && *value != '\0') {
            result += value;
        } else if (name == "NPUOPT_SOURCE_DIR") {
            result += NPUOPT_SOURCE_DIR;
        } else if (name == "NPUOPT_BUILD_DIR") {
            result += NPUOPT_BUILD_DIR;
        } else {
            if (undefined != nullptr) *undefined = name;
            return std::nullopt;
        }
        pos = end + 1;
    }
    return result;
}

TargetConfig load_target_config(const std::filesystem::path& target_yaml) {
    YAML::Node root = detail::load_yaml_file(target_yaml);
    Fields target(target_yaml, root, "",
                  {"name", "description", "toolchain", "run_check", "facts", "docs", "microbench", "templates", "kernels",
                   "cost_model"});
    TargetConfig config;
    config.dir = std::filesystem::absolute(target_yaml).parent_path().lexically_normal();
    config.name = target.string("name");
    if (!std::regex_match(config.name, k_target_name_pattern)) {
        target.fail_at("name", "expected a lowercase name (letters, digits, '-', '_', '.')");
    }
    std::string dir_name = config.dir.filename().string();
    if (config.name != dir_name) {
        target.fail_at("name", fmt::format("'{}' does not match its directory '{}' (they must be equal)", config.name,
                                           dir_name));
    }
    config.description = target.string("description");
    config.toolchain = parse_toolchain(target, config.dir);
    if (target.has("run_check")) {
        Fields run_check = target.map("run_check", {"fraction"});
        config.run_check_fraction = run_check.number_or("fraction", 1.0);
        if (!(config.run_check_fraction > 0.0 && config.run_check_fraction <= 1.0)) {
            run_check.fail_at("fraction", fmt::format("expected a share of launches in (0, 1], got {}",
                                                      config.run_check_fraction));
        }
    }

    YAML::Node facts = target.required("facts", "a map of public hardware facts");
    if (!facts.IsMap()) target.fail_at("facts", fmt::format("expected a map, got {}", detail::describe(facts)));
    for (const auto& entry : facts) {
        std::string fact_name = entry.first.Scalar();
        if (!std::regex_match(fact_name, k_identifier_pattern)) {
            detail::fail(target_yaml, entry.first, "facts." + fact_name, "expected an identifier as the fact name");
        }
        Fields fact(target_yaml, entry.second, "facts." + fact_name, {"value", "unit", "description"});
        HardwareFact hardware_fact;
        hardware_fact.value = fact.number("value");
        hardware_fact.unit = fact.string("unit");
        hardware_fact.description = fact.string("description");
        if (!config.facts.emplace(fact_name, hardware_fact).second) {
            detail::fail(target_yaml, entry.first, "facts." + fact_name, "duplicate fact");
        }
    }
    config.docs_dir = resolve_against(config.dir, path_string(target, "docs"));
    config.microbench_dir = resolve_against(config.dir, path_string(target, "microbench"));
    config.templates_dir = resolve_against(config.dir, path_string(target, "templates"));
    config.kernels_file = resolve_against(config.dir, path_string(target, "kernels"));
    if (target.has("cost_model")) {
        const auto file = resolve_against(config.dir, path_string(target, "cost_model"));
        if (!std::filesystem::is_regular_file(file)) {
            target.fail_at("cost_model", fmt::format("{} not found", file.string()));
        }
        config.cost_model = std::make_shared<CostModelSpec>(load_cost_model_config(file));
    } else if (std::filesystem::is_regular_file(config.dir / "cost_model.yaml")) {
        config.cost_model = std::make_shared<CostModelSpec>(load_cost_model_config(config.dir / "cost_model.yaml"));
    }
    return config;
}

namespace {

const std::set<std::string>& tensor_roles() {
    static const std::set<std::string> k_roles = {"weight", "input", "output", "state"};
    return k_roles;
}

const std::set<std::string>& tensor_dtypes() {
    static const std::set<std::string> k_dtypes = {"fp8_e4m3", "fp4_e2m1", "bf16", "f32", "i32"};
    return k_dtypes;
}

/// A map of shape variables to positive integers, at `key`.
std::map<std::string, std::int64_t> parse_shape_values(const std::filesystem::path& kernels_yaml,
                                                       const YAML::Node& node, const std::string& key) {
    if (!node.IsMap()) {
        detail::fail(kernels_yaml, node, key,
                     fmt::format("expected a map of shape variables to integers, got {}", detail::describe(node)));
    }
    std::map<std::string, std::int64_t> values;
    for (const auto& entry : node) {
        std::string var = entry.first.Scalar();
        std::string var_key = fmt::format("{}.{}", key, var);
        if (!std::regex_match(var, k_identifier_pattern)) {
            detail::fail(kernels_yaml, entry.first, var_key, "expected an identifier as the variable name");
        }
        std::int64_t value = detail::scalar_integer(kernels_yaml, entry.second, var_key);
        if (value <= 0) detail::fail(kernels_yaml, entry.second, var_key, "expected a positive integer");
        values[var] = value;
    }
    return values;
}

/// The kernel's `shape` (one, named default) or `shapes` (named, the first the default), each with
/// its node for error locations.
std::vector<YAML::Node> parse_kernel_shapes(const std::filesystem::path& kernels_yaml, Fields& kernel,
                                            KernelSpec& spec) {
    if (kernel.has("shape") == kernel.has("shapes")) {
        kernel.fail_at(kernel.has("shape") ? "shapes" : "shape",
                       "expected exactly one of 'shape' (one map of shape variables) and 'shapes' (named "
                       "shapes, the first one the default)");
    }
    std::vector<YAML::Node> shape_nodes;  // beside spec.shapes, for error locations
    if (kernel.has("shape")) {
        spec.shapes.push_back(
            {k_default_shape_name, parse_shape_values(kernels_yaml, kernel.node()["shape"], kernel.key_path("shape"))});
        shape_nodes.push_back(kernel.node()["shape"]);
    } else {
        YAML::Node shapes = kernel.node()["shapes"];
        if (!shapes.IsMap() || shapes.size() == 0) {
            kernel.fail_at("shapes", fmt::format("expected a non-empty map of shape names to shapes, got {}",
                                                 detail::describe(shapes)));
        }
        for (const auto& entry : shapes) {
            std::string shape_name = entry.first.Scalar();
            std::string key = fmt::format("{}.{}", kernel.key_path("shapes"), shape_name);
            if (!std::regex_match(shape_name, k_shape_name_pattern)) {
                detail::fail(kernels_yaml, entry.first, key,
                             "expected a shape name (lowercase letters, digits, '-', '_', '.'), e.g. gemma4-12b");
            }
            spec.shapes.push_back({shape_name, parse_shape_values(kernels_yaml, entry.second, key)});
            shape_nodes.push_back(entry.second);
            if (spec.shapes.front().values.size() != spec.shapes.back().values.size() ||
                !std::equal(spec.shapes.front().values.begin(), spec.shapes.front().values.end(),
                            spec.shapes.back().values.begin(),
                            [](const auto& lhs, const auto& rhs) { return lhs.first == rhs.first; })) {
                std::vector<std::string> expected;
                for (const auto& [var, value] : spec.shapes.front().values)
                    expected.push_back(var);
                detail::fail(kernels_yaml, entry.second, key,
                             fmt::format("expected the same variables as shape '{}' ({})", spec.shapes.front().name,
                                         fmt::join(expected, ", ")));
            }
        }
    }
    spec.shape_name = spec.shapes.front().name;
    spec.shape = spec.shapes.front().values;
    return shape_nodes;
}

/// The kernel's `limits`: bounds on shape dimensions (products and quotients of variables).
void parse_kernel_limits(const std::filesystem::path& kernels_yaml, Fields& kernel, KernelSpec& spec) {
    if (!kernel.has("limits")) return;
    YAML::Node limits = kernel.node()["limits"];
    if (!limits.IsSequence()) {
        kernel.fail_at("limits", fmt::format("expected a list of limits, got {}", detail::describe(limits)));
    }
    for (std::size_t limit_idx = 0; limit_idx < limits.size(); ++limit_idx) {
        Fields limit(kernels_yaml, limits[limit_idx], fmt::format("{}[{}]", kernel.key_path("limits"), limit_idx),
                     {"dim", "multiple_of", "min", "max", "why"});
        ShapeLimit shape_limit;
        shape_limit.dim = limit.string("dim");
        shape_limit.why = limit.string("why");
        std::string why;
        if (!evaluate_dimension(shape_limit.dim, spec.shape, &why)) {
            limit.fail_at("dim", fmt::format("'{}' {} (expected a shape variable of kernel '{}' or a "
                                             "product/quotient of them)",
                                             shape_limit.dim, why, spec.name));
        }
        for (const char* bound : {"multiple_of", "min", "max"}) {
            if (!limit.has(bound)) continue;
            const std::int64_t value = limit.integer(bound);
            if (value <= 0) limit.fail_at(bound, "expected a positive integer");
            (std::string_view(bound) == "multiple_of" ? shape_limit.multiple_of
             : std::string_view(bound) == "min"       ? shape_limit.min
                                                      : shape_limit.max) = value;
        }
        if (!shape_limit.multiple_of && !shape_limit.min && !shape_limit.max) {
            limit.fail_at("dim", "expected at least one bound: multiple_of, min or max");
        }
        spec.limits.push_back(std::move(shape_limit));
    }
}

/// Every named shape within the kernel's declared limits.
void check_shapes_within_limits(const std::filesystem::path& kernels_yaml, Fields& kernel, const KernelSpec& spec,
                                const std::vector<YAML::Node>& shape_nodes) {
    for (std::size_t shape_idx = 0; shape_idx < spec.shapes.size(); ++shape_idx) {
        if (auto violation = shape_limit_violation(spec, spec.shapes[shape_idx].values)) {
            detail::fail(kernels_yaml, shape_nodes[shape_idx],
                         kernel.has("shape")
                             ? kernel.key_path("shape")
                             : fmt::format("{}.{}", kernel.key_path("shapes"), spec.shapes[shape_idx].name),
                         fmt::format("shape '{}' is outside the kernel's declared limits: {}",
                                     spec.shapes[shape_idx].name, *violation));
        }
    }
}

/// The kernel's `tensors`: name, role, dtype and a shape valid at every named shape.
void parse_kernel_tensors(const std::filesystem::path& kernels_yaml, Fields& kernel, KernelSpec& spec) {
    YAML::Node tensors = kernel.required("tensors", "a list of tensors");
    if (!tensors.IsSequence()) {
        kernel.fail_at("tensors", fmt::format("expected a list of tensors, got {}", detail::describe(tensors)));
    }
    std::set<std::string> tensor_names;
    for (std::size_t tensor_idx = 0; tensor_idx < tensors.size(); ++tensor_idx) {
        Fields tensor(kernels_yaml, tensors[tensor_idx], fmt::format("{}[{}]", kernel.key_path("tensors"), tensor_idx),
                      {"name", "role", "dtype", "shape"});
        TensorSpec tensor_spec;
        tensor_spec.name = tensor.string("name");
        if (!tensor_names.insert(tensor_spec.name).second) {
            tensor.fail_at("name", fmt::format("duplicate tensor '{}'", tensor_spec.name));
        }
        tensor_spec.role = tensor.string("role");
        if (!tensor_roles().contains(tensor_spec.role)) {
            tensor.fail_at("role", fmt::format("'{}' is not a role (expected one of: {})", tensor_spec.role,
                                               fmt::join(tensor_roles(), ", ")));
        }
        tensor_spec.dtype = tensor.string("dtype");
        if (!tensor_dtypes().contains(tensor_spec.dtype)) {
            tensor.fail_at("dtype", fmt::format("'{}' is not a dtype (expected one of: {})", tensor_spec.dtype,
                                                fmt::join(tensor_dtypes(), ", ")));
        }
        YAML::Node dims = tensor.required("shape", "a list of integers or shape-variable names");
        if (!dims.IsSequence()) {
            tensor.fail_at("shape", fmt::format("expected a list of integers or shape-variable names, got {}",
                                                detail::describe(dims)));
        }
        for (std::size_t dim_idx = 0; dim_idx < dims.size(); ++dim_idx) {
            std::string key = fmt::format("{}[{}]", tensor.key_path("shape"), dim_idx);
            std::string dim = detail::scalar_string(kernels_yaml, dims[dim_idx], key);
            for (const auto& named : spec.shapes) {
                std::string why;
                if (evaluate_dimension(dim, named.values, &why)) continue;
                detail::fail(
                    kernels_yaml, dims[dim_idx], key,
                    fmt::format("'{}' {}{} (expected an integer, a shape variable of kernel '{}', or a "
                                "product/quotient of them such as hidden/16)",
                                dim, why, spec.shapes.size() > 1 ? fmt::format(" at shape '{}'", named.name) : "",
                                spec.name));
            }
            tensor_spec.shape.push_back(dim);
        }
        spec.tensors.push_back(std::move(tensor_spec));
    }
}

}  // namespace

KernelsConfig load_kernels_config(const std::filesystem::path& kernels_yaml,
                                  const std::filesystem::path& templates_dir) {
    YAML::Node root = detail::load_yaml_file(kernels_yaml);
    Fields top(kernels_yaml, root, "", {"kernels"});
    YAML::Node list = top.required("kernels", "a list of kernels");
    if (!list.IsSequence() || list.size() == 0) {
        top.fail_at("kernels", fmt::format("expected a non-empty list of kernels, got {}", detail::describe(list)));
    }
    KernelsConfig config;
    config.file = kernels_yaml;
    std::set<std::string> names;
    for (std::size_t kernel_idx = 0; kernel_idx < list.size(); ++kernel_idx) {
        Fields kernel(kernels_yaml, list[kernel_idx], fmt::format("kernels[{}]", kernel_idx),
                      {"name", "description", "shape", "shapes", "limits", "tolerance", "baseline", "tensors"});
        KernelSpec spec;
        spec.name = kernel.string("name");
        if (!std::regex_match(spec.name, k_identifier_pattern)) kernel.fail_at("name", "expected an identifier");
        if (!names.insert(spec.name).second) kernel.fail_at("name", fmt::format("duplicate kernel '{}'", spec.name));
        spec.description = kernel.string("description");
        const std::vector<YAML::Node> shape_nodes = parse_kernel_shapes(kernels_yaml, kernel, spec);
        parse_kernel_limits(kernels_yaml, kernel, spec);
        check_shapes_within_limits(kernels_yaml, kernel, spec, shape_nodes);

        Fields tolerance = kernel.map("tolerance", {"atol", "rtol"});
        spec.atol = tolerance.number("atol");
        spec.rtol = tolerance.number("rtol");
        if (spec.atol < 0) tolerance.fail_at("atol", "expected a number >= 0");
        if (spec.rtol < 0) tolerance.fail_at("rtol", "expected a number >= 0");
        spec.baseline = resolve_against(templates_dir, path_string(kernel, "baseline"));

        parse_kernel_tensors(kernels_yaml, kernel, spec);
        config.kernels.push_back(std::move(spec));
    }
    return config;
}

std::filesystem::path locate_knowledge_dir(const std::optional<std::filesystem::path>& flag) {
    std::filesystem::path dir;
    std::string origin;
    if (flag) {
        dir = *flag;
        origin = "--knowledge-dir";
    } else if (const char* env = std::getenv("NPUOPT_KNOWLEDGE_DIR"); env != nullptr && *env != '\0') {
        dir = env;
        origin = "NPUOPT_KNOWLEDGE_DIR";
    } else {
        dir = std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge";
        origin = "the source tree";
    }
    std::error_code error_code;
    if (!std::filesystem::is_directory(dir, error_code)) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("knowledge directory {} (from {}) does not exist; pass --knowledge-dir or set "
                                "NPUOPT_KNOWLEDGE_DIR to the repository's knowledge/ folder",
                                dir.string(), origin));
    }
    return std::filesystem::absolute(dir).lexically_normal();
}

std::vector<std::string> list_targets(const std::filesystem::path& knowledge_dir) {
    std::vector<std::string> names;
    std::error_code error_code;
    for (const auto& entry : std::filesystem::directory_iterator(knowledge_dir, error_code)) {
        if (entry.is_directory() && std::filesystem::is_regular_file(entry.path() / "target.yaml")) {
            names.push_back(entry.path().filename().string());
        }
    }
    std::sort(names.begin(), names.end());
    return names;
}

TargetConfig load_target(const std::filesystem::path& knowledge_dir, const std::string& name) {
    std::vector<std::string> known = list_targets(knowledge_dir);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("unknown target '{}' (known targets in {}: {})", name, knowledge_dir.string(),
                                known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
    }
    return load_target_config(knowledge_dir / name / "target.yaml");
}

}  // namespace npuopt::config
