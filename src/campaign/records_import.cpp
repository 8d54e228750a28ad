// Import side of records_io.hpp: every line read and checked first, then the records applied in
// one transaction (rolled back for a dry run and when nothing is new).

#include <algorithm>
#include <fstream>
#include <istream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "campaign/driver.hpp"
#include "campaign/records_io.hpp"
#include "core/error.hpp"
#include "search/design.hpp"

namespace npuopt::campaign {
namespace {

/// The checked contents of a records file.
struct ParsedRecords {
    RecordsHeader header;
    std::vector<DesignLine> designs;
    std::map<std::string, std::vector<EvaluationLine>> evaluations;  ///< by design hash, in file order
    std::int64_t evaluation_count = 0;
};

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorKind::invalid_input, message); }

/// A design line against those before it and the header: listed once, its source hashing to its hash.
void check_design(const DesignLine& design, const RecordsHeader& header, const std::string& file,
                  std::map<std::string, std::int64_t>& seen) {
    const std::string place = fmt::format("{}:{}: design", file, design.line);
    if (auto [first, inserted] = seen.emplace(design.hash, design.line); !inserted) {
        fail(fmt::format("{}: field 'hash': design {} is listed twice (first on line {})", place, design.hash,
                         first->second));
    }
    if (design.source && search::design_hash(header.target, design.kernel, design.shape, *design.source) != design.hash) {
        fail(fmt::format("{}: field 'source' does not hash to field 'hash' ({}): the file was changed after export or "
                         "is damaged",
                         place, design.hash));
    }
}

/// The header against the destination: records move only between campaigns of one target.
void check_header(const RecordsHeader& header, const CampaignFacts& destination, const std::string& file,
                  std::int64_t line_number) {
    if (header.target != destination.target) {
        fail(fmt::format("{}:{}: header: field 'target' is '{}', but campaign {} runs target '{}': records move only "
                         "between campaigns of one target",
                         file, line_number, header.target, destination.name, destination.target));
    }
}

ParsedRecords parse_all(std::istream& in, const std::string& file, const CampaignFacts& destination) {
    ParsedRecords parsed;
    std::map<std::string, std::int64_t> design_lines;
    std::int64_t header_line = 0;
    std::int64_t line_number = 0;
    std::string text;
    while (std::getline(in, text)) {
        ++line_number;
        if (!text.empty() && text.back() == '\r') text.pop_back();
        if (text.find_first_not_of(" \t") == std::string::npos) continue;
        RecordsLine line = parse_records_line(text, file, line_number);
        if (auto* header = std::get_if<RecordsHeader>(&line)) {
            if (header_line != 0) fail(fmt::format("{}:{}: header: a second header (the first is on line {})", file, line_number, header_line));
            check_header(*header, destination, file, line_number);
            parsed.header = std::move(*header);
            header_line = line_number;
        } else if (header_line == 0) {
            fail(fmt::format("{}:{}: expected the header line first (record 'header'), found a {} record", file,
                             line_number, std::holds_alternative<DesignLine>(line) ? "design" : "evaluation"));
        } else if (auto* design = std::get_if<DesignLine>(&line)) {
            check_design(*design, parsed.header, file, design_lines);
            parsed.designs.push_back(std::move(*design));
        } else {
            auto& evaluation = std::get<EvaluationLine>(line);
            if (!design_lines.contains(evaluation.design)) {
                fail(fmt::format("{}:{}: evaluation: field 'design' names design {}, which no design line before it "
                                 "lists", file, line_number, evaluation.design));
            }
            parsed.evaluations[evaluation.design].push_back(std::move(evaluation));
            parsed.evaluation_count += 1;
        }
    }
    if (in.bad()) throw Error(ErrorKind::io, fmt::format("{}: reading failed after line {}", file, line_number));
    if (header_line == 0) fail(fmt::format("{}: no header line: it is empty or not a file of `npuopt export`", file));
    return parsed;
}

/// Applies checked records to a campaign's store (inside the caller's transaction).
class Importer {
public:
    Importer(store::CampaignStore& store, const CampaignFacts& destination, const ImportOptions& options,
             ImportReport& report)
        : m_store(&store), m_records(store.database()), m_destination(&destination), m_options(options),
          m_report(&report) {}

