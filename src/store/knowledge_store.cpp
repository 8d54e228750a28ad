#include "store/knowledge_store.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace npuopt::store {

void ensure_knowledge_schema(Database& database) {
    auto present = database.query("SELECT count(*) FROM sqlite_master WHERE name = 'kb_fts'");
    if (as_int(present.at(0).at(0)) == 1) return;
    database.migrate();  // a database opened without migrating: bring it to the current schema
    present = database.query("SELECT count(*) FROM sqlite_master WHERE name = 'kb_fts'");
    if (as_int(present.at(0).at(0)) != 1) {
        throw Error(ErrorKind::store, fmt::format("database {} has no knowledge tables (schema version {})",
                                                  database.file().string(), database.schema_version()));
    }
}

namespace {

constexpr const char* k_section_select =
    "SELECT s.id, s.target, s.doc_set, s.source_path, s.heading_path, s.ordinal, s.text, s.content_hash, "
    "coalesce(v.version, ''), s.stale, s.created_at FROM doc_sections s "
    "LEFT JOIN toolchain_versions v ON v.id = s.toolchain_version_id ";

DocSectionRecord section_from_row(const Row& row) {
    RowReader read(row);
    DocSectionRecord section;
    section.id = read.integer();
    section.target = read.text();
    section.doc_set = read.text();
    section.source_path = read.text();
    section.heading_path = read.text();
    section.ordinal = read.integer();
    section.text = read.text();
    section.content_hash = read.text();
    section.toolchain_version = read.text();
    section.stale = read.flag();
    section.created_at = read.text();
    read.finish();
    return section;
}

constexpr const char* k_rule_select =
    "SELECT r.id, r.target, r.code, r.statement, r.quantity, r.limit_value, r.confidence, coalesce(v.version, ''), "
    "r.status, r.stale, f.kind, f.features, f.signature, f.origin, f.evidence_count, f.counter_count, f.retired_in, "
    "r.created_at FROM rules r JOIN rule_facets f ON f.rule_id = r.id "
    "LEFT JOIN toolchain_versions v ON v.id = r.toolchain_version_id ";

KbRuleRecord rule_from_row(const Row& row) {
    RowReader read(row);
    KbRuleRecord rule;
    rule.id = read.integer();
    rule.target = read.text();
    rule.code = read.text();
    rule.statement = read.text();
    rule.quantity = read.text();
    rule.limit = read.optional_real();
    rule.confidence = read.real();
    rule.toolchain_version = read.text();
    rule.status = read.text();
    rule.stale = read.flag();
    rule.kind = read.text();
    rule.features_json = read.text();
    rule.signature = read.text();
    rule.origin = read.text();
    rule.evidence_count = read.integer();
    rule.counter_count = read.integer();
    rule.retired_in = read.text();
    rule.created_at = read.text();
    read.finish();
    return rule;
}

Value version_id_value(Database& database, const std::string& target, const std::string& version) {
    if (version.empty()) return nullptr;
    auto rows = database.query("SELECT id FROM toolchain_versions WHERE target = ? AND version = ? ORDER BY id LIMIT 1",
                               {target, version});
    if (rows.empty()) {
        throw Error(ErrorKind::internal,
                    fmt::format("toolchain version {} of target {} was never recorded", version, target));
    }
    return rows[0][0];
}

}  // namespace

KnowledgeStore::KnowledgeStore(Database& database) : m_database(&database) { ensure_knowledge_schema(database); }

std::int64_t KnowledgeStore::toolchain_version_id(const std::string& target, const std::string& name,
                                                  const std::string& version) {
    Transaction transaction(*m_database);
    m_database->execute("INSERT INTO toolchain_versions (target, name, version, first_seen) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (target, name, version) DO NOTHING",
                        {target, name, version, log::utc_timestamp()});
    auto rows = m_database->query("SELECT id FROM toolchain_versions WHERE target = ? AND name = ? AND version = ?",
                                  {target, name, version});
    transaction.commit();
    return as_int(rows.at(0).at(0));
}

std::optional<std::string> KnowledgeStore::meta(const std::string& key) {
    auto rows = m_database->query("SELECT value FROM meta WHERE key = ?", {key});
    if (rows.empty()) return std::nullopt;
    return as_text(rows[0][0]);
}

void KnowledgeStore::set_meta(const std::string& key, const std::string& value) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        {key, value});
    transaction.commit();
}

