#include "store/campaign_store.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace npuopt::store {
namespace {

constexpr const char* k_design_columns =
    "id, content_hash, target, kernel, shape, template, params, source, parent_id, created_at";

DesignRecord design_from_row(const Row& row) {
    RowReader read(row);
    DesignRecord design;
    design.id = read.integer();
    design.content_hash = read.text();
    design.target = read.text();
    design.kernel = read.text();
    design.shape = read.text();
    design.template_name = read.text();
    design.params_json = read.text();
    design.source = read.optional_text();
    design.parent_id = read.optional_integer();
    design.created_at = read.text();
    read.finish();
    return design;
}

constexpr const char* k_evaluation_columns =
    "id, design_id, toolchain_version_id, bench_config_hash, stage, verdict, reason, secs, stale, created_at, "
    "launches, failed_launches, retries";

EvaluationRecord evaluation_from_row(const Row& row) {
    RowReader read(row);
    EvaluationRecord evaluation;
    evaluation.id = read.integer();
    evaluation.design_id = read.integer();
    evaluation.toolchain_version_id = read.optional_integer();
    evaluation.bench_config_hash = read.text();
    evaluation.stage = read.text();
    evaluation.verdict = read.text();
    evaluation.reason = read.text();
    evaluation.secs = read.real();
    evaluation.stale = read.flag();
    evaluation.created_at = read.text();
    evaluation.launches = read.optional_integer();
    evaluation.failed_launches = read.optional_integer();
    evaluation.retries = read.optional_integer();
    read.finish();
    return evaluation;
}

constexpr const char* k_measurement_columns =
    "id, evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms, side, outcome, error, attempt, pair_idx";

MeasurementRecord measurement_from_row(const Row& row) {
    RowReader read(row);
    MeasurementRecord measurement;
    measurement.id = read.integer();
    measurement.evaluation_id = read.integer();
    measurement.launch_order = read.integer();
    measurement.seed = read.integer();
    measurement.repeat_idx = read.integer();
    measurement.cycles = read.optional_real();
    measurement.wall_ms = read.optional_real();
    measurement.side = read.text();
    measurement.outcome = read.text();
    measurement.error = read.optional_text();
    measurement.attempt = read.integer();
    measurement.pair_idx = read.optional_integer();
    read.finish();
    return measurement;
}

/// A measurement the schema would refuse, named in words before SQLite's CHECK does it tersely.
void validate_measurement(const MeasurementRecord& measurement) {
    auto where = [&] {
        return fmt::format("measurement (launch {}, repeat {})", measurement.launch_order, measurement.repeat_idx);
    };
    if (measurement.side != "candidate" && measurement.side != "champion") {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{}: side '{}' is not candidate or champion", where(), measurement.side));
    }
    if (measurement.outcome == "ok") {
        if (!measurement.cycles) throw Error(ErrorKind::invalid_input, where() + ": outcome ok without cycles");
        if (measurement.error) {
            throw Error(ErrorKind::invalid_input, fmt::format("{}: outcome ok with an error ({})", where(), *measurement.error));
        }
    } else if (measurement.outcome == "transient" || measurement.outcome == "failed") {
        if (!measurement.error || measurement.error->empty()) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("{}: outcome {} without its error", where(), measurement.outcome));
        }
    } else {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{}: outcome '{}' is not ok, transient or failed", where(), measurement.outcome));
    }
}

constexpr const char* k_knowledge_columns =
    "id, target, kind, key, text, value, evidence, toolchain_version_id, stale, created_at";

KnowledgeEntry knowledge_from_row(const Row& row) {
    RowReader read(row);
    KnowledgeEntry entry;
    entry.id = read.integer();
    entry.target = read.text();
    entry.kind = read.text();
    entry.key = read.text();
    entry.text = read.text();
    entry.value = read.optional_real();
    entry.evidence_json = read.text();
    entry.toolchain_version_id = read.optional_integer();
    entry.stale = read.flag();
    entry.created_at = read.text();
    read.finish();
    return entry;
}

constexpr const char* k_rule_columns =
    "id, target, code, statement, quantity, limit_value, confidence, toolchain_version_id, status, stale, created_at";

RuleRecord rule_from_row(const Row& row) {
    RowReader read(row);
    RuleRecord rule;
    rule.id = read.integer();
    rule.target = read.text();
    rule.code = read.text();
    rule.statement = read.text();
    rule.quantity = read.text();
    rule.limit = read.optional_real();
    rule.confidence = read.real();
    rule.toolchain_version_id = read.optional_integer();
    rule.status = read.text();
    rule.stale = read.flag();
    rule.created_at = read.text();
    read.finish();
    return rule;
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

void CampaignStore::count_device_launch() {
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO meta (key, value) VALUES ('device_launches', '1') ON CONFLICT (key) DO UPDATE SET value = "
        "CAST(CAST(value AS INTEGER) + 1 AS TEXT)");
    transaction.commit();
}

