#include "llm/prompt.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <kainjow/mustache.hpp>

#include "core/error.hpp"

namespace npuopt::llm {

namespace {

constexpr std::string_view k_system_marker = "---system---";
constexpr std::string_view k_user_marker = "---user---";

/// Render one part; values as plain text (no HTML escaping).
std::string render_part(const std::string& text, const std::map<std::string, std::string>& values,
                        const std::string& origin) {
    kainjow::mustache::mustache tmpl(text);
    if (!tmpl.is_valid()) {
        throw Error(ErrorKind::invalid_config, fmt::format("{}: the prompt template does not parse: {}", origin, tmpl.error_message()));
    }
    tmpl.set_custom_escape([](const std::string& raw) { return raw; });
    kainjow::mustache::data data;
    for (const auto& [name, value] : values) {
        if (value.empty()) {
            data.set(name, false);  // {{#name}} sections stay closed
        } else {
            data.set(name, value);
        }
    }
    return tmpl.render(data);
}

std::string trim_newlines(std::string text) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) text.erase(text.begin());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
    return text;
}

}  // namespace

PromptTemplate PromptTemplate::parse(const std::string& text, const std::string& origin) {
    PromptTemplate result;
    result.m_origin = origin;
    const auto user_at = text.find(k_user_marker);
    if (user_at == std::string::npos) {
        throw Error(ErrorKind::invalid_config, fmt::format("{}: the prompt template has no '{}' part", origin, k_user_marker));
    }
    const auto system_at = text.find(k_system_marker);
    if (system_at != std::string::npos && system_at < user_at) {
        result.m_system = trim_newlines(text.substr(system_at + k_system_marker.size(), user_at - system_at - k_system_marker.size()));
    }
    result.m_user = trim_newlines(text.substr(user_at + k_user_marker.size()));
    for (const std::string* part : {&result.m_system, &result.m_user}) {
        kainjow::mustache::mustache check(*part);
        if (!check.is_valid()) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: the prompt template does not parse: {}", origin, check.error_message()));
        }
    }
    return result;
}

PromptTemplate PromptTemplate::load(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::invalid_config, fmt::format("{}: cannot read the prompt template", file.string()));
    std::ostringstream text;
    text << in.rdbuf();
    return parse(text.str(), file.string());
}

PromptParts PromptTemplate::render(const std::map<std::string, std::string>& values) const {
    return {render_part(m_system, values, m_origin), render_part(m_user, values, m_origin)};
}

std::int64_t estimate_tokens(const std::string& text) {
    return static_cast<std::int64_t>((text.size() + 3) / 4);
}

}  // namespace npuopt::llm