std::int64_t KnowledgeStore::insert_section(const DocSectionRecord& section) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO doc_sections (target, doc_set, source_path, heading_path, ordinal, text, content_hash, "
        "toolchain_version_id, stale, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {section.target, section.doc_set, section.source_path, section.heading_path, section.ordinal, section.text,
         section.content_hash, version_id_value(*m_database, section.target, section.toolchain_version),
         std::int64_t{section.stale ? 1 : 0}, log::utc_timestamp()});
    std::int64_t id = m_database->last_insert_id();
    transaction.commit();
    return id;
}

std::vector<DocSectionRecord> KnowledgeStore::list_sections(const std::string& target, const std::string& version,
                                                            bool include_stale) {
    std::vector<DocSectionRecord> sections;
    for (const Row& row : m_database->query(
             std::string(k_section_select) +
                 "WHERE s.target = ? AND (? = '' OR v.version = ?) AND (s.stale = 0 OR ?) ORDER BY s.id",
             {target, version, version, std::int64_t{include_stale ? 1 : 0}})) {
        sections.push_back(section_from_row(row));
    }
    return sections;
}

std::optional<DocSectionRecord> KnowledgeStore::find_section(std::int64_t id) {
    auto rows = m_database->query(std::string(k_section_select) + "WHERE s.id = ?", {id});
    if (rows.empty()) return std::nullopt;
    return section_from_row(rows[0]);
}

void KnowledgeStore::mark_section_stale(std::int64_t id) {
    Transaction transaction(*m_database);
    m_database->execute("UPDATE doc_sections SET stale = 1 WHERE id = ?", {id});
    m_database->execute("UPDATE doc_summaries SET stale = 1 WHERE section_id = ?", {id});
    transaction.commit();
}

std::optional<DocSummaryRecord> KnowledgeStore::find_summary_by_content(const std::string& content_hash,
                                                                       const std::string& summarizer) {
    auto rows = m_database->query(
        "SELECT m.section_id FROM doc_summaries m JOIN doc_sections s ON s.id = m.section_id "
        "WHERE s.content_hash = ? AND m.summarizer = ? ORDER BY m.id DESC LIMIT 1",
        {content_hash, summarizer});
    if (rows.empty()) return std::nullopt;
    return summary_of_section(as_int(rows[0][0]));
}

std::int64_t KnowledgeStore::insert_summary(const DocSummaryRecord& summary,
                                            const std::vector<SummaryFailureRecord>& failures) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO doc_summaries (section_id, summarizer, text, claims, claims_dropped, stale, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        {summary.section_id, summary.summarizer, summary.text, summary.claims_json, summary.claims_dropped,
         std::int64_t{summary.stale ? 1 : 0}, log::utc_timestamp()});
    std::int64_t id = m_database->last_insert_id();
    for (const SummaryFailureRecord& failure : failures) {
        m_database->execute("INSERT INTO summary_check_failures (summary_id, claim, reasons) VALUES (?, ?, ?)",
                            {id, failure.claim, failure.reasons_json});
    }
    transaction.commit();
    return id;
}

std::optional<DocSummaryRecord> KnowledgeStore::summary_of_section(std::int64_t section_id) {
    auto rows = m_database->query(
        "SELECT id, section_id, summarizer, text, claims, claims_dropped, stale, created_at FROM doc_summaries "
        "WHERE section_id = ? ORDER BY id DESC LIMIT 1",
        {section_id});
    if (rows.empty()) return std::nullopt;
    RowReader read(rows[0]);
    DocSummaryRecord summary;
    summary.id = read.integer();
    summary.section_id = read.integer();
    summary.summarizer = read.text();
    summary.text = read.text();
    summary.claims_json = read.text();
    summary.claims_dropped = read.integer();
    summary.stale = read.flag();
    summary.created_at = read.text();
    read.finish();
    return summary;
}

std::vector<SummaryFailureRecord> KnowledgeStore::list_summary_failures(std::int64_t summary_id) {
    std::vector<SummaryFailureRecord> failures;
    for (const Row& row : m_database->query(
             "SELECT id, summary_id, claim, reasons FROM summary_check_failures WHERE summary_id = ? ORDER BY id",
             {summary_id})) {
        failures.push_back({as_int(row[0]), as_int(row[1]), as_text(row[2]), as_text(row[3])});
    }
    return failures;
}

