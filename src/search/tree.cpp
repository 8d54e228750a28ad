#include "search/tree.hpp"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"
#include "proc/subprocess.hpp"

namespace npuopt::search {

namespace {

constexpr std::size_t k_dot_move_chars = 32;  ///< a longer move is cut in a tree picture's node

std::string cycles_text(const std::optional<double>& cycles) {
    return cycles ? fmt::format("{:.0f} cycles", *cycles) : std::string("not measured");
}

std::string design_label(const store::DesignRecord& design) {
    if (design.params_json.empty() || design.params_json == "{}") return design.template_name;
    std::string params;
    auto json = nlohmann::json::parse(design.params_json, nullptr, false);
    if (json.is_object()) {
        for (const auto& [name, value] : json.items()) {
            params += fmt::format("{}{}={}", params.empty() ? "" : ",", name, value.dump());
        }
    }
    return fmt::format("{}{{{}}}", design.template_name, params);
}

std::string dot_escape(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

void write_file(const std::filesystem::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write", file.string()));
}

}  // namespace

DesignTree load_tree(store::CampaignStore& store, const std::string& kernel) {
    store::TreeStore trees(store.database());
    DesignTree tree;
    tree.kernel = kernel;
    tree.champion_path = trees.champion_path(kernel);
    std::set<std::int64_t> path_designs;
    for (const auto& link : tree.champion_path) path_designs.insert(link.design_id);
    std::map<std::int64_t, std::size_t> node_of_design;
    for (auto& edge : trees.list_edges(kernel)) {
        TreeNode node;
        node.design = store.find_design(edge.design_id).value_or(store::DesignRecord{});
        node.edge = std::move(edge);
        node.on_champion_path = path_designs.count(node.edge.design_id) > 0;
        node.is_champion = !tree.champion_path.empty() && tree.champion_path.back().design_id == node.edge.design_id;
        node_of_design[node.edge.design_id] = tree.nodes.size();
        tree.nodes.push_back(std::move(node));
    }
    for (std::size_t node_idx = 0; node_idx < tree.nodes.size(); ++node_idx) {
        const auto& parent = tree.nodes[node_idx].edge.parent_design_id;
        auto found = parent ? node_of_design.find(*parent) : node_of_design.end();
        if (found == node_of_design.end() || found->second == node_idx) {
            tree.roots.push_back(node_idx);
        } else {
            tree.nodes[found->second].children.push_back(node_idx);
        }
    }
    if (!tree.champion_path.empty()) {
        tree.baseline_cycles = tree.champion_path.front().cycles;
        tree.champion_cycles = tree.champion_path.back().cycles;
    }
    return tree;
}

std::string render_tree_text(store::CampaignStore& store, const std::string& kernel, bool with_reasons) {
    return render_tree_text(load_tree(store, kernel), with_reasons);
}

std::string render_tree_text(const DesignTree& tree, bool with_reasons) {
    std::string out = fmt::format("{}: {} designs", tree.kernel, tree.nodes.size());
    if (tree.baseline_cycles && tree.champion_cycles) {
        out += fmt::format(", baseline {:.0f} cycles, champion {:.0f} cycles ({:.2f}x), {} accepted changes",
                           *tree.baseline_cycles, *tree.champion_cycles, *tree.baseline_cycles / *tree.champion_cycles,
                           tree.champion_path.empty() ? 0 : tree.champion_path.size() - 1);
    }
    out += "\n";
    if (tree.nodes.empty()) return out + "  (no designs evaluated yet)\n";
    std::function<void(std::size_t, const std::string&, bool, bool)> render = [&](std::size_t node_idx,
                                                                                 const std::string& prefix, bool last,
                                                                                 bool root) {
        const TreeNode& node = tree.nodes[node_idx];
        std::string branch = root ? "" : (last ? "`- " : "|- ");
        std::string mark = node.is_champion ? "** " : (node.on_champion_path ? "*  " : "   ");
        std::string speedup = node.edge.speedup ? fmt::format(" x{:.3f}", *node.edge.speedup) : "";
        out += fmt::format("{}{}{}#{} {}  {}: {}  [{}{}] {}{}\n", mark, prefix, branch, node.edge.step,
                           design_label(node.design), node.edge.role, node.edge.move.empty() ? "-" : node.edge.move,
                           node.edge.verdict, node.edge.last_stage.empty() ? "" : " at " + node.edge.last_stage,
                           cycles_text(node.edge.cycles), speedup);
        std::string child_prefix = prefix + (root ? "" : (last ? "   " : "|  "));
        if (with_reasons) {
            if (!node.edge.reason.empty()) out += fmt::format("   {}   why: {}\n", child_prefix, node.edge.reason);
            if (!node.edge.final_reason.empty()) out += fmt::format("   {}   outcome: {}\n", child_prefix, node.edge.final_reason);
        }
        for (std::size_t child_idx = 0; child_idx < node.children.size(); ++child_idx) {
            render(node.children[child_idx], child_prefix, child_idx + 1 == node.children.size(), false);
        }
    };
    for (std::size_t root_idx : tree.roots) render(root_idx, "", true, true);
    out += "(** champion, * champion path)\n";
    return out;
}

nlohmann::json tree_json(const DesignTree& tree) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& node : tree.nodes) {
        auto optional_number = [](const std::optional<double>& value) {
            return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
        };
        nlohmann::json params = nlohmann::json::parse(node.design.params_json, nullptr, false);
        nlohmann::json quantities = nlohmann::json::parse(node.edge.quantities_json, nullptr, false);
        nodes.push_back({{"step", node.edge.step},
                         {"design_id", node.edge.design_id},
                         {"content_hash", node.design.content_hash},
                         {"template", node.design.template_name},
                         {"params", params.is_discarded() ? nlohmann::json::object() : params},
                         {"quantities", quantities.is_discarded() ? nlohmann::json::object() : quantities},
                         {"parent_design_id", node.edge.parent_design_id ? nlohmann::json(*node.edge.parent_design_id)
                                                                         : nlohmann::json(nullptr)},
                         {"role", node.edge.role},
                         {"move", node.edge.move},
                         {"reason", node.edge.reason},
                         {"verdict", node.edge.verdict},
                         {"last_stage", node.edge.last_stage},
                         {"final_reason", node.edge.final_reason},
                         {"cycles", optional_number(node.edge.cycles)},
                         {"predicted_cycles", optional_number(node.edge.predicted_cycles)},
                         {"speedup", optional_number(node.edge.speedup)},
                         {"device_runs", node.edge.device_runs},
                         {"device_secs", node.edge.device_secs},
                         {"on_champion_path", node.on_champion_path},
                         {"champion", node.is_champion}});
    }
    nlohmann::json path = nlohmann::json::array();
    for (const auto& link : tree.champion_path) {
        path.push_back({{"design_id", link.design_id}, {"step", link.step}, {"cycles", link.cycles}, {"reason", link.reason}});
    }
    return {{"kernel", tree.kernel},
            {"baseline_cycles", tree.baseline_cycles ? nlohmann::json(*tree.baseline_cycles) : nlohmann::json(nullptr)},
            {"champion_cycles", tree.champion_cycles ? nlohmann::json(*tree.champion_cycles) : nlohmann::json(nullptr)},
            {"champion_path", path},
            {"nodes", nodes}};
}

