// `npuopt run DIR` (live progress on stderr; SIGINT/SIGTERM stop cleanly, exit 3) and
// `npuopt tree show KERNEL | export --campaign DIR`.

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "cli/campaign_output.hpp"
#include "cli/commands.hpp"
#include "config/campaign_config.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "campaign/workspace.hpp"
#include "search/tree.hpp"
#include "store/tree_store.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::string progress_line(const campaign::Progress& progress) {
    return fmt::format("[step {}] {} {}:{} {} | champion {} cyc | {:.3f}x{} | {:.0f}% of speed of light | device runs "
                       "{}/{} | wall {} of {} | ETA {}",
                       progress.step, progress.kernel, progress.role, progress.design.substr(0, 32), progress.verdict,
                       progress.champion_cycles ? fmt::format("{:.0f}", *progress.champion_cycles) : std::string("-"),
                       progress.speedup, progress.reference == "baseline" ? "" : " (vs first correct design)",
                       progress.sol_fraction * 100.0, progress.device_runs_used, progress.device_runs_budget,
                       duration_text(progress.wall_secs_used), duration_text(progress.wall_secs_budget),
                       progress.eta_secs ? duration_text(*progress.eta_secs) : "-");
}

nlohmann::json progress_json(const campaign::Progress& progress) {
    auto optional = [](const std::optional<double>& value) { return value ? nlohmann::json(*value) : nlohmann::json(); };
    return {{"event", "progress"},
            {"step", progress.step},
            {"kernel", progress.kernel},
            {"role", progress.role},
            {"design", progress.design},
            {"verdict", progress.verdict},
            {"champion_cycles", optional(progress.champion_cycles)},
            {"reference_cycles", optional(progress.baseline_cycles)},
            {"reference", progress.reference},
            {"speedup", progress.speedup},
            {"fraction_of_speed_of_light", progress.sol_fraction},
            {"device_runs_used", progress.device_runs_used},
            {"device_runs_budget", progress.device_runs_budget},
            {"wall_secs_used", progress.wall_secs_used},
            {"wall_secs_budget", progress.wall_secs_budget},
            {"eta_secs", optional(progress.eta_secs)}};
}

nlohmann::json result_json(const campaign::CampaignResult& result) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& kernel : result.kernels) {
        kernels.push_back({{"kernel", kernel.kernel},
                           {"status", kernel.status},
                           {"reason", kernel.reason},
                           {"shape", kernel.shape},
                           {"reference", kernel.reference},
                           {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles) : nullptr},
                           {"champion_cycles", kernel.champion_cycles ? nlohmann::json(*kernel.champion_cycles) : nullptr},
                           {"champion", kernel.champion},
                           {"designs", kernel.designs}});
    }
    return {{"stop", campaign::stop_reason_name(result.stop)},
            {"message", result.message},
            {"steps_this_run", result.steps_this_run},
            {"device_runs_used", result.device_runs_used},
            {"kernels", kernels}};
}

campaign::CampaignResult run_with_progress(campaign::Workspace& workspace, const RunOptions& options, bool json) {
    campaign::RunOverrides overrides;
    overrides.budget_minutes = options.budget_minutes;
    overrides.device_runs = options.device_runs;
    overrides.max_steps = options.max_steps;
    overrides.wall_reserve_secs = options.wall_reserve_secs;
    if (options.stream_json) {
        // One object per line on stdout, flushed as it happens (cargo's --message-format json).
        overrides.progress = [](const campaign::Progress& progress) {
            std::cout << progress_json(progress).dump() << std::endl;
        };
        overrides.on_event = [](const std::string& kind, const nlohmann::json& payload) {
            nlohmann::json line = {{"event", kind}};
            if (payload.is_object()) {
                for (const auto& [key, value] : payload.items()) {
                    if (key != "event") line[key] = value;
                }
            }
            std::cout << line.dump() << std::endl;
        };
        auto result = campaign::run_workspace(workspace, overrides);
        nlohmann::json finished = result_json(result);
        finished["event"] = "finished";
        std::cout << finished.dump() << std::endl;
        return result;
    }
    const bool live = !json && ::isatty(STDERR_FILENO);
    overrides.progress = [live](const campaign::Progress& progress) {
        if (live) std::cerr << "\r\033[K" << progress_line(progress) << std::flush;
        else std::cerr << progress_line(progress) << '\n';
    };
    auto result = campaign::run_workspace(workspace, overrides);
    if (live) std::cerr << '\n';
    return result;
}

