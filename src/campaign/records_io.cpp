// Export side of records_io.hpp, the campaign facts, and what both sides share: the lines a
// stored design and its evaluations become. The import side is records_import.cpp.

#include "campaign/records_io.hpp"

#include <algorithm>
#include <fstream>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "campaign/workspace.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "eval/cascade.hpp"
#include "search/design.hpp"
#include "store/tree_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::campaign {

namespace fs = std::filesystem;
using nlohmann::json;

std::map<std::int64_t, ToolchainId> toolchains_by_id(store::CampaignStore& store) {
    std::map<std::int64_t, ToolchainId> toolchains;
    for (const auto& version : store.list_toolchain_versions()) toolchains[version.id] = {version.name, version.version};
    return toolchains;
}

std::vector<EvaluationLine> stored_evaluations(store::CampaignStore& store, const store::DesignRecord& design,
                                               const std::map<std::int64_t, ToolchainId>& toolchains,
                                               std::int64_t* running_skipped) {
    const auto origins = store::RecordsStore(store.database()).evaluation_origins(design.id);
    std::vector<EvaluationLine> lines;
    for (const store::EvaluationRecord& record : store.list_evaluations(design.id, true)) {
        if (record.verdict == "running") {  // not finished: its launches and verdict are still to come
            if (running_skipped) *running_skipped += 1;
            continue;
        }
        EvaluationLine line;
        line.design = design.content_hash;
        line.stage = record.stage;
        line.verdict = record.verdict;
        line.reason = record.reason;
        line.secs = record.secs;
        if (record.toolchain_version_id) {
            auto found = toolchains.find(*record.toolchain_version_id);
            if (found != toolchains.end()) line.toolchain = found->second;
        }
        line.bench_config = record.bench_config_hash;
        line.stale = record.stale;
        line.created_at = record.created_at;
        line.launches = record.launches;
        line.failed_launches = record.failed_launches;
        line.retries = record.retries;
        line.measurements = store.list_measurements(record.id);
        auto origin = origins.find(record.id);
        line.fingerprint = origin != origins.end() ? origin->second.origin_fingerprint : evaluation_fingerprint(line);
        lines.push_back(std::move(line));
    }
    return lines;
}

namespace {

/// Sources under <dir>/designs/ by file stem ("KERNEL-HASH16", as CampaignRecords::source_file names them).
std::map<std::string, fs::path> design_source_files(const fs::path& dir) {
    std::map<std::string, fs::path> files;
    std::error_code error;
    if (dir.empty() || !fs::is_directory(dir / "designs", error)) return files;
    for (const auto& entry : fs::directory_iterator(dir / "designs", error)) {
        if (entry.is_regular_file(error) && entry.path().extension() != ".tmp") {
            files[entry.path().stem().string()] = entry.path();
        }
    }
    return files;
}

std::optional<std::string> read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// Writes one campaign's records, line by line.
class Exporter {
public:
    Exporter(store::CampaignStore& store, const CampaignFacts& facts, std::ostream& out)
        : m_store(&store), m_facts(&facts), m_out(&out), m_toolchains(toolchains_by_id(store)),
          m_source_files(design_source_files(facts.dir)) {}

    void write_header(const std::string& kernel) {
        RecordsHeader header;
        header.target = m_facts->target;
        header.toolchain = m_facts->toolchain;
        for (const auto& version : m_store->list_toolchain_versions()) {
            if (version.target == m_facts->target) header.toolchain_versions.push_back({version.name, version.version});
        }
        for (const auto& [name, facts] : m_facts->kernels) {
            if ((kernel.empty() || kernel == name) && !facts.bench_config_hashes.empty()) {
                header.bench_config[name] = facts.bench_config_hashes.front();
            }
        }
        header.campaign_name = m_facts->name;
        header.campaign_fingerprint = m_facts->fingerprint;
        header.campaign_seed = m_facts->seed;
        header.kernel = kernel;
        header.exported_at = log::utc_timestamp();
        header.npuopt_version = NPUOPT_VERSION;
        *m_out << to_json(header).dump() << '\n';
    }

