// `npuopt export` / `npuopt import`: portable tuning records between campaigns and machines
// (campaign/records_io.hpp). Flags and output here; the records' logic in campaign/.

#include "cli/records_cli.hpp"

#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/lock.hpp"
#include "campaign/records_io.hpp"
#include "campaign/workspace.hpp"
#include "cli/suggest.hpp"
#include "core/error.hpp"

namespace npuopt::cli {
namespace {

struct ExportCliOptions {
    std::string dir;
    std::string campaign;
    std::string out;
    std::string kernel;
    bool force = false;
};

struct ImportCliOptions {
    std::string file;
    std::string dir;
    std::string campaign;
    std::string queue = "passed";
    bool dry_run = false;
};

int run_export(const GlobalOptions& global, const ExportCliOptions& options) {
    const std::filesystem::path dir = *resolve_campaign_dir("export", options.dir, options.campaign, true);
    auto workspace = campaign::open_workspace(dir, global.knowledge_dir);
    const campaign::CampaignFacts facts = campaign::campaign_facts(workspace);
    campaign::ExportOptions export_options;
    export_options.kernel = options.kernel;
    const campaign::ExportSummary summary =
        campaign::export_records_file(*workspace.store, facts, export_options, options.out, options.force);
    if (global.json) {
        nlohmann::json out = campaign::to_json(summary);
        out["campaign"] = facts.name;
        out["kernel"] = options.kernel.empty() ? nlohmann::json() : nlohmann::json(options.kernel);
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << fmt::format("exported {} designs and {} evaluations ({} measurements) of campaign {}{} to {}{}\n",
                                 summary.designs, summary.evaluations, summary.measurements, facts.name,
                                 options.kernel.empty() ? "" : " (kernel " + options.kernel + ")", options.out,
                                 summary.running_skipped > 0
                                     ? fmt::format("; {} evaluations still running were left out", summary.running_skipped)
                                     : "");
    }
    return k_exit_ok;
}

int run_import(const GlobalOptions& global, const ImportCliOptions& options) {
    const std::filesystem::path dir = *resolve_campaign_dir("import", options.dir, options.campaign, true);
    campaign::ImportOptions import_options;
    import_options.queue = campaign::parse_queue_policy(options.queue).value_or(campaign::QueuePolicy::passed);
    import_options.dry_run = options.dry_run;
    auto workspace = campaign::open_workspace(dir, global.knowledge_dir);
    const campaign::CampaignFacts facts = campaign::campaign_facts(workspace);
    std::optional<campaign::CampaignLock> lock;  // not while a campaign runs on it (a dry run writes nothing)
    if (!options.dry_run) lock.emplace(campaign::CampaignLock::acquire(workspace.dir, "npuopt import"));
    const campaign::ImportReport report =
        campaign::import_records_file(*workspace.store, facts, options.file, import_options);
    if (global.json) {
        std::cout << campaign::to_json(report).dump(2) << '\n';
    } else {
        std::cout << campaign::render_import_text(report);
    }
    return k_exit_ok;
}

}  // namespace

RegisteredCommand register_export_command(CLI::App& app) {
    auto options = std::make_shared<ExportCliOptions>();
    auto* command = app.add_subcommand(
        "export", "Write a campaign's designs and measurements to a portable records file (JSON Lines), for "
                  "`npuopt import` into another campaign, here or on another machine");
    command->add_option("dir", options->dir, "Campaign directory");
    command->add_option("--campaign", options->campaign, "The same as DIR");
    command->add_option("--out", options->out, "The records file to write (JSON Lines)")->required();
    command->add_option("--kernel", options->kernel, "Only this kernel's designs and measurements");
    command->add_flag("--force", options->force, "Overwrite --out when it exists");
    return {command, [options](const GlobalOptions& global) { return run_export(global, *options); }};
}

RegisteredCommand register_import_command(CLI::App& app) {
    auto options = std::make_shared<ImportCliOptions>();
    auto* command = app.add_subcommand(
        "import", "Read a records file of `npuopt export` into a campaign: designs deduplicated by content hash, "
                  "measurements by fingerprint (importing twice adds nothing), those of another toolchain version, "
                  "bench configuration or shape kept but marked stale; the designs that passed are queued and "
                  "measured again by the next `npuopt run`. One transaction: a broken file changes nothing");
    command->add_option("file", options->file, "The records file (from `npuopt export`)")->required();
    command->add_option("dir", options->dir, "Campaign directory to import into (or --campaign)");
    command->add_option("--campaign", options->campaign, "Campaign directory to import into");
    command->add_option("--queue", options->queue,
                        "Which imported designs the next run measures again: passed (those that passed correctness "
                        "where they came from), all, none")
        ->check(CLI::IsMember({"passed", "all", "none"}))
        ->capture_default_str();
    command->add_flag("--dry-run", options->dry_run, "Report what the import would do; write nothing");
    return {command, [options](const GlobalOptions& global) { return run_import(global, *options); }};
}

}  // namespace npuopt::cli