std::string tree_dot(const DesignTree& tree) {
    std::string out = fmt::format("digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n"
                                  "  label=\"{} design tree\";\n",
                                  dot_escape(tree.kernel), dot_escape(tree.kernel));
    for (const auto& node : tree.nodes) {
        std::string colour = node.on_champion_path ? "darkgreen"
                             : node.edge.verdict == "rejected" || node.edge.verdict == "inconclusive" ? "grey50"
                             : node.edge.verdict == "accepted" ? "darkgreen"
                                                                : "red3";
        // Compact: the move and the cycles (the verdict where nothing was measured); the design's
        // full parameters, role and verdict go into the tooltip (an SVG <title>).
        std::string move = node.edge.move.empty() ? node.edge.role : node.edge.move;
        if (move.size() > k_dot_move_chars) move = move.substr(0, k_dot_move_chars - 3) + "...";
        std::string measured = node.edge.cycles ? fmt::format("{:.0f} cyc", *node.edge.cycles) : node.edge.verdict;
        std::string label = fmt::format("#{} {}\\n{}", node.edge.step, dot_escape(move), dot_escape(measured));
        std::string tooltip = fmt::format("design {}: {} ({}: {}), {}{}", node.edge.design_id,
                                          design_label(node.design), node.edge.role, node.edge.move, node.edge.verdict,
                                          node.edge.last_stage.empty() ? "" : " at " + node.edge.last_stage);
        out += fmt::format("  d{} [label=\"{}\", tooltip=\"{}\", color={}{}];\n", node.edge.design_id, label,
                           dot_escape(tooltip), colour, node.on_champion_path ? ", penwidth=2.5, style=bold" : "");
    }
    for (const auto& node : tree.nodes) {
        if (!node.edge.parent_design_id || *node.edge.parent_design_id == node.edge.design_id) continue;
        out += fmt::format(
            "  d{} -> d{} [label=\"{}\", fontsize=8{}];\n", *node.edge.parent_design_id, node.edge.design_id,
            dot_escape(node.edge.role),
            node.on_champion_path && node.edge.verdict == "accepted" ? ", color=darkgreen, penwidth=2" : "");
    }
    return out + "}\n";
}

TreeExport export_trees(store::CampaignStore& store, const std::filesystem::path& out_dir,
                        const std::vector<std::string>& kernels) {
    TreeExport result;
    std::filesystem::create_directories(out_dir);
    std::vector<std::string> names = kernels;
    if (names.empty()) names = store::TreeStore(store.database()).list_kernels();
    const char* path_env = std::getenv("PATH");
    auto dot_binary = proc::find_executable("dot", path_env ? path_env : "/usr/bin:/bin");
    if (!dot_binary) result.svg_note = "no SVG: the Graphviz `dot` binary is not on PATH";
    for (const auto& kernel : names) {
        DesignTree tree = load_tree(store, kernel);
        auto json_file = out_dir / (kernel + ".json");
        write_file(json_file, tree_json(tree).dump(2) + "\n");
        result.files.push_back(json_file);
        auto dot_file = out_dir / (kernel + ".dot");
        write_file(dot_file, tree_dot(tree));
        result.files.push_back(dot_file);
        if (!dot_binary) continue;
        auto svg_file = out_dir / (kernel + ".svg");
        proc::Command command;
        command.argv = {dot_binary->string(), "-Tsvg", std::filesystem::absolute(dot_file).string(), "-o",
                        std::filesystem::absolute(svg_file).string()};
        command.sandbox.enabled = false;
        command.limits.timeout_secs = 60.0;
        command.cwd = std::filesystem::absolute(out_dir);
        proc::Result ran = proc::run(command);
        if (ran.ok()) {
            result.files.push_back(svg_file);
        } else {
            result.svg_note = fmt::format("no SVG for {}: dot failed ({})", kernel,
                                          ran.error ? *ran.error : ran.stderr_text.substr(0, 200));
        }
    }
    return result;
}

}  // namespace npuopt::search
