#include "store/campaign_store.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace npuopt::store {
namespace {

constexpr const char* k_design_columns =
    "id, content_hash, target, kernel, shape, template, params, source, parent_id, created_at";

DesignRecord design_from_row(const Row& row) {
    DesignRecord design;
    design.id = as_int(row[0]);
    design.content_hash = as_text(row[1]);
    design.target = as_text(row[2]);
    design.kernel = as_text(row[3]);
    design.shape = as_text(row[4]);
    design.template_name = as_text(row[5]);
    design.params_json = as_text(row[6]);
    if (!std::holds_alternative<std::nullptr_t>(row[7])) design.source = as_text(row[7]);
    design.parent_id = as_optional_int(row[8]);
    design.created_at = as_text(row[9]);
    return design;
}

}  // namespace

CampaignStore CampaignStore::open(const std::filesystem::path& file, const Database::Options& options) {
    return CampaignStore(Database::open(file, options));
}

void CampaignStore::set_meta(const std::string& key, const std::string& value) {
    Transaction transaction(m_database);
    m_database.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       {key, value});
    transaction.commit();
}

std::optional<std::string> CampaignStore::meta(const std::string& key) {
    auto rows = m_database.query("SELECT value FROM meta WHERE key = ?", {key});
    if (rows.empty()) return std::nullopt;
    return as_text(rows[0][0]);
}

std::int64_t CampaignStore::record_toolchain_version(const std::string& target, const std::string& name,
                                                     const std::string& version) {
    Transaction transaction(m_database);
    m_database.execute("INSERT INTO toolchain_versions (target, name, version, first_seen) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (target, name, version) DO NOTHING",
                       {target, name, version, log::utc_timestamp()});
    auto rows = m_database.query("SELECT id FROM toolchain_versions WHERE target = ? AND name = ? AND version = ?",
                                 {target, name, version});
    transaction.commit();
    return as_int(rows.at(0).at(0));
}

std::vector<ToolchainVersionRecord> CampaignStore::list_toolchain_versions() {
    std::vector<ToolchainVersionRecord> records;
    for (const Row& row : m_database.query("SELECT id, target, name, version, first_seen FROM toolchain_versions ORDER BY id")) {
        records.push_back({as_int(row[0]), as_text(row[1]), as_text(row[2]), as_text(row[3]), as_text(row[4])});
    }
    return records;
}

std::int64_t CampaignStore::record_design(const DesignRecord& design) {
    if (design.content_hash.empty()) throw Error(ErrorKind::internal, "design without a content hash");
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO designs (content_hash, target, kernel, shape, template, params, source, parent_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (content_hash) DO NOTHING",
        {design.content_hash, design.target, design.kernel, design.shape, design.template_name, design.params_json,
         design.source ? Value(*design.source) : Value(nullptr), optional_value(design.parent_id),
         log::utc_timestamp()});
    auto rows = m_database.query("SELECT id FROM designs WHERE content_hash = ?", {design.content_hash});
    transaction.commit();
    return as_int(rows.at(0).at(0));
}

std::optional<DesignRecord> CampaignStore::find_design(std::int64_t id) {
    auto rows = m_database.query(fmt::format("SELECT {} FROM designs WHERE id = ?", k_design_columns), {id});
    if (rows.empty()) return std::nullopt;
    return design_from_row(rows[0]);
}

std::optional<DesignRecord> CampaignStore::find_design_by_hash(const std::string& content_hash) {
    auto rows = m_database.query(fmt::format("SELECT {} FROM designs WHERE content_hash = ?", k_design_columns),
                                 {content_hash});
    if (rows.empty()) return std::nullopt;
    return design_from_row(rows[0]);
}

std::vector<DesignRecord> CampaignStore::list_designs(const std::string& target, const std::string& kernel) {
    std::vector<DesignRecord> designs;
    for (const Row& row : m_database.query(
             fmt::format("SELECT {} FROM designs WHERE target = ? AND kernel = ? ORDER BY id", k_design_columns),
             {target, kernel})) {
        designs.push_back(design_from_row(row));
    }
    return designs;
}

