#pragma once
// Strict reading of YAML maps for config/: every error names file:line:column, the dotted key
// path and what was expected; keys not in the allowed set are errors. Internal to config/.

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace npuopt::config::detail {

/// Parse a YAML file; a missing file is Error(io), a syntax error Error(invalid_config) at file:line.
YAML::Node load_yaml_file(const std::filesystem::path& file);

/// "file:line:column" of a node (1-based), or just "file" when the node has no mark.
std::string location(const std::filesystem::path& file, const YAML::Node& node);

/// Throw Error(invalid_config) "<file:line:col>: key '<key>': <what>".
[[noreturn]] void fail(const std::filesystem::path& file, const YAML::Node& at, std::string_view key,
                       std::string_view what);

/// Short description of a node for messages: "a map", "a list", "null", "'text'".
std::string describe(const YAML::Node& node);

/// A YAML map being read: checks it is a map, rejects unknown and duplicate keys up front,
/// and reads typed values whose errors name file, line and key.
class Fields {
public:
    Fields(std::filesystem::path file, YAML::Node node, std::string path,
           std::initializer_list<std::string_view> allowed_keys);

    bool has(std::string_view key) const;
    /// The value node; missing → error "is missing (expected <expected>)".
    YAML::Node required(std::string_view key, std::string_view expected) const;

    std::string string(std::string_view key) const;
    std::string string_or(std::string_view key, std::string fallback) const;
    double number(std::string_view key) const;
    double number_or(std::string_view key, double fallback) const;
    std::int64_t integer(std::string_view key) const;
    std::int64_t integer_or(std::string_view key, std::int64_t fallback) const;
    bool boolean(std::string_view key) const;
    bool boolean_or(std::string_view key, bool fallback) const;
    std::vector<std::string> string_list(std::string_view key) const;
    std::vector<std::string> string_list_or(std::string_view key, std::vector<std::string> fallback) const;

    /// A nested map with its own allowed keys.
    Fields map(std::string_view key, std::initializer_list<std::string_view> allowed_keys) const;

    /// Dotted path of a key under this map, e.g. "toolchain.commands.run".
    std::string key_path(std::string_view key) const;
    [[noreturn]] void fail_at(std::string_view key, std::string_view what) const;
    const YAML::Node& node() const { return m_node; }
    const std::filesystem::path& file() const { return m_file; }
    /// Keys in document order.
    std::vector<std::string> keys() const;

private:
    std::filesystem::path m_file;
    YAML::Node m_node;
    std::string m_path;
};

/// Read a scalar node of an expected type; errors name `key`.
std::string scalar_string(const std::filesystem::path& file, const YAML::Node& node, std::string_view key);
double scalar_number(const std::filesystem::path& file, const YAML::Node& node, std::string_view key);
std::int64_t scalar_integer(const std::filesystem::path& file, const YAML::Node& node, std::string_view key);
bool scalar_boolean(const std::filesystem::path& file, const YAML::Node& node, std::string_view key);

}  // namespace npuopt::config::detail