    void run(const ParsedRecords& parsed) {
        store::ImportRecord import;
        import.source_file = m_report->file;
        import.source_campaign = parsed.header.campaign_name;
        import.source_fingerprint = parsed.header.campaign_fingerprint;
        import.source_target = parsed.header.target;
        import.source_toolchain = parsed.header.toolchain ? parsed.header.toolchain->text() : "";
        import.format_version = parsed.header.version;
        m_import_id = m_records.record_import(import);
        static const std::vector<EvaluationLine> k_none;
        for (const DesignLine& design : parsed.designs) {
            auto evaluations = parsed.evaluations.find(design.hash);
            import_design(design, evaluations == parsed.evaluations.end() ? k_none : evaluations->second);
        }
        m_records.set_import_counts(m_import_id, m_report->counts);
        m_store->record_event("records_imported", nlohmann::json{{"import_id", m_import_id},
                                                                 {"file", m_report->file},
                                                                 {"campaign", parsed.header.campaign_name},
                                                                 {"designs_added", m_report->counts.designs_added},
                                                                 {"evaluations_added", m_report->counts.evaluations_added},
                                                                 {"queued", m_report->counts.designs_queued}}
                                                          .dump());
    }

    std::int64_t import_id() const { return m_import_id; }

private:
    void import_design(const DesignLine& design, const std::vector<EvaluationLine>& evaluations) {
        store::ImportCounts& counts = m_report->counts;
        auto kernel = m_destination->kernels.find(design.kernel);
        if (kernel == m_destination->kernels.end()) {
            counts.designs_skipped += 1;
            auto& skipped = m_report->skipped_kernels;
            if (std::find(skipped.begin(), skipped.end(), design.kernel) == skipped.end()) skipped.push_back(design.kernel);
            return;
        }
        const std::optional<store::DesignRecord> existing = m_store->find_design_by_hash(design.hash);
        const std::int64_t design_id = existing ? existing->id : insert_design(design);
        m_ids[design.hash] = design_id;
        std::set<std::string> known = existing ? known_fingerprints(*existing) : std::set<std::string>{};
        std::string first_stale;
        std::int64_t stale = 0;
        for (const EvaluationLine& evaluation : evaluations) {
            if (!known.insert(evaluation.fingerprint).second) {
                counts.evaluations_present += 1;
                continue;
            }
            const std::string reason = stale_reason(design, kernel->second, evaluation);
            add_evaluation(design_id, evaluation, reason);
            if (!reason.empty() && stale++ == 0) first_stale = reason;
        }
        if (existing) {
            counts.designs_present += 1;
            return;
        }
        counts.designs_added += 1;
        const bool shape_differs = design.shape != kernel->second.shape;
        store::ImportedDesignRecord record;
        record.import_id = m_import_id;
        record.design_id = design_id;
        record.origin_hash = design.hash;
        record.origin_role = design.tree ? design.tree->role : "";
        record.stale = shape_differs || (!evaluations.empty() && stale == static_cast<std::int64_t>(evaluations.size()));
        record.stale_reason = shape_differs ? fmt::format("made for shape {} (this campaign runs {})", design.shape,
                                                          kernel->second.shape)
                                            : record.stale ? first_stale : "";
        record.queued = should_queue(design, evaluations, shape_differs) && queue_design(*m_store, design.kernel, design_id);
        m_records.record_imported_design(record);
        if (record.queued) {
            counts.designs_queued += 1;
            m_report->queued.push_back(fmt::format("{}: {}@{}", design.kernel, design.family, design.hash.substr(0, 8)));
        }
    }

    std::int64_t insert_design(const DesignLine& design) {
        store::DesignRecord record;
        record.content_hash = design.hash;
        record.target = m_destination->target;
        record.kernel = design.kernel;
        record.shape = design.shape;
        record.template_name = design.family;
        record.params_json = design.params.dump();
        record.source = design.source;
        if (design.parent) {
            if (auto parent = m_ids.find(*design.parent); parent != m_ids.end()) {
                record.parent_id = parent->second;
            } else if (auto stored = m_store->find_design_by_hash(*design.parent)) {
                record.parent_id = stored->id;
            }
        }
        return m_store->record_design(record);
    }

    /// Fingerprints of the evaluations the campaign holds of `design` (measured here or imported).
    std::set<std::string> known_fingerprints(const store::DesignRecord& design) {
        std::set<std::string> known;
        for (const EvaluationLine& line : stored_evaluations(*m_store, design, toolchains_by_id(*m_store))) {
            known.insert(line.fingerprint);
        }
        return known;
    }

