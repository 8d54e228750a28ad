// `bench refresh`: a campaign that lives through a toolchain update against one that starts on
// the new toolchain. On npu-sim, with no LLM:
//
//   switched  N device runs per kernel on npuc 1.0, then npuc 1.1 put in campaign.yaml
//             (toolchain.bin) and N more: the knowledge base is refreshed, fix-its become
//             rewrites, baselines and champions are ported, re-verified and re-measured;
//   fresh     2N device runs per kernel on npuc 1.1 from the start.
//
// Printed per kernel: the champion ÷ the weight-movement minimum before the switch, right after
// porting and at the end, beside the fresh campaign's at the same total device runs; whether the
// champion was ported or lost (and why); and how many steps after the switch failed again on a
// failure already seen (same family, same diagnostic). Goals (issue 18): 0 champions lost, at
// most 1 step per distinct diagnostic, the switched campaign at least as good as the fresh one.
//
// The "end" figures are what each campaign recorded (a median of a few launches, noisy by ±2 %);
// both final champions are then re-verified and re-measured on npuc 1.1 one after the other
// (median of --verify-runs correct seeded runs each, as `npuopt submit` does), and the comparison
// is made on those: "verified" columns. With several --seeds the comparison is repeated per campaign
// seed (work/seed-K/) and summarised as the geometric mean of switched ÷ fresh per kernel with a
// 95 % t-interval over seeds: one seed's difference is of the order of the search's own spread.
//
//   npuopt_bench_refresh [--json] [--device-runs N (per kernel and phase; default 30)] [--work DIR]
//                        [--verify-runs N (default 7)] [--seeds 1,2,3 | 1-4 (campaign seeds; default 1)]
//                        [--knowledge-dir DIR] [--npusim DIR (holds 1.0/bin/npuc and 1.1/bin/npuc)]
//
// Only this program reads the simulator's default profile (its sustained HBM bandwidth, for the
// true minimum); npuopt itself never does.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "campaign/submission.hpp"
#include "campaign/workspace.hpp"
#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "eval/speed_of_light.hpp"
#include "eval/stats.hpp"
#include "store/campaign_store.hpp"
#include "store/tree_store.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

