#include "campaign/submission.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "campaign/driver.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "core/hash.hpp"
#include "eval/cascade.hpp"
#include "eval/seed_stream.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write", file.string()));
}

std::string utc_now() {
    std::time_t now = std::time(nullptr);
    std::tm parts{};
    gmtime_r(&now, &parts);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
    return text;
}

/// The design's source in the campaign's designs/ folder (the sandbox can read it there).
fs::path materialise(const fs::path& campaign_dir, const store::DesignRecord& design, const std::string& extension) {
    auto dir = campaign_dir / "designs";
    fs::create_directories(dir);
    auto file = dir / (design.kernel + "-" + design.content_hash.substr(0, 16) + extension);
    if (!fs::exists(file)) write_text(file, design.source.value_or(""));
    return file;
}

nlohmann::json optional_json(const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

double geomean_speedup(const std::vector<KernelResult>& results) {
    double log_sum = 0.0;
    int count = 0;
    for (const auto& result : results) {
        if (result.speedup > 0) {
            log_sum += std::log(result.speedup);
            ++count;
        }
    }
    return count ? std::exp(log_sum / count) : 0.0;
}

std::string render_results_table(const std::vector<KernelResult>& results) {
    auto cell = [](const std::optional<double>& value) { return value ? fmt::format("{:.0f}", *value) : std::string("-"); };
    std::string text = fmt::format("{:<20} {:<12} {:>14} {:>14} {:>9} {:>14}\n", "kernel", "shape", "reference cyc",
                                   "champion cyc", "speedup", "champion/min");
    for (const auto& result : results) {
        text += fmt::format("{:<20} {:<12} {:>14} {:>14} {:>9} {:>14}{}{}\n", result.kernel,
                            result.shape.empty() ? "-" : result.shape, cell(result.baseline_cycles),
                            cell(result.champion_cycles),
                            result.speedup > 0 ? fmt::format("{:.3f}x", result.speedup) : std::string("-"),
                            result.champion_over_min > 0 ? fmt::format("{:.3f}x", result.champion_over_min)
                                                         : std::string("-"),
                            result.reason.empty() ? "" : "  (" + result.reason + ")",
                            result.reference == "baseline" ? "" : "  [reference: " + result.reference + "]");
    }
    double geomean = geomean_speedup(results);
    text += fmt::format("{:<20} {:>14} {:>14} {:>9}\n", "geomean", "", "",
                        geomean > 0 ? fmt::format("{:.3f}x", geomean) : std::string("-"));
    return text;
}

nlohmann::json results_json(const std::vector<KernelResult>& results) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& result : results) {
        kernels.push_back({{"kernel", result.kernel},
                           {"shape", result.shape},
                           {"reference", result.reference},
                           {"champion_hash", result.champion_hash},
                           {"champion_template", result.champion_template},
                           {"source_file", result.source_file},
                           {"source_sha256", result.source_sha256},
                           {"baseline_cycles", optional_json(result.baseline_cycles)},
                           {"champion_cycles", optional_json(result.champion_cycles)},
                           {"baseline_runs", result.baseline_runs},
                           {"champion_runs", result.champion_runs},
                           {"all_runs_passed_correctness", result.all_passed},
                           {"speedup", result.speedup},
                           {"weight_movement_min_cycles", result.weight_min_cycles},
                           {"champion_over_min", result.champion_over_min},
                           {"reason", result.reason}});
    }
    return {{"kernels", kernels}, {"geomean_speedup", geomean_speedup(results)}};
}

