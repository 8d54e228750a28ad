#pragma once
// Typed accessors over a campaign's database (campaign.db). Every write is one transaction;
// every record is keyed by target, kernel, shape, toolchain version and bench-config hash where
// it applies; records from an older toolchain are marked stale, never deleted.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/database.hpp"

namespace npuopt::store {

/// A toolchain release seen by the campaign.
struct ToolchainVersionRecord {
    std::int64_t id = 0;
    std::string target;
    std::string name;      ///< e.g. npuc
    std::string version;   ///< e.g. 1.0.0
    std::string first_seen;
};

/// A candidate kernel: template + parameters (+ optional source), unique by content hash.
struct DesignRecord {
    std::int64_t id = 0;
    std::string content_hash;
    std::string target;
    std::string kernel;
    std::string shape;          ///< canonical "k=v,k=v"
    std::string template_name;
    std::string params_json = "{}";
    std::optional<std::string> source;
    std::optional<std::int64_t> parent_id;
    std::string created_at;
};

/// One process launch of an evaluation (one row per timed repeat inside it), failed launches
/// included: a failure has no cycles, an outcome other than "ok" and its error.
struct MeasurementRecord {
    std::int64_t id = 0;
    std::int64_t evaluation_id = 0;
    std::int64_t launch_order = 0;  ///< position in the stage's launch sequence (a race: both sides)
    std::int64_t seed = 0;
    std::int64_t repeat_idx = 0;
    std::optional<double> cycles;   ///< none for a failed launch
    std::optional<double> wall_ms;
    std::string side = "candidate"; ///< candidate | champion (which design of a race ran)
    std::string outcome = "ok";     ///< ok | transient (failed, retried) | failed (not retryable)
    std::optional<std::string> error;
    std::int64_t attempt = 0;       ///< 0 first try, then one more per retry of the same launch
    std::optional<std::int64_t> pair_idx;  ///< the race pair (none outside races)
};

/// One step of the evaluation cascade applied to a design.
struct EvaluationRecord {
    std::int64_t id = 0;
    std::int64_t design_id = 0;
    std::optional<std::int64_t> toolchain_version_id;
    std::string bench_config_hash;
    std::string stage;    ///< rules | estimate | compile | correctness | screen | race
    std::string verdict;  ///< pass | fail | accept | reject | error ...
    std::string reason;
    double secs = 0.0;
    bool stale = false;
    std::string created_at;
    std::optional<std::int64_t> launches;         ///< device launches, failed ones included (v5+)
    std::optional<std::int64_t> failed_launches;  ///< launches that failed, transiently or not
    std::optional<std::int64_t> retries;          ///< launches repeated after a transient failure
};

/// Something learnt about the target (doc summary, fitted parameter, microbench result).
struct KnowledgeEntry {
    std::int64_t id = 0;
    std::string target;
    std::string kind;     ///< e.g. doc_summary | hw_param | microbench
    std::string key;
    std::string text;
    std::optional<double> value;
    std::string evidence_json = "{}";
    std::optional<std::int64_t> toolchain_version_id;
    bool stale = false;
    std::string created_at;
};

/// A legality rule learnt from diagnostics or docs.
struct RuleRecord {
    std::int64_t id = 0;
    std::string target;
    std::string code;       ///< diagnostic code, e.g. E0201
    std::string statement;
    std::string quantity;   ///< e.g. dm_bytes
    std::optional<double> limit;
    double confidence = 0.0;
    std::optional<std::int64_t> toolchain_version_id;
    std::string status = "proposed";  ///< proposed | confirmed | refuted
    bool stale = false;
    std::string created_at;
};

/// A campaign event (also mirrored to events.jsonl by the caller).
struct EventRecord {
    std::int64_t id = 0;
    std::string ts;
    std::string kind;
    std::string payload_json = "{}";
};

/// Counts for `npuopt status`.
struct StoreSummary {
    int schema_version = 0;
    std::map<std::string, std::string> meta;
    std::vector<ToolchainVersionRecord> toolchain_versions;
    std::map<std::string, std::int64_t> designs_by_kernel;
    std::map<std::string, std::int64_t> evaluations_by_verdict;  ///< "stage/verdict" → count
    std::int64_t measurements = 0;
    std::int64_t failed_launches = 0;  ///< measurement rows whose outcome is not ok
    std::int64_t knowledge_entries = 0;
    std::int64_t knowledge_entries_stale = 0;
    std::int64_t rules = 0;
    std::int64_t rules_stale = 0;
    std::int64_t events = 0;
    std::optional<EventRecord> last_event;
};

/// The campaign database with typed accessors.
class CampaignStore {
public:
    explicit CampaignStore(Database database) : m_database(std::move(database)) {}
    /// Open (creating and migrating as options say) a campaign database file.
    static CampaignStore open(const std::filesystem::path& file, const Database::Options& options = {});