std::string read_text(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

double true_sustained_bytes_per_cycle() {
    const fs::path profile = fs::path(NPUOPT_SOURCE_DIR) / "tools/npu-sim/profiles/default.profile";
    std::smatch match;
    const std::string text = read_text(profile);
    if (std::regex_search(text, match, std::regex(R"(hbm_sustained_bytes_per_cycle\s*=\s*([0-9.]+))"))) {
        return std::stod(match[1].str());
    }
    throw Error(ErrorKind::io, "cannot read hbm_sustained_bytes_per_cycle from " + profile.string());
}

void set_toolchain(const fs::path& dir, std::string yaml, const fs::path& npuc) {
    const std::regex bin(R"(\n  bin: "[^"]*")");
    if (!std::regex_search(yaml, bin)) throw Error(ErrorKind::invalid_config, "campaign.yaml has no toolchain.bin line");
    yaml = std::regex_replace(yaml, bin, fmt::format("\n  bin: \"{}\"", npuc.string()));
    std::ofstream out(dir / std::string(config::k_campaign_file_name), std::ios::trunc);
    out << yaml;
}

/// A campaign directory on the npu-sim target, its toolchain `npuc` (absolute path).
void init_campaign(const fs::path& dir, const config::KernelsConfig& kernels, const fs::path& npuc,
                   std::uint64_t seed) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::string> names;
    for (const auto& kernel : kernels.kernels) names.push_back(kernel.name);
    std::string yaml = config::campaign_yaml_template("npu-sim", names, seed);
    set_toolchain(dir, yaml, npuc);
    auto store = store::CampaignStore::open(dir / std::string(config::k_campaign_db_name));
    store.set_meta("target", "npu-sim");
}

struct Phase {
    std::map<std::string, double> champion;  ///< kernel → champion cycles
    std::map<std::string, std::string> label;
    std::int64_t device_runs = 0;
    double secs = 0.0;
};

Phase run_phase(const fs::path& dir, const std::optional<fs::path>& knowledge_dir, std::int64_t device_runs, bool kb) {
    const auto start = std::chrono::steady_clock::now();
    auto workspace = campaign::open_workspace(dir, knowledge_dir);
    if (kb) {
        campaign::KbBuildOptions options;
        options.quick = true;
        campaign::build_knowledge(workspace, options);
    }
    campaign::RunOverrides overrides;
    overrides.device_runs = device_runs;
    overrides.stop_requested = [] { return false; };
    auto result = campaign::run_workspace(workspace, overrides);
    Phase phase;
    for (const auto& kernel : result.kernels) {
        if (kernel.champion_cycles) phase.champion[kernel.kernel] = *kernel.champion_cycles;
        phase.label[kernel.kernel] = kernel.champion;
    }
    phase.device_runs = result.device_runs_used;
    phase.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return phase;
}

/// Every kernel's champion re-verified and re-measured (a submission of `runs` seeded runs each):
/// kernel → cycles.
std::map<std::string, double> verified_champions(const fs::path& dir, const std::optional<fs::path>& knowledge_dir,
                                                 int runs) {
    auto workspace = campaign::open_workspace(dir, knowledge_dir);
    campaign::SubmitOptions options;
    options.out_dir = dir / "verified";
    fs::remove_all(options.out_dir);
    options.runs = runs;
    std::map<std::string, double> cycles;
    for (const auto& kernel : campaign::build_submission(workspace, options).kernels) {
        if (kernel.champion_cycles) cycles[kernel.kernel] = *kernel.champion_cycles;
    }
    return cycles;
}

/// Steps after `after_step` that failed on a failure their kernel's family had already shown
/// since then (same diagnostic code and message), per kernel; and the distinct failures.
std::pair<std::map<std::string, int>, std::map<std::string, int>> repeated_failures(const fs::path& dir,
                                                                                   std::int64_t after_step) {
    auto store = store::CampaignStore::open(dir / std::string(config::k_campaign_db_name));
    store::TreeStore trees(store.database());
    std::map<std::string, int> repeats;
    std::map<std::string, int> distinct;
    const std::regex code(R"(E[0-9]{4}[^(]*)");
    for (const auto& name : trees.list_kernels()) {
        std::vector<store::TreeEdgeRecord> edges = trees.list_edges(name);
        std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
        std::set<std::string> seen;
        for (const auto& edge : edges) {
            if (edge.step <= after_step || edge.verdict != "failed") continue;
            std::smatch match;
            if (!std::regex_search(edge.final_reason, match, code)) continue;
            auto design = store.find_design(edge.design_id);
            const std::string key = (design ? design->template_name : std::string("?")) + "|" + match[0].str();
            if (!seen.insert(key).second) repeats[name] += 1;
        }
        distinct[name] = static_cast<int>(seen.size());
    }
    return {repeats, distinct};
}

std::vector<nlohmann::json> events(const fs::path& dir, const std::string& kind) {
    auto store = store::CampaignStore::open(dir / std::string(config::k_campaign_db_name));
    std::vector<nlohmann::json> found;
    for (const auto& event : store.list_events(100000)) {
        if (event.kind == kind) found.push_back(nlohmann::json::parse(event.payload_json, nullptr, false));
    }
    return found;
}

std::int64_t steps_so_far(const fs::path& dir) {
    auto store = store::CampaignStore::open(dir / std::string(config::k_campaign_db_name));
    return campaign::campaign_status(store).steps;
}

/// "1,2,5" or "1-4" (or both, comma-separated) → campaign seeds.
std::vector<std::uint64_t> parse_seeds(const std::string& text) {
    std::vector<std::uint64_t> seeds;
    std::stringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
        const auto dash = item.find('-');
        if (item.empty()) continue;
        if (dash == std::string::npos) {
            seeds.push_back(std::stoull(item));
        } else {
            const std::uint64_t from = std::stoull(item.substr(0, dash));
            const std::uint64_t to = std::stoull(item.substr(dash + 1));
            for (std::uint64_t seed = from; seed <= to; ++seed) seeds.push_back(seed);
        }
    }
    if (seeds.empty()) throw Error(ErrorKind::invalid_input, "--seeds needs at least one seed (\"1,2,3\" or \"1-4\")");
    return seeds;
}

