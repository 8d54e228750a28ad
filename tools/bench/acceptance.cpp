// Benchmark of the acceptance rule on npu-sim, side by side with two naive rules, all measured
// from the same device launches in one run:
//
//   ours     the judge's sequential signed-rank race (eval/judge.hpp), interleaved launches
//   cascade  what the campaign's cascade decides from the same launches: a clear win (the slowest of
//            the first 4 candidate launches under 0.90x the champion's median) accepts, a second
//            look (both first 2 over 1.0x) rejects, the screen (median of 4 over 0.98x) rejects,
//            else the race decides
//   naive 1  accept when the candidate's first launch is faster than the champion's
//   naive 5  accept when the mean of 5 launches each is faster
//
// Scenarios: A/A races of identical designs (every accept is false), a true 3% and a true 1%
// improvement. The designs are the official attention_output baseline at a small shape with a
// padding loop of vector ops whose length sets the cycle ratio, measured exactly on a noiseless
// copy of the profile. Races run on a copy of the default profile with launch_overhead_ms = 0
// (noise, outliers, drift and transient failures as shipped).
//
// Usage: acceptance [--json] [--aa N] [--races N] [--jobs N] [--npuc PATH] [--seed S] [--work DIR]
//                   [--source DIR] [--device-slots N]
//   --source DIR        the npuopt source tree to read the profile, baseline and target.yaml from
//                       (default: the one this binary was built from)
//   --device-slots N    max_concurrent_runs in the racing copy of the profile (default: the
//                       profile's). Only wall time changes: the slots queue launches, the noise
//                       and cycles do not depend on them. Use with --jobs N on a machine with cores.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/evaluation.hpp"
#include "eval/judge.hpp"
#include "eval/race.hpp"
#include "eval/sequential.hpp"
#include "eval/stats.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt;
using namespace npuopt::eval;

namespace {

struct Options {
    bool json = false;
    int aa_races = 200;
    int effect_races = 100;
    int jobs = 2;
    std::uint64_t seed = 20261129;
    fs::path npuc;
    fs::path work;
    fs::path source = NPUOPT_SOURCE_DIR;
    int device_slots = 0;  ///< 0: the profile's max_concurrent_runs
    std::string command;
    std::map<std::string, std::int64_t> shape{{"hidden", 256}, {"q_heads", 2}, {"head_dim", 64}};
};

[[noreturn]] void usage_error(const std::string& message) {
    std::cerr << "acceptance: error: " << message
              << "\nusage: acceptance [--json] [--aa N] [--races N] [--jobs N] [--npuc PATH] [--seed S] [--work DIR] "
                 "[--source DIR] [--device-slots N]\n";
    std::exit(2);
}

Options parse_options(int argc, char** argv) {
    Options options;
    options.npuc = fs::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
    options.work = fs::path(NPUOPT_BUILD_DIR) / "bench-acceptance";
    auto value = [&](int& arg_idx) -> std::string {
        if (arg_idx + 1 >= argc) usage_error(fmt::format("{} needs a value", argv[arg_idx]));
        return argv[++arg_idx];
    };
    auto positive = [&](const std::string& flag, const std::string& text) {
        try {
            const int parsed = std::stoi(text);
            if (parsed > 0) return parsed;
        } catch (const std::exception&) {
        }
        usage_error(fmt::format("{} expects a positive integer, got '{}'", flag, text));
    };
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string arg = argv[arg_idx];
        if (arg == "--json") options.json = true;
        else if (arg == "--aa") options.aa_races = positive(arg, value(arg_idx));
        else if (arg == "--races") options.effect_races = positive(arg, value(arg_idx));
        else if (arg == "--jobs") options.jobs = positive(arg, value(arg_idx));
        else if (arg == "--seed") options.seed = static_cast<std::uint64_t>(positive(arg, value(arg_idx)));
        else if (arg == "--npuc") options.npuc = value(arg_idx);
        else if (arg == "--work") options.work = value(arg_idx);
        else if (arg == "--source") options.source = value(arg_idx);
        else if (arg == "--device-slots") options.device_slots = positive(arg, value(arg_idx));
        else if (arg == "--help" || arg == "-h") usage_error("help");
        else usage_error(fmt::format("unknown argument '{}'", arg));
    }
    options.work = fs::absolute(options.work);  // the toolchain runs in its own scratch directory
    options.npuc = fs::absolute(options.npuc);
    options.source = fs::absolute(options.source);
    for (int arg_idx = 0; arg_idx < argc; ++arg_idx) options.command += (arg_idx ? " " : "") + std::string(argv[arg_idx]);
    if (!fs::exists(options.source / "tools" / "npu-sim" / "profiles" / "default.profile")) {
        usage_error(fmt::format("--source {} has no tools/npu-sim/profiles/default.profile", options.source.string()));
    }
    if (!fs::exists(options.npuc)) {
        usage_error(fmt::format("npuc not found at {} (build npu-sim, or pass --npuc)", options.npuc.string()));
    }
    return options;
}

