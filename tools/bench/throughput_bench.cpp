// `bench throughput`: what the evaluation pipeline (campaign.yaml `parallel:`) buys on npu-sim,
// side by side with the serial loop, in one run. Every configuration starts from a copy of the
// same campaign (knowledge base built once, same seed) and spends the same device-run budget:
//
//   serial       builders 1, devices 1 (the loop as it was: one step at a time)
//   bB dD        B steps in flight (each compiles and checks its own design; with more builders
//                than kernels a round takes several candidates of one kernel), D device slots
//   slurm-…      the same with every toolchain call a Slurm job (when SLURM_CONF is set)
//   pool-…       the same through a pool of B workers in one Slurm job array (executor.array_size)
//
// Printed per configuration: wall seconds; device runs and designs (steps) evaluated per hour;
// device utilisation = the launches' wall seconds ÷ (wall seconds × device slots), i.e. the share
// of time a device was busy; and the champions' ÷ minimum, to show the search did not get worse.
// The simulator sleeps launch_overhead_ms per repeat (a device's latency, no CPU): that is what
// parallel slots overlap, while compiling (rustc) and simulating compete for this machine's cores.
//
// Then the A/A check under the pipeline: a campaign of attention_output whose only role proposes
// copies of the champion (its source with a comment: the same kernel, so every accept is false),
// run through the campaign's own cascade serially and under the pipeline; the share of races that
// accepted, with a 95 % Wilson interval, per configuration.
//
// A copy of the default profile with max_concurrent_runs raised to 4 is used, so that the
// simulator's own slot locks never cap the devices asked for. Only this program reads it.
//
//   npuopt_bench_throughput [--json] [--device-runs N (per kernel; default 40)] [--work DIR]
//                           [--configs serial,b2d1,b2d2,b4d2,b4d4,slurm-serial,slurm-b4d4,pool-serial,pool-b4d4]
//                           [--aa N (copies per configuration; default 100, 0: none)]
//                           [--aa-configs serial,b4d4] [--knowledge-dir DIR]

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
#include "eval/stats.hpp"
#include "search/design.hpp"
#include "search/roles.hpp"
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
    bool slurm = false;  ///< every toolchain call through Slurm (executor: slurm)
    int array_size = 0;  ///< > 0: through a pool of that many workers (one job array), not a job per call
};