/// The geometric mean of exp(logs) with a 95 % t-interval (none below two values).
nlohmann::json log_ratio_summary(const std::vector<double>& logs) {
    nlohmann::json out = {{"n", logs.size()}};
    if (logs.empty()) return out;
    const double centre = eval::mean(logs);
    out["geomean"] = std::exp(centre);
    if (logs.size() >= 2) {
        const double half = eval::student_t_quantile(0.975, static_cast<double>(logs.size() - 1)) * eval::standard_error(logs);
        out["ci95"] = {std::exp(centre - half), std::exp(centre + half)};
    }
    return out;
}

/// Over seeds, per kernel and over every kernel: the switched campaign's verified champion ÷ the
/// fresh one's (below 1: the switched campaign is ahead), geometric mean and 95 % interval; and
/// the goals' counts summed.
nlohmann::json summarise_seeds(const nlohmann::json& per_seed, std::int64_t runs, int verify_runs) {
    std::map<std::string, std::vector<double>> logs;
    std::vector<double> all;
    std::int64_t lost = 0, wasted = 0, behind = 0, cells = 0;
    for (const auto& seed : per_seed) {
        lost += seed.value("champions_lost", 0);
        wasted += seed.value("steps_on_known_failures", 0);
        behind += seed.value("kernels_switched_behind_fresh_verified", 0);
        for (const auto& kernel : seed["kernels"]) {
            ++cells;
            const double end = kernel.value("end_verified", 0.0);
            const double fresh = kernel.value("fresh_end_verified", 0.0);
            if (end <= 0 || fresh <= 0) continue;
            logs[kernel.value("kernel", "")].push_back(std::log(end / fresh));
            all.push_back(std::log(end / fresh));
        }
    }
    nlohmann::json kernels = nlohmann::json::object();
    for (const auto& [name, values] : logs) kernels[name] = log_ratio_summary(values);
    return {{"benchmark", "refresh"},
            {"device_runs_per_kernel_per_phase", runs},
            {"verify_runs", verify_runs},
            {"seeds", per_seed},
            {"switched_over_fresh_verified", {{"kernels", kernels}, {"all", log_ratio_summary(all)}}},
            {"champions_lost", lost},
            {"steps_on_known_failures", wasted},
            {"cells_switched_behind_fresh_verified", behind},
            {"cells", cells}};
}

std::string seed_summary_text(const nlohmann::json& summary) {
    auto line = [](const std::string& name, const nlohmann::json& s) {
        std::string text = fmt::format("{:<18} {:>7.3f}", name, s.value("geomean", 0.0));
        if (s.contains("ci95")) text += fmt::format("  [{:.3f}, {:.3f}]", s["ci95"][0].get<double>(), s["ci95"][1].get<double>());
        return text + fmt::format("  (n = {})\n", s.value("n", 0));
    };
    std::string text = "switched ÷ fresh, verified champions (geometric mean over seeds, 95 % t-interval; < 1: switched ahead)\n";
    for (const auto& [name, s] : summary["switched_over_fresh_verified"]["kernels"].items()) text += line(name, s);
    text += line("all", summary["switched_over_fresh_verified"]["all"]);
    text += fmt::format("champions lost: {}; steps on known failures: {}; cells where switched is behind: {} of {}\n",
                        summary.value("champions_lost", 0), summary.value("steps_on_known_failures", 0),
                        summary.value("cells_switched_behind_fresh_verified", 0), summary.value("cells", 0));
    return text;
}

