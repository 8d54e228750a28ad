#include "store/records_store.hpp"

#include <fmt/format.h>

#include "core/log.hpp"

namespace npuopt::store {
namespace {

constexpr const char* k_import_columns =
    "id, created_at, source_file, source_campaign, source_fingerprint, source_target, source_toolchain, "
    "format_version, designs_added, designs_present, designs_skipped, designs_queued, evaluations_added, "
    "evaluations_present, evaluations_stale, measurements_added";

ImportRecord import_from_row(const Row& row) {
    RowReader read(row);
    ImportRecord record;
    record.id = read.integer();
    record.created_at = read.text();
    record.source_file = read.text();
    record.source_campaign = read.text();
    record.source_fingerprint = read.text();
    record.source_target = read.text();
    record.source_toolchain = read.text();
    record.format_version = read.integer();
    record.counts.designs_added = read.integer();
    record.counts.designs_present = read.integer();
    record.counts.designs_skipped = read.integer();
    record.counts.designs_queued = read.integer();
    record.counts.evaluations_added = read.integer();
    record.counts.evaluations_present = read.integer();
    record.counts.evaluations_stale = read.integer();
    record.counts.measurements_added = read.integer();
    read.finish();
    return record;
}

}  // namespace

std::int64_t RecordsStore::record_import(const ImportRecord& record) {
    Transaction transaction(*m_database);
    m_database->execute(
        "INSERT INTO imports (created_at, source_file, source_campaign, source_fingerprint, source_target, "
        "source_toolchain, format_version) VALUES (?, ?, ?, ?, ?, ?, ?)",
        {log::utc_timestamp(), record.source_file, record.source_campaign, record.source_fingerprint,
         record.source_target, record.source_toolchain, record.format_version});
    const std::int64_t id = m_database->last_insert_id();
    set_import_counts(id, record.counts);
    transaction.commit();
    return id;
}

void RecordsStore::set_import_counts(std::int64_t import_id, const ImportCounts& counts) {
    m_database->execute(
        "UPDATE imports SET designs_added = ?, designs_present = ?, designs_skipped = ?, designs_queued = ?, "
        "evaluations_added = ?, evaluations_present = ?, evaluations_stale = ?, measurements_added = ? WHERE id = ?",
        {counts.designs_added, counts.designs_present, counts.designs_skipped, counts.designs_queued,
         counts.evaluations_added, counts.evaluations_present, counts.evaluations_stale, counts.measurements_added,
         import_id});
}

std::vector<ImportRecord> RecordsStore::list_imports() {
    std::vector<ImportRecord> records;
    for (const Row& row : m_database->query(fmt::format("SELECT {} FROM imports ORDER BY id", k_import_columns))) {
        records.push_back(import_from_row(row));
    }
    return records;
}

void RecordsStore::record_imported_design(const ImportedDesignRecord& record) {
    m_database->execute(
        "INSERT INTO imported_designs (import_id, design_id, origin_hash, origin_role, queued, stale, stale_reason) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        {record.import_id, record.design_id, record.origin_hash, record.origin_role,
         std::int64_t{record.queued ? 1 : 0}, std::int64_t{record.stale ? 1 : 0}, record.stale_reason});
}

std::optional<ImportedDesignRecord> RecordsStore::find_imported_design(std::int64_t design_id) {
    auto rows = m_database->query(
        "SELECT d.import_id, d.design_id, d.origin_hash, d.origin_role, d.queued, d.stale, d.stale_reason, "
        "i.source_file FROM imported_designs d JOIN imports i ON i.id = d.import_id WHERE d.design_id = ? "
        "ORDER BY d.import_id DESC LIMIT 1",
        {design_id});
    if (rows.empty()) return std::nullopt;
    RowReader read(rows[0]);
    ImportedDesignRecord record;
    record.import_id = read.integer();
    record.design_id = read.integer();
    record.origin_hash = read.text();
    record.origin_role = read.text();
    record.queued = read.flag();
    record.stale = read.flag();
    record.stale_reason = read.text();
    record.source_file = read.text();
    read.finish();
    return record;
}

void RecordsStore::tag_evaluation(std::int64_t evaluation_id, const EvaluationOrigin& origin) {
    m_database->execute("UPDATE evaluations SET import_id = ?, origin_fingerprint = ?, import_note = ? WHERE id = ?",
                        {origin.import_id, origin.origin_fingerprint, origin.import_note, evaluation_id});
}

std::map<std::int64_t, EvaluationOrigin> RecordsStore::evaluation_origins(std::int64_t design_id) {
    std::map<std::int64_t, EvaluationOrigin> origins;
    for (const Row& row : m_database->query(
             "SELECT id, import_id, origin_fingerprint, import_note FROM evaluations WHERE design_id = ? AND "
             "origin_fingerprint IS NOT NULL",
             {design_id})) {
        RowReader read(row);
        const std::int64_t id = read.integer();
        EvaluationOrigin origin;
        origin.import_id = read.optional_integer().value_or(0);
        origin.origin_fingerprint = read.text();
        origin.import_note = read.text();
        read.finish();
        origins[id] = origin;
    }
    return origins;
}

bool RecordsStore::has_origin_fingerprint(const std::string& fingerprint) {
    return !m_database->query("SELECT 1 FROM evaluations WHERE origin_fingerprint = ? LIMIT 1", {fingerprint}).empty();
}

ImportsSummary RecordsStore::summarize() {
    ImportsSummary summary;
    for (const ImportRecord& record : list_imports()) {
        summary.imports += 1;
        summary.designs += record.counts.designs_added;
        summary.sources.push_back(record.source_campaign.empty()
                                      ? record.source_file
                                      : fmt::format("{} (campaign {})", record.source_file, record.source_campaign));
    }
    auto rows = m_database->query(
        "SELECT COUNT(*), COALESCE(SUM(stale), 0) FROM evaluations WHERE import_id IS NOT NULL");
    summary.evaluations = as_int(rows.at(0).at(0));
    summary.evaluations_stale = as_int(rows.at(0).at(1));
    return summary;
}

}  // namespace npuopt::store