    void write_kernel(const std::string& kernel) {
        std::map<std::int64_t, std::string> hashes;
        for (const store::DesignRecord& design : m_store->list_designs(m_facts->target, kernel)) {
            hashes[design.id] = design.content_hash;
            *m_out << to_json(design_line(design, hashes)).dump() << '\n';
            m_summary.designs += 1;
            for (const EvaluationLine& line : stored_evaluations(*m_store, design, m_toolchains, &m_summary.running_skipped)) {
                *m_out << to_json(line).dump() << '\n';
                m_summary.evaluations += 1;
                m_summary.measurements += static_cast<std::int64_t>(line.measurements.size());
            }
        }
    }

    const ExportSummary& summary() const { return m_summary; }

private:
    DesignLine design_line(const store::DesignRecord& design, const std::map<std::int64_t, std::string>& hashes) {
        DesignLine line;
        line.hash = design.content_hash;
        line.kernel = design.kernel;
        line.shape = design.shape;
        line.family = design.template_name;
        line.params = json::parse(design.params_json, nullptr, false);
        if (!line.params.is_object()) line.params = json::object();
        line.source = design.source ? design.source : source_from_file(design);
        if (design.parent_id) {
            auto parent = hashes.find(*design.parent_id);
            if (parent != hashes.end()) {
                line.parent = parent->second;
            } else if (auto record = m_store->find_design(*design.parent_id)) {
                line.parent = record->content_hash;
            }
        }
        if (auto edge = store::TreeStore(m_store->database()).find_edge(design.kernel, design.id)) {
            line.tree = TreeOrigin{edge->role,       edge->move, edge->reason, edge->verdict, edge->last_stage,
                                   edge->final_reason, edge->step, edge->cycles, edge->speedup};
        }
        return line;
    }

    /// A templated design's source as the campaign wrote it for the toolchain, when it still hashes right.
    std::optional<std::string> source_from_file(const store::DesignRecord& design) const {
        auto file = m_source_files.find(design.kernel + "-" + design.content_hash.substr(0, 16));
        if (file == m_source_files.end()) return std::nullopt;
        auto text = read_text(file->second);
        if (!text || search::design_hash(design.target, design.kernel, design.shape, *text) != design.content_hash) {
            return std::nullopt;
        }
        return text;
    }

    store::CampaignStore* m_store;
    const CampaignFacts* m_facts;
    std::ostream* m_out;
    std::map<std::int64_t, ToolchainId> m_toolchains;
    std::map<std::string, fs::path> m_source_files;
    ExportSummary m_summary;
};

std::optional<ToolchainId> current_toolchain(Workspace& workspace) {
    const target::VersionResult version = workspace.toolchain->version();
    if (version.call.status == target::CallStatus::ok && !version.version.empty()) {
        return ToolchainId{version.name, version.version};
    }
    const auto last_run = store::TreeStore(workspace.store->database()).state("toolchain_version");
    if (!last_run || last_run->empty()) return std::nullopt;
    const auto versions = workspace.store->list_toolchain_versions();
    for (auto seen = versions.rbegin(); seen != versions.rend(); ++seen) {
        if (seen->target == workspace.target.name && seen->version == *last_run) return ToolchainId{seen->name, seen->version};
    }
    return std::nullopt;
}

}  // namespace

CampaignFacts campaign_facts(Workspace& workspace) {
    CampaignFacts facts;
    facts.dir = workspace.dir;
    facts.name = workspace.dir.filename().string();
    facts.seed = workspace.campaign.seed;
    facts.target = workspace.target.name;
    facts.fingerprint = content_hash(
        fmt::format("{}\n{}\n{}", facts.target, workspace.store->meta("created_at").value_or(""), facts.seed));
    facts.toolchain = current_toolchain(workspace);
    const eval::CascadeConfig config = cascade_config(workspace);
    const auto& selected = workspace.campaign.kernels;
    for (const config::KernelSpec& spec : workspace.kernels.kernels) {
        if (!selected.empty() && std::find(selected.begin(), selected.end(), spec.name) == selected.end()) continue;
        eval::KernelContext context;
        context.spec = spec;
        context.shape = spec.shape;
        facts.kernels[spec.name] = {target::format_shape(spec.shape),
                                    {eval::bench_config_hash(config, context),
                                     eval::bench_config_hash(eval::CascadeConfig::strict(config), context)}};
    }
    return facts;
}

