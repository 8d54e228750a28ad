#include "campaign/kb_figures.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/microbench_config.hpp"
#include "core/error.hpp"

namespace npuopt::campaign {

namespace fs = std::filesystem;

KbFigures kb_figures(Workspace& workspace) {
    KbFigures figures;
    const std::string& target = workspace.target.name;
    const auto entries = workspace.store->list_knowledge(target, true);  // read once
    std::optional<store::KnowledgeEntry> newest;
    for (const auto& entry : entries) {
        if (entry.kind == "hardware_model" && (!newest || entry.id > newest->id)) newest = entry;
    }
    if (!newest) {
        figures.note = fmt::format("no knowledge base built: `npuopt kb build --campaign {}` fits the hardware model",
                                   workspace.dir.string());
        return figures;
    }
    const nlohmann::json json = nlohmann::json::parse(newest->text, nullptr, false);
    if (!json.is_object()) {
        figures.note = "the recorded hardware model cannot be read (damaged JSON)";
        return figures;
    }
    knowledge::HardwareModel model = knowledge::hardware_model_from_json(json);
    figures.built = true;
    figures.toolchain_version = model.toolchain_version;
    figures.params = model.params;
    figures.missing = model.missing;
    if (!newest->toolchain_version_id) {
        figures.note = "the hardware model has no toolchain version: its measurements cannot be matched";
        return figures;
    }
    auto run = knowledge::microbench_run_of(entries, target, *newest->toolchain_version_id);
    if (!run) {
        figures.note = "no microbenchmark measurements recorded with the hardware model";
        return figures;
    }
    const fs::path suite_file = workspace.target.microbench_dir / "suite.yaml";
    if (!fs::is_regular_file(suite_file)) {
        figures.note = fmt::format("no microbenchmark suite at {}: the fits cannot be drawn", suite_file.string());
        return figures;
    }
    try {
        const auto suite = config::load_microbench_suite(suite_file);
        figures.plots = knowledge::fit_plots(*run, workspace.target, suite, model);
    } catch (const Error& error) {
        figures.note = fmt::format("the microbenchmark suite cannot be read: {}", error.what());
        return figures;
    }
    if (figures.plots.empty()) figures.note = "no model entry of the suite was fitted from measurements";
    return figures;
}

}  // namespace npuopt::campaign
