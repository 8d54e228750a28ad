// `bench kb`: builds npu-sim's hardware model from nothing (the microbenchmark suite through the
// sandboxed toolchain, then the least-squares fits of src/knowledge/) and prints each fitted
// parameter beside the TRUE value of the active simulator profile, with the relative error and
// the build time. Only this program reads the profile: npuopt itself never does.
//
//   npuopt_bench_kb [--profile FILE] [--npuc PATH] [--json] [--parallel N] [--probe NAME]...
//                   [--store campaign.db] [--require-goal]
//                   [--no-rules | --rules-only] [--rules-quick] [--rules-npuc PATH]...
//
// After the hardware model, the rules section (rules_bench.hpp): a sweep over many designs,
// rules mined from every diagnostic, their precision and the share of the toolchain's
// diagnostic codes that have a rule. --rules-npuc (repeatable) names the releases to sweep;
// default: the target's npuc and every sibling release (<root>/<release>/bin/npuc).
//
// The profile is --profile, else $NPU_SIM_PROFILE, else tools/npu-sim/profiles/default.profile
// when it exists, else the simulator's compiled-in defaults (read from its profile.rs). It is
// handed to the toolchain through target.yaml's toolchain.env (NPU_SIM_PROFILE).

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"
#include "rules_bench.hpp"
#include "target/toolchain.hpp"
#include "store/campaign_store.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

constexpr double k_goal_relative_error = 0.05;

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::io, fmt::format("cannot read {}", file.string()));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// The simulator's profile: compiled-in defaults (profile.rs), overlaid by the profile file.
std::map<std::string, double> read_true_profile(const fs::path& sim_dir, const std::optional<fs::path>& profile) {
    std::map<std::string, double> values;
    // the profile lives with the device (device/src since the device boundary; npu/src before it)
    const fs::path device_defaults = sim_dir / "device" / "src" / "profile.rs";
    const std::string defaults =
        read_text(fs::exists(device_defaults) ? device_defaults : sim_dir / "npu" / "src" / "profile.rs");
    const std::regex k_default_line(R"(^\s*([a-z_][a-z0-9_]*)\s*=\s*([0-9.eE+-]+)\s*,)");
    std::istringstream lines(defaults);
    for (std::string line; std::getline(lines, line);) {
        std::smatch match;
        if (std::regex_search(line, match, k_default_line)) values[match[1].str()] = std::stod(match[2].str());
    }
    if (profile) {
        std::istringstream profile_lines(read_text(*profile));
        for (std::string line; std::getline(profile_lines, line);) {
            line = line.substr(0, line.find('#'));
            auto equals = line.find('=');
            if (equals == std::string::npos) continue;
            auto trim = [](std::string text) {
                text.erase(0, text.find_first_not_of(" \t\r"));
                text.erase(text.find_last_not_of(" \t\r") + 1);
                return text;
            };
            values[trim(line.substr(0, equals))] = std::stod(trim(line.substr(equals + 1)));
        }
    }
    return values;
}

/// The true value of each comparable model parameter, from the profile.
std::map<std::string, double> true_values(const std::map<std::string, double>& profile, const std::string& version) {
    auto at = [&](const char* key) {
        auto found = profile.find(key);
        return found == profile.end() ? std::nan("") : found->second;
    };
    const bool release_1_1 = version.rfind("1.1", 0) == 0;
    const double max_packet = at("dma_max_packet_bytes") * (release_1_1 ? 2.0 : 1.0);
    return {
        {"dma_startup_cycles", at("dma_startup_cycles")},
        {"dma_engine_bytes_per_cycle", at("dma_engine_bytes_per_cycle")},
        {"dma_packet_overhead_cycles", at("dma_packet_overhead_cycles")},
        {"dma_max_packet_bytes", max_packet},
        {"dma_effective_bytes_per_cycle",
         max_packet / (max_packet / at("dma_engine_bytes_per_cycle") + at("dma_packet_overhead_cycles"))},
        {"sustained_bytes_per_cycle", at("hbm_sustained_bytes_per_cycle")},
        {"engines_per_cluster", at("dma_engines_per_cluster")},
        {"clusters", at("clusters")},
        {"pass_issue_cycles", at("pass_issue_cycles") * (release_1_1 ? 2.0 / 3.0 : 1.0)},
        {"tensor_macs_per_cycle", at("lanes_per_slice") * at("tensor_macs_per_lane_cycle")},
        {"chip_macs_per_cycle",
         at("lanes_per_slice") * at("tensor_macs_per_lane_cycle") * at("clusters") * at("slices_per_cluster")},
        {"vector_op_cycles", at("vector_op_cycles")},
        {"vector_elems_per_cycle", at("vector_elems_per_cycle")},
        {"switch_startup_cycles", at("switch_startup_cycles")},
        {"switch_bytes_per_cycle", at("switch_bytes_per_cycle")},
        {"unaligned_write_penalty", at("unaligned_write_penalty")},
        {"bank_conflict_penalty", at("bank_conflict_penalty")},
        {"bank_safe_run", at("bank_hang_run") - 1},
        {"bank_hang_run", at("bank_hang_run")},
    };
}

