#include "llm/extract.hpp"

#include <algorithm>
#include <cctype>

namespace npuopt::llm {
namespace {

std::string lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
    return text;
}

/// An opening or closing fence: up to 3 spaces, then 3+ backticks or tildes.
struct Fence {
    char mark = 0;
    std::size_t length = 0;
    std::string_view info;  ///< what follows the fence on its line
};

std::optional<Fence> fence_of(std::string_view line) {
    std::size_t indent = 0;
    while (indent < line.size() && indent < 3 && line[indent] == ' ') ++indent;
    if (indent >= line.size() || (line[indent] != '`' && line[indent] != '~')) return std::nullopt;
    Fence fence;
    fence.mark = line[indent];
    std::size_t end = indent;
    while (end < line.size() && line[end] == fence.mark) ++end;
    fence.length = end - indent;
    if (fence.length < 3) return std::nullopt;
    fence.info = trim(line.substr(end));
    return fence;
}

/// The language of an info string: its first word, up to a space, comma or brace ("rust,ignore" → "rust").
std::string language_of(std::string_view info) {
    std::size_t end = 0;
    while (end < info.size() && !std::isspace(static_cast<unsigned char>(info[end])) && info[end] != ',' &&
           info[end] != '{') {
        ++end;
    }
    return lower(info.substr(0, end));
}

std::optional<nlohmann::json> parse_object(std::string_view text) {
    nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object()) return std::nullopt;
    return value;
}

/// End (one past the closing brace) of the balanced object starting at text[open]; npos when unbalanced.
std::size_t balanced_object_end(std::string_view text, std::size_t open) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t pos = open; pos < text.size(); ++pos) {
        char c = text[pos];
        if (in_string) {
            if (c == '\\') {
                ++pos;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}') {
            if (--depth == 0) return pos + 1;
        }
    }
    return std::string_view::npos;
}

}  // namespace

std::vector<FencedBlock> fenced_blocks(std::string_view text) {
    std::vector<FencedBlock> blocks;
    std::optional<Fence> open;
    FencedBlock current;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t line_end = std::min(text.find('\n', pos), text.size());
        std::string_view line = text.substr(pos, line_end - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        pos = line_end + 1;
        auto fence = fence_of(line);
        if (!open) {
            if (fence && !(fence->mark == '`' && fence->info.find('`') != std::string_view::npos)) {
                open = fence;
                current = FencedBlock{language_of(fence->info), {}};
            }
        } else if (fence && fence->mark == open->mark && fence->length >= open->length && fence->info.empty()) {
            blocks.push_back(std::move(current));
            current = {};
            open.reset();
        } else {
            current.code.append(line);
            current.code.push_back('\n');
        }
    }
    return blocks;
}

std::optional<std::string> extract_code(std::string_view text, std::string_view language) {
    std::string wanted = lower(language);
    std::optional<std::string> untagged;
    for (auto& block : fenced_blocks(text)) {
        if (block.language == wanted) return std::move(block.code);
        if (block.language.empty() && !untagged) untagged = std::move(block.code);
    }
    return untagged;
}

std::optional<nlohmann::json> extract_json_object(std::string_view text) {
    if (auto whole = parse_object(text)) return whole;
    for (const auto& block : fenced_blocks(text)) {
        if (block.language == "json" || block.language.empty()) {
            if (auto object = parse_object(block.code)) return object;
        }
    }
    // Bounded: a reply of many unbalanced braces must not cost quadratic time.
    static constexpr int k_most_candidates = 64;
    int candidates = 0;
    for (std::size_t open = text.find('{'); open != std::string_view::npos && candidates < k_most_candidates;
         open = text.find('{', open + 1), ++candidates) {
        std::size_t end = balanced_object_end(text, open);
        if (end == std::string_view::npos) continue;
        if (auto object = parse_object(text.substr(open, end - open))) return object;
    }
    return std::nullopt;
}

std::string redact(std::string_view text, std::string_view secret) {
    std::string out(text);
    if (secret.empty()) return out;
    static constexpr std::string_view k_marker = "[redacted]";
    for (std::size_t pos = out.find(secret); pos != std::string::npos; pos = out.find(secret, pos + k_marker.size())) {
        out.replace(pos, secret.size(), k_marker);
    }
    return out;
}

}  // namespace npuopt::llm
