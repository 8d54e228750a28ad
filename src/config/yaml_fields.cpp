#include "config/yaml_fields.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::config::detail {

YAML::Node load_yaml_file(const std::filesystem::path& file) {
    std::error_code error_code;
    if (!std::filesystem::is_regular_file(file, error_code)) {
        throw Error(ErrorKind::invalid_config, fmt::format("{}: file not found (expected a YAML file)", file.string()));
    }
    try {
        return YAML::LoadFile(file.string());
    } catch (const YAML::BadFile&) {
        throw Error(ErrorKind::io, fmt::format("{}: cannot read file", file.string()));
    } catch (const YAML::ParserException& parse_error) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("{}:{}:{}: invalid YAML: {}", file.string(), parse_error.mark.line + 1,
                                parse_error.mark.column + 1, parse_error.msg));
    }
}

std::string location(const std::filesystem::path& file, const YAML::Node& node) {
    YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
    if (mark.is_null()) return file.string();
    return fmt::format("{}:{}:{}", file.string(), mark.line + 1, mark.column + 1);
}

void fail(const std::filesystem::path& file, const YAML::Node& at, std::string_view key, std::string_view what) {
    throw Error(ErrorKind::invalid_config, fmt::format("{}: key '{}': {}", location(file, at), key, what));
}

std::string describe(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) return "null";
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    return fmt::format("'{}'", node.Scalar());
}

std::string scalar_string(const std::filesystem::path& file, const YAML::Node& node, std::string_view key) {
    if (!node.IsScalar()) fail(file, node, key, fmt::format("expected a string, got {}", describe(node)));
    return node.Scalar();
}

double scalar_number(const std::filesystem::path& file, const YAML::Node& node, std::string_view key) {
    if (node.IsScalar()) {
        try {
            return node.as<double>();
        } catch (const YAML::BadConversion&) {
        }
    }
    fail(file, node, key, fmt::format("expected a number, got {}", describe(node)));
}

std::int64_t scalar_integer(const std::filesystem::path& file, const YAML::Node& node, std::string_view key) {
    if (node.IsScalar()) {
        try {
            return node.as<std::int64_t>();
        } catch (const YAML::BadConversion&) {
        }
    }
    fail(file, node, key, fmt::format("expected an integer, got {}", describe(node)));
}

bool scalar_boolean(const std::filesystem::path& file, const YAML::Node& node, std::string_view key) {
    if (node.IsScalar()) {
        try {
            return node.as<bool>();
        } catch (const YAML::BadConversion&) {
        }
    }
    fail(file, node, key, fmt::format("expected true or false, got {}", describe(node)));
}

Fields::Fields(std::filesystem::path file, YAML::Node node, std::string path,
               std::initializer_list<std::string_view> allowed_keys)
    : m_file(std::move(file)), m_node(std::move(node)), m_path(std::move(path)) {
    std::string shown_path = m_path.empty() ? "(top level)" : m_path;
    if (!m_node.IsMap()) {
        if (m_path.empty()) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: expected a map of keys at the top level, got {}",
                                    location(m_file, m_node), describe(m_node)));
        }
        fail(m_file, m_node, m_path, fmt::format("expected a map, got {}", describe(m_node)));
    }
    std::set<std::string> seen;
    for (const auto& entry : m_node) {
        const YAML::Node& key_node = entry.first;
        if (!key_node.IsScalar()) fail(m_file, key_node, shown_path, "keys must be plain strings");
        const std::string& key = key_node.Scalar();
        if (!seen.insert(key).second) fail(m_file, key_node, key_path(key), "duplicate key");
        bool known = std::any_of(allowed_keys.begin(), allowed_keys.end(),
                                 [&](std::string_view allowed) { return allowed == key; });
        if (!known) {
            std::string expected;
            for (std::string_view allowed : allowed_keys) {
                expected += expected.empty() ? "" : ", ";
                expected += allowed;
            }
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: unknown key '{}' (expected one of: {})", location(m_file, key_node),
                                    key_path(key), expected));
        }
    }
}

std::string Fields::key_path(std::string_view key) const {
    return m_path.empty() ? std::string(key) : fmt::format("{}.{}", m_path, key);
}

void Fields::fail_at(std::string_view key, std::string_view what) const {
    YAML::Node value = has(key) ? m_node[std::string(key)] : m_node;
    fail(m_file, value, key_path(key), what);
}

bool Fields::has(std::string_view key) const {
    return static_cast<bool>(m_node[std::string(key)]);
}

std::vector<std::string> Fields::keys() const {
    std::vector<std::string> result;
    for (const auto& entry : m_node) result.push_back(entry.first.Scalar());
    return result;
}

YAML::Node Fields::required(std::string_view key, std::string_view expected) const {
    YAML::Node value = m_node[std::string(key)];
    if (!value) fail(m_file, m_node, key_path(key), fmt::format("is missing (expected {})", expected));
    return value;
}

std::string Fields::string(std::string_view key) const {
    return scalar_string(m_file, required(key, "a string"), key_path(key));
}

std::string Fields::string_or(std::string_view key, std::string fallback) const {
    return has(key) ? string(key) : fallback;
}

double Fields::number(std::string_view key) const {
    return scalar_number(m_file, required(key, "a number"), key_path(key));
}

double Fields::number_or(std::string_view key, double fallback) const {
    return has(key) ? number(key) : fallback;
}

std::int64_t Fields::integer(std::string_view key) const {
    return scalar_integer(m_file, required(key, "an integer"), key_path(key));
}

std::int64_t Fields::integer_or(std::string_view key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
}

bool Fields::boolean(std::string_view key) const {
    return scalar_boolean(m_file, required(key, "true or false"), key_path(key));
}

bool Fields::boolean_or(std::string_view key, bool fallback) const {
    return has(key) ? boolean(key) : fallback;
}

std::vector<std::string> Fields::string_list(std::string_view key) const {
    YAML::Node value = required(key, "a list of strings");
    if (!value.IsSequence()) {
        fail(m_file, value, key_path(key), fmt::format("expected a list of strings, got {}", describe(value)));
    }
    std::vector<std::string> result;
    for (std::size_t item_idx = 0; item_idx < value.size(); ++item_idx) {
        result.push_back(scalar_string(m_file, value[item_idx], fmt::format("{}[{}]", key_path(key), item_idx)));
    }
    return result;
}

std::vector<std::string> Fields::string_list_or(std::string_view key, std::vector<std::string> fallback) const {
    return has(key) ? string_list(key) : fallback;
}

Fields Fields::map(std::string_view key, std::initializer_list<std::string_view> allowed_keys) const {
    return Fields(m_file, required(key, "a map"), key_path(key), allowed_keys);
}

}  // namespace npuopt::config::detail