std::int64_t KnowledgeStore::insert_rule(const KbRuleRecord& rule) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO rules (target, code, statement, quantity, limit_value, confidence, toolchain_version_id, status, "
        "stale, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {rule.target, rule.code, rule.statement, rule.quantity, optional_value(rule.limit), rule.confidence,
         version_id_value(*m_database, rule.target, rule.toolchain_version), rule.status,
         std::int64_t{rule.stale ? 1 : 0}, log::utc_timestamp()});
    std::int64_t id = m_database->last_insert_id();
    m_database->execute(
        "INSERT INTO rule_facets (rule_id, kind, features, signature, origin, evidence_count, counter_count, "
        "retired_in) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {id, rule.kind, rule.features_json, rule.signature, rule.origin, rule.evidence_count, rule.counter_count,
         rule.retired_in});
    transaction.commit();
    return id;
}

void KnowledgeStore::update_rule(const KbRuleRecord& rule) {
    Transaction transaction(*m_database);
    m_database->execute(
        "UPDATE rules SET statement = ?, quantity = ?, limit_value = ?, confidence = ?, status = ?, stale = ? "
        "WHERE id = ?",
        {rule.statement, rule.quantity, optional_value(rule.limit), rule.confidence, rule.status,
         std::int64_t{rule.stale ? 1 : 0}, rule.id});
    m_database->execute(
        "UPDATE rule_facets SET kind = ?, features = ?, signature = ?, evidence_count = ?, counter_count = ?, "
        "retired_in = ? WHERE rule_id = ?",
        {rule.kind, rule.features_json, rule.signature, rule.evidence_count, rule.counter_count, rule.retired_in,
         rule.id});
    transaction.commit();
}

std::optional<KbRuleRecord> KnowledgeStore::find_rule(std::int64_t id) {
    auto rows = m_database->query(std::string(k_rule_select) + "WHERE r.id = ?", {id});
    if (rows.empty()) return std::nullopt;
    return rule_from_row(rows[0]);
}

std::optional<KbRuleRecord> KnowledgeStore::find_rule_by_signature(const std::string& target,
                                                                  const std::string& version,
                                                                  const std::string& signature) {
    auto rows = m_database->query(std::string(k_rule_select) +
                                      "WHERE r.target = ? AND coalesce(v.version, '') = ? AND f.signature = ? "
                                      "ORDER BY r.id DESC LIMIT 1",
                                  {target, version, signature});
    if (rows.empty()) return std::nullopt;
    return rule_from_row(rows[0]);
}

std::vector<KbRuleRecord> KnowledgeStore::list_rules(const std::string& target, const std::string& version,
                                                     bool include_stale) {
    std::vector<KbRuleRecord> rules;
    for (const Row& row :
         m_database->query(std::string(k_rule_select) +
                               "WHERE r.target = ? AND (? = '' OR v.version = ?) AND (r.stale = 0 OR ?) ORDER BY r.id",
                           {target, version, version, std::int64_t{include_stale ? 1 : 0}})) {
        rules.push_back(rule_from_row(row));
    }
    return rules;
}

std::int64_t KnowledgeStore::add_rule_evidence(const RuleEvidenceRecord& evidence) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO rule_evidence (rule_id, design_hash, source_path, outcome, toolchain_version, quantities, "
        "message, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {evidence.rule_id, evidence.design_hash, evidence.source_path, evidence.outcome, evidence.toolchain_version,
         evidence.quantities_json, evidence.message, log::utc_timestamp()});
    std::int64_t id = m_database->last_insert_id();
    transaction.commit();
    return id;
}

std::vector<RuleEvidenceRecord> KnowledgeStore::list_rule_evidence(std::int64_t rule_id) {
    std::vector<RuleEvidenceRecord> evidence;
    for (const Row& row : m_database->query(
             "SELECT id, rule_id, design_hash, source_path, outcome, toolchain_version, quantities, message, "
             "created_at FROM rule_evidence WHERE rule_id = ? ORDER BY id",
             {rule_id})) {
        evidence.push_back({as_int(row[0]), as_int(row[1]), as_text(row[2]), as_text(row[3]), as_text(row[4]),
                            as_text(row[5]), as_text(row[6]), as_text(row[7]), as_text(row[8])});
    }
    return evidence;
}

std::vector<FactRecord> KnowledgeStore::list_facts(const std::string& target, const std::string& version) {
    std::vector<FactRecord> facts;
    for (const Row& row : m_database->query(
             "SELECT e.id, e.kind, e.key, e.text, e.value, e.evidence, coalesce(v.version, ''), e.stale "
             "FROM knowledge_entries e LEFT JOIN toolchain_versions v ON v.id = e.toolchain_version_id "
             "WHERE e.target = ? AND (? = '' OR v.version = ?) ORDER BY e.id",
             {target, version, version})) {
        facts.push_back({as_int(row[0]), as_text(row[1]), as_text(row[2]), as_text(row[3]), as_optional_double(row[4]),
                         as_text(row[5]), as_text(row[6]), as_int(row[7]) != 0});
    }
    return facts;
}

