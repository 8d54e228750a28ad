// `npuopt add FILE --kernel K --campaign C`: a person's kernel recorded as a design of the
// campaign, queued, and raced at once by a run that evaluates only what users queued (the
// kernel's baseline first when it has none yet). From then on it is a design of the tree like
// any other: a champion when it wins, evidence for the rules when it fails.

#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "campaign/lock.hpp"
#include "campaign/workspace.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "store/tree_store.hpp"

namespace npuopt::cli {

std::string progress_line(const campaign::Progress& progress);  // cmd_run.cpp

int run_add(const GlobalOptions& global, const AddOptions& options) {
    std::ifstream in(options.file, std::ios::binary);
    if (!in) throw Error(ErrorKind::invalid_input, fmt::format("add: cannot read {}", options.file.string()));
    std::ostringstream source;
    source << in.rdbuf();
    if (source.str().find_first_not_of(" \t\r\n") == std::string::npos) {
        throw Error(ErrorKind::invalid_input, fmt::format("add: {} is empty", options.file.string()));
    }
    auto workspace = campaign::open_workspace(options.campaign_dir, global.knowledge_dir);
    const config::KernelSpec* spec = nullptr;
    std::vector<std::string> names;
    for (const auto& kernel : workspace.kernels.kernels) {
        names.push_back(kernel.name);
        if (kernel.name == options.kernel) spec = &kernel;
    }
    if (spec == nullptr) {
        throw Error(ErrorKind::invalid_input, fmt::format("add: unknown kernel '{}' (kernels of this campaign: {})",
                                                          options.kernel, fmt::join(names, ", ")));
    }
    std::int64_t design_id = 0;
    {
        auto lock = campaign::CampaignLock::acquire(workspace.dir);  // not while a campaign runs on it
        design_id = campaign::queue_user_design(*workspace.store, workspace.target.name, *spec, source.str(),
                                                options.file.string());
    }
    nlohmann::json out = {{"kernel", spec->name}, {"design_id", design_id}, {"file", options.file.string()}};
    if (options.queue_only) {
        out["queued"] = true;
        if (global.json) {
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << fmt::format("added {} as design {} of {}; the next `npuopt run` races it first\n",
                                     options.file.string(), design_id, spec->name);
        }
        return k_exit_ok;
    }
    campaign::RunOverrides overrides;
    overrides.only_queued = true;
    overrides.progress = [](const campaign::Progress& progress) { std::cerr << progress_line(progress) << '\n'; };
    const campaign::CampaignResult result = campaign::run_workspace(workspace, overrides);
    store::TreeStore tree(workspace.store->database());
    const auto edge = tree.find_edge(spec->name, design_id);
    if (!edge) {
        out["verdict"] = nullptr;
        out["message"] = result.message;
        if (global.json) {
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << fmt::format("design {} is queued but was not evaluated: {}\n", design_id, result.message);
        }
        return result.stop == campaign::StopReason::interrupted ? k_exit_interrupted : k_exit_failure;
    }
    out["verdict"] = edge->verdict;
    out["last_stage"] = edge->last_stage;
    out["reason"] = edge->final_reason;
    out["cycles"] = edge->cycles ? nlohmann::json(*edge->cycles) : nlohmann::json();
    out["speedup_over_champion"] = edge->speedup ? nlohmann::json(*edge->speedup) : nlohmann::json();
    if (global.json) {
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << fmt::format("design {} of {}: {} at {}{} — {}\n", design_id, spec->name, edge->verdict,
                                 edge->last_stage, edge->speedup ? fmt::format(" ({:.3f}x the champion)", *edge->speedup) : "",
                                 edge->final_reason);
    }
    if (edge->verdict == "accepted") return k_exit_ok;
    if (edge->verdict == "rejected" || edge->verdict == "inconclusive") return k_exit_not_faster;
    return k_exit_failure;
}

}  // namespace npuopt::cli
