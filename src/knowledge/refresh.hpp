#pragma once
// Refresh after a toolchain change, and the diff between two versions' knowledge.
//
//   toolchain.version() ─► same as the KB's? ─► done
//          │ changed
//          ▼
//   mark old-version entries stale (kept) ─► ingest the new release's docs ─► re-compile each
//   rule's evidence designs: code still reported → kept (limit re-read); compiles → retired;
//   blocked by another error → carried as unverified; new diagnostics → new rules ─► remeasure()

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/knowledge_base.hpp"
#include "target/toolchain.hpp"

namespace npuopt::knowledge {

/// What changed in one rule between two versions.
struct RuleChange {
    std::string signature;
    std::string code;
    std::string quantity;
    std::optional<double> old_limit;
    std::optional<double> new_limit;
    std::string text;  ///< render_rule() of the newer record
};

/// A measured fact in both versions (re-measured), or in one only.
struct FactChange {
    std::string kind;
    std::string key;
    std::optional<double> old_value;
    std::optional<double> new_value;
};

/// What the knowledge base believes differently at `new_version` than at `old_version`.
struct KbDiff {
    std::string old_version;
    std::string new_version;
    std::vector<std::string> sections_added;    ///< "page.md § Heading > Path"
    std::vector<std::string> sections_removed;
    std::vector<std::string> sections_changed;
    std::vector<RuleChange> rules_added;
    std::vector<RuleChange> rules_retired;      ///< no longer enforced at new_version
    std::vector<RuleChange> rules_limit_changed;
    std::vector<RuleChange> rules_kept;
    std::vector<FactChange> facts_remeasured;
    std::vector<FactChange> facts_added;
    std::vector<FactChange> facts_dropped;

    std::string to_markdown() const;
    nlohmann::json to_json() const;
};

/// Compare the knowledge of two toolchain versions of kb's target.
KbDiff diff(KnowledgeBase& kb, const std::string& old_version, const std::string& new_version);

/// Hooks and knobs of a refresh.
struct RefreshOptions {
    bool force = false;  ///< re-ingest and re-validate even when the version did not change
    /// Re-run the microbenchmarks for `version` (the microbench/hardware-model code sets it).
    std::function<void(const std::string& version)> remeasure;
    /// A design's source file when neither the evidence nor the designs table has it.
    std::function<std::optional<std::filesystem::path>(const std::string& design_hash)> locate_source;
    Summarizer* summarizer = nullptr;  ///< null: the extractive librarian
    /// Where design sources from the designs table are written to be compiled (not /tmp: the
    /// sandbox hides it); default: beside the database file.
    std::filesystem::path scratch_dir;
    std::string source_extension = ".rs";  ///< file extension for sources written from the designs table
};

/// What one refresh did.
struct RefreshReport {
    std::string old_version;        ///< "" on the first refresh (a build from nothing)
    std::string new_version;
    bool changed = false;           ///< false: the version was already current and nothing was done
    std::int64_t marked_stale = 0;
    IngestReport ingest;
    int rules_revalidated = 0;
    int rules_kept = 0;
    int rules_retired = 0;
    int rules_unverified = 0;       ///< evidence could not be compiled to a verdict; carried over
    int designs_compiled = 0;
    bool remeasured = false;
    KbDiff diff;
};

/// Read the toolchain's version; when it differs from the knowledge base's (or `force`), bring
/// the knowledge base up to it. Throws Error(toolchain) when the version cannot be read.
RefreshReport refresh(KnowledgeBase& kb, const target::Toolchain& toolchain, const RefreshOptions& options = {});

}  // namespace npuopt::knowledge
