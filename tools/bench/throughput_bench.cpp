// `bench throughput`: what the evaluation pipeline (campaign.yaml `parallel:`) buys on npu-sim,
// side by side with the serial loop, in one run. Every configuration starts from a copy of the
// same campaign (knowledge base built once, same seed) and spends the same device-run budget:
//
//   serial       builders 1, devices 1 (the loop as it was: one step at a time)
//   b2 d1        two steps in flight (each compiles and checks its own design), one device slot
//   b2 d2        two steps in flight, two device slots
//   b3 d3        three steps in flight (one per kernel: the most a round takes), three slots
//
// Printed per configuration: wall seconds; device runs and designs (steps) evaluated per hour;
// device utilisation = the launches' wall seconds ÷ (wall seconds × device slots), i.e. the share
// of time a device was busy; and the champions' ÷ minimum, to show the search did not get worse.
// The simulator sleeps launch_overhead_ms per repeat (a device's latency, no CPU): that is what
// parallel slots overlap, while compiling (rustc) and simulating compete for this machine's cores.
//
// A copy of the default profile with max_concurrent_runs raised to 4 is used, so that the
// simulator's own slot locks never cap the devices asked for. Only this program reads it.
//
//   npuopt_bench_throughput [--json] [--device-runs N (per kernel; default 40)] [--work DIR]
//                           [--configs serial,b2d1,b2d2,b3d3,slurm-serial,slurm-b3d3] [--knowledge-dir DIR]

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "campaign/workspace.hpp"
#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "eval/speed_of_light.hpp"
#include "store/campaign_store.hpp"
#include "store/tree_store.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

struct Config {
    std::string name;
    std::int64_t builders = 1;
    std::int64_t devices = 1;
    bool slurm = false;  ///< every toolchain call a Slurm job (executor: slurm)
};

Config parse_config(const std::string& name) {
    const bool slurm = name.rfind("slurm-", 0) == 0;
    const std::string rest = slurm ? name.substr(6) : name;
    if (rest == "serial") return {name, 1, 1, slurm};
    std::smatch match;
    if (std::regex_match(rest, match, std::regex(R"(b([0-9]+)d([0-9]+))"))) {
        Config config{name, std::stoll(match[1].str()), std::stoll(match[2].str()), slurm};
        if (config.builders < 1 || config.devices < 1 || config.devices > config.builders) {
            throw Error(ErrorKind::invalid_input, fmt::format("--configs: {} needs 1 <= devices <= builders", name));
        }
        return config;
    }
    throw Error(ErrorKind::invalid_input, fmt::format("--configs: '{}' is neither serial nor bNdM (e.g. b2d2)", name));
}

/// The default profile with max_concurrent_runs = 4 (the simulator's slot locks never bind).
fs::path write_profile(const fs::path& work, double* sustained) {
    const fs::path source = fs::path(NPUOPT_SOURCE_DIR) / "tools/npu-sim/profiles/default.profile";
    std::string text = read_file_text(source);
    std::smatch match;
    if (!std::regex_search(text, match, std::regex(R"(hbm_sustained_bytes_per_cycle\s*=\s*([0-9.]+))"))) {
        throw Error(ErrorKind::io, "cannot read hbm_sustained_bytes_per_cycle from " + source.string());
    }
    *sustained = std::stod(match[1].str());
    text = std::regex_replace(text, std::regex(R"(max_concurrent_runs\s*=\s*[0-9.]+)"), "max_concurrent_runs = 4");
    const fs::path profile = work / "profile" / "throughput.profile";
    fs::create_directories(profile.parent_path());
    std::ofstream(profile) << text;
    return profile;
}

campaign::Workspace open(const fs::path& dir, const std::optional<fs::path>& knowledge_dir, const fs::path& profile,
                         bool slurm = false) {
    auto workspace = campaign::open_workspace(dir, knowledge_dir);
    if (slurm) {
        config::ExecutorConfig executor;
        executor.kind = "slurm";
        workspace.executor = campaign::make_executor(executor, workspace.dir);
    }
    workspace.target.toolchain.env["NPU_SIM_PROFILE"] = profile.string();
    workspace.target.toolchain.read_only_paths.push_back(profile.parent_path());
    workspace.toolchain = std::make_unique<target::Toolchain>(workspace.target, workspace.sandbox, workspace.limits);
    workspace.toolchain->set_cache_dir(workspace.cache_dir);
    if (workspace.executor) workspace.toolchain->set_executor(workspace.executor);
    return workspace;
}