namespace {

/// What every kernel's re-measurement shares: the campaign, its champions, the cascade that
/// measures, and the replay log being written.
struct SubmitRun {
    Workspace& workspace;
    const SubmitOptions& options;
    store::TreeStore& trees;
    eval::Cascade& cascade;
    const knowledge::HardwareModel* model;
    const fs::path& dir;
    const std::string& toolchain_version;
    std::ostringstream& replay;
    PhaseClock clock;                  ///< the re-verification's progress and ETA
    std::size_t measurements_total = 0;  ///< champion and reference of every kernel
    std::size_t measurements_done = 0;
};

/// What the kernel's speedup is measured against: the baseline, or where it failed, the first
/// correct design (the first champion).
std::optional<store::DesignRecord> reference_design(Workspace& workspace, store::TreeStore& trees,
                                                    const std::string& kernel, const std::string& baseline_failure) {
    std::optional<store::DesignRecord> baseline_design;
    if (baseline_failure.empty()) {
        for (const auto& design : workspace.store->list_designs(workspace.target.name, kernel)) {
            if (design.template_name == "baseline") baseline_design = design;
        }
    } else if (auto path = trees.champion_path(kernel, true); !path.empty()) {
        baseline_design = workspace.store->find_design(path.front().design_id);
    }
    return baseline_design;
}

/// One kernel of the submission: its champion and reference re-verified and re-measured on the
/// same seeds, the champion's source written into the submission directory.
KernelResult submit_kernel(SubmitRun& run, const KernelSetup& setup) {
    Workspace& workspace = run.workspace;
    const SubmitOptions& options = run.options;
    store::TreeStore& trees = run.trees;
    std::ostringstream& replay = run.replay;
    KernelResult result;
    result.kernel = setup.spec.name;
    result.shape = setup.spec.shape_name;
    if (run.model) result.weight_min_cycles = run.model->weight_movement_min_cycles(setup.context.min_bytes_moved);
    const std::string extension =
        setup.spec.baseline.has_extension() ? setup.spec.baseline.extension().string() : ".rs";
    auto champion = trees.current_champion(setup.spec.name);
    std::optional<store::DesignRecord> champion_design;
    if (champion) champion_design = workspace.store->find_design(champion->design_id);
    if (!champion_design || !champion_design->source) {
        result.reason = "no champion";
        replay << fmt::format("{}: no champion in the campaign database\n", result.kernel);
        return result;
    }
    // The reference: the baseline, or where it failed, the first correct design (the first champion).
    const auto kernel_state =
        nlohmann::json::parse(trees.state("kernel/" + setup.spec.name).value_or("{}"), nullptr, false);
    const std::string baseline_failure =
        kernel_state.is_object() ? kernel_state.value("baseline_failure", std::string()) : std::string();
    result.reference = reference_text(baseline_failure);
    const std::optional<store::DesignRecord> baseline_design =
        reference_design(workspace, trees, setup.spec.name, baseline_failure);
    // The same seeds for champion and baseline (a paired comparison), hashed from the campaign
    // seed, the kernel and the toolchain version: reproducible, never guessable by a kernel.
    std::vector<std::uint64_t> seeds;
    eval::SeedStream seed_stream(workspace.campaign.seed, setup.spec.name, "submission " + run.toolchain_version);
    for (int run_idx = 0; run_idx < options.runs; ++run_idx)
        seeds.push_back(seed_stream.next());
    replay << fmt::format("{}: seeds [{}]\n", result.kernel, fmt::join(seeds, ", "));

    auto measure = [&](const store::DesignRecord& design, const char* what) {
        eval::Candidate candidate;
        candidate.design_id = design.id;
        candidate.content_hash = design.content_hash;
        candidate.kernel = design.kernel;
        candidate.source_file = materialise(workspace.dir, design, extension);
        if (options.on_progress) {
            options.on_progress(fmt::format("{}: measuring the {} ({} runs) [{}]", result.kernel, what, options.runs,
                                            run.clock.text(run.measurements_done, run.measurements_total)));
        }
        auto measured = run.cascade.measure(candidate, setup.context, seeds);
        run.measurements_done += 1;
        replay << fmt::format("{} {} {} ({}): runs [{}] median {} all passed correctness: {}{}\n", result.kernel, what,
                              design.content_hash, design.template_name, fmt::join(measured.cycles, ", "),
                              measured.cycles_median ? fmt::format("{:.0f}", *measured.cycles_median) : "-",
                              measured.all_passed ? "yes" : "no",
                              measured.reason.empty() ? "" : " — " + measured.reason);
        return measured;
    };
    auto champion_measured = measure(*champion_design, "champion");
    result.champion_hash = champion_design->content_hash;
    result.champion_template = champion_design->template_name;
    result.champion_runs = champion_measured.cycles;
    result.all_passed = champion_measured.all_passed;
    if (champion_measured.all_passed)
        result.champion_cycles = champion_measured.cycles_median;
    else
        result.reason = "champion failed re-verification: " + champion_measured.reason;
    if (baseline_design) {
        auto baseline_measured = baseline_design->id == champion_design->id
                                     ? champion_measured
                                     : measure(*baseline_design, baseline_failure.empty() ? "baseline" : "reference");
        result.baseline_runs = baseline_measured.cycles;
        if (baseline_measured.all_passed) result.baseline_cycles = baseline_measured.cycles_median;
    }

    const std::string source_name = result.kernel + extension;
    write_text(run.dir / source_name, *champion_design->source);
    result.source_file = source_name;
    result.source_sha256 = sha256_hex(*champion_design->source);
    if (result.champion_cycles && result.baseline_cycles && *result.champion_cycles > 0) {
        result.speedup = *result.baseline_cycles / *result.champion_cycles;
    }
    if (result.champion_cycles && result.weight_min_cycles > 0) {
        result.champion_over_min = *result.champion_cycles / result.weight_min_cycles;
    }
    return result;
}

/// DIR.tar.gz beside DIR, written by tar.
fs::path write_tarball(const fs::path& dir) {
    fs::path tarball = dir;
    tarball += ".tar.gz";
    proc::Command tar;
    const char* path_env = std::getenv("PATH");
    auto tar_bin = proc::find_executable("tar", path_env ? path_env : "/usr/bin:/bin");
    if (!tar_bin) throw Error(ErrorKind::io, "submit: `tar` is not installed (needed for the .tar.gz)");
    tar.argv = {tar_bin->string(), "-czf", tarball.string(), "-C", dir.parent_path().string(), dir.filename().string()};
    tar.sandbox.enabled = false;
    tar.cwd = dir.parent_path();
    tar.limits.timeout_secs = 120;
    auto result = proc::run(tar);
    if (!result.ok()) {
        throw Error(ErrorKind::io, fmt::format("tar could not write {}: {}{}", tarball.string(),
                                               result.error.value_or(""), result.stderr_text));
    }
    return tarball;
}

}  // namespace

