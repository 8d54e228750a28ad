#pragma once
// Doc ingestion: a target's Markdown documentation → sections (heading path + text, code blocks
// kept), parsed with cmark-gfm. Picks the doc set that matches the toolchain release.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace npuopt::knowledge {

/// One section of a page: the text under a heading, up to the next heading of any level.
struct DocSection {
    std::string source_path;   ///< page path relative to the doc set, e.g. "dsl/dma.md"
    std::string heading_path;  ///< headings from the page title down, joined by " > "
    int ordinal = 0;           ///< position within its page, from 0
    std::string text;          ///< the section's blocks as CommonMark (code fences and `code` kept)
    std::string content_hash;  ///< SHA-256 of heading_path + "\n" + text
};

/// The doc set a toolchain release reads: `<docs_dir>/<major.minor>` (or the full version),
/// else the newest release subdirectory not newer than `version`, else `docs_dir` itself when it
/// has no release subdirectories.
struct DocSet {
    std::filesystem::path dir;
    std::string name;  ///< the subdirectory's name ("1.1"), "" when docs_dir is used directly
};

/// Choose the doc set for `version` (e.g. "1.1.0"); nullopt when `docs_dir` is not a directory
/// or only newer releases are documented.
std::optional<DocSet> select_doc_set(const std::filesystem::path& docs_dir, std::string_view version);

/// Split one Markdown page into sections. Text before the first heading belongs to a section
/// titled by the page's file stem. Sections without text are skipped.
std::vector<DocSection> split_markdown(std::string_view markdown, const std::string& source_path);

/// Every *.md page under `dir` (recursively, sorted by path), split into sections.
/// Throws Error(io) when a page cannot be read.
std::vector<DocSection> read_doc_set(const std::filesystem::path& dir);

}  // namespace npuopt::knowledge