/// One comparison for campaign seed `seed` under `work`: the per-kernel figures as JSON and as a table.
std::pair<nlohmann::json, std::string> run_seed(std::uint64_t seed, const fs::path& work, const config::KernelsConfig& kernels,
                                                std::map<std::string, double> minimum, std::int64_t runs, int verify_runs,
                                                const std::optional<fs::path>& knowledge_dir, const fs::path& npuc_10,
                                                const fs::path& npuc_11) {
    const std::int64_t per_phase = runs * static_cast<std::int64_t>(kernels.kernels.size());
    const fs::path switched = work / "switched";
    const fs::path fresh = work / "fresh";
    init_campaign(switched, kernels, npuc_10, seed);
    std::cerr << fmt::format("switched: {} device runs on npuc 1.0 …\n", per_phase);
    const Phase before = run_phase(switched, knowledge_dir, per_phase, true);
    const std::int64_t switch_step = steps_so_far(switched);
    set_toolchain(switched, read_text(switched / std::string(config::k_campaign_file_name)), npuc_11);
    std::cerr << fmt::format("switched: npuc 1.1 in campaign.yaml, {} more device runs …\n", per_phase);
    const Phase after = run_phase(switched, knowledge_dir, per_phase, false);
    init_campaign(fresh, kernels, npuc_11, seed);
    std::cerr << fmt::format("fresh: {} device runs on npuc 1.1 …\n", 2 * per_phase);
    const Phase fresh_end = run_phase(fresh, knowledge_dir, 2 * per_phase, true);

    std::cerr << fmt::format("both final champions re-verified on npuc 1.1, {} runs each …\n", verify_runs);
    const auto switched_verified = verified_champions(switched, knowledge_dir, verify_runs);
    const auto fresh_verified = verified_champions(fresh, knowledge_dir, verify_runs);

    std::map<std::string, nlohmann::json> ports;
    for (const auto& event : events(switched, "port_finished")) ports[event.value("kernel", "")] = event;
    const auto [repeats, distinct] = repeated_failures(switched, switch_step);
    const auto rewrites = events(switched, "fixit_kept");
    const auto model_changes = events(switched, "hardware_model_changed");

    auto ratio = [&](const std::map<std::string, double>& cycles, const std::string& kernel) -> double {
        auto found = cycles.find(kernel);
        return found == cycles.end() || minimum[kernel] <= 0 ? 0.0 : found->second / minimum[kernel];
    };
    nlohmann::json out = {{"benchmark", "refresh"},
                          {"device_runs_per_kernel_per_phase", runs},
                          {"verify_runs", verify_runs},
                          {"kernels", nlohmann::json::array()},
                          {"rewrites_learnt", rewrites.size()},
                          {"hardware_model_changes", model_changes.empty() ? nlohmann::json() : model_changes.back()},
                          {"secs", {{"switched_before", before.secs}, {"switched_after", after.secs}, {"fresh", fresh_end.secs}}}};
    int lost = 0;
    int wasted = 0;
    int not_as_good = 0;
    std::string table = fmt::format("{:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<8} {:>8} {}\n", "kernel", "before",
                                    "ported", "end", "fresh", "end ver.", "fresh ver.", "champion", "repeats",
                                    "(÷ weight-movement minimum)");
    for (const auto& kernel : kernels.kernels) {
        const std::string& name = kernel.name;
        const auto port = ports.count(name) ? ports[name] : nlohmann::json::object();
        const double ported_cycles = port.value("champion_cycles", 0.0);
        const bool kept = port.value("champion_ported", false);
        const bool had_champion = before.label.count(name) && before.label.at(name) != "baseline";
        if (had_champion && !kept) ++lost;
        const int repeat = repeats.count(name) ? repeats.at(name) : 0;
        wasted += repeat;
        const double ported_ratio = minimum[name] > 0 ? ported_cycles / minimum[name] : 0.0;
        out["kernels"].push_back({{"kernel", name},
                                  {"before", ratio(before.champion, name)},
                                  {"after_port", ported_ratio},
                                  {"end", ratio(after.champion, name)},
                                  {"fresh_end", ratio(fresh_end.champion, name)},
                                  {"end_verified", ratio(switched_verified, name)},
                                  {"fresh_end_verified", ratio(fresh_verified, name)},
                                  {"champion_before", before.label.count(name) ? before.label.at(name) : ""},
                                  {"champion_ported", kept},
                                  {"lost", port.value("lost", std::string())},
                                  {"repeated_failures", repeat},
                                  {"distinct_failures", distinct.count(name) ? distinct.at(name) : 0}});
        const double end_verified = ratio(switched_verified, name);
        const double fresh_verified_ratio = ratio(fresh_verified, name);
        if (end_verified <= 0 || (fresh_verified_ratio > 0 && end_verified > fresh_verified_ratio)) ++not_as_good;
        table += fmt::format("{:<18} {:>8.3f}x {:>8.3f}x {:>8.3f}x {:>8.3f}x {:>8.3f}x {:>8.3f}x  {:<8} {:>8}\n", name,
                             ratio(before.champion, name), ported_ratio, ratio(after.champion, name),
                             ratio(fresh_end.champion, name), end_verified, fresh_verified_ratio,
                             kept ? "ported" : had_champion ? "LOST" : "baseline", repeat);
    }
    out["champions_lost"] = lost;
    out["kernels_switched_behind_fresh_verified"] = not_as_good;
    out["steps_on_known_failures"] = wasted;
    table += fmt::format("champions lost: {}; steps on failures already seen after the switch: {}; rewrites "
                                 "learnt from fix-its: {}; kernels where the switched campaign's verified champion "
                                 "is behind the fresh one's: {}\n",
                                 lost, wasted, rewrites.size(), not_as_good);
    out["seed"] = seed;
    return {out, table};
}

}  // namespace