std::string read_file(const fs::path& path) {
    std::ifstream stream(path);
    if (!stream) throw Error(ErrorKind::io, fmt::format("cannot read {}", path.string()));
    std::stringstream buffer;
    buffer << stream.rdbuf();
    return buffer.str();
}

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream stream(path);
    if (!(stream << text)) throw Error(ErrorKind::io, fmt::format("cannot write {}", path.string()));
}

/// A copy of the default profile with some keys replaced.
fs::path write_profile(const fs::path& source, const fs::path& dir, const std::string& name,
                       const std::map<std::string, std::string>& keys) {
    std::string text = read_file(source / "tools" / "npu-sim" / "profiles" / "default.profile");
    for (const auto& [key, value] : keys) {
        const std::regex line("(^|\n)" + key + " *=[^\n]*");
        if (!std::regex_search(text, line)) text += fmt::format("\n{} = {}\n", key, value);
        text = std::regex_replace(text, line, "$1" + key + " = " + value);
    }
    const fs::path path = dir / name;
    write_file(path, text);
    return path;
}

/// The baseline attention_output with `pad` serial vector ops on slice 1 before its work.
fs::path write_design(const fs::path& source, const fs::path& dir, const std::string& name, int pad) {
    std::string text = read_file(source / "dsl_templates" / "npu-sim" / "baseline_attention_output.rs");
    const std::string anchor = "fn ao(k: &mut Ctx) {";
    const auto at = text.find(anchor);
    if (at == std::string::npos) throw Error(ErrorKind::internal, "baseline_attention_output.rs has no fn ao");
    text.insert(at + anchor.size(), fmt::format(
        "\n    // benchmark padding: {} serial vector ops on slice 1\n"
        "    let pad_v = k.vrf_alloc(1, 16);\n"
        "    for _ in 0..{} {{\n        let t = k.vfill(pad_v, 0.0);\n        k.wait(t);\n    }}\n",
        pad, pad));
    const fs::path path = dir / (name + ".rs");
    write_file(path, text);
    return path;
}

target::Toolchain make_toolchain(const Options& options, const fs::path& profile, const fs::path& cache) {
    auto target = config::load_target_config(options.source / "knowledge" / "npu-sim" / "target.yaml");
    target.toolchain.bin = fs::absolute(options.npuc).string();
    target.toolchain.env["NPU_SIM_PROFILE"] = profile.string();
    target.toolchain.env["NPUC_CACHE_DIR"] = cache.string();
    proc::SandboxPolicy sandbox;
    sandbox.enabled = false;  // the benchmark runs the trusted baseline only; the sandbox would hide the cache
    return target::Toolchain(std::move(target), sandbox);
}

double exact_cycles(const target::Toolchain& toolchain, const fs::path& file, const Options& options) {
    target::RunRequest request;
    request.file = file;
    request.kernel = "attention_output";
    request.seed = 1;
    request.check = true;
    request.shape = options.shape;
    const auto result = toolchain.run(request);
    if (result.call.status != target::CallStatus::ok || result.cycles.empty() || !result.verify ||
        !result.verify->passed) {
        throw Error(ErrorKind::toolchain, fmt::format("benchmark design {} does not run correctly: {}", file.string(),
                                                      result.call.message));
    }
    return result.cycles.front();
}

