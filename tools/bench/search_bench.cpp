// `bench search`: npuopt's campaign against two naive searches on the same device-run budget, on
// npu-sim, over the same templates and toolchain:
//
//   npuopt   the campaign driver with its heuristic roles and the cascade (race-based acceptance)
//   random   a role that samples a random template and random parameter values; single-run acceptance
//   hill     greedy hill-climbing: one parameter of the champion moved to a neighbouring value;
//            single-run acceptance (one launch of the candidate beats the champion's median)
//
// Every champion is then re-measured the same way (median of 7 seeded runs, each correct) and
// printed per kernel: baseline cycles, champion cycles, speedup, champion / weight-movement
// minimum, and the geomean speedup, side by side.
//
//   npuopt_bench_search [--json] [--device-runs N (per kernel)] [--knowledge-dir DIR] [--work DIR] [--full-kb]
//                       [--profile FILE] [--only npuopt,random,hill]
//
// The simulator's profile is --profile, else $NPU_SIM_PROFILE, else the compiled-in default; it is
// handed to the toolchain through the target's toolchain.env, as `bench kb` does. Only this
// program reads the profile (its sustained HBM bandwidth, for the true weight-movement minimum
// printed beside npuopt's own estimate); npuopt itself never does.

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/driver.hpp"
#include "campaign/evaluator.hpp"
#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/cascade.hpp"
#include "eval/speed_of_light.hpp"
#include "campaign/submission.hpp"
#include "campaign/workspace.hpp"
#include "search/roles.hpp"
#include "store/campaign_store.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

/// Random search: a random non-baseline template, each parameter a random value of its domain.
class RandomRole final : public search::Role {
public:
    std::string name() const override { return "random"; }
    std::vector<search::Proposal> propose(const search::SearchContext& context) override {
        std::mt19937_64 random(context.seed);
        std::vector<std::shared_ptr<search::Template>> families;
        for (const auto& family : context.templates) {
            if (!family->is_baseline()) families.push_back(family);
        }
        std::vector<search::Proposal> proposals;
        if (families.empty()) return proposals;
        for (int attempt = 0; attempt < 64 && proposals.empty(); ++attempt) {
            const auto& family = families[random() % families.size()];
            search::Assignment assignment;
            for (const auto& param : family->params()) {
                assignment[param.name] = param.values.empty() ? param.default_value
                                                              : param.values[random() % param.values.size()];
            }
            if (family->check_constraints(assignment)) continue;
            auto design = family->instantiate(assignment);
            if (context.is_known && context.is_known(design.content_hash)) continue;
            proposals.push_back({design, "random", "sample " + family->name(), "uniform random sample", std::nullopt});
        }
        return proposals;
    }
};

/// Greedy hill-climbing: move one parameter of the champion to a neighbouring value of its domain.
class HillClimbRole final : public search::Role {
public:
    std::string name() const override { return "hill"; }
    std::vector<search::Proposal> propose(const search::SearchContext& context) override {
        std::mt19937_64 random(context.seed);
        std::vector<search::Proposal> proposals;
        std::shared_ptr<search::Template> family;
        search::Assignment start;
        if (context.champion && !context.champion->is_baseline) {
            for (const auto& candidate : context.templates) {
                if (candidate->name() == context.champion->template_name) family = candidate;
            }
            start = context.champion->params;
        }
        if (!family) {  // from the baseline: a random family's default point
            std::vector<std::shared_ptr<search::Template>> families;
            for (const auto& candidate : context.templates) {
                if (!candidate->is_baseline()) families.push_back(candidate);
            }
            if (families.empty()) return proposals;
            family = families[random() % families.size()];
            start = family->default_assignment();
            if (!family->check_constraints(start)) {
                auto design = family->instantiate(start);
                if (!context.is_known || !context.is_known(design.content_hash)) {
                    proposals.push_back({design, "hill", "start " + family->name(), "default point", std::nullopt});
                    return proposals;
                }
            }
        }
        std::vector<search::Assignment> neighbours;
        for (const auto& param : family->params()) {
            for (std::size_t value_idx = 0; value_idx < param.values.size(); ++value_idx) {
                if (param.values[value_idx] != start[param.name]) continue;
                for (int step : {-1, 1}) {
                    auto next = static_cast<long>(value_idx) + step;
                    if (next < 0 || next >= static_cast<long>(param.values.size())) continue;
                    auto moved = start;
                    moved[param.name] = param.values[static_cast<std::size_t>(next)];
                    neighbours.push_back(moved);
                }
            }
        }
        std::shuffle(neighbours.begin(), neighbours.end(), random);
        for (const auto& assignment : neighbours) {
            if (family->check_constraints(assignment)) continue;
            auto design = family->instantiate(assignment);
            if (context.is_known && context.is_known(design.content_hash)) continue;
            proposals.push_back({design, "hill", "neighbour", "one parameter one step", std::nullopt});
            break;
        }
        return proposals;
    }
};

