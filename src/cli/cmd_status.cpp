// `npuopt status DIR`: what the campaign database holds, from the database alone.

#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "cli/commands.hpp"
#include "config/campaign_config.hpp"
#include "core/error.hpp"
#include "proc/slurm.hpp"
#include "store/campaign_store.hpp"
#include "store/records_store.hpp"

namespace npuopt::cli {
namespace {

/// What `npuopt import` brought into the campaign.
nlohmann::json imports_json(const store::ImportsSummary& imports) {
    return {{"count", imports.imports},
            {"designs", imports.designs},
            {"evaluations", imports.evaluations},
            {"evaluations_stale", imports.evaluations_stale},
            {"sources", imports.sources}};
}

std::string imports_line(const store::ImportsSummary& imports) {
    return fmt::format("imports    {}: {} designs, {} evaluations ({} stale) from {}\n", imports.imports,
                       imports.designs, imports.evaluations, imports.evaluations_stale, fmt::join(imports.sources, ", "));
}

/// The Slurm jobs in flight of the campaign's spool (none without `executor: slurm`).
nlohmann::json jobs_json(const std::vector<proc::JobInFlight>& jobs) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& job : jobs) {
        out.push_back({{"job_id", job.job_id}, {"call", job.call}, {"attempt", job.attempt},
                       {"age_secs", job.age_secs}, {"owner", job.owner}});
    }
    return out;
}

std::string jobs_line(const std::vector<proc::JobInFlight>& jobs) {
    std::vector<std::string> items;
    for (const auto& job : jobs) {
        const bool pool = job.call.rfind("pool-", 0) == 0;  // a job array of workers
        items.push_back(fmt::format("{} ({}{:.0f} s{})", job.job_id, pool ? "worker pool, " : "", job.age_secs,
                                    job.attempt > 1 ? fmt::format(", attempt {}", job.attempt) : std::string()));
    }
    return fmt::format("slurm jobs {} in flight: {}\n", jobs.size(), fmt::join(items, ", "));
}

}  // namespace

int run_status(const GlobalOptions& global, const StatusOptions& options) {
    std::filesystem::path db_file = options.dir / config::k_campaign_db_name;
    if (!std::filesystem::is_regular_file(db_file)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{} is not a campaign directory (no {}; create one with `npuopt init`)",
                                options.dir.string(), config::k_campaign_db_name));
    }
    store::Database::Options open_options;
    open_options.create = false;
    open_options.read_only = true;  // status never writes: it works on a read-only campaign, and beside a run
    auto store = store::CampaignStore::open(db_file, open_options);
    store::StoreSummary summary = store.summarize();
    const store::ImportsSummary imports = store::RecordsStore(store.database()).summarize();

    if (global.json) {
        nlohmann::json toolchains = nlohmann::json::array();
        for (const auto& version : summary.toolchain_versions) {
            toolchains.push_back({{"target", version.target}, {"name", version.name}, {"version", version.version},
                                  {"first_seen", version.first_seen}});
        }
        nlohmann::json out = {{"dir", std::filesystem::absolute(options.dir).lexically_normal().string()},
                              {"schema_version", summary.schema_version},
                              {"meta", summary.meta},
                              {"toolchain_versions", toolchains},
                              {"designs_by_kernel", summary.designs_by_kernel},
                              {"evaluations", summary.evaluations_by_verdict},
                              {"measurements", summary.measurements},
                              {"knowledge_entries", summary.knowledge_entries},
                              {"knowledge_entries_stale", summary.knowledge_entries_stale},
                              {"rules", summary.rules},
                              {"rules_stale", summary.rules_stale},
                              {"events", summary.events}};
        out["imports"] = imports_json(imports);
        if (summary.last_event) out["last_event"] = {{"ts", summary.last_event->ts}, {"kind", summary.last_event->kind}};
        out["campaign"] = campaign::to_json(campaign::campaign_status(store));
        out["slurm_jobs_in_flight"] = jobs_json(proc::jobs_in_flight(options.dir / "spool"));
        std::cout << out.dump(2) << '\n';
        return k_exit_ok;
    }

    auto meta = [&](const std::string& key) {
        auto found = summary.meta.find(key);
        return found == summary.meta.end() ? std::string("?") : found->second;
    };
    std::cout << fmt::format("campaign   {}\n", std::filesystem::absolute(options.dir).lexically_normal().string())
              << fmt::format("target     {}\n", meta("target"))
              << fmt::format("created    {} (npuopt {}, schema v{})\n", meta("created_at"), meta("npuopt_version"),
                             summary.schema_version);
    std::cout << "toolchains ";
    if (summary.toolchain_versions.empty()) std::cout << "none seen yet";
    for (std::size_t version_idx = 0; version_idx < summary.toolchain_versions.size(); ++version_idx) {
        const auto& version = summary.toolchain_versions[version_idx];
        std::cout << (version_idx ? ", " : "") << version.name << ' ' << version.version;
    }
    std::cout << "\ndesigns    ";
    if (summary.designs_by_kernel.empty()) std::cout << "none yet";
    bool first = true;
    for (const auto& [kernel, count] : summary.designs_by_kernel) {
        std::cout << (first ? "" : ", ") << kernel << ' ' << count;
        first = false;
    }
    std::cout << "\nevaluations ";
    if (summary.evaluations_by_verdict.empty()) std::cout << "none yet";
    first = true;
    for (const auto& [stage_verdict, count] : summary.evaluations_by_verdict) {
        std::cout << (first ? "" : ", ") << stage_verdict << ' ' << count;
        first = false;
    }
    std::cout << fmt::format("\nmeasurements {}\n", summary.measurements);
    if (imports.imports > 0) std::cout << imports_line(imports);
    if (const auto jobs = proc::jobs_in_flight(options.dir / "spool"); !jobs.empty()) std::cout << jobs_line(jobs);
    std::cout
              << fmt::format("knowledge  {} entries ({} stale), {} rules ({} stale)\n", summary.knowledge_entries,
                             summary.knowledge_entries_stale, summary.rules, summary.rules_stale)
              << fmt::format("events     {}", summary.events);
    if (summary.last_event) std::cout << fmt::format(" (last: {} {})", summary.last_event->ts, summary.last_event->kind);
    std::cout << '\n';
    std::cout << '\n' << campaign::render_status_text(campaign::campaign_status(store));
    return k_exit_ok;
}

}  // namespace npuopt::cli
