#pragma once
// Portable tuning records (`npuopt export` / `npuopt import`, format in records_format.hpp): a
// campaign's designs and measurements written to a file, and read into another campaign.
//
//   export  header ──► per kernel, per design (id order): its design line, then its finished
//           evaluations with their measurements
//   import  every line parsed and checked (nothing written yet) ──► ONE transaction: the import,
//           its designs (deduped by content hash), their evaluations (deduped by fingerprint;
//           stale, with the reason, when their toolchain, bench config or shape differ from the
//           destination's), the queue ──► commit; rolled back for a dry run and when nothing is new
//
// An imported measurement is kept and marked as imported, never taken for one made here: the
// designs that passed are queued (queue_design) and measured again by the next run, as `npuopt
// add` does for a person's kernel; they enter the tree with role "import".

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign/records_format.hpp"
#include "store/campaign_store.hpp"
#include "store/records_store.hpp"

namespace npuopt::campaign {

struct Workspace;

/// A kernel as records compare it: its shape and the bench-config hashes its evaluations carry
/// (the configured acceptance, then the strict one of a late campaign).
struct KernelFacts {
    std::string shape;
    std::vector<std::string> bench_config_hashes;
};

/// What a campaign says about itself in an export, and what an import compares records against.
struct CampaignFacts {
    std::string name;                      ///< the campaign directory's name
    std::string fingerprint;               ///< content hash of target, creation time and seed
    std::uint64_t seed = 0;
    std::string target;
    std::optional<ToolchainId> toolchain;  ///< the version it runs now (none: unknown)
    std::map<std::string, KernelFacts> kernels;
    std::filesystem::path dir;             ///< its directory (designs/ holds sources); empty: none
};

/// A campaign's facts from its workspace; the toolchain is asked for its version now, else the
/// version of the last run is taken.
CampaignFacts campaign_facts(Workspace& workspace);

struct ExportOptions {
    std::string kernel;  ///< only this kernel ("" = every kernel)
};

struct ExportSummary {
    std::filesystem::path file;
    std::int64_t designs = 0;
    std::int64_t evaluations = 0;
    std::int64_t measurements = 0;
    std::int64_t running_skipped = 0;  ///< evaluations still running (not finished: not exported)
};

/// Write the campaign's records to `out`. Error(invalid_input) for a kernel it does not have.
ExportSummary write_records(store::CampaignStore& store, const CampaignFacts& facts, const ExportOptions& options,
                            std::ostream& out);
/// write_records() into `file`, atomically (a temporary beside it, renamed over it).
/// Error(invalid_input) when `file` exists and `force` is false; Error(io) when it cannot be written.
ExportSummary export_records_file(store::CampaignStore& store, const CampaignFacts& facts, const ExportOptions& options,
                                  const std::filesystem::path& file, bool force);

/// Which imported designs are queued for re-measurement.
enum class QueuePolicy { passed, all, none };
std::optional<QueuePolicy> parse_queue_policy(std::string_view text);
std::string_view queue_policy_name(QueuePolicy policy);

struct ImportOptions {
    QueuePolicy queue = QueuePolicy::passed;
    bool dry_run = false;  ///< report what would happen; write nothing
};

/// What an import did (or, for a dry run, would do).
struct ImportReport {
    std::string file;
    RecordsHeader source;
    std::string destination;                 ///< the campaign's name
    bool dry_run = false;
    QueuePolicy queue = QueuePolicy::passed;
    bool nothing_new = false;                ///< every design and evaluation was there already
    std::optional<std::int64_t> import_id;   ///< none for a dry run and when nothing was new
    std::int64_t designs_in_file = 0;
    std::int64_t evaluations_in_file = 0;
    store::ImportCounts counts;
    std::map<std::string, std::int64_t> stale_reasons;  ///< reason → evaluations marked stale for it
    std::vector<std::string> skipped_kernels;           ///< kernels of the file this campaign lacks
    std::vector<std::string> queued;                    ///< "kernel: family@hash" of each queued design
};

/// Import records from `in` (named `file` in errors) into `store`. Every line is checked before
/// anything is written; Error(invalid_input) naming FILE:LINE and the field for a broken line, a
/// header of another format, version or target. The import is one transaction.
ImportReport import_records(store::CampaignStore& store, const CampaignFacts& destination, std::istream& in,
                            const std::string& file, const ImportOptions& options);
/// import_records() from a file; Error(invalid_input) when it cannot be read.
ImportReport import_records_file(store::CampaignStore& store, const CampaignFacts& destination,
                                 const std::filesystem::path& file, const ImportOptions& options);

nlohmann::json to_json(const ExportSummary& summary);
nlohmann::json to_json(const ImportReport& report);
std::string render_import_text(const ImportReport& report);

/// The campaign's toolchain versions by id.
std::map<std::int64_t, ToolchainId> toolchains_by_id(store::CampaignStore& store);
/// The finished evaluations of a stored design as records lines (an imported one keeps the
/// fingerprint it came with); running ones are skipped and counted in `running_skipped`.
std::vector<EvaluationLine> stored_evaluations(store::CampaignStore& store, const store::DesignRecord& design,
                                               const std::map<std::int64_t, ToolchainId>& toolchains,
                                               std::int64_t* running_skipped = nullptr);

/// How a queued design enters the tree: role "import" with its file when an import queued it,
/// else role "user" (`npuopt add`).
struct QueuedOrigin {
    std::string role;
    std::string move;
    std::string reason;
};
QueuedOrigin queued_origin(store::CampaignStore& store, std::int64_t design_id);

}  // namespace npuopt::campaign