/// Single-run acceptance: one correct launch of the candidate faster than the champion's median.
class SingleRunEvaluator final : public campaign::Evaluator {
public:
    SingleRunEvaluator(eval::Cascade& cascade, campaign::Evaluator& inner, const target::Toolchain& toolchain)
        : m_cascade(&cascade), m_inner(&inner), m_toolchain(&toolchain) {}
    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext& kernel) override {
        if (!champion) return m_inner->evaluate(candidate, champion, kernel);  // the baseline, as npuopt does
        eval::Outcome outcome;
        // A compile check first, as npuopt's cascade does: it costs no device run.
        auto checked = m_toolchain->check(candidate.source_file);
        if (!checked.ok) {
            outcome.final_reason = "does not compile";
            return outcome;
        }
        auto measured = m_cascade->measure(candidate, kernel, std::vector<std::uint64_t>{m_seed++});
        outcome.device_runs = 1;
        outcome.correct = measured.all_passed;
        outcome.cycles_median = measured.cycles_median;
        outcome.champion_cycles_median = champion->cycles_median;
        if (measured.all_passed && measured.cycles_median && *measured.cycles_median > 0) {
            outcome.speedup = champion->cycles_median / *measured.cycles_median;
            outcome.accepted = *measured.cycles_median < champion->cycles_median;
        }
        outcome.final_reason = outcome.accepted ? "one run faster than the champion" : measured.reason.empty() ? "one run not faster" : measured.reason;
        return outcome;
    }
    eval::Outcome revalidate(const eval::Champion&, const eval::Champion&, const eval::KernelContext&) override {
        eval::Outcome outcome;
        outcome.accepted = true;  // naive searches never doubt their champion
        outcome.final_reason = "not re-validated (naive search)";
        return outcome;
    }
    double speed_of_light_cycles(const eval::KernelContext& kernel) override { return m_inner->speed_of_light_cycles(kernel); }
    std::string toolchain_version(std::string* why) override { return m_inner->toolchain_version(why); }

private:
    eval::Cascade* m_cascade;
    campaign::Evaluator* m_inner;
    const target::Toolchain* m_toolchain;
    std::uint64_t m_seed = 900000;
};

/// The simulator profile handed to the toolchain (none: its compiled-in default).
std::optional<fs::path> g_profile;

/// Point the workspace's toolchain at the profile, as `bench kb` does (the sandbox passes only
/// the target's toolchain.env).
void apply_profile(campaign::Workspace& workspace) {
    if (!g_profile) return;
    workspace.target.toolchain.env["NPU_SIM_PROFILE"] = g_profile->string();
    workspace.target.toolchain.read_only_paths.push_back(g_profile->parent_path());
    workspace.toolchain = std::make_unique<target::Toolchain>(workspace.target, workspace.sandbox, workspace.limits);
    workspace.toolchain->set_cache_dir(workspace.cache_dir);
}