    /// Why `evaluation` does not hold in this campaign ("" when it does): another shape,
    /// toolchain version or benchmark configuration.
    std::string stale_reason(const DesignLine& design, const KernelFacts& kernel, const EvaluationLine& evaluation) const {
        std::vector<std::string> reasons;
        if (design.shape != kernel.shape) {
            reasons.push_back(fmt::format("shape {} (this campaign runs {})", design.shape, kernel.shape));
        }
        const auto& here = m_destination->toolchain;
        if (evaluation.toolchain && !here) {
            reasons.push_back(fmt::format("measured under {} (this campaign's toolchain version is unknown)",
                                          evaluation.toolchain->text()));
        } else if (evaluation.toolchain && *evaluation.toolchain != *here) {
            reasons.push_back(fmt::format("measured under {} (this campaign runs {})", evaluation.toolchain->text(),
                                          here->text()));
        }
        const auto& hashes = kernel.bench_config_hashes;
        if (std::find(hashes.begin(), hashes.end(), evaluation.bench_config) == hashes.end()) {
            reasons.push_back(fmt::format("bench config {} (this campaign's is {})", evaluation.bench_config,
                                          hashes.empty() ? std::string("unknown") : hashes.front()));
        }
        return fmt::format("{}", fmt::join(reasons, "; "));
    }

    void add_evaluation(std::int64_t design_id, const EvaluationLine& evaluation, const std::string& stale_reason) {
        store::EvaluationRecord record;
        record.design_id = design_id;
        if (evaluation.toolchain) {
            record.toolchain_version_id = m_store->record_toolchain_version(
                m_destination->target, evaluation.toolchain->name, evaluation.toolchain->version);
        }
        record.bench_config_hash = evaluation.bench_config;
        record.stage = evaluation.stage;
        record.verdict = evaluation.verdict;
        record.reason = evaluation.reason;
        record.secs = evaluation.secs;
        record.stale = !stale_reason.empty();
        record.launches = evaluation.launches;
        record.failed_launches = evaluation.failed_launches;
        record.retries = evaluation.retries;
        const std::int64_t id = m_store->record_evaluation(record, evaluation.measurements);
        std::string note = fmt::format("imported from {} (campaign {}), measured there at {}", m_report->file,
                                       m_report->source.campaign_name, evaluation.created_at);
        if (record.stale) note += "; stale: " + stale_reason;
        m_records.tag_evaluation(id, {m_import_id, evaluation.fingerprint, note});
        store::ImportCounts& counts = m_report->counts;
        counts.evaluations_added += 1;
        counts.measurements_added += static_cast<std::int64_t>(evaluation.measurements.size());
        if (record.stale) {
            counts.evaluations_stale += 1;
            m_report->stale_reasons[stale_reason] += 1;
        }
    }

    /// Whether a design new to the campaign is measured again here, as --queue says: never its
    /// baseline (every campaign measures its own first) nor a design of another shape.
    bool should_queue(const DesignLine& design, const std::vector<EvaluationLine>& evaluations, bool shape_differs) const {
        if (m_options.queue == QueuePolicy::none || shape_differs || design.family == "baseline") return false;
        if (m_options.queue == QueuePolicy::all) return true;
        if (design.tree && design.tree->verdict == "accepted") return true;
        return std::any_of(evaluations.begin(), evaluations.end(), [](const EvaluationLine& evaluation) {
            return evaluation.stage == "correctness" && evaluation.verdict == "pass";
        });
    }

    store::CampaignStore* m_store;
    store::RecordsStore m_records;
    const CampaignFacts* m_destination;
    ImportOptions m_options;
    ImportReport* m_report;
    std::int64_t m_import_id = 0;
    std::map<std::string, std::int64_t> m_ids;  ///< design hash → id here
};

}  // namespace

ImportReport import_records(store::CampaignStore& store, const CampaignFacts& destination, std::istream& in,
                            const std::string& file, const ImportOptions& options) {
    const ParsedRecords parsed = parse_all(in, file, destination);
    ImportReport report;
    report.file = file;
    report.source = parsed.header;
    report.destination = destination.name;
    report.dry_run = options.dry_run;
    report.queue = options.queue;
    report.designs_in_file = static_cast<std::int64_t>(parsed.designs.size());
    report.evaluations_in_file = parsed.evaluation_count;
    store::Transaction transaction = store.database().transaction();
    Importer importer(store, destination, options, report);
    importer.run(parsed);
    report.nothing_new = report.counts.designs_added == 0 && report.counts.evaluations_added == 0;
    if (!report.nothing_new && !options.dry_run) {
        transaction.commit();
        report.import_id = importer.import_id();
    }
    return report;
}