bool is_goal_param(const std::string& name) {
    return name == "dma_startup_cycles" || name == "dma_engine_bytes_per_cycle" ||
           name == "sustained_bytes_per_cycle" || name == "pass_issue_cycles";
}

struct Options {
    std::optional<fs::path> profile;
    std::optional<fs::path> npuc;
    std::optional<fs::path> store;
    std::vector<std::string> probes;
    std::vector<fs::path> rules_npucs;
    int parallel = 2;
    bool json = false;
    bool require_goal = false;
    bool hardware = true;   ///< the microbenchmarks and the fitted model
    bool rules = true;      ///< the rules sweep
    bool rules_quick = false;
};

Options parse_options(int argc, char** argv) {
    Options options;
    auto value = [&](int& idx, const std::string& flag) -> std::string {
        if (idx + 1 >= argc) throw Error(ErrorKind::invalid_input, fmt::format("{} needs a value", flag));
        return argv[++idx];
    };
    for (int idx = 1; idx < argc; ++idx) {
        std::string flag = argv[idx];
        if (flag == "--profile") options.profile = fs::absolute(value(idx, flag));
        else if (flag == "--npuc") options.npuc = fs::absolute(value(idx, flag));
        else if (flag == "--store") options.store = value(idx, flag);
        else if (flag == "--probe") options.probes.push_back(value(idx, flag));
        else if (flag == "--parallel") options.parallel = std::stoi(value(idx, flag));
        else if (flag == "--json") options.json = true;
        else if (flag == "--require-goal") options.require_goal = true;
        else if (flag == "--no-rules") options.rules = false;
        else if (flag == "--rules-only") options.hardware = false;
        else if (flag == "--rules-quick") options.rules_quick = true;
        else if (flag == "--rules-npuc") options.rules_npucs.push_back(fs::absolute(value(idx, flag)));
        else if (flag == "--help" || flag == "-h") {
            std::cout << "usage: npuopt_bench_kb [--profile FILE] [--npuc PATH] [--json] [--parallel N] "
                         "[--probe NAME]... [--store campaign.db] [--require-goal] [--no-rules | --rules-only] "
                         "[--rules-quick] [--rules-npuc PATH]...\n";
            std::exit(0);
        } else {
            throw Error(ErrorKind::invalid_input, fmt::format("unknown option '{}' (see --help)", flag));
        }
    }
    if (!options.rules && !options.hardware) {
        throw Error(ErrorKind::invalid_input, "--no-rules and --rules-only exclude each other");
    }
    if (options.parallel < 1) throw Error(ErrorKind::invalid_input, "--parallel must be at least 1");
    if (!options.profile) {
        if (const char* env = std::getenv("NPU_SIM_PROFILE"); env && *env) {
            options.profile = fs::absolute(env);
        } else if (fs::path fallback = fs::path(NPUOPT_SOURCE_DIR) / "tools/npu-sim/profiles/default.profile";
                   fs::exists(fallback)) {
            options.profile = fallback;
        }
    }
    return options;
}

std::string format_value(double value) {
    if (!std::isfinite(value)) return "inf";
    if (std::abs(value) >= 100 || value == std::floor(value)) return fmt::format("{:.1f}", value);
    return fmt::format("{:.3f}", value);
}