/// The true sustained HBM bandwidth: the profile's value, else the simulator's compiled-in one.
double true_sustained_bytes_per_cycle() {
    const std::string key = "hbm_sustained_bytes_per_cycle";
    auto value_in = [&](const std::string& text, char separator) -> std::optional<double> {
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);) {
            auto at = line.find(key);
            if (at == std::string::npos || line.find('#') < at) continue;
            auto sep = line.find(separator, at + key.size());
            if (sep == std::string::npos) continue;
            try {
                return std::stod(line.substr(sep + 1));
            } catch (const std::exception&) {
                continue;
            }
        }
        return std::nullopt;
    };
    auto read = [](const fs::path& path) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    };
    if (g_profile) {
        if (auto value = value_in(read(*g_profile), '=')) return *value;
    }
    const fs::path defaults = fs::path(NPUOPT_SOURCE_DIR) / "tools" / "npu-sim" / "profiles" / "default.profile";
    if (auto value = value_in(read(defaults), '=')) return *value;
    throw Error(ErrorKind::io, "cannot read " + key + " from the simulator's profile " + defaults.string());
}

void init_campaign(const fs::path& dir, const config::TargetConfig& target, const config::KernelsConfig& kernels) {
    fs::create_directories(dir);
    std::vector<std::string> names;
    for (const auto& kernel : kernels.kernels) names.push_back(kernel.name);
    {
        std::ofstream out(dir / std::string(config::k_campaign_file_name));
        out << config::campaign_yaml_template(target.name, names, 1);
    }
    auto store = store::CampaignStore::open(dir / std::string(config::k_campaign_db_name));
    store.set_meta("target", target.name);
}

struct StrategyResult {
    std::string name;
    std::vector<campaign::KernelResult> kernels;
    double geomean = 0.0;
    std::int64_t device_runs = 0;
    double wall_secs = 0.0;
};

StrategyResult run_strategy(const std::string& name, const fs::path& dir, const std::optional<fs::path>& knowledge_dir,
                            std::int64_t device_runs) {
    auto start = std::chrono::steady_clock::now();
    auto workspace = campaign::open_workspace(dir, knowledge_dir);
    apply_profile(workspace);
    StrategyResult result;
    result.name = name;
    if (name == "npuopt") {
        campaign::RunOverrides overrides;
        overrides.device_runs = device_runs;
        result.device_runs = campaign::run_workspace(workspace, overrides).device_runs_used;
    } else {
        std::string version = workspace.toolchain_version();
        auto model = workspace.hardware_model();
        eval::CascadeConfig config;
        config.seed = workspace.campaign.seed;
        eval::Cascade cascade(*workspace.toolchain, *workspace.store, nullptr, model ? &*model : nullptr, config);
        campaign::CascadeEvaluator inner(cascade, *workspace.toolchain);
        SingleRunEvaluator evaluator(cascade, inner, *workspace.toolchain);
        campaign::CampaignOptions options;
        options.dir = workspace.dir;
        options.target = workspace.target.name;
        options.seed = workspace.campaign.seed;
        options.wall_budget_secs = 3600.0;
        options.device_run_budget = device_runs;
        campaign::RoleFactory roles = [name](const std::string&) {
            std::vector<std::unique_ptr<search::Role>> list;
            if (name == "random") list.push_back(std::make_unique<RandomRole>());
            else list.push_back(std::make_unique<HillClimbRole>());
            return list;
        };
        campaign::CampaignDriver driver(*workspace.store, evaluator, workspace.kernel_setups(), options, model, {}, roles);
        result.device_runs = driver.run().device_runs_used;
    }
    campaign::SubmitOptions submit;
    submit.out_dir = dir / "champions";
    try {
        auto submission = campaign::build_submission(workspace, submit);
        result.kernels = submission.kernels;
        result.geomean = submission.geomean;
    } catch (const Error& error) {
        std::cerr << fmt::format("{}: no verified champion: {}\n", name, error.what());
    }
    result.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

/// "a,b,c" → {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& text) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(text);
    while (std::getline(in, part, ',')) {
        if (!part.empty()) parts.push_back(part);
    }
    return parts;
}