std::optional<std::string> KnowledgeStore::design_source(const std::string& content_hash) {
    auto rows = m_database->query("SELECT source FROM designs WHERE content_hash = ?", {content_hash});
    if (rows.empty() || std::holds_alternative<std::nullptr_t>(rows[0][0])) return std::nullopt;
    return as_text(rows[0][0]);
}

std::int64_t KnowledgeStore::mark_stale_except(const std::string& target, const std::string& version) {
    Transaction transaction(*m_database);
    const std::string other_versions =
        "toolchain_version_id IS NULL OR toolchain_version_id NOT IN "
        "(SELECT id FROM toolchain_versions WHERE target = ?2 AND version = ?1)";
    std::int64_t changed = 0;
    changed += m_database->execute(
        "UPDATE doc_sections SET stale = 1 WHERE stale = 0 AND target = ?2 AND (" + other_versions + ")",
        {version, target});
    changed += m_database->execute(
        "UPDATE doc_summaries SET stale = 1 WHERE stale = 0 AND section_id IN (SELECT id FROM doc_sections WHERE "
        "stale = 1)");
    changed += m_database->execute(
        "UPDATE rules SET stale = 1 WHERE stale = 0 AND target = ?2 AND (" + other_versions + ")", {version, target});
    changed += m_database->execute(
        "UPDATE knowledge_entries SET stale = 1 WHERE stale = 0 AND target = ?2 AND toolchain_version_id IS NOT NULL "
        "AND toolchain_version_id NOT IN (SELECT id FROM toolchain_versions WHERE target = ?2 AND version = ?1)",
        {version, target});
    transaction.commit();
    return changed;
}

std::vector<SearchRow> KnowledgeStore::search(const std::string& target, const std::string& fts_query, int limit) {
    std::vector<SearchRow> hits;
    if (fts_query.empty()) return hits;
    for (const Row& row : m_database->query(
             "SELECT kb_fts.kind, kb_fts.ref_id, kb_fts.title, snippet(kb_fts, 1, '[', ']', '…', 16), bm25(kb_fts, 2.0, 1.0) AS rank, "
             "CASE kb_fts.kind "
             "  WHEN 'section' THEN (SELECT stale FROM doc_sections WHERE id = kb_fts.ref_id) "
             "  WHEN 'summary' THEN (SELECT stale FROM doc_summaries WHERE id = kb_fts.ref_id) "
             "  WHEN 'rule' THEN (SELECT stale FROM rules WHERE id = kb_fts.ref_id) "
             "  ELSE (SELECT stale FROM knowledge_entries WHERE id = kb_fts.ref_id) END, "
             "coalesce(CASE kb_fts.kind "
             "  WHEN 'section' THEN (SELECT v.version FROM doc_sections s JOIN toolchain_versions v "
             "                       ON v.id = s.toolchain_version_id WHERE s.id = kb_fts.ref_id) "
             "  WHEN 'summary' THEN (SELECT v.version FROM doc_summaries m JOIN doc_sections s ON s.id = m.section_id "
             "                       JOIN toolchain_versions v ON v.id = s.toolchain_version_id WHERE m.id = kb_fts.ref_id) "
             "  WHEN 'rule' THEN (SELECT v.version FROM rules r JOIN toolchain_versions v "
             "                    ON v.id = r.toolchain_version_id WHERE r.id = kb_fts.ref_id) "
             "  ELSE (SELECT v.version FROM knowledge_entries e JOIN toolchain_versions v "
             "        ON v.id = e.toolchain_version_id WHERE e.id = kb_fts.ref_id) END, ''), kb_fts.body "
             "FROM kb_fts WHERE kb_fts MATCH ? AND kb_fts.target = ? ORDER BY rank LIMIT ?",
             {fts_query, target, std::int64_t{limit}})) {
        RowReader read(row);
        SearchRow hit;
        hit.kind = read.text();
        hit.ref_id = read.integer();
        hit.title = read.text();
        hit.snippet = read.text();
        hit.bm25 = read.real();
        hit.stale = read.optional_integer().value_or(0) != 0;
        hit.toolchain_version = read.text();
        hit.body = read.text();
        read.finish();
        hits.push_back(std::move(hit));
    }
    return hits;
}

}  // namespace npuopt::store