/// One race and what the naive rules would have said from its first launches.
struct RaceRecord {
    Decision decision = Decision::inconclusive;
    std::size_t launches = 0;
    std::size_t transient_failures = 0;
    bool naive_one = false;
    bool naive_five = false;
    bool clear_win = false;    ///< the cascade's screen would accept without a race
    bool second_look = false;  ///< the cascade's second look would reject before the race
    bool screen_pass = false;  ///< the cascade's screen (median of 4 under 0.98x) would let it race
    double log_ratio_estimate = 0.0;
};

/// Cycles per pair index of the successful (last) attempt of each side.
struct PairTimes {
    std::vector<std::optional<double>> champion, candidate;
    void set(std::size_t pair_idx, Side side, double cycles) {
        auto& list = side == Side::champion ? champion : candidate;
        if (list.size() <= pair_idx) list.resize(pair_idx + 1);
        list[pair_idx] = cycles;
    }
    bool complete(std::size_t pairs) const {
        if (champion.size() < pairs || candidate.size() < pairs) return false;
        for (std::size_t pair_idx = 0; pair_idx < pairs; ++pair_idx) {
            if (!champion[pair_idx] || !candidate[pair_idx]) return false;
        }
        return true;
    }
};

RaceRecord run_one(const Judge& judge, const LaunchSpec& champion, const LaunchSpec& candidate, std::uint64_t seed) {
    RaceConfig config;
    config.seed = seed;
    const JudgeReport report = run_race(std::make_shared<const SequentialDesign>(judge.design()), config,
                                        [&](Side side, std::uint64_t input_seed) {
                                            return judge.launch(side == Side::champion ? champion : candidate,
                                                                input_seed);
                                        });
    RaceRecord record;
    record.decision = report.verdict.decision;
    record.launches = report.verdict.launches;
    record.transient_failures = report.verdict.transient_failures;
    record.log_ratio_estimate = report.verdict.test.log_ratio_estimate;
    PairTimes times;
    for (const auto& observation : report.observations) {
        if (observation.secs && !observation.error) times.set(observation.pair_idx, observation.side, *observation.secs);
    }
    // The naive rules need 5 complete pairs, the cascade's screen rules 4 + the confirming champion
    // launches; a race that stopped earlier gets extra pairs, launched the same way (fresh seed,
    // alternating order), which only these rules see.
    const CascadeConfig cascade_defaults;
    const std::size_t needed =
        std::max<std::size_t>(5, 4 + static_cast<std::size_t>(std::max(0, cascade_defaults.clear_win_champion_launches)));
    std::mt19937_64 extra_seeds(seed ^ 0x5eed'0f'e11a'b1e5ULL);
    std::size_t pair_idx = 0;
    int failures = 0;
    while (!times.complete(needed) && failures < 20) {
        while (pair_idx < needed && times.champion.size() > pair_idx && times.candidate.size() > pair_idx &&
               times.champion[pair_idx] && times.candidate[pair_idx]) {
            ++pair_idx;
        }
        if (pair_idx >= needed) break;
        const std::uint64_t input_seed = extra_seeds();
        const std::array<Side, 2> order = pair_idx % 2 == 0 ? std::array{Side::champion, Side::candidate}
                                                            : std::array{Side::candidate, Side::champion};
        for (Side side : order) {
            const auto launch = judge.launch(side == Side::champion ? champion : candidate, input_seed);
            if (launch.result.secs && !launch.result.error) {
                times.set(pair_idx, side, *launch.result.secs);
            } else {
                ++failures;
            }
        }
    }
    if (times.complete(needed)) {
        record.naive_one = *times.candidate[0] < *times.champion[0];
        double champion_sum = 0.0;
        double candidate_sum = 0.0;
        for (std::size_t index = 0; index < 5; ++index) {
            champion_sum += *times.champion[index];
            candidate_sum += *times.candidate[index];
        }
        record.naive_five = candidate_sum < champion_sum;
        // The cascade's rules before the race (CascadeConfig defaults), on the same launches: the
        // champion's median over its first 4 launches stands for its recorded median (a champion
        // accepted at the screen has no more), its next launches for the screen's confirming ones;
        // the candidate's first 4 launches for its correctness launches.
        std::vector<double> champion_times;
        for (std::size_t index = 0; index < 4; ++index) champion_times.push_back(*times.champion[index]);
        const double champion_median = median(champion_times);
        double reference = champion_median;
        for (std::size_t index = 4; index < needed; ++index) reference = std::min(reference, *times.champion[index]);
        double slowest = 0.0;
        for (std::size_t index = 0; index < 4; ++index) slowest = std::max(slowest, *times.candidate[index]);
        record.clear_win = slowest < cascade_defaults.clear_win_ratio * reference;
        record.second_look = std::min(*times.candidate[0], *times.candidate[1]) >
                             cascade_defaults.second_look_ratio * champion_median;
        const std::vector<double> first_four{*times.candidate[0], *times.candidate[1], *times.candidate[2],
                                             *times.candidate[3]};
        record.screen_pass = median(first_four) <= cascade_defaults.screen_max_ratio * champion_median;
    }
    return record;
}

struct Scenario {
    std::string name;
    LaunchSpec champion;
    LaunchSpec candidate;
    double true_speedup = 1.0;  ///< exact: champion cycles / candidate cycles (noiseless profile)
    int races = 0;
    std::vector<RaceRecord> records;
};

nlohmann::json rate_json(std::size_t successes, std::size_t trials) {
    const auto [lower, upper] = wilson_interval(successes, trials);
    return {{"rate", trials ? static_cast<double>(successes) / static_cast<double>(trials) : 0.0},
            {"count", successes},
            {"of", trials},
            {"ci95", {lower, upper}}};
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Options options = parse_options(argc, argv);
        const auto wall_start = std::chrono::steady_clock::now();
        fs::create_directories(options.work / "cache");
        std::map<std::string, std::string> racing_keys{{"launch_overhead_ms", "0"}};
        if (options.device_slots > 0) racing_keys["max_concurrent_runs"] = std::to_string(options.device_slots);
        const fs::path racing_profile = write_profile(options.source, options.work, "racing.profile", racing_keys);
        const fs::path exact_profile = write_profile(
            options.source, options.work, "exact.profile",
            {{"launch_overhead_ms", "0"}, {"noise_sigma", "0"}, {"outlier_rate", "0"}, {"drift_per_hour", "0"},
             {"transient_failure_rate", "0"}});
        const auto racing = make_toolchain(options, racing_profile, options.work / "cache");
        const auto exact = make_toolchain(options, exact_profile, options.work / "cache");

        // Calibrate the padding: cycles are linear in the pad length.
        const double base_cycles = exact_cycles(exact, write_design(options.source, options.work, "pad0", 0), options);
        const double pad200_cycles = exact_cycles(exact, write_design(options.source, options.work, "pad200", 200), options);
        const double cycles_per_pad = (pad200_cycles - base_cycles) / 200.0;
        if (!(cycles_per_pad > 0.0)) throw Error(ErrorKind::internal, "the padding loop costs no cycles");
        const int champion_pad = static_cast<int>(std::lround(0.08 * base_cycles / cycles_per_pad));
        const double champion_target = base_cycles + champion_pad * cycles_per_pad;
        auto pad_for = [&](double speedup) {
            return static_cast<int>(std::lround((champion_target / speedup - base_cycles) / cycles_per_pad));
        };
        const fs::path champion_file = write_design(options.source, options.work, "champion", champion_pad);
        const fs::path twin_file = write_design(options.source, options.work, "champion_twin", champion_pad);
        const fs::path faster3_file = write_design(options.source, options.work, "faster3", pad_for(1.03));
        const fs::path faster1_file = write_design(options.source, options.work, "faster1", pad_for(1.01));
        const double champion_cycles = exact_cycles(exact, champion_file, options);
        const double twin_cycles = exact_cycles(exact, twin_file, options);
        const double faster3_cycles = exact_cycles(exact, faster3_file, options);
        const double faster1_cycles = exact_cycles(exact, faster1_file, options);

        const std::string kernel = "attention_output";
        auto spec = [&](const fs::path& file) { return LaunchSpec{file, kernel, options.shape, {}}; };
        std::vector<Scenario> scenarios;
        scenarios.push_back({"aa", spec(champion_file), spec(twin_file), champion_cycles / twin_cycles,
                             options.aa_races, {}});
        scenarios.push_back({"true_3pct", spec(champion_file), spec(faster3_file), champion_cycles / faster3_cycles,
                             options.effect_races, {}});
        scenarios.push_back({"true_1pct", spec(champion_file), spec(faster1_file), champion_cycles / faster1_cycles,
                             options.effect_races, {}});

        const SequentialConfig acceptance;  // the defaults the cascade uses
        const auto design = std::make_shared<const SequentialDesign>(make_sequential_design(acceptance));
        const Judge judge(racing, design);

        // Work items interleave the scenarios so slow drift touches them alike.
        struct Item { std::size_t scenario_idx; int race_idx; };
        std::vector<Item> items;
        const int most = std::max(options.aa_races, options.effect_races);
        for (int race_idx = 0; race_idx < most; ++race_idx) {
            for (std::size_t scenario_idx = 0; scenario_idx < scenarios.size(); ++scenario_idx) {
                if (race_idx < scenarios[scenario_idx].races) items.push_back({scenario_idx, race_idx});
            }
        }
        for (auto& scenario : scenarios) scenario.records.resize(static_cast<std::size_t>(scenario.races));
        std::atomic<std::size_t> next_item{0};
        std::atomic<std::size_t> done{0};
        std::mutex progress_mutex;
        auto worker = [&] {
            while (true) {
                const std::size_t item_idx = next_item.fetch_add(1);
                if (item_idx >= items.size()) return;
                const Item& item = items[item_idx];
                Scenario& scenario = scenarios[item.scenario_idx];
                const std::uint64_t race_seed = options.seed * 1000003ULL + item_idx;
                scenario.records[static_cast<std::size_t>(item.race_idx)] =
                    run_one(judge, scenario.champion, scenario.candidate, race_seed);
                const std::size_t finished = ++done;
                if (finished % 25 == 0) {  // stderr: the JSON on stdout stays clean
                    std::lock_guard lock(progress_mutex);
                    std::cerr << fmt::format("acceptance: {}/{} races\n", finished, items.size());
                }
            }
        };
        std::vector<std::thread> threads;
        for (int job = 0; job < options.jobs; ++job) threads.emplace_back(worker);
        for (auto& thread : threads) thread.join();

        // Figures, side by side.
        nlohmann::json rules = nlohmann::json::array();
        struct RuleView { std::string name; std::string key; };
        const std::vector<RuleView> views{{"ours: sequential signed-rank race (alpha 0.05, beta 0.10, min effect 1%, 4..30 pairs)", "ours"},
                                          {"cascade: clear win 0.90x, second look 1.0x, screen 0.98x, then the race", "cascade"},
                                          {"naive: accept if one run is faster", "naive_one"},
                                          {"naive: accept if the mean of 5 runs each is faster", "naive_five"}};
        std::size_t transient_total = 0;
        for (const auto& scenario : scenarios) {
            for (const auto& record : scenario.records) transient_total += record.transient_failures;
        }
        for (const auto& view : views) {
            nlohmann::json entry{{"rule", view.name}, {"key", view.key}};
            std::vector<double> runs;
            for (const auto& scenario : scenarios) {
                std::size_t accepted = 0;
                std::size_t rejected = 0;
                std::vector<double> scenario_runs;
                for (const auto& record : scenario.records) {
                    bool accept = false;
                    double launches = 0.0;
                    if (view.key == "ours") {
                        accept = record.decision == Decision::accept;
                        rejected += record.decision == Decision::reject ? 1 : 0;
                        launches = static_cast<double>(record.launches);
                    } else if (view.key == "cascade") {
                        const bool raced = !record.clear_win && !record.second_look && record.screen_pass;
                        accept = record.clear_win || (raced && record.decision == Decision::accept);
                        rejected += !accept && (!raced || record.decision == Decision::reject) ? 1 : 0;
                        launches = record.clear_win || (!raced && !record.second_look) ? 4.0
                                   : record.second_look                                 ? 2.0
                                                                                        : 4.0 + static_cast<double>(record.launches);
                    } else if (view.key == "naive_one") {
                        accept = record.naive_one;
                        launches = 2.0;
                    } else {
                        accept = record.naive_five;
                        launches = 10.0;
                    }
                    accepted += accept ? 1 : 0;
                    scenario_runs.push_back(launches);
                    runs.push_back(launches);
                }
                nlohmann::json figures = rate_json(accepted, scenario.records.size());
                if (view.key == "ours" || view.key == "cascade") figures["rejected"] = rate_json(rejected, scenario.records.size());
                figures["runs_median"] = scenario_runs.empty() ? 0.0 : median(scenario_runs);
                figures["runs_p95"] = scenario_runs.empty() ? 0.0 : quantile(scenario_runs, 0.95);
                entry[scenario.name == "aa" ? "aa_false_accept" : "accept_" + scenario.name] = figures;
            }
            entry["runs_per_decision_median"] = runs.empty() ? 0.0 : median(runs);
            entry["runs_per_decision_p95"] = runs.empty() ? 0.0 : quantile(runs, 0.95);
            rules.push_back(entry);
        }
        const double wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
        nlohmann::json result{
            {"benchmark", "acceptance"},
            {"target", "npu-sim"},
            {"kernel", kernel},
            {"shape", target::format_shape(options.shape)},
            {"profile", options.device_slots > 0
                            ? fmt::format("default.profile with launch_overhead_ms = 0, max_concurrent_runs = {}",
                                          options.device_slots)
                            : std::string("default.profile with launch_overhead_ms = 0")},
            {"designs",
             {{"champion_cycles", champion_cycles},
              {"aa_true_speedup", scenarios[0].true_speedup},
              {"true_3pct_speedup", scenarios[1].true_speedup},
              {"true_1pct_speedup", scenarios[2].true_speedup},
              {"measured_on", "noiseless copy of the profile (exact model cycles)"}}},
            {"races", {{"aa", options.aa_races}, {"true_3pct", options.effect_races}, {"true_1pct", options.effect_races}}},
            {"transient_failures_retried", transient_total},
            {"rules", rules},
            {"goals", {{"aa_false_accept", "<= 0.01 (ours)"}, {"accept_true_3pct", ">= 0.90 (ours)"}}},
            {"wall_secs", wall_secs},
            {"jobs", options.jobs},
            {"command", options.command}};
        if (options.json) {
            std::cout << result.dump(2) << "\n";
            return 0;
        }
        std::cout << fmt::format("acceptance benchmark on npu-sim ({} at {}; launch overhead 0), {:.0f} s\n", kernel,
                                 target::format_shape(options.shape), wall_secs);
        std::cout << fmt::format("designs: true speedups A/A {:.4f}, '3%' {:.4f}, '1%' {:.4f} (exact model cycles)\n\n",
                                 scenarios[0].true_speedup, scenarios[1].true_speedup, scenarios[2].true_speedup);
        std::cout << fmt::format("{:<52} {:>18} {:>18} {:>18} {:>12}\n", "rule", "A/A false accept", "accept at 3%",
                                 "accept at 1%", "runs med/p95");
        for (const auto& entry : rules) {
            auto cell = [&](const char* key) {
                const auto& figures = entry[key];
                return fmt::format("{:.1f}% ({}/{})", 100.0 * figures["rate"].get<double>(), figures["count"].get<std::size_t>(),
                                   figures["of"].get<std::size_t>());
            };
            std::string name = entry["rule"].get<std::string>();
            if (name.size() > 52) name = name.substr(0, 49) + "...";
            std::cout << fmt::format("{:<52} {:>18} {:>18} {:>18} {:>12}\n", name, cell("aa_false_accept"),
                                     cell("accept_true_3pct"), cell("accept_true_1pct"),
                                     fmt::format("{:.0f}/{:.0f}", entry["runs_per_decision_median"].get<double>(),
                                                 entry["runs_per_decision_p95"].get<double>()));
        }
        std::cout << fmt::format("\ngoals: A/A false accept <= 1%, accept at 3% >= 90% (ours); {} transient failures "
                                 "retried\n",
                                 transient_total);
        return 0;
    } catch (const Error& error) {
        std::cerr << "acceptance: error: " << error.what() << "\n";
        return 1;
    }
}
