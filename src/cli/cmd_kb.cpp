// `npuopt kb build|search|show|export|refresh|diff --campaign DIR`: the campaign's knowledge base.
// Every action reads the toolchain's version first and refreshes the knowledge base when it changed.

#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/lock.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/refresh.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json refresh_json(const knowledge::RefreshReport& report) {
    return {{"old_version", report.old_version},
            {"new_version", report.new_version},
            {"changed", report.changed},
            {"marked_stale", report.marked_stale},
            {"sections", report.ingest.sections},
            {"sections_added", report.ingest.sections_added},
            {"sections_removed", report.ingest.sections_removed},
            {"summaries_written", report.ingest.summaries_written},
            {"summaries_reused", report.ingest.summaries_reused},
            {"claims_kept", report.ingest.claims_kept},
            {"claims_dropped", report.ingest.claims_dropped},
            {"rules_revalidated", report.rules_revalidated},
            {"rules_kept", report.rules_kept},
            {"rules_retired", report.rules_retired},
            {"rules_unverified", report.rules_unverified},
            {"remeasured", report.remeasured},
            {"diff", report.diff.to_json()}};
}

std::string refresh_text(const knowledge::RefreshReport& report) {
    if (!report.changed) return fmt::format("knowledge base is current (toolchain {})\n", report.new_version);
    return fmt::format(
        "knowledge base {} → {}: {} sections ({} new, {} gone), {} summaries written ({} reused), claims {} kept / {} "
        "dropped; rules: {} re-validated, {} kept, {} retired, {} unverified; {} entries marked stale; {}\n",
        report.old_version.empty() ? "(empty)" : report.old_version, report.new_version, report.ingest.sections,
        report.ingest.sections_added, report.ingest.sections_removed, report.ingest.summaries_written,
        report.ingest.summaries_reused, report.ingest.claims_kept, report.ingest.claims_dropped,
        report.rules_revalidated, report.rules_kept, report.rules_retired, report.rules_unverified,
        report.marked_stale, report.remeasured ? "hardware model re-measured" : "hardware model not re-measured");
}

void emit(const std::string& text, const std::optional<fs::path>& out) {
    if (!out) {
        std::cout << text;
        return;
    }
    std::ofstream stream(*out, std::ios::binary | std::ios::trunc);
    stream << text;
    if (!stream) throw Error(ErrorKind::io, fmt::format("cannot write {}", out->string()));
    std::cerr << fmt::format("wrote {}\n", out->string());
}

}  // namespace

int run_kb(const GlobalOptions& global, const KbOptions& options) {
    if (options.format != "md" && options.format != "json") {
        throw Error(ErrorKind::invalid_input, fmt::format("kb: --format must be md or json, not '{}'", options.format));
    }
    if (options.action == "search" && options.query.empty()) {
        throw Error(ErrorKind::invalid_input, "kb search: a QUERY is required (e.g. `npuopt kb search \"DMA packet\"`)");
    }
    if (options.action == "diff" && (options.old_version.empty() || options.new_version.empty())) {
        throw Error(ErrorKind::invalid_input, "kb diff: two toolchain versions are required (`npuopt kb diff OLD NEW`)");
    }
    auto workspace = campaign::open_workspace(options.campaign_dir, global.knowledge_dir);
    // build and refresh rewrite the knowledge base: never beside a run of the same campaign
    std::optional<campaign::CampaignLock> lock;
    if (options.action == "build" || options.action == "refresh") {
        lock.emplace(campaign::CampaignLock::acquire(workspace.dir, "npuopt kb " + options.action));
    }

    campaign::KbBuildOptions build_options;
    build_options.quick = options.quick;
    build_options.force = options.action == "build";
    if (!global.json) build_options.on_progress = [](const std::string& line) { std::cerr << line << '\n'; };

    // Every action first brings the knowledge base up to the toolchain's version.
    std::optional<knowledge::RefreshReport> refresh_report;
    try {
        refresh_report = campaign::build_knowledge(workspace, build_options);
    } catch (const Error& error) {
        if (error.kind() != ErrorKind::toolchain || options.action == "build" || options.action == "refresh") throw;
        std::cerr << fmt::format("npuopt: warning: knowledge base not refreshed: {}\n", error.what());
    }

    auto kb = knowledge::KnowledgeBase::for_target(workspace.store->database(), workspace.target);
    if (options.action == "build" || options.action == "refresh") {
        if (global.json) {
            std::cout << refresh_json(*refresh_report).dump(2) << '\n';
        } else {
            std::cout << refresh_text(*refresh_report);
            if (auto model = workspace.hardware_model()) {
                std::cout << fmt::format("hardware model ({} {}): {} parameters\n", model->target,
                                         model->toolchain_version, model->params.size());
                for (const auto& param : model->params) {
                    std::cout << fmt::format("  {:<32} {:>12.4g} {:<12} [{:.4g}, {:.4g}]  {}\n", param.name,
                                             param.value, param.unit, param.ci95_lower, param.ci95_upper, param.source);
                }
                for (const auto& missing : model->missing) std::cout << "  missing: " << missing << '\n';
            }
            std::cout << fmt::format("rules: {}\n", kb.rules().list().size());
        }
        return k_exit_ok;
    }
    if (options.action == "search") {
        auto hits = kb.search(options.query, options.limit);
        if (global.json) {
            nlohmann::json out = nlohmann::json::array();
            for (const auto& hit : hits) {
                out.push_back({{"kind", hit.kind}, {"id", hit.id}, {"title", hit.title}, {"snippet", hit.snippet},
                               {"score", hit.score}, {"stale", hit.stale}, {"toolchain_version", hit.toolchain_version}});
            }
            std::cout << out.dump(2) << '\n';
        } else {
            if (hits.empty()) std::cout << fmt::format("no match for '{}'\n", options.query);
            for (const auto& hit : hits) {
                std::cout << fmt::format("{:7.2f}  {:<8} {}{}\n         {}\n", hit.score, hit.kind, hit.title,
                                         hit.stale ? " (stale)" : "", hit.snippet);
            }
        }
        return k_exit_ok;
    }
    if (options.action == "show") {
        const bool as_json = options.format == "json" || global.json;
        emit(as_json ? kb.export_json().dump(2) + "\n" : kb.export_markdown(), options.out);
        return k_exit_ok;
    }
    if (options.action == "export") {  // a file, into the campaign directory by default
        const bool as_json = options.format == "json" || global.json;
        const fs::path out =
            options.out.value_or(options.campaign_dir / (as_json ? "knowledge.json" : "knowledge.md"));
        emit(as_json ? kb.export_json().dump(2) + "\n" : kb.export_markdown(), out);
        if (global.json) std::cout << nlohmann::json{{"file", out.string()}, {"format", as_json ? "json" : "md"}}.dump(2) << '\n';
        return k_exit_ok;
    }
    if (options.action == "diff") {
        auto difference = knowledge::diff(kb, options.old_version, options.new_version);
        emit(global.json || options.format == "json" ? difference.to_json().dump(2) + "\n" : difference.to_markdown(),
             options.out);
        return k_exit_ok;
    }
    throw Error(ErrorKind::invalid_input, fmt::format("kb: unknown action '{}'", options.action));
}

}  // namespace npuopt::cli
