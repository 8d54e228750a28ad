// {placeholder} expansion in a target.yaml command's argv.

#include <fmt/format.h>

#include <cctype>

#include "core/error.hpp"
#include "target/toolchain.hpp"

namespace npuopt::target {

namespace {

/// Placeholders that stand for a whole optional argument: an argument that is exactly one of
/// them, expanding to nothing, is dropped instead of passed as "" ({check} → "--check" or nothing).
constexpr std::string_view k_flag_placeholders[] = {"check"};
/// Placeholders that are the value of the flag before them: an argument that is exactly one of
/// them, expanding to nothing, is dropped with that flag (a check without a kernel: no
/// "--kernel {kernel} --shape {shape}").
constexpr std::string_view k_flag_value_placeholders[] = {"kernel", "shape"};

bool is_flag_value_placeholder(std::string_view argument) {
    for (std::string_view name : k_flag_value_placeholders) {
        if (argument.size() == name.size() + 2 && argument.front() == '{' && argument.back() == '}' &&
            argument.substr(1, name.size()) == name) {
            return true;
        }
    }
    return false;
}

bool is_flag_placeholder(std::string_view argument) {
    for (std::string_view name : k_flag_placeholders) {
        if (argument.size() == name.size() + 2 && argument.front() == '{' && argument.back() == '}' &&
            argument.substr(1, name.size()) == name) {
            return true;
        }
    }
    return false;
}

bool is_identifier(std::string_view text) {
    if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) return false;
    for (char ch : text) {
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
    }
    return true;
}

std::string known_names(const std::map<std::string, std::string>& values) {
    std::string names;
    for (const auto& [name, value] : values) names += (names.empty() ? "{" : ", {") + name + "}";
    return names.empty() ? "none" : names;
}

}  // namespace

std::string format_shape(const std::map<std::string, std::int64_t>& shape) {
    std::string text;
    for (const auto& [name, value] : shape) {  // std::map: sorted by key
        if (!text.empty()) text += ',';
        text += fmt::format("{}={}", name, value);
    }
    return text;
}

std::vector<std::string> expand_argv(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& values,
                                     std::string_view command_name) {
    std::vector<std::string> expanded;
    for (const auto& argument : argv) {
        std::string result;
        std::size_t position = 0;
        while (position < argument.size()) {
            std::size_t open = argument.find('{', position);
            std::size_t close = open == std::string::npos ? std::string::npos : argument.find('}', open + 1);
            if (close == std::string::npos) {
                result += argument.substr(position);
                break;
            }
            std::string_view name(argument.data() + open + 1, close - open - 1);
            result += argument.substr(position, open - position);
            if (!is_identifier(name)) {  // not a placeholder (e.g. JSON): literal text
                result += argument.substr(open, close - open + 1);
            } else {
                auto found = values.find(std::string(name));
                if (found == values.end()) {
                    throw Error(ErrorKind::invalid_config,
                                fmt::format("toolchain command '{}': unknown placeholder {{{}}} in argument \"{}\" "
                                            "(available in this command: {})",
                                            command_name, name, argument, known_names(values)));
                }
                result += found->second;
            }
            position = close + 1;
        }
        if (result.empty() && is_flag_placeholder(argument)) continue;
        if (result.empty() && is_flag_value_placeholder(argument)) {
            if (!expanded.empty() && expanded.back().starts_with("-")) expanded.pop_back();
            continue;
        }
        expanded.push_back(std::move(result));
    }
    return expanded;
}

}  // namespace npuopt::target