/// The hardware-model section: fitted vs true. Prints the text form unless --json; returns
/// the JSON form (into `out`) and whether the goal was met.
bool run_hardware_section(const Options& options, const config::TargetConfig& target, nlohmann::json& out) {
    const fs::path source_dir = NPUOPT_SOURCE_DIR;
    const fs::path sim_dir = source_dir / "tools" / "npu-sim";
    const auto suite = config::load_microbench_suite(target.microbench_dir / "suite.yaml");

    knowledge::MicrobenchOptions run_options;
    run_options.parallel = options.parallel;
    run_options.only_probes = options.probes;
    if (!options.json) {
        run_options.on_point = [](const knowledge::MicrobenchPoint& point) {
            std::cerr << fmt::format("  {:<16} {:<44} {:<9} {}\n", point.probe, nlohmann::json(point.params).dump(),
                                     knowledge::point_status_name(point.status),
                                     point.status == knowledge::PointStatus::ok
                                         ? fmt::format("{:.0f} cycles", point.cycles_median)
                                         : point.message.substr(0, 80));
        };
    }
    const auto start = std::chrono::steady_clock::now();
    const auto run = knowledge::run_microbench_suite(target, suite, run_options);
    const auto model = knowledge::fit_hardware_model(run, target, suite);
    const double build_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.store) {
        auto store = store::CampaignStore::open(*options.store);
        knowledge::record_hardware_model(store, model, run);
    }

    const auto truth = true_values(read_true_profile(sim_dir, options.profile), run.toolchain_version);
    std::map<std::string, int> counts;
    for (const auto& point : run.points) counts[std::string(knowledge::point_status_name(point.status))]++;

    nlohmann::json rows = nlohmann::json::array();
    bool goal_met = true;
    for (const auto& param : model.params) {
        auto found = truth.find(param.name);
        const double true_value = found == truth.end() ? std::nan("") : found->second;
        const double relative = std::isfinite(true_value) && true_value != 0 ? (param.value - true_value) / true_value : std::nan("");
        const bool goal = is_goal_param(param.name);
        const bool within = std::isfinite(relative) && std::abs(relative) <= k_goal_relative_error;
        if (goal && !within) goal_met = false;
        rows.push_back({{"name", param.name},
                        {"unit", param.unit},
                        {"fitted", param.value},
                        {"ci95", {std::isfinite(param.ci95_lower) ? nlohmann::json(param.ci95_lower) : nlohmann::json(nullptr),
                                  std::isfinite(param.ci95_upper) ? nlohmann::json(param.ci95_upper) : nlohmann::json(nullptr)}},
                        {"r_squared", param.r_squared ? nlohmann::json(*param.r_squared) : nlohmann::json(nullptr)},
                        {"true", std::isfinite(true_value) ? nlohmann::json(true_value) : nlohmann::json(nullptr)},
                        {"relative_error", std::isfinite(relative) ? nlohmann::json(relative) : nlohmann::json(nullptr)},
                        {"goal", goal ? nlohmann::json(k_goal_relative_error) : nlohmann::json(nullptr)},
                        {"within_goal", goal ? nlohmann::json(within) : nlohmann::json(nullptr)},
                        {"source", param.source}});
    }
    for (const char* name : {"dma_startup_cycles", "dma_engine_bytes_per_cycle", "sustained_bytes_per_cycle", "pass_issue_cycles"}) {
        if (!model.param(name)) goal_met = false;
    }

    out["toolchain"] = run.toolchain_name;
    out["toolchain_version"] = run.toolchain_version;
    out["build_secs"] = build_secs;
    out["points"] = counts;
    out["params"] = rows;
    out["goal_met"] = goal_met;
    out["findings"] = model.findings;
    out["missing"] = model.missing;
    if (!options.json) {
        std::cout << fmt::format("bench kb — target {}, {} {}, profile {}\n", target.name, run.toolchain_name,
                                 run.toolchain_version,
                                 options.profile ? options.profile->string() : std::string("(compiled-in default)"));
        std::cout << fmt::format("{:<30} {:>10} {:>23} {:>8} {:>10} {:>9}  {}\n", "parameter", "fitted", "95% CI", "R²",
                                 "true", "rel.err", "goal");
        for (const auto& row : rows) {
            auto number = [](const nlohmann::json& value) { return value.is_null() ? std::string("-") : format_value(value.get<double>()); };
            std::string ci = fmt::format("[{}, {}]", number(row["ci95"][0]), number(row["ci95"][1]));
            std::string relative = row["relative_error"].is_null() ? "-" : fmt::format("{:+.2f}%", 100 * row["relative_error"].get<double>());
            std::string goal = row["goal"].is_null() ? "" : (row["within_goal"].get<bool>() ? "ok (≤5%)" : "MISSED (>5%)");
            std::string r_squared = row["r_squared"].is_null() ? "-" : fmt::format("{:.4f}", row["r_squared"].get<double>());
            std::cout << fmt::format("{:<30} {:>10} {:>23} {:>8} {:>10} {:>9}  {}\n", row["name"].get<std::string>(),
                                     number(row["fitted"]), ci, r_squared, number(row["true"]), relative, goal);
        }
        for (const auto& finding : model.findings) std::cout << "finding: " << finding << "\n";
        for (const auto& missing : model.missing) std::cout << "missing: " << missing << "\n";
        std::cout << fmt::format("build: {} points ({} ok, {} failed, {} timed out, {} skipped) in {:.1f} s; goal {}\n",
                                 run.points.size(), counts["ok"], counts["failed"], counts["timed_out"], counts["skipped"],
                                 build_secs, goal_met ? "met" : "MISSED");
    }
    return goal_met;
}

