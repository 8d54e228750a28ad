#include "knowledge/docs.hpp"

#include <cmark-gfm.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace npuopt::knowledge {

namespace fs = std::filesystem;

namespace {

/// "1.10.2" → {1, 10, 2}; nullopt when not dotted decimal.
std::optional<std::vector<int>> parse_release(std::string_view text) {
    std::vector<int> parts;
    int value = 0;
    bool have_digit = false;
    for (char character : text) {
        if (character >= '0' && character <= '9') {
            value = value * 10 + (character - '0');
            have_digit = true;
        } else if (character == '.' && have_digit) {
            parts.push_back(value);
            value = 0;
            have_digit = false;
        } else {
            return std::nullopt;
        }
    }
    if (!have_digit) return std::nullopt;
    parts.push_back(value);
    return parts;
}

struct CmarkFree {
    void operator()(char* text) const { std::free(text); }
};
struct NodeFree {
    void operator()(cmark_node* node) const { cmark_node_free(node); }
};

std::string render_commonmark(cmark_node* node) {
    std::unique_ptr<char, CmarkFree> text(cmark_render_commonmark(node, CMARK_OPT_DEFAULT, 0));
    return text ? std::string(text.get()) : std::string();
}

std::string heading_text(cmark_node* heading) {
    std::unique_ptr<char, CmarkFree> text(cmark_render_plaintext(heading, CMARK_OPT_DEFAULT, 0));
    std::string result = text ? std::string(text.get()) : std::string();
    while (!result.empty() && (result.back() == '\n' || result.back() == ' ')) result.pop_back();
    return result;
}

std::string trim_blank_lines(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    std::size_t start = text.find_first_not_of("\n ");
    return start == std::string::npos ? std::string() : text.substr(start);
}

}  // namespace

std::optional<DocSet> select_doc_set(const fs::path& docs_dir, std::string_view version) {
    std::error_code error;
    if (!fs::is_directory(docs_dir, error)) return std::nullopt;
    std::vector<std::pair<std::vector<int>, std::string>> releases;
    for (const auto& entry : fs::directory_iterator(docs_dir, error)) {
        if (!entry.is_directory()) continue;
        std::string name = entry.path().filename().string();
        if (auto release = parse_release(name)) releases.emplace_back(*release, name);
    }
    if (releases.empty()) return DocSet{docs_dir, ""};
    auto wanted = parse_release(version);
    if (!wanted) return std::nullopt;
    for (const auto& [release, name] : releases) {  // exact major.minor, or the exact version
        if (name == version) return DocSet{docs_dir / name, name};
    }
    for (const auto& [release, name] : releases) {
        if (release.size() == 2 && wanted->size() >= 2 && release[0] == (*wanted)[0] && release[1] == (*wanted)[1]) {
            return DocSet{docs_dir / name, name};
        }
    }
    std::sort(releases.begin(), releases.end());
    std::optional<DocSet> newest_not_newer;
    for (const auto& [release, name] : releases) {
        if (release <= *wanted) newest_not_newer = DocSet{docs_dir / name, name};
    }
    return newest_not_newer;
}

std::vector<DocSection> split_markdown(std::string_view markdown, const std::string& source_path) {
    std::unique_ptr<cmark_node, NodeFree> document(
        cmark_parse_document(markdown.data(), markdown.size(), CMARK_OPT_DEFAULT));
    if (!document) throw Error(ErrorKind::internal, fmt::format("cmark could not parse {}", source_path));

    std::vector<DocSection> sections;
    std::vector<std::pair<int, std::string>> heading_stack;  // (level, text)
    std::string stem = fs::path(source_path).stem().string();
    std::string current_path = stem;
    std::string current_text;
    int ordinal = 0;

    auto flush = [&] {
        std::string text = trim_blank_lines(current_text);
        current_text.clear();
        if (text.empty()) return;
        DocSection section;
        section.source_path = source_path;
        section.heading_path = current_path;
        section.ordinal = ordinal++;
        section.text = std::move(text);
        section.content_hash = content_hash(section.heading_path + "\n" + section.text);
        sections.push_back(std::move(section));
    };

    for (cmark_node* node = cmark_node_first_child(document.get()); node != nullptr; node = cmark_node_next(node)) {
        if (cmark_node_get_type(node) == CMARK_NODE_HEADING) {
            flush();
            int level = cmark_node_get_heading_level(node);
            while (!heading_stack.empty() && heading_stack.back().first >= level) heading_stack.pop_back();
            heading_stack.emplace_back(level, heading_text(node));
            current_path.clear();
            for (const auto& [heading_level, text] : heading_stack) {
                if (!current_path.empty()) current_path += " > ";
                current_path += text;
            }
            continue;
        }
        current_text += render_commonmark(node);
        current_text += '\n';
    }
    flush();
    return sections;
}

std::vector<DocSection> read_doc_set(const fs::path& dir) {
    std::vector<fs::path> pages;
    std::error_code error;
    for (auto it = fs::recursive_directory_iterator(dir, error); !error && it != fs::recursive_directory_iterator();
         it.increment(error)) {
        if (it->is_regular_file() && it->path().extension() == ".md") pages.push_back(it->path());
    }
    if (error) throw Error(ErrorKind::io, fmt::format("cannot list docs in {}: {}", dir.string(), error.message()));
    std::sort(pages.begin(), pages.end());
    std::vector<DocSection> sections;
    for (const fs::path& page : pages) {
        std::ifstream stream(page, std::ios::binary);
        if (!stream) throw Error(ErrorKind::io, fmt::format("cannot read doc page {}", page.string()));
        std::ostringstream buffer;
        buffer << stream.rdbuf();
        auto page_sections = split_markdown(buffer.str(), fs::relative(page, dir).generic_string());
        sections.insert(sections.end(), std::make_move_iterator(page_sections.begin()),
                        std::make_move_iterator(page_sections.end()));
    }
    return sections;
}

}  // namespace npuopt::knowledge