Config parse_config(const std::string& name) {
    const bool pool = name.rfind("pool-", 0) == 0;
    const bool slurm = pool || name.rfind("slurm-", 0) == 0;
    const std::string rest = pool ? name.substr(5) : slurm ? name.substr(6) : name;
    if (rest == "serial") return {name, 1, 1, slurm, pool ? 1 : 0};
    std::smatch match;
    if (std::regex_match(rest, match, std::regex(R"(b([0-9]+)d([0-9]+))"))) {
        Config config{name, std::stoll(match[1].str()), std::stoll(match[2].str()), slurm, 0};
        if (pool) config.array_size = static_cast<int>(config.builders);  // a worker per builder
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
                         bool slurm = false, int array_size = 0) {
    auto workspace = campaign::open_workspace(dir, knowledge_dir);
    if (slurm) {
        config::ExecutorConfig executor;
        executor.kind = "slurm";
        executor.array_size = array_size;
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
    auto workspace = open(dir, knowledge_dir, profile, config.slurm, config.array_size);
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

/// Copies of the champion: its source with a comment naming the step, so a new design of the
/// same kernel. An accept of one is a false accept.
class AaCopyRole final : public search::Role {
public:
    std::string name() const override { return "aa-copy"; }
    std::vector<search::Proposal> propose(const search::SearchContext& context) override {
        if (!context.champion) return {};
        const search::Design& champion = *context.champion;
        std::string source = champion.source;
        if (const auto mark = source.find("\n// a/a copy "); mark != std::string::npos) source.resize(mark);
        search::Proposal proposal;
        proposal.design = search::design_from_source(champion.target, champion.kernel, champion.shape_text,
                                                     source + fmt::format("\n// a/a copy {}\n", context.seed),
                                                     "aa-copy", champion.source_extension);
        proposal.role = name();
        proposal.move = "a/a copy";
        proposal.reason = "the champion's source with a comment: the same kernel, so an accept is false";
        return {proposal};
    }
};

struct AaMeasured {
    double wall_secs = 0.0;
    std::int64_t races = 0;       ///< A/A steps measured against the champion (screen or race)
    std::int64_t accepted = 0;    ///< races that accepted (committed, or stale in their round)
    std::int64_t stale = 0;       ///< of those, accepted against a champion its round had replaced
    std::int64_t device_runs = 0;
};

AaMeasured run_aa(const fs::path& dir, const std::optional<fs::path>& knowledge_dir, const fs::path& profile,
                  const Config& config, std::int64_t copies) {
    auto workspace = open(dir, knowledge_dir, profile, config.slurm, config.array_size);
    campaign::RunOverrides overrides;
    overrides.max_steps = copies + 1;  // the baseline first
    overrides.device_runs = copies * 64;
    overrides.stop_requested = [] { return false; };
    overrides.parallel = config::ParallelConfig{config.builders, config.devices};
    overrides.roles = [](const std::string&) {
        std::vector<std::unique_ptr<search::Role>> roles;
        roles.push_back(std::make_unique<AaCopyRole>());
        return roles;
    };
    const auto start = std::chrono::steady_clock::now();
    campaign::run_workspace(workspace, overrides);
    AaMeasured measured;
    measured.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    store::TreeStore trees(workspace.store->database());
    for (const auto& edge : trees.list_edges("attention_output")) {
        if (edge.role != "aa-copy") continue;
        measured.device_runs += edge.device_runs;
        // Measured against the champion: accepted, rejected (screen or race) or a race without a decision.
        if (edge.verdict == "accepted" || edge.verdict == "rejected" || edge.verdict == "inconclusive") {
            measured.races += 1;
        }
        if (edge.verdict == "accepted") measured.accepted += 1;
    }
    for (const auto& event : workspace.store->list_events(1000000)) {
        if (event.kind != "step_stale") continue;  // its edge was replaced by the re-race
        measured.stale += 1;
        measured.races += 1;
        measured.accepted += 1;
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
    std::vector<Config> aa_configs;
    std::int64_t aa_copies = 100;
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
            else if (arg == "--aa") aa_copies = std::stoll(value());
            else if (arg == "--configs" || arg == "--aa-configs") {
                std::stringstream items(value());
                std::string item;
                auto& into = arg == "--configs" ? configs : aa_configs;
                while (std::getline(items, item, ',')) if (!item.empty()) into.push_back(parse_config(item));
            } else throw Error(ErrorKind::invalid_input, "unknown argument " + arg);
            if (runs <= 0) throw Error(ErrorKind::invalid_input, "--device-runs must be positive");
            if (aa_copies < 0) throw Error(ErrorKind::invalid_input, "--aa must be 0 or more");
        } catch (const std::exception& error) {
            std::cerr << "npuopt_bench_throughput: error: " << error.what() << '\n';
            return 2;
        }
    }
    if (configs.empty()) {
        for (const char* name : {"serial", "b2d1", "b2d2", "b4d2", "b4d4"}) configs.push_back(parse_config(name));
        if (std::getenv("SLURM_CONF")) {  // a cluster to run through: the same side by side
            for (const char* name : {"slurm-serial", "slurm-b4d4", "pool-serial", "pool-b4d4"}) {
                configs.push_back(parse_config(name));
            }
        }
    }
    if (aa_configs.empty()) {
        for (const char* name : {"serial", "b4d4"}) aa_configs.push_back(parse_config(name));
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
                            {"executor", config.array_size > 0 ? "slurm pool" : config.slurm ? "slurm" : "local"},
                            {"array_size", config.array_size},
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
        // The A/A check: the same cascade, copies of the champion only, serially and in the pipeline.
        nlohmann::json aa_rows = nlohmann::json::array();
        std::string aa_table;
        if (aa_copies > 0) {
            aa_table = fmt::format("\nA/A under the pipeline (attention_output, copies of the champion: every accept "
                                   "is false)\n{:<13} {:>7} {:>9} {:>7} {:>22} {:>13} {:>8}\n",
                                   "config", "steps", "accepted", "stale", "false accept [95% CI]", "runs per step",
                                   "wall s");
            const fs::path aa_seed = work / "aa-seed";
            fs::remove_all(aa_seed);
            fs::copy(seed_dir, aa_seed, fs::copy_options::recursive);
            std::ofstream(aa_seed / std::string(config::k_campaign_file_name), std::ios::trunc)
                << std::regex_replace(config::campaign_yaml_template("npu-sim", {"attention_output"}, 1),
                                      std::regex(R"(\nkernels: \[\])"), "\nkernels: [attention_output]");
            for (const auto& config : aa_configs) {
                const fs::path dir = work / ("aa-" + config.name);
                fs::remove_all(dir);
                fs::copy(aa_seed, dir, fs::copy_options::recursive);
                std::cerr << fmt::format("A/A {}: {} copies with {} builder(s), {} device slot(s) …\n", config.name,
                                         aa_copies, config.builders, config.devices);
                AaMeasured measured;
                try {
                    measured = run_aa(dir, knowledge_dir, profile, config, aa_copies);
                } catch (const std::exception& error) {
                    std::cerr << fmt::format("A/A {}: failed: {}\n", config.name, error.what());
                    aa_rows.push_back({{"config", config.name}, {"error", error.what()}});
                    aa_table += fmt::format("{:<13} failed: {}\n", config.name, error.what());
                    continue;
                }
                const auto [lower, upper] = eval::wilson_interval(static_cast<std::size_t>(measured.accepted),
                                                                  static_cast<std::size_t>(measured.races));
                const double rate = measured.races > 0 ? static_cast<double>(measured.accepted) /
                                                             static_cast<double>(measured.races)
                                                       : 0.0;
                const double runs_per_race = measured.races > 0 ? static_cast<double>(measured.device_runs) /
                                                                      static_cast<double>(measured.races)
                                                                : 0.0;
                aa_rows.push_back({{"config", config.name},
                                   {"executor", config.array_size > 0 ? "slurm pool" : config.slurm ? "slurm" : "local"},
                                   {"builders", config.builders},
                                   {"devices", config.devices},
                                   {"steps", measured.races},
                                   {"accepted", measured.accepted},
                                   {"stale", measured.stale},
                                   {"false_accept_rate", rate},
                                   {"ci95", {lower, upper}},
                                   {"device_runs", measured.device_runs},
                                   {"wall_secs", measured.wall_secs}});
                aa_table += fmt::format("{:<13} {:>7} {:>9} {:>7} {:>8.3f} [{:.3f}, {:.3f}] {:>13.1f} {:>8.1f}\n",
                                        config.name, measured.races, measured.accepted, measured.stale, rate, lower,
                                        upper, runs_per_race, measured.wall_secs);
            }
        }
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        nlohmann::json out = {{"benchmark", "throughput"},
                              {"device_runs_per_kernel", runs},
                              {"cores", cores},
                              {"profile", "default.profile, max_concurrent_runs = 4 (launch_overhead_ms as shipped)"},
                              {"configs", rows},
                              {"aa", {{"kernel", "attention_output"}, {"copies", aa_copies}, {"configs", aa_rows}}}};
        if (json) {
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << table << aa_table
                      << fmt::format("{} cores here: compiling and simulating share them; {} kernels, so builders "
                                     "beyond that take several candidates of one kernel a round\n",
                                     cores, kernels.kernels.size());
        }
        return 0;
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_throughput: error: " << error.what() << '\n';
        return 1;
    }
}