std::int64_t CampaignStore::device_launches() {
    auto rows = m_database.query("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'device_launches'");
    if (rows.empty()) return 0;
    return as_int(rows[0][0]);
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
    for (const MeasurementRecord& measurement : measurements) validate_measurement(measurement);
    Transaction transaction(m_database);
    m_database.execute(
        "INSERT INTO evaluations (design_id, toolchain_version_id, bench_config_hash, stage, verdict, reason, secs, "
        "stale, created_at, launches, failed_launches, retries) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {evaluation.design_id, optional_value(evaluation.toolchain_version_id), evaluation.bench_config_hash,
         evaluation.stage, evaluation.verdict, evaluation.reason, evaluation.secs,
         std::int64_t{evaluation.stale ? 1 : 0}, log::utc_timestamp(), optional_value(evaluation.launches),
         optional_value(evaluation.failed_launches), optional_value(evaluation.retries)});
    std::int64_t evaluation_id = m_database.last_insert_id();
    for (const MeasurementRecord& measurement : measurements) {
        m_database.execute(
            "INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms, side, outcome, "
            "error, attempt, pair_idx) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            {evaluation_id, measurement.launch_order, measurement.seed, measurement.repeat_idx,
             optional_value(measurement.cycles), optional_value(measurement.wall_ms), measurement.side,
             measurement.outcome, measurement.error ? Value(*measurement.error) : Value(nullptr), measurement.attempt,
             optional_value(measurement.pair_idx)});
    }
    transaction.commit();
    return evaluation_id;
}

std::int64_t CampaignStore::append_measurement(std::int64_t evaluation_id, const MeasurementRecord& measurement) {
    validate_measurement(measurement);
    m_database.execute(
        "INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms, side, outcome, "
        "error, attempt, pair_idx) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {evaluation_id, measurement.launch_order, measurement.seed, measurement.repeat_idx,
         optional_value(measurement.cycles), optional_value(measurement.wall_ms), measurement.side, measurement.outcome,
         measurement.error ? Value(*measurement.error) : Value(nullptr), measurement.attempt,
         optional_value(measurement.pair_idx)});
    return m_database.last_insert_id();
}

void CampaignStore::complete_evaluation(std::int64_t evaluation_id, const EvaluationRecord& final_record) {
    int changed = m_database.execute(
        "UPDATE evaluations SET verdict = ?, reason = ?, secs = ?, launches = ?, failed_launches = ?, retries = ? "
        "WHERE id = ? AND verdict = 'running'",
        {final_record.verdict, final_record.reason, final_record.secs, optional_value(final_record.launches),
         optional_value(final_record.failed_launches), optional_value(final_record.retries), evaluation_id});
    if (changed != 1) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("evaluation {} is not a running evaluation; it cannot be completed", evaluation_id));
    }
}

std::int64_t CampaignStore::mark_interrupted_evaluations(const std::string& reason) {
    return m_database.execute("UPDATE evaluations SET verdict = 'interrupted', reason = ? WHERE verdict = 'running'",
                              {reason});
}

std::vector<EvaluationRecord> CampaignStore::list_evaluations(std::int64_t design_id, bool include_stale) {
    std::vector<EvaluationRecord> evaluations;
    for (const Row& row : m_database.query(
             fmt::format("SELECT {} FROM evaluations WHERE design_id = ? AND (stale = 0 OR ?) ORDER BY id",
                         k_evaluation_columns),
             {design_id, std::int64_t{include_stale ? 1 : 0}})) {
        evaluations.push_back(evaluation_from_row(row));
    }
    return evaluations;
}

std::vector<MeasurementRecord> CampaignStore::list_measurements(std::int64_t evaluation_id) {
    std::vector<MeasurementRecord> measurements;
    for (const Row& row : m_database.query(
             fmt::format("SELECT {} FROM measurements WHERE evaluation_id = ? ORDER BY launch_order, repeat_idx",
                         k_measurement_columns),
             {evaluation_id})) {
        measurements.push_back(measurement_from_row(row));
    }
    return measurements;
}

std::vector<std::vector<double>> CampaignStore::recent_stage_cycles(const std::string& stage,
                                                                   std::int64_t max_evaluations) {
    std::vector<std::vector<double>> result;
    std::int64_t current = -1;
    for (const Row& row : m_database.query(
             "SELECT e.id, m.cycles FROM evaluations e JOIN measurements m ON m.evaluation_id = e.id "
             "WHERE e.id IN (SELECT id FROM evaluations WHERE stage = ? AND import_id IS NULL ORDER BY id DESC LIMIT ?) "
             "AND m.outcome = 'ok' AND m.side = 'candidate' AND m.cycles IS NOT NULL "
             "ORDER BY e.id, m.launch_order, m.repeat_idx",
             {stage, max_evaluations})) {
        RowReader read(row);
        const std::int64_t evaluation = read.integer();
        const double cycles = read.real();
        read.finish();
        if (evaluation != current) {
            result.emplace_back();
            current = evaluation;
        }
        result.back().push_back(cycles);
    }
    return result;
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
             fmt::format("SELECT {} FROM knowledge_entries WHERE target = ? AND (stale = 0 OR ?) ORDER BY id",
                         k_knowledge_columns),
             {target, std::int64_t{include_stale ? 1 : 0}})) {
        entries.push_back(knowledge_from_row(row));
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
             fmt::format("SELECT {} FROM rules WHERE target = ? AND (stale = 0 OR ?) ORDER BY id", k_rule_columns),
             {target, std::int64_t{include_stale ? 1 : 0}})) {
        rules.push_back(rule_from_row(row));
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

std::optional<EventRecord> CampaignStore::last_event(const std::string& kind) {
    for (const Row& row :
         m_database.query("SELECT id, ts, kind, payload FROM events WHERE kind = ? ORDER BY id DESC LIMIT 1", {kind})) {
        return EventRecord{as_int(row[0]), as_text(row[1]), as_text(row[2]), as_text(row[3])};
    }
    return std::nullopt;
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
    summary.failed_launches = count("SELECT COUNT(*) FROM measurements WHERE outcome <> 'ok'");
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