Submission build_submission(Workspace& workspace, const SubmitOptions& options) {
    if (options.runs < 1) throw Error(ErrorKind::invalid_input, "submit: --runs must be at least 1");
    if (fs::exists(options.out_dir) && !fs::is_empty(options.out_dir)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("submission directory {} exists and is not empty", options.out_dir.string()));
    }
    std::string why;
    Submission submission;
    submission.toolchain_version = workspace.toolchain_version(&why);
    if (submission.toolchain_version.empty()) {
        throw Error(ErrorKind::toolchain, fmt::format("submit: cannot read the toolchain's version: {}", why));
    }
    auto model = workspace.hardware_model();
    store::TreeStore trees(workspace.store->database());
    auto setups = workspace.kernel_setups();

    eval::CascadeConfig cascade_config;
    cascade_config.seed = workspace.campaign.seed;
    eval::Cascade cascade(*workspace.toolchain, *workspace.store, nullptr, model ? &*model : nullptr, cascade_config);

    fs::create_directories(options.out_dir);
    submission.dir = fs::absolute(options.out_dir).lexically_normal();
    std::ostringstream replay;
    replay << fmt::format("# replay of {} at {} ({} {}); {} seeded runs per design, each checked for correctness\n",
                          workspace.dir.string(), utc_now(), workspace.target.name, submission.toolchain_version,
                          options.runs);

    SubmitRun run{
        workspace, options, trees, cascade, model ? &*model : nullptr, submission.dir, submission.toolchain_version,
        replay, PhaseClock(), 2 * setups.size(), 0};
    bool any_champion = false;
    for (const auto& setup : setups) {
        KernelResult result = submit_kernel(run, setup);
        any_champion = any_champion || result.all_passed;
        submission.kernels.push_back(std::move(result));
    }
    if (!any_champion) {
        write_text(submission.dir / "replay.log", replay.str());
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{}: no kernel has a champion that passes re-verification (run the campaign first; "
                                "see {})",
                                workspace.dir.string(), (submission.dir / "replay.log").string()));
    }
    submission.geomean = geomean_speedup(submission.kernels);
    replay << fmt::format("geomean speedup {:.4f}\n", submission.geomean);
    write_text(submission.dir / "replay.log", replay.str());

    submission.manifest = results_json(submission.kernels);
    submission.manifest["target"] = workspace.target.name;
    submission.manifest["toolchain_version"] = submission.toolchain_version;
    submission.manifest["runs_per_design"] = options.runs;
    submission.manifest["created_at"] = utc_now();
    submission.manifest["campaign"] = workspace.dir.string();
    submission.manifest["replay_log_sha256"] = sha256_hex(replay.str());
    write_text(submission.dir / "manifest.json", submission.manifest.dump(2) + "\n");

    submission.tarball = write_tarball(submission.dir);
    return submission;
}

}  // namespace npuopt::campaign