    Database& database() { return m_database; }

    void set_meta(const std::string& key, const std::string& value);
    std::optional<std::string> meta(const std::string& key);

    /// Count one device launch of the campaign (its own transaction, so it is persisted before the
    /// launch runs: a killed step's launches are still charged to the budget).
    void count_device_launch();
    /// Device launches counted so far (0 for a campaign that never launched).
    std::int64_t device_launches();

    /// Id of (target, name, version), inserting it on first sight.
    std::int64_t record_toolchain_version(const std::string& target, const std::string& name, const std::string& version);
    std::vector<ToolchainVersionRecord> list_toolchain_versions();

    /// Id of the design with this content hash, inserting it when new (idempotent).
    std::int64_t record_design(const DesignRecord& design);
    std::optional<DesignRecord> find_design(std::int64_t id);
    std::optional<DesignRecord> find_design_by_hash(const std::string& content_hash);
    std::vector<DesignRecord> list_designs(const std::string& target, const std::string& kernel);

    /// Record an evaluation and its measurements in one transaction; returns the evaluation id.
    /// Throws Error(invalid_input) for a measurement with an unknown side or outcome, an "ok" one
    /// without cycles or with an error, or a failed one without its error.
    std::int64_t record_evaluation(const EvaluationRecord& evaluation,
                                   const std::vector<MeasurementRecord>& measurements = {});
    std::vector<EvaluationRecord> list_evaluations(std::int64_t design_id, bool include_stale = false);
    std::vector<MeasurementRecord> list_measurements(std::int64_t evaluation_id);
    /// The timed launches of the latest `max_evaluations` evaluations of `stage` run here (not
    /// imported): per evaluation, oldest first, the candidate's successful launches in order.
    std::vector<std::vector<double>> recent_stage_cycles(const std::string& stage, std::int64_t max_evaluations);

    /// A long stage (a race) is recorded as it goes, so a killed process loses no completed launch:
    /// record_evaluation() of its row with verdict "running", append_measurement() after every
    /// launch (its own transaction), complete_evaluation() with the final verdict at the end.
    std::int64_t append_measurement(std::int64_t evaluation_id, const MeasurementRecord& measurement);
    /// Set a running evaluation's verdict, reason, time and launch counts. Error(invalid_input)
    /// when `evaluation_id` is not a running evaluation.
    void complete_evaluation(std::int64_t evaluation_id, const EvaluationRecord& final_record);
    /// Evaluations still "running" (their process ended in the middle) become "interrupted" with
    /// `reason`; their measurements stay. Returns how many. Called when a campaign run starts.
    std::int64_t mark_interrupted_evaluations(const std::string& reason);

    std::int64_t record_knowledge(const KnowledgeEntry& entry);
    std::vector<KnowledgeEntry> list_knowledge(const std::string& target, bool include_stale = false);

    std::int64_t record_rule(const RuleRecord& rule);
    std::vector<RuleRecord> list_rules(const std::string& target, bool include_stale = false);

    /// Mark evaluations, knowledge and rules of `target` from any other toolchain version stale.
    /// Returns how many records changed.
    std::int64_t mark_stale_except(const std::string& target, std::int64_t current_toolchain_version_id);

    std::int64_t record_event(const std::string& kind, const std::string& payload_json = "{}");
    std::vector<EventRecord> list_events(std::int64_t limit = 100);
    /// The latest event of `kind`, if any.
    std::optional<EventRecord> last_event(const std::string& kind);

    StoreSummary summarize();

private:
    Database m_database;
};

}  // namespace npuopt::store