/// The device seconds the campaign's counters hold (the launches' wall time, summed).
double device_secs_of(store::CampaignStore& store) {
    const auto text = store::TreeStore(store.database()).state("counters");
    if (!text) return 0.0;
    const nlohmann::json counters = nlohmann::json::parse(*text, nullptr, false);
    return counters.is_object() ? counters.value("device_secs", 0.0) : 0.0;
}

struct Measured {
    double wall_secs = 0.0;
    std::int64_t device_runs = 0;
    std::int64_t steps = 0;
    double device_secs = 0.0;
    std::map<std::string, double> champion;  ///< kernel → cycles
};

Measured run_config(const fs::path& dir, const std::optional<fs::path>& knowledge_dir, const fs::path& profile,
                    const Config& config, std::int64_t device_runs) {
    auto workspace = open(dir, knowledge_dir, profile, config.slurm);
    const auto before = campaign::campaign_status(*workspace.store);
    const double device_secs_before = device_secs_of(*workspace.store);
    campaign::RunOverrides overrides;
    overrides.device_runs = device_runs;
    overrides.stop_requested = [] { return false; };
    overrides.parallel = config::ParallelConfig{config.builders, config.devices};
    const auto start = std::chrono::steady_clock::now();
    auto result = campaign::run_workspace(workspace, overrides);
    Measured measured;
    measured.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto after = campaign::campaign_status(*workspace.store);
    measured.device_runs = after.device_runs_used - before.device_runs_used;
    measured.steps = after.steps - before.steps;
    measured.device_secs = device_secs_of(*workspace.store) - device_secs_before;
    for (const auto& kernel : result.kernels) {
        if (kernel.champion_cycles) measured.champion[kernel.kernel] = *kernel.champion_cycles;
    }
    return measured;
}

}  // namespace