std::string outcome_text(const campaign::CampaignResult& result) {
    std::string text = fmt::format("stopped: {} ({} steps this run, {} device runs){}\n",
                                   campaign::stop_reason_name(result.stop), result.steps_this_run,
                                   result.device_runs_used, result.message.empty() ? "" : " — " + result.message);
    for (const auto& kernel : result.kernels) {
        double speedup = kernel.baseline_cycles && kernel.champion_cycles && *kernel.champion_cycles > 0
                             ? *kernel.baseline_cycles / *kernel.champion_cycles
                             : 0.0;
        const bool is_baseline = kernel.reference == "baseline";
        text += fmt::format("  {:<20} {:<9} shape {} {} {} champion {} ({:.3f}x) {} designs{}\n", kernel.kernel,
                            kernel.status, kernel.shape.empty() ? "-" : kernel.shape,
                            is_baseline ? "baseline" : "reference",
                            kernel.baseline_cycles ? fmt::format("{:.0f}", *kernel.baseline_cycles) : "-",
                            kernel.champion_cycles ? fmt::format("{:.0f}", *kernel.champion_cycles) : "-", speedup,
                            kernel.designs, kernel.reason.empty() ? "" : " — " + kernel.reason);
        if (!is_baseline) text += fmt::format("  {:<20} reference: {}\n", "", kernel.reference);
    }
    return text;
}

int run_run(const GlobalOptions& global, const RunOptions& options) {
    if (options.budget_minutes && *options.budget_minutes <= 0) {
        throw Error(ErrorKind::invalid_input, "run: --budget-minutes must be positive");
    }
    if (options.device_runs && *options.device_runs <= 0) {
        throw Error(ErrorKind::invalid_input, "run: --device-runs must be positive");
    }
    auto workspace = campaign::open_workspace(options.dir, global.knowledge_dir);
    // As doctor does: a missing toolchain is named with where it was looked for, before anything runs.
    std::string why_missing;
    if (!workspace.toolchain->resolve_bin(&why_missing)) {
        throw Error(ErrorKind::toolchain,
                    fmt::format("run: {}; nothing was run (`npuopt doctor --campaign {}` says how to fix it)",
                                why_missing, options.dir.string()));
    }
    auto result = run_with_progress(workspace, options, global.json);
    if (options.stream_json) {
        // the stream ended with {"event":"finished",...}
    } else if (global.json) {
        std::cout << result_json(result).dump(2) << '\n';
    } else {
        std::cout << outcome_text(result);
    }
    if (result.stop == campaign::StopReason::interrupted) return k_exit_interrupted;
    if (result.stop == campaign::StopReason::all_failed || result.stop == campaign::StopReason::toolchain_missing) {
        return k_exit_failure;
    }
    return k_exit_ok;
}

int run_tree(const GlobalOptions& global, const TreeOptions& options) {
    if (options.action == "show" && options.kernel.empty()) {
        throw Error(ErrorKind::invalid_input, "tree show: a KERNEL is required (`npuopt tree show KERNEL --campaign DIR`)");
    }
    fs::path db_file = options.campaign_dir / config::k_campaign_db_name;
    if (!fs::is_regular_file(db_file)) {
        throw Error(ErrorKind::invalid_input, fmt::format("{} is not a campaign directory (no {})",
                                                          options.campaign_dir.string(), config::k_campaign_db_name));
    }
    store::Database::Options open_options;
    open_options.create = false;
    auto store = store::CampaignStore::open(db_file, open_options);
    if (options.action == "show") {
        store::TreeStore trees(store.database());
        auto kernels = trees.list_kernels();
        if (std::find(kernels.begin(), kernels.end(), options.kernel) == kernels.end()) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("kernel '{}' has no design tree in {} (kernels with a tree: {})", options.kernel,
                                    options.campaign_dir.string(),
                                    kernels.empty() ? std::string("none yet") : fmt::format("{}", fmt::join(kernels, ", "))));
        }
        auto tree = search::load_tree(store, options.kernel);
        if (global.json) std::cout << search::tree_json(tree).dump(2) << '\n';
        else std::cout << search::render_tree_text(tree, options.reasons);
        return k_exit_ok;
    }
    fs::path out_dir = options.out.value_or(options.campaign_dir / "trees");  // into the campaign by default
    std::vector<std::string> kernels;
    if (!options.kernel.empty()) kernels.push_back(options.kernel);
    auto exported = search::export_trees(store, out_dir, kernels);
    if (global.json) {
        nlohmann::json files = nlohmann::json::array();
        for (const auto& file : exported.files) files.push_back(file.string());
        std::cout << nlohmann::json{{"files", files}, {"svg_note", exported.svg_note}}.dump(2) << '\n';
    } else {
        for (const auto& file : exported.files) std::cout << "wrote " << file.string() << '\n';
        if (exported.files.empty()) std::cout << "no design trees yet (run the campaign first)\n";
        if (!exported.svg_note.empty()) std::cout << "no SVG: " << exported.svg_note << '\n';
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