/// The releases the rules section sweeps: --rules-npuc, else the target's npuc and its siblings
/// (<root>/<release>/bin/npuc, as the simulator's build lays them out).
std::vector<fs::path> rules_releases(const Options& options, const config::TargetConfig& target) {
    if (!options.rules_npucs.empty()) return options.rules_npucs;
    proc::SandboxPolicy sandbox;
    sandbox.enabled = false;
    std::string why;
    auto bin = target::Toolchain(target, sandbox).resolve_bin(&why);
    if (!bin) throw Error(ErrorKind::toolchain, fmt::format("rules: cannot find the toolchain: {}", why));
    std::vector<fs::path> releases = {fs::weakly_canonical(*bin)};
    const fs::path root = releases.front().parent_path().parent_path().parent_path();
    std::vector<fs::path> siblings;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(root, error)) {
        fs::path candidate = entry.path() / "bin" / releases.front().filename();
        if (entry.is_directory() && fs::exists(candidate) && fs::weakly_canonical(candidate) != releases.front()) {
            siblings.push_back(fs::weakly_canonical(candidate));
        }
    }
    std::sort(siblings.begin(), siblings.end());
    releases.insert(releases.end(), siblings.begin(), siblings.end());
    return releases;
}

int run_bench(const Options& options) {
    const fs::path source_dir = NPUOPT_SOURCE_DIR;
    config::TargetConfig target = config::load_target_config(source_dir / "knowledge" / "npu-sim" / "target.yaml");
    if (options.npuc) target.toolchain.bin = options.npuc->string();
    if (options.profile) {
        if (!fs::exists(*options.profile)) {
            throw Error(ErrorKind::invalid_input, fmt::format("profile {} does not exist", options.profile->string()));
        }
        target.toolchain.env["NPU_SIM_PROFILE"] = options.profile->string();
        target.toolchain.read_only_paths.push_back(options.profile->parent_path());
    }
    nlohmann::json out = {{"benchmark", "kb"},
                          {"target", target.name},
                          {"profile", options.profile ? options.profile->string() : std::string("(compiled-in default)")}};
    bool goal_met = true;
    if (options.hardware) goal_met = run_hardware_section(options, target, out);
    if (options.rules) {
        bench::RulesBenchOptions rules_options;
        rules_options.source_dir = source_dir;
        rules_options.npucs = rules_releases(options, target);
        rules_options.parallel = options.parallel;
        rules_options.quick = options.rules_quick;
        rules_options.progress = !options.json;
        out["rules"] = bench::run_rules_bench(target, rules_options);
        if (!out["rules"]["precision_goal_met"].get<bool>()) goal_met = false;
        if (!options.json) std::cout << bench::rules_bench_text(out["rules"]);
    }
    out["all_goals_met"] = goal_met;
    if (options.json) std::cout << out.dump(2) << "\n";
    return options.require_goal && !goal_met ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run_bench(parse_options(argc, argv));
    } catch (const Error& error) {
        std::cerr << "npuopt_bench_kb: error: " << error.what() << "\n";
        return 2;
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_kb: error: " << error.what() << "\n";
        return 2;
    }
}