int main(int argc, char** argv) {
    log::init_stderr(log::Level::warn);
    // Slurm jobs run the npuopt built beside this program (exec-call), unless told otherwise.
    ::setenv("NPUOPT_SLURM_WORKER", (fs::path(NPUOPT_BUILD_DIR) / "npuopt").c_str(), 0);
    bool json = false;
    std::int64_t runs = 40;
    std::optional<fs::path> knowledge_dir;
    fs::path work = fs::path(NPUOPT_BUILD_DIR) / "bench-throughput";
    std::vector<Config> configs;
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string arg = argv[arg_idx];
        auto value = [&]() -> std::string {
            if (arg_idx + 1 >= argc) throw Error(ErrorKind::invalid_input, arg + " needs a value");
            return argv[++arg_idx];
        };
        try {
            if (arg == "--json") json = true;
            else if (arg == "--device-runs") runs = std::stoll(value());
            else if (arg == "--knowledge-dir") knowledge_dir = value();
            else if (arg == "--work") work = fs::absolute(value());
            else if (arg == "--configs") {
                std::stringstream items(value());
                std::string item;
                while (std::getline(items, item, ',')) if (!item.empty()) configs.push_back(parse_config(item));
            } else throw Error(ErrorKind::invalid_input, "unknown argument " + arg);
            if (runs <= 0) throw Error(ErrorKind::invalid_input, "--device-runs must be positive");
        } catch (const std::exception& error) {
            std::cerr << "npuopt_bench_throughput: error: " << error.what() << '\n';
            return 2;
        }
    }
    if (configs.empty()) {
        for (const char* name : {"serial", "b2d1", "b2d2", "b3d3"}) configs.push_back(parse_config(name));
        if (std::getenv("SLURM_CONF")) {  // a cluster to run through: the same side by side
            for (const char* name : {"slurm-serial", "slurm-b3d3"}) configs.push_back(parse_config(name));
        }
    }
    try {
        const auto root = config::locate_knowledge_dir(knowledge_dir);
        const auto target = config::load_target(root, "npu-sim");
        const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
        fs::remove_all(work);
        fs::create_directories(work);
        double sustained = 0.0;
        const fs::path profile = write_profile(work, &sustained);
        std::map<std::string, double> minimum;
        for (const auto& kernel : kernels.kernels) minimum[kernel.name] = eval::kernel_min_bytes(kernel, {}) / sustained;

        // One campaign with its knowledge base built on the profile; every configuration runs on a copy.
        const fs::path seed_dir = work / "seed-campaign";
        fs::create_directories(seed_dir);
        {
            std::vector<std::string> names;
            for (const auto& kernel : kernels.kernels) names.push_back(kernel.name);
            std::ofstream(seed_dir / std::string(config::k_campaign_file_name))
                << config::campaign_yaml_template("npu-sim", names, 1);
            auto store = store::CampaignStore::open(seed_dir / std::string(config::k_campaign_db_name));
            store.set_meta("target", "npu-sim");
        }
        std::cerr << "knowledge base (quick) on the benchmark's profile …\n";
        {
            auto workspace = open(seed_dir, knowledge_dir, profile);
            campaign::KbBuildOptions kb;
            kb.quick = true;
            campaign::build_knowledge(workspace, kb);
        }
        const std::int64_t budget = runs * static_cast<std::int64_t>(kernels.kernels.size());
        nlohmann::json rows = nlohmann::json::array();
        std::string table = fmt::format("{:<13} {:>8} {:>10} {:>12} {:>13} {:>12}  {}\n", "config", "wall s",
                                        "runs/hour", "designs/hour", "device busy", "vs serial", "champion ÷ minimum");
        double serial_rate = 0.0;
        for (const auto& config : configs) {
            const fs::path dir = work / config.name;
            fs::remove_all(dir);
            fs::copy(seed_dir, dir, fs::copy_options::recursive);
            std::cerr << fmt::format("{}: {} device runs with {} builder(s), {} device slot(s) …\n", config.name, budget,
                                     config.builders, config.devices);
            Measured measured;
            try {
                measured = run_config(dir, knowledge_dir, profile, config, budget);
            } catch (const std::exception& error) {  // one configuration's failure keeps the others' figures
                std::cerr << fmt::format("{}: failed: {}\n", config.name, error.what());
                rows.push_back({{"config", config.name}, {"error", error.what()}});
                table += fmt::format("{:<13} failed: {}\n", config.name, error.what());
                continue;
            }
            const double hours = measured.wall_secs / 3600.0;
            const double runs_per_hour = hours > 0 ? static_cast<double>(measured.device_runs) / hours : 0.0;
            const double designs_per_hour = hours > 0 ? static_cast<double>(measured.steps) / hours : 0.0;
            const double busy = measured.wall_secs > 0
                                    ? measured.device_secs / (measured.wall_secs * static_cast<double>(config.devices))
                                    : 0.0;
            if (config.name == "serial") serial_rate = runs_per_hour;
            nlohmann::json ratios = nlohmann::json::object();
            std::string ratio_text;
            for (const auto& [kernel, cycles] : measured.champion) {
                const double ratio = minimum[kernel] > 0 ? cycles / minimum[kernel] : 0.0;
                ratios[kernel] = ratio;
                ratio_text += fmt::format("{} {:.3f}  ", kernel, ratio);
            }
            rows.push_back({{"config", config.name},
                            {"executor", config.slurm ? "slurm" : "local"},
                            {"builders", config.builders},
                            {"devices", config.devices},
                            {"wall_secs", measured.wall_secs},
                            {"device_runs", measured.device_runs},
                            {"designs", measured.steps},
                            {"device_secs", measured.device_secs},
                            {"device_runs_per_hour", runs_per_hour},
                            {"designs_per_hour", designs_per_hour},
                            {"device_utilisation", busy},
                            {"champion_over_minimum", ratios}});
            table += fmt::format("{:<13} {:>8.1f} {:>10.0f} {:>12.0f} {:>12.1f}% {:>11}  {}\n", config.name,
                                 measured.wall_secs, runs_per_hour, designs_per_hour, 100.0 * busy,
                                 serial_rate > 0 ? fmt::format("{:.2f}x", runs_per_hour / serial_rate) : "-", ratio_text);
        }
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        nlohmann::json out = {{"benchmark", "throughput"},
                              {"device_runs_per_kernel", runs},
                              {"cores", cores},
                              {"profile", "default.profile, max_concurrent_runs = 4 (launch_overhead_ms as shipped)"},
                              {"configs", rows}};
        if (json) {
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << table
                      << fmt::format("{} cores here: compiling and simulating share them; a step in flight per kernel "
                                     "at most ({} kernels)\n",
                                     cores, kernels.kernels.size());
        }
        return 0;
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_throughput: error: " << error.what() << '\n';
        return 1;
    }
}