ImportReport import_records_file(store::CampaignStore& store, const CampaignFacts& destination,
                                 const std::filesystem::path& file, const ImportOptions& options) {
    std::error_code error;
    if (std::filesystem::is_directory(file, error)) {
        fail(fmt::format("import: {} is a directory, expected a records file of `npuopt export`", file.string()));
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(fmt::format("import: cannot read {}", file.string()));
    return import_records(store, destination, in, file.string(), options);
}

nlohmann::json to_json(const ImportReport& report) {
    const store::ImportCounts& counts = report.counts;
    const RecordsHeader& source = report.source;
    return {{"file", report.file},
            {"source",
             {{"campaign", source.campaign_name},
              {"fingerprint", source.campaign_fingerprint},
              {"target", source.target},
              {"toolchain", source.toolchain ? nlohmann::json(source.toolchain->text()) : nlohmann::json()},
              {"kernel", source.kernel.empty() ? nlohmann::json() : nlohmann::json(source.kernel)},
              {"exported_at", source.exported_at}}},
            {"destination", report.destination},
            {"dry_run", report.dry_run},
            {"nothing_new", report.nothing_new},
            {"import_id", report.import_id ? nlohmann::json(*report.import_id) : nlohmann::json()},
            {"queue", queue_policy_name(report.queue)},
            {"designs",
             {{"in_file", report.designs_in_file},
              {"added", counts.designs_added},
              {"present", counts.designs_present},
              {"skipped", counts.designs_skipped},
              {"queued", counts.designs_queued}}},
            {"evaluations",
             {{"in_file", report.evaluations_in_file},
              {"added", counts.evaluations_added},
              {"present", counts.evaluations_present},
              {"stale", counts.evaluations_stale}}},
            {"measurements_added", counts.measurements_added},
            {"stale_reasons", report.stale_reasons},
            {"skipped_kernels", report.skipped_kernels},
            {"queued", report.queued}};
}

std::string render_import_text(const ImportReport& report) {
    const store::ImportCounts& counts = report.counts;
    const std::string source = fmt::format("{} (campaign {}, {}{})", report.file, report.source.campaign_name,
                                           report.source.target,
                                           report.source.toolchain ? ", " + report.source.toolchain->text() : "");
    if (report.nothing_new) {
        std::string text = fmt::format("nothing new: the {} designs and {} evaluations of {} that campaign {} can use "
                                       "are in it already; nothing was written\n",
                                       counts.designs_present, counts.evaluations_present, source, report.destination);
        if (!report.skipped_kernels.empty()) {
            text += fmt::format("  skipped      {} designs of kernels this campaign does not have: {}\n",
                                counts.designs_skipped, fmt::join(report.skipped_kernels, ", "));
        }
        return text;
    }
    std::string text = report.dry_run ? fmt::format("dry run, nothing written: importing {} into {} would add\n",
                                                    source, report.destination)
                                      : fmt::format("imported {} into {} (import {})\n", source, report.destination,
                                                    report.import_id.value_or(0));
    text += fmt::format("  designs      {} added, {} here already, {} skipped\n", counts.designs_added,
                        counts.designs_present, counts.designs_skipped);
    text += fmt::format("  evaluations  {} added ({} stale), {} here already; {} measurements\n",
                        counts.evaluations_added, counts.evaluations_stale, counts.evaluations_present,
                        counts.measurements_added);
    for (const auto& [reason, count] : report.stale_reasons) text += fmt::format("  stale        {}: {}\n", count, reason);
    if (!report.skipped_kernels.empty()) {
        text += fmt::format("  skipped      {} designs of kernels this campaign does not have: {}\n",
                            counts.designs_skipped, fmt::join(report.skipped_kernels, ", "));
    }
    text += fmt::format("  queued       {} design(s) (--queue {}){}\n", counts.designs_queued, queue_policy_name(report.queue),
                        counts.designs_queued > 0 ? ": the next `npuopt run` measures them here and races them first" : "");
    return text;
}

}  // namespace npuopt::campaign