/// The per-kernel figures of every strategy side by side, then the geomeans.
std::string side_by_side(const std::vector<StrategyResult>& results, const std::map<std::string, double>& true_min) {
    std::string text = fmt::format("{:<18} {:<8} {:>10} {:>10} {:>8} {:>9} {:>9}  {}\n", "kernel", "strategy", "baseline",
                                   "champion", "speedup", "÷min", "÷min(npu)", "champion template");
    std::vector<std::string> kernel_names;
    for (const auto& result : results) {
        for (const auto& kernel : result.kernels) {
            if (std::find(kernel_names.begin(), kernel_names.end(), kernel.kernel) == kernel_names.end()) {
                kernel_names.push_back(kernel.kernel);
            }
        }
    }
    auto cycles = [](const std::optional<double>& value) {
        return value ? fmt::format("{:.0f}", *value) : std::string("-");
    };
    for (const auto& name : kernel_names) {
        for (const auto& result : results) {
            for (const auto& kernel : result.kernels) {
                if (kernel.kernel != name) continue;
                auto found = true_min.find(name);
                double ratio = found != true_min.end() && kernel.champion_cycles && found->second > 0
                                   ? *kernel.champion_cycles / found->second
                                   : 0.0;
                text += fmt::format("{:<18} {:<8} {:>10} {:>10} {:>7.3f}x {:>8.3f}x {:>8.3f}x  {}\n", name, result.name,
                                    cycles(kernel.baseline_cycles), cycles(kernel.champion_cycles), kernel.speedup,
                                    ratio, kernel.champion_over_min, kernel.champion_template);
            }
        }
    }
    for (const auto& result : results) {
        text += fmt::format("geomean speedup {:<8} {:.3f}x  ({} device runs, {:.0f} s)\n", result.name, result.geomean,
                            result.device_runs, result.wall_secs);
    }
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    bool json = false;
    std::int64_t device_runs = 100;  // per kernel; tools/bench/search_results.md was measured at 100
    std::optional<fs::path> knowledge_dir;
    fs::path work = fs::path(NPUOPT_BUILD_DIR) / "bench-search";
    bool quick_kb = true;
    std::vector<std::string> strategies = {"npuopt", "random", "hill"};
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        std::string arg = argv[arg_idx];
        auto value = [&]() -> std::string {
            if (arg_idx + 1 >= argc) throw Error(ErrorKind::invalid_input, arg + " needs a value");
            return argv[++arg_idx];
        };
        try {
            if (arg == "--json") json = true;
            else if (arg == "--device-runs") device_runs = std::stoll(value());
            else if (arg == "--knowledge-dir") knowledge_dir = value();
            else if (arg == "--work") work = fs::absolute(value());
            else if (arg == "--full-kb") quick_kb = false;
            else if (arg == "--profile") g_profile = fs::absolute(value());
            else if (arg == "--only") strategies = split_commas(value());
            else throw Error(ErrorKind::invalid_input, "unknown argument " + arg);
            if (device_runs <= 0) throw Error(ErrorKind::invalid_input, "--device-runs must be positive");
            for (const auto& name : strategies) {
                if (name != "npuopt" && name != "random" && name != "hill") {
                    throw Error(ErrorKind::invalid_input,
                                fmt::format("--only: unknown strategy '{}' (npuopt, random, hill)", name));
                }
            }
            if (strategies.empty()) throw Error(ErrorKind::invalid_input, "--only: no strategy named");
        } catch (const std::exception& error) {
            std::cerr << "npuopt_bench_search: error: " << error.what() << '\n';
            return 2;
        }
    }
    if (!g_profile) {
        if (const char* env = std::getenv("NPU_SIM_PROFILE"); env && *env) g_profile = fs::absolute(env);
    }
    if (g_profile && !fs::is_regular_file(*g_profile)) {
        std::cerr << "npuopt_bench_search: error: profile " << g_profile->string() << " does not exist\n";
        return 2;
    }
    try {
        auto root = config::locate_knowledge_dir(knowledge_dir);
        auto target = config::load_target(root, "npu-sim");
        auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
        // The true weight-movement minimum per kernel (the profile's sustained bandwidth).
        const double sustained = true_sustained_bytes_per_cycle();
        std::map<std::string, double> true_min;
        for (const auto& kernel : kernels.kernels) {
            true_min[kernel.name] = eval::kernel_min_bytes(kernel, {}) / sustained;
        }
        fs::remove_all(work);
        // One knowledge base for all: build it once, copy the database.
        const fs::path base = work / "kb";
        init_campaign(base, target, kernels);
        const auto kb_start = std::chrono::steady_clock::now();
        {
            auto workspace = campaign::open_workspace(base, knowledge_dir);
            apply_profile(workspace);
            campaign::KbBuildOptions options;
            options.quick = quick_kb;
            campaign::build_knowledge(workspace, options);
        }
        const double kb_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - kb_start).count();
        // --device-runs is per kernel (as `npuopt bench --help` says); the campaign's budget is the sum.
        const std::int64_t campaign_runs = device_runs * static_cast<std::int64_t>(kernels.kernels.size());
        std::vector<StrategyResult> results;
        for (const auto& name : strategies) {
            const fs::path dir = work / name;
            fs::create_directories(dir);
            fs::copy_file(base / std::string(config::k_campaign_file_name), dir / std::string(config::k_campaign_file_name));
            fs::copy_file(base / std::string(config::k_campaign_db_name), dir / std::string(config::k_campaign_db_name));
            std::cerr << fmt::format("== {} ({} device runs)\n", name, campaign_runs);
            results.push_back(run_strategy(name, dir, knowledge_dir, campaign_runs));
            // as each strategy ends, so that a long run that is cut short still leaves its figures
            std::cerr << side_by_side({results.back()}, true_min) << std::flush;
        }
        if (json) {
            nlohmann::json out = {{"device_run_budget_per_kernel", device_runs},
                                  {"device_run_budget", campaign_runs},
                                  {"profile", g_profile ? g_profile->string() : std::string("(compiled-in default)")},
                                  {"true_sustained_bytes_per_cycle", sustained},
                                  {"kb_build_secs", kb_secs},
                                  {"strategies", nlohmann::json::array()}};
            for (const auto& result : results) {
                auto entry = campaign::results_json(result.kernels);
                for (auto& kernel : entry["kernels"]) {
                    double minimum = true_min[kernel["kernel"].get<std::string>()];
                    kernel["true_min_cycles"] = minimum;
                    kernel["champion_over_true_min"] =
                        kernel["champion_cycles"].is_number() && minimum > 0
                            ? nlohmann::json(kernel["champion_cycles"].get<double>() / minimum)
                            : nlohmann::json(nullptr);
                }
                entry["strategy"] = result.name;
                entry["device_runs_used"] = result.device_runs;
                entry["wall_secs"] = result.wall_secs;
                out["strategies"].push_back(entry);
            }
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << fmt::format("profile {} (true sustained HBM {} B/cycle), budget {} device runs per strategy; "
                                     "÷min = champion / true weight-movement minimum, ÷min(npu) = by npuopt's fitted model\n",
                                     g_profile ? g_profile->string() : std::string("(compiled-in default)"), sustained,
                                     campaign_runs)
                      << side_by_side(results, true_min);
        }
    } catch (const Error& error) {
        std::cerr << "npuopt_bench_search: error: " << error.what() << '\n';
        return 1;
    }
    return 0;
}
