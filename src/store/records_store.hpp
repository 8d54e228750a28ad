#pragma once
// Portable tuning records in a campaign's database (tables of the records migration step;
// SCHEMA.md): one row per import (`imports`), one per design an import added
// (`imported_designs`), and the import columns of `evaluations` (import_id, origin_fingerprint,
// import_note) that tell an imported measurement from one taken here. The only owner of these;
// the evaluation rows themselves are written by CampaignStore. Knows nothing of the file format.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/database.hpp"

namespace npuopt::store {

/// What an import added (counts are of the records file's contents).
struct ImportCounts {
    std::int64_t designs_added = 0;
    std::int64_t designs_present = 0;    ///< already in the campaign (same content hash)
    std::int64_t designs_skipped = 0;    ///< of a kernel the campaign does not have
    std::int64_t designs_queued = 0;     ///< queued for re-measurement here
    std::int64_t evaluations_added = 0;
    std::int64_t evaluations_present = 0;  ///< already in the campaign (same fingerprint)
    std::int64_t evaluations_stale = 0;    ///< added, but measured under other conditions
    std::int64_t measurements_added = 0;
};

/// One import of a records file.
struct ImportRecord {
    std::int64_t id = 0;
    std::string created_at;
    std::string source_file;
    std::string source_campaign;     ///< the exporting campaign's name
    std::string source_fingerprint;  ///< and its fingerprint
    std::string source_target;
    std::string source_toolchain;    ///< "npuc 1.0.0" ("" when unknown)
    std::int64_t format_version = 0;
    ImportCounts counts;
};

/// A design an import added to the campaign.
struct ImportedDesignRecord {
    std::int64_t import_id = 0;
    std::int64_t design_id = 0;
    std::string origin_hash;   ///< its content hash in the records file
    std::string origin_role;   ///< the role that made it where it came from ("" when unknown)
    bool queued = false;       ///< queued for re-measurement here
    bool stale = false;
    std::string stale_reason;
    std::string source_file;   ///< of its import (read back only)
};

/// Where an imported evaluation came from.
struct EvaluationOrigin {
    std::int64_t import_id = 0;
    std::string origin_fingerprint;
    std::string import_note;
};

/// Imports at a glance (`npuopt status`).
struct ImportsSummary {
    std::int64_t imports = 0;
    std::int64_t designs = 0;
    std::int64_t evaluations = 0;
    std::int64_t evaluations_stale = 0;
    std::vector<std::string> sources;  ///< "FILE (campaign NAME)" of each import, oldest first
};

/// Accessors; each write composes inside the caller's Transaction (an import is one).
class RecordsStore {
public:
    explicit RecordsStore(Database& database) : m_database(&database) {}

    /// Insert an import (counts as given; set_import_counts() fixes them at the end); its id.
    std::int64_t record_import(const ImportRecord& record);
    void set_import_counts(std::int64_t import_id, const ImportCounts& counts);
    std::vector<ImportRecord> list_imports();

    void record_imported_design(const ImportedDesignRecord& record);
    /// The latest import that added `design_id` (with its source file); none for a design made here.
    std::optional<ImportedDesignRecord> find_imported_design(std::int64_t design_id);

    /// Mark evaluation `evaluation_id` as imported by `origin.import_id`.
    void tag_evaluation(std::int64_t evaluation_id, const EvaluationOrigin& origin);
    /// Evaluation id → origin, for every imported evaluation of `design_id`.
    std::map<std::int64_t, EvaluationOrigin> evaluation_origins(std::int64_t design_id);
    /// Whether an evaluation imported with this origin fingerprint is in the campaign.
    bool has_origin_fingerprint(const std::string& fingerprint);

    ImportsSummary summarize();

private:
    Database* m_database;
};

}  // namespace npuopt::store