ExportSummary write_records(store::CampaignStore& store, const CampaignFacts& facts, const ExportOptions& options,
                            std::ostream& out) {
    std::vector<std::string> kernels;
    for (const auto& [kernel, count] : store.summarize().designs_by_kernel) kernels.push_back(kernel);
    if (!options.kernel.empty()) {
        if (!facts.kernels.contains(options.kernel) &&
            std::find(kernels.begin(), kernels.end(), options.kernel) == kernels.end()) {
            std::vector<std::string> names;
            for (const auto& [name, kernel_facts] : facts.kernels) names.push_back(name);
            throw Error(ErrorKind::invalid_input, fmt::format("export: campaign {} has no kernel '{}' (its kernels: {})",
                                                              facts.name, options.kernel, fmt::join(names, ", ")));
        }
        kernels = {options.kernel};
    }
    Exporter exporter(store, facts, out);
    exporter.write_header(options.kernel);
    for (const std::string& kernel : kernels) exporter.write_kernel(kernel);
    return exporter.summary();
}

ExportSummary export_records_file(store::CampaignStore& store, const CampaignFacts& facts, const ExportOptions& options,
                                  const fs::path& file, bool force) {
    std::error_code error;
    if (fs::exists(file, error) && !force) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("export: {} exists; pass --force to overwrite it", file.string()));
    }
    if (fs::is_directory(file, error)) {
        throw Error(ErrorKind::invalid_input, fmt::format("export: {} is a directory, expected a file", file.string()));
    }
    fs::path temporary = file;
    temporary += fmt::format(".tmp{}", ::getpid());
    ExportSummary summary;
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        if (!out) throw Error(ErrorKind::io, fmt::format("export: cannot write {}", temporary.string()));
        try {
            summary = write_records(store, facts, options, out);
        } catch (...) {
            out.close();
            fs::remove(temporary, error);
            throw;
        }
        out.flush();
        if (!out) {
            out.close();
            fs::remove(temporary, error);
            throw Error(ErrorKind::io, fmt::format("export: writing {} failed (disk full?)", temporary.string()));
        }
    }
    fs::rename(temporary, file, error);
    if (error) {
        fs::remove(temporary);
        throw Error(ErrorKind::io, fmt::format("export: cannot rename {} to {}: {}", temporary.string(), file.string(),
                                               error.message()));
    }
    summary.file = file;
    return summary;
}

std::optional<QueuePolicy> parse_queue_policy(std::string_view text) {
    if (text == "passed") return QueuePolicy::passed;
    if (text == "all") return QueuePolicy::all;
    if (text == "none") return QueuePolicy::none;
    return std::nullopt;
}

std::string_view queue_policy_name(QueuePolicy policy) {
    switch (policy) {
        case QueuePolicy::passed: return "passed";
        case QueuePolicy::all: return "all";
        case QueuePolicy::none: return "none";
    }
    return "passed";
}

nlohmann::json to_json(const ExportSummary& summary) {
    return {{"file", summary.file.string()},
            {"designs", summary.designs},
            {"evaluations", summary.evaluations},
            {"measurements", summary.measurements},
            {"running_skipped", summary.running_skipped}};
}

QueuedOrigin queued_origin(store::CampaignStore& store, std::int64_t design_id) {
    auto imported = store::RecordsStore(store.database()).find_imported_design(design_id);
    if (!imported || !imported->queued) {
        return {"user", "added by a user", "`npuopt add`: a person's kernel, raced against the champion"};
    }
    const std::string file = fs::path(imported->source_file).filename().string();
    return {"import", fmt::format("imported from {}", file),
            fmt::format("`npuopt import`: a design of another campaign{}, measured again here and raced against the "
                        "champion",
                        imported->origin_role.empty() ? "" : fmt::format(" (made by its {})", imported->origin_role))};
}

}  // namespace npuopt::campaign
