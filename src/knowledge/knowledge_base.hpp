#pragma once
// The knowledge base of one target: what npuopt believes about the chip, each belief with its
// evidence and the toolchain version it holds for. A facade over docs, summaries, rules,
// retrieval and export; refresh.hpp updates it after a toolchain change.
//
//   docs/<release>/*.md ─► sections ─► summaries (checked) ─┐
//   diagnostics, runtime failures ─► rules (with evidence) ─┼─► kb_fts (BM25) ─► search()
//   microbenchmarks ─► knowledge_entries (facts) ──────────┘                  export_markdown/json()

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/target_config.hpp"
#include "knowledge/retrieval.hpp"
#include "knowledge/rules.hpp"
#include "knowledge/summary.hpp"
#include "store/database.hpp"
#include "store/knowledge_store.hpp"

namespace npuopt::knowledge {

/// What one doc ingestion did.
struct IngestReport {
    std::string doc_set;             ///< release subdirectory read ("" = the docs dir itself)
    std::string toolchain_version;
    int sections = 0;                ///< sections in the doc set
    int sections_added = 0;          ///< new or changed since the last ingestion of this version
    int sections_removed = 0;        ///< gone from the docs (marked stale)
    int summaries_written = 0;
    int summaries_reused = 0;        ///< unchanged text: the earlier checked summary is copied
    int claims_kept = 0;
    int claims_dropped = 0;          ///< failed the check; kept in summary_check_failures
};

/// The knowledge base of one target inside a SQLite database (a campaign's or a standalone kb.db).
class KnowledgeBase {
public:
    /// `docs_dir` holds the doc sets (release subdirectories, or pages directly).
    KnowledgeBase(store::Database& database, std::string target, std::filesystem::path docs_dir);
    /// The knowledge base of `target` (its name and docs_dir).
    static KnowledgeBase for_target(store::Database& database, const config::TargetConfig& target);

    const std::string& target() const { return m_target; }
    const std::filesystem::path& docs_dir() const { return m_docs_dir; }
    store::KnowledgeStore& store() { return *m_store; }

    /// The toolchain version the knowledge base was last refreshed for ("" before the first refresh).
    std::string current_version();
    /// The toolchain's name (e.g. npuc) at that version.
    std::string toolchain_name();
    /// Record `version` as current (refresh does this; tests and imports may too).
    void set_current_version(const std::string& toolchain_name, const std::string& version);

    /// Ingest the doc set of the current version: new or changed sections are stored, summarised
    /// (by `summarizer`, the extractive one when null) and checked; vanished ones marked stale.
    IngestReport ingest_docs(Summarizer* summarizer = nullptr);

    /// The rule book of the current version.
    RuleBook rules();

    /// Sections, summaries, rules and facts ranked together by BM25.
    std::vector<SearchHit> search(std::string_view query, int limit = 10);

    /// What npuopt believes and why: every summary, rule and fact with evidence, version, stale flag
    /// and confidence, as Markdown for people.
    std::string export_markdown();
    /// The same as JSON (schema: {target, toolchain_version, sections[], rules[], facts[]}).
    nlohmann::json export_json();

private:
    std::unique_ptr<store::KnowledgeStore> m_store;
    std::string m_target;
    std::filesystem::path m_docs_dir;
};

}  // namespace npuopt::knowledge
