#pragma once
// Typed accessors for the knowledge base's tables: doc sections, checked summaries and their
// failed claims, legality rules (the v2 `rules` table plus `rule_facets` and `rule_evidence`),
// and one FTS5 index (`kb_fts`) over sections, summaries, rules and knowledge_entries so that
// their BM25 scores are comparable. Knows nothing about targets beyond their names.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/database.hpp"

namespace npuopt::store {

/// Check that the knowledge tables (migration step 4) exist, migrating a database opened without
/// migrations; Error(store) when they cannot be had.
void ensure_knowledge_schema(Database& database);

/// One section of a doc page: heading path + text (Markdown, code blocks kept).
struct DocSectionRecord {
    std::int64_t id = 0;
    std::string target;
    std::string doc_set;          ///< the release subdirectory ingested ("1.0"), "" when none
    std::string source_path;      ///< relative to the doc set, e.g. "dma.md"
    std::string heading_path;     ///< "DMA > Packets"
    std::int64_t ordinal = 0;     ///< position within its page
    std::string text;
    std::string content_hash;     ///< SHA-256 of heading_path + text
    std::string toolchain_version;
    bool stale = false;
    std::string created_at;
};

/// A checked summary of a section: the claims that passed the check.
struct DocSummaryRecord {
    std::int64_t id = 0;
    std::int64_t section_id = 0;
    std::string summarizer;       ///< e.g. "extractive/1"
    std::string text;             ///< kept claims, one per line
    std::string claims_json = "[]";
    std::int64_t claims_dropped = 0;
    bool stale = false;
    std::string created_at;
};

/// A claim a summariser stated that the check refused, kept for inspection.
struct SummaryFailureRecord {
    std::int64_t id = 0;
    std::int64_t summary_id = 0;
    std::string claim;
    std::string reasons_json = "[]";
};

/// A legality rule: the v2 `rules` row joined with its facets.
struct KbRuleRecord {
    std::int64_t id = 0;
    std::string target;
    std::string code;
    std::string statement;
    std::string quantity;
    std::optional<double> limit;     ///< the bound, or the modulus of a multiple_of rule
    double confidence = 0.0;
    std::string toolchain_version;
    std::string status = "proposed"; ///< proposed | confirmed | demoted | retired | unverified
    bool stale = false;
    std::string kind;                ///< upper_bound | lower_bound | multiple_of | statement | runtime
    std::string features_json = "{}";
    std::string signature;           ///< identity within a version (code, kind, quantity, features)
    std::string origin;              ///< check | schedule | run
    std::int64_t evidence_count = 0;
    std::int64_t counter_count = 0;  ///< designs the toolchain accepted although the rule rejects them
    std::string retired_in;          ///< toolchain version that no longer enforces it, "" when none
    std::string created_at;
};

/// A design that triggered (or, for outcome "accepted", contradicted) a rule.
struct RuleEvidenceRecord {
    std::int64_t id = 0;
    std::int64_t rule_id = 0;
    std::string design_hash;
    std::string source_path;         ///< a file holding the design's source, "" when unknown
    std::string outcome;             ///< rejected | accepted | compiles
    std::string toolchain_version;
    std::string quantities_json = "{}";
    std::string message;
    std::string created_at;
};

/// A measured fact (a knowledge_entries row, written by the microbenchmark code) with its version.
struct FactRecord {
    std::int64_t id = 0;
    std::string kind;
    std::string key;
    std::string text;
    std::optional<double> value;
    std::string evidence_json = "{}";
    std::string toolchain_version;
    bool stale = false;
};

/// One row of a full-text search.
struct SearchRow {
    std::string kind;    ///< section | summary | rule | fact
    std::int64_t ref_id = 0;
    std::string title;
    std::string snippet;
    double bm25 = 0.0;   ///< FTS5 bm25(): lower (more negative) is better
    bool stale = false;
    std::string toolchain_version;
    std::string body;    ///< the whole indexed text
};

/// Accessors over an open database; every write path is one transaction.
class KnowledgeStore {
public:
    /// Ensures the schema exists.
    explicit KnowledgeStore(Database& database);

    Database& database() { return *m_database; }

    std::int64_t toolchain_version_id(const std::string& target, const std::string& name, const std::string& version);
    std::optional<std::string> meta(const std::string& key);
    void set_meta(const std::string& key, const std::string& value);

    std::int64_t insert_section(const DocSectionRecord& section);
    /// Sections of `target`; `version` "" = every version.
    std::vector<DocSectionRecord> list_sections(const std::string& target, const std::string& version = {},
                                                bool include_stale = true);
    std::optional<DocSectionRecord> find_section(std::int64_t id);
    /// Mark one section and its summaries stale (its text changed or it left the docs).
    void mark_section_stale(std::int64_t id);

    std::int64_t insert_summary(const DocSummaryRecord& summary, const std::vector<SummaryFailureRecord>& failures);
    std::optional<DocSummaryRecord> summary_of_section(std::int64_t section_id);
    std::vector<SummaryFailureRecord> list_summary_failures(std::int64_t summary_id);
    /// The latest summary by `summarizer` of any section with this content hash (for reuse).
    std::optional<DocSummaryRecord> find_summary_by_content(const std::string& content_hash,
                                                           const std::string& summarizer);

    std::int64_t insert_rule(const KbRuleRecord& rule);
    void update_rule(const KbRuleRecord& rule);
    std::optional<KbRuleRecord> find_rule(std::int64_t id);
    std::optional<KbRuleRecord> find_rule_by_signature(const std::string& target, const std::string& version,
                                                       const std::string& signature);
    /// Rules of `target`; `version` "" = every version.
    std::vector<KbRuleRecord> list_rules(const std::string& target, const std::string& version = {},
                                         bool include_stale = true);
    std::int64_t add_rule_evidence(const RuleEvidenceRecord& evidence);
    std::vector<RuleEvidenceRecord> list_rule_evidence(std::int64_t rule_id);

    /// knowledge_entries of `target`; `version` "" = every version.
    std::vector<FactRecord> list_facts(const std::string& target, const std::string& version = {});

    /// Source text of a design in the designs table, when it has one.
    std::optional<std::string> design_source(const std::string& content_hash);

    /// Mark sections, summaries, rules and knowledge entries of `target` from versions other
    /// than `version` stale; returns how many rows changed.
    std::int64_t mark_stale_except(const std::string& target, const std::string& version);

    /// FTS5 search over `target`'s entries; `fts_query` is already in FTS5 syntax.
    std::vector<SearchRow> search(const std::string& target, const std::string& fts_query, int limit);

private:
    Database* m_database;
};

}  // namespace npuopt::store
