#pragma once
// A kernel's design tree as read back from the store: nodes (designs with how their evaluation
// ended), edges (the role and move that produced them, with the reason) and the champion path.
// Renders as indented text (`npuopt tree show`) and exports JSON and Graphviz DOT (SVG through
// the `dot` binary when it is installed) for `npuopt tree export`.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/campaign_store.hpp"
#include "store/tree_store.hpp"

namespace npuopt::search {

/// One node of a design tree.
struct TreeNode {
    store::TreeEdgeRecord edge;
    store::DesignRecord design;
    std::vector<std::size_t> children;  ///< indices into DesignTree::nodes
    bool on_champion_path = false;
    bool is_champion = false;
};

/// A kernel's tree.
struct DesignTree {
    std::string kernel;
    std::vector<TreeNode> nodes;           ///< in step order
    std::vector<std::size_t> roots;
    std::vector<store::ChampionRecord> champion_path;  ///< active links, oldest first
    std::optional<double> baseline_cycles;
    std::optional<double> champion_cycles;
};

/// Read `kernel`'s tree from the campaign database.
DesignTree load_tree(store::CampaignStore& store, const std::string& kernel);

/// The tree as indented text: one line per design (step, design, role: move, verdict, cycles),
/// champion path marked with '*'; `with_reasons` adds the reason under each line.
std::string render_tree_text(store::CampaignStore& store, const std::string& kernel, bool with_reasons = false);
std::string render_tree_text(const DesignTree& tree, bool with_reasons = false);

/// {kernel, baseline_cycles, champion_cycles, champion_path[], nodes[{step, design_id, hash, template,
/// params, parent_design_id, role, move, reason, verdict, last_stage, final_reason, cycles,
/// predicted_cycles, speedup, device_runs, device_secs, on_champion_path}]}
nlohmann::json tree_json(const DesignTree& tree);
/// Graphviz DOT of the tree (champion path bold green, rejected grey, failed red).
std::string tree_dot(const DesignTree& tree);

/// What an export wrote.
struct TreeExport {
    std::vector<std::filesystem::path> files;
    std::string svg_note;  ///< why no SVG was written ("" when it was)
};

/// Write <kernel>.json and <kernel>.dot for each kernel (all with a tree when `kernels` is empty)
/// into `out_dir`, and <kernel>.svg when `dot` is on PATH.
TreeExport export_trees(store::CampaignStore& store, const std::filesystem::path& out_dir,
                        const std::vector<std::string>& kernels = {});

}  // namespace npuopt::search