std::int64_t CampaignStore::record_evaluation(const EvaluationRecord& evaluation,
                                              const std::vector<MeasurementRecord>& measurements) {
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO evaluations (design_id, toolchain_version_id, bench_config_hash, stage, verdict, reason, secs, "
        "stale, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {evaluation.design_id, optional_value(evaluation.toolchain_version_id), evaluation.bench_config_hash,
         evaluation.stage, evaluation.verdict, evaluation.reason, evaluation.secs,
         std::int64_t{evaluation.stale ? 1 : 0}, log::utc_timestamp()});
    std::int64_t evaluation_id = m_database.last_insert_id();
    for (const MeasurementRecord& measurement : measurements) {
        m_database.execute(
            "INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            {evaluation_id, measurement.launch_order, measurement.seed, measurement.repeat_idx, measurement.cycles,
             optional_value(measurement.wall_ms)});
    }
    transaction.commit();
    return evaluation_id;
}

std::vector<EvaluationRecord> CampaignStore::list_evaluations(std::int64_t design_id, bool include_stale) {
    std::vector<EvaluationRecord> evaluations;
    for (const Row& row : m_database.query(
             "SELECT id, design_id, toolchain_version_id, bench_config_hash, stage, verdict, reason, secs, stale, "
             "created_at FROM evaluations WHERE design_id = ? AND (stale = 0 OR ?) ORDER BY id",
             {design_id, std::int64_t{include_stale ? 1 : 0}})) {
        EvaluationRecord evaluation;
        evaluation.id = as_int(row[0]);
        evaluation.design_id = as_int(row[1]);
        evaluation.toolchain_version_id = as_optional_int(row[2]);
        evaluation.bench_config_hash = as_text(row[3]);
        evaluation.stage = as_text(row[4]);
        evaluation.verdict = as_text(row[5]);
        evaluation.reason = as_text(row[6]);
        evaluation.secs = as_double(row[7]);
        evaluation.stale = as_int(row[8]) != 0;
        evaluation.created_at = as_text(row[9]);
        evaluations.push_back(std::move(evaluation));
    }
    return evaluations;
}

std::vector<MeasurementRecord> CampaignStore::list_measurements(std::int64_t evaluation_id) {
    std::vector<MeasurementRecord> measurements;
    for (const Row& row : m_database.query(
             "SELECT id, evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms FROM measurements "
             "WHERE evaluation_id = ? ORDER BY launch_order, repeat_idx",
             {evaluation_id})) {
        measurements.push_back({as_int(row[0]), as_int(row[1]), as_int(row[2]), as_int(row[3]), as_int(row[4]),
                                as_double(row[5]), as_optional_double(row[6])});
    }
    return measurements;
}

std::int64_t CampaignStore::record_knowledge(const KnowledgeEntry& entry) {
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO knowledge_entries (target, kind, key, text, value, evidence, toolchain_version_id, stale, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {entry.target, entry.kind, entry.key, entry.text, optional_value(entry.value), entry.evidence_json,
         optional_value(entry.toolchain_version_id), std::int64_t{entry.stale ? 1 : 0}, log::utc_timestamp()});
    std::int64_t id = m_database.last_insert_id();
    transaction.commit();
    return id;
}

std::vector<KnowledgeEntry> CampaignStore::list_knowledge(const std::string& target, bool include_stale) {
    std::vector<KnowledgeEntry> entries;
    for (const Row& row : m_database.query(
             "SELECT id, target, kind, key, text, value, evidence, toolchain_version_id, stale, created_at "
             "FROM knowledge_entries WHERE target = ? AND (stale = 0 OR ?) ORDER BY id",
             {target, std::int64_t{include_stale ? 1 : 0}})) {
        KnowledgeEntry entry;
        entry.id = as_int(row[0]);
        entry.target = as_text(row[1]);
        entry.kind = as_text(row[2]);
        entry.key = as_text(row[3]);
        entry.text = as_text(row[4]);
        entry.value = as_optional_double(row[5]);
        entry.evidence_json = as_text(row[6]);
        entry.toolchain_version_id = as_optional_int(row[7]);
        entry.stale = as_int(row[8]) != 0;
        entry.created_at = as_text(row[9]);
        entries.push_back(std::move(entry));
    }
    return entries;
}

std::int64_t CampaignStore::record_rule(const RuleRecord& rule) {
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO rules (target, code, statement, quantity, limit_value, confidence, toolchain_version_id, status, "
        "stale, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {rule.target, rule.code, rule.statement, rule.quantity, optional_value(rule.limit), rule.confidence,
         optional_value(rule.toolchain_version_id), rule.status, std::int64_t{rule.stale ? 1 : 0},
         log::utc_timestamp()});
    std::int64_t id = m_database.last_insert_id();
    transaction.commit();
    return id;
}