int main(int argc, char** argv) {
    log::init_stderr(log::Level::warn);
    bool json = false;
    std::int64_t runs = 30;
    int verify_runs = 7;
    std::optional<fs::path> knowledge_dir;
    fs::path work = fs::path(NPUOPT_BUILD_DIR) / "bench-refresh";
    fs::path npusim = fs::path(NPUOPT_BUILD_DIR) / "npu-sim";
    std::vector<std::uint64_t> seeds = {1};
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string arg = argv[arg_idx];
        auto value = [&]() -> std::string {
            if (arg_idx + 1 >= argc) throw Error(ErrorKind::invalid_input, arg + " needs a value");
            return argv[++arg_idx];
        };
        try {
            if (arg == "--json") json = true;
            else if (arg == "--device-runs") runs = std::stoll(value());
            else if (arg == "--verify-runs") verify_runs = std::stoi(value());
            else if (arg == "--knowledge-dir") knowledge_dir = value();
            else if (arg == "--work") work = fs::absolute(value());
            else if (arg == "--npusim") npusim = fs::absolute(value());
            else if (arg == "--seeds") seeds = parse_seeds(value());
            else throw Error(ErrorKind::invalid_input, "unknown argument " + arg);
            if (runs <= 0) throw Error(ErrorKind::invalid_input, "--device-runs must be positive");
            if (verify_runs <= 0) throw Error(ErrorKind::invalid_input, "--verify-runs must be positive");
        } catch (const std::exception& error) {
            std::cerr << "npuopt_bench_refresh: error: " << error.what() << '\n';
            return 2;
        }
    }
    const fs::path npuc_10 = npusim / "1.0/bin/npuc";
    const fs::path npuc_11 = npusim / "1.1/bin/npuc";
    for (const auto& npuc : {npuc_10, npuc_11}) {
        if (!fs::is_regular_file(npuc)) {
            std::cerr << "npuopt_bench_refresh: error: " << npuc.string()
                      << " is not built (build the simulator: cmake --build <build> --target npu_sim, or --npusim DIR)\n";
            return 2;
        }
    }
    try {
        const auto root = config::locate_knowledge_dir(knowledge_dir);
        const auto target = config::load_target(root, "npu-sim");
        const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
        const double sustained = true_sustained_bytes_per_cycle();
        std::map<std::string, double> minimum;
        for (const auto& kernel : kernels.kernels) minimum[kernel.name] = eval::kernel_min_bytes(kernel, {}) / sustained;
        nlohmann::json per_seed = nlohmann::json::array();
        std::string tables;
        for (const std::uint64_t seed : seeds) {
            const fs::path seed_work = seeds.size() == 1 ? work : work / fmt::format("seed-{}", seed);
            if (seeds.size() > 1) std::cerr << fmt::format("campaign seed {} …\n", seed);
            auto [out, table] = run_seed(seed, seed_work, kernels, minimum, runs, verify_runs, knowledge_dir, npuc_10, npuc_11);
            per_seed.push_back(out);
            tables += (seeds.size() > 1 ? fmt::format("seed {}:\n", seed) : std::string()) + table;
        }
        nlohmann::json result = seeds.size() == 1 ? per_seed.front() : summarise_seeds(per_seed, runs, verify_runs);
        if (json) {
            std::cout << result.dump(2) << '\n';
        } else {
            std::cout << tables;
            if (seeds.size() > 1) std::cout << seed_summary_text(result);
        }
        return 0;
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_refresh: error: " << error.what() << '\n';
        return 1;
    }
}