std::vector<RuleRecord> CampaignStore::list_rules(const std::string& target, bool include_stale) {
    std::vector<RuleRecord> rules;
    for (const Row& row : m_database.query(
             "SELECT id, target, code, statement, quantity, limit_value, confidence, toolchain_version_id, status, "
             "stale, created_at FROM rules WHERE target = ? AND (stale = 0 OR ?) ORDER BY id",
             {target, std::int64_t{include_stale ? 1 : 0}})) {
        RuleRecord rule;
        rule.id = as_int(row[0]);
        rule.target = as_text(row[1]);
        rule.code = as_text(row[2]);
        rule.statement = as_text(row[3]);
        rule.quantity = as_text(row[4]);
        rule.limit = as_optional_double(row[5]);
        rule.confidence = as_double(row[6]);
        rule.toolchain_version_id = as_optional_int(row[7]);
        rule.status = as_text(row[8]);
        rule.stale = as_int(row[9]) != 0;
        rule.created_at = as_text(row[10]);
        rules.push_back(std::move(rule));
    }
    return rules;
}

std::int64_t CampaignStore::mark_stale_except(const std::string& target, std::int64_t current_toolchain_version_id) {
    Transaction transaction(m_database);
    std::int64_t changed = 0;
    changed += m_database.execute(
        "UPDATE evaluations SET stale = 1 WHERE stale = 0 AND toolchain_version_id IS NOT ? AND design_id IN "
        "(SELECT id FROM designs WHERE target = ?)",
        {current_toolchain_version_id, target});
    changed += m_database.execute(
        "UPDATE knowledge_entries SET stale = 1 WHERE stale = 0 AND target = ? AND toolchain_version_id IS NOT ?",
        {target, current_toolchain_version_id});
    changed += m_database.execute(
        "UPDATE rules SET stale = 1 WHERE stale = 0 AND target = ? AND toolchain_version_id IS NOT ?",
        {target, current_toolchain_version_id});
    transaction.commit();
    return changed;
}

std::int64_t CampaignStore::record_event(const std::string& kind, const std::string& payload_json) {
    Transaction transaction(m_database);
    m_database.execute("INSERT INTO events (ts, kind, payload) VALUES (?, ?, ?)",
                       {log::utc_timestamp(), kind, payload_json});
    std::int64_t id = m_database.last_insert_id();
    transaction.commit();
    return id;
}

std::vector<EventRecord> CampaignStore::list_events(std::int64_t limit) {
    std::vector<EventRecord> events;
    for (const Row& row : m_database.query(
             "SELECT id, ts, kind, payload FROM (SELECT * FROM events ORDER BY id DESC LIMIT ?) ORDER BY id", {limit})) {
        events.push_back({as_int(row[0]), as_text(row[1]), as_text(row[2]), as_text(row[3])});
    }
    return events;
}

StoreSummary CampaignStore::summarize() {
    StoreSummary summary;
    summary.schema_version = m_database.schema_version();
    for (const Row& row : m_database.query("SELECT key, value FROM meta ORDER BY key")) {
        summary.meta[as_text(row[0])] = as_text(row[1]);
    }
    summary.toolchain_versions = list_toolchain_versions();
    for (const Row& row : m_database.query("SELECT kernel, COUNT(*) FROM designs GROUP BY kernel ORDER BY kernel")) {
        summary.designs_by_kernel[as_text(row[0])] = as_int(row[1]);
    }
    for (const Row& row : m_database.query(
             "SELECT stage || '/' || verdict, COUNT(*) FROM evaluations WHERE stale = 0 GROUP BY stage, verdict")) {
        summary.evaluations_by_verdict[as_text(row[0])] = as_int(row[1]);
    }
    auto count = [&](const char* sql) { return as_int(m_database.query(sql).at(0).at(0)); };
    summary.measurements = count("SELECT COUNT(*) FROM measurements");
    summary.knowledge_entries = count("SELECT COUNT(*) FROM knowledge_entries");
    summary.knowledge_entries_stale = count("SELECT COUNT(*) FROM knowledge_entries WHERE stale = 1");
    summary.rules = count("SELECT COUNT(*) FROM rules");
    summary.rules_stale = count("SELECT COUNT(*) FROM rules WHERE stale = 1");
    summary.events = count("SELECT COUNT(*) FROM events");
    auto last = list_events(1);
    if (!last.empty()) summary.last_event = last.back();
    return summary;
}

}  // namespace npuopt::store
