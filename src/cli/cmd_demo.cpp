// `npuopt demo [DIR] [--minutes N]`: npuopt's main job in one command on npu-sim — init, a short
// knowledge-base build, a budgeted campaign and a submission — ending in the results table.
// --minutes bounds the whole command: the campaign gets what the kb build left, less a reserve
// for the submission re-estimated before every step from the launches' measured wall time.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/campaign_output.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/progress.hpp"
#include "report/report.hpp"
#include "campaign/kb_figures.hpp"
#include "campaign/submission.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {

namespace fs = std::filesystem;

namespace {

constexpr int k_submit_runs = 7;

/// The demo's clock and its progress lines ("[demo   12s of 180s] ...", none with --json).
struct DemoClock {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    double budget_secs = 0.0;
    bool quiet = false;
    double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    void say(const std::string& line) const {
        if (!quiet) std::cerr << fmt::format("[demo {:5.0f}s of {:.0f}s] {}\n", elapsed(), budget_secs, line);
    }
};

fs::path demo_dir(const DemoOptions& options) {
    if (options.dir) return *options.dir;
    std::string pattern = (fs::temp_directory_path() / "npuopt-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw Error(ErrorKind::io, "demo: cannot create a temporary directory");
    return pattern;
}

/// `npuopt init DIR --target npu-sim` without its summary on stdout.
void init_quietly(const GlobalOptions& global, const fs::path& dir) {
    InitOptions init_options;
    init_options.dir = dir;
    init_options.target = "npu-sim";
    GlobalOptions quiet = global;
    quiet.json = true;
    std::ostringstream ignored;
    auto* previous = std::cout.rdbuf(ignored.rdbuf());
    try {
        run_init(quiet, init_options);
    } catch (...) {
        std::cout.rdbuf(previous);
        throw;
    }
    std::cout.rdbuf(previous);
}

/// The kb build with a progress line every few seconds; returns the probes' median wall time per
/// repeat (a first estimate of a launch for the submission's reserve; 0 when none ran).
double build_kb(campaign::Workspace& workspace, const DemoOptions& options, const DemoClock& clock) {
    clock.say(options.full_kb ? "2/4 kb build (docs, the whole microbenchmark suite, hardware model)"
                              : "2/4 kb build (docs, the quick microbenchmark subset, hardware model)");
    campaign::KbBuildOptions kb_options;
    kb_options.quick = !options.full_kb;
    double last_said = -1e9;
    kb_options.on_progress = [&](const std::string& line) {  // a line every few seconds, and the last one
        const bool last = line.find("ETA 0s]") != std::string::npos || line.rfind("hardware model", 0) == 0;
        if (!last && clock.elapsed() - last_said < 5.0) return;
        last_said = clock.elapsed();
        clock.say(line);
    };
    std::vector<double> launch_secs;
    kb_options.on_point = [&](const knowledge::MicrobenchPoint& point) {
        if (point.status == knowledge::PointStatus::ok && point.attempts > 0) {
            const double repeats = static_cast<double>(std::max<std::size_t>(1, point.cycles.size()));
            launch_secs.push_back(point.wall_secs / point.attempts / repeats);
        }
    };
    auto kb_report = campaign::build_knowledge(workspace, kb_options);
    clock.say(fmt::format("    {} doc sections, {} summaries; hardware model {}", kb_report.ingest.sections,
                          kb_report.ingest.summaries_written + kb_report.ingest.summaries_reused,
                          workspace.hardware_model() ? "fitted" : "missing"));
    if (launch_secs.empty()) return 0.0;
    std::sort(launch_secs.begin(), launch_secs.end());
    return launch_secs[launch_secs.size() / 2];
}

/// The submission's reserve: each kernel's champion and reference measured k_submit_runs times,
/// at the campaign's mean launch wall time (the probes' per repeat until the campaign has
/// launched anything), with a margin for compiles, the report and the tarball.
std::function<double(double)> submission_reserve(const campaign::Workspace& workspace, double probe_launch_secs) {
    const double kernels = static_cast<double>(std::max<std::size_t>(1, workspace.kernel_setups().size()));
    return [kernels, probe_launch_secs](double mean_launch_secs) {
        const double launch = mean_launch_secs > 0 ? mean_launch_secs : probe_launch_secs;
        return 1.15 * kernels * 2.0 * k_submit_runs * launch + 1.0 * kernels + 3.0;
    };
}

}  // namespace

int run_demo(const GlobalOptions& global, const DemoOptions& options) {
    if (options.minutes <= 0) throw Error(ErrorKind::invalid_input, "demo: --minutes must be positive");
    DemoClock clock;
    clock.budget_secs = options.minutes * 60.0;
    clock.quiet = global.json;
    const fs::path dir = demo_dir(options);

    clock.say(fmt::format("1/4 init {} (target npu-sim)", dir.string()));
    init_quietly(global, dir);
    auto workspace = campaign::open_workspace(dir, global.knowledge_dir);
    std::string why;
    if (workspace.toolchain_version(&why).empty()) {
        throw Error(ErrorKind::toolchain, fmt::format("demo: the npu-sim toolchain is not usable: {} (build it with "
                                                      "`cmake --build <build> --target npu_sim`)",
                                                      why));
    }
    const double probe_launch = build_kb(workspace, options, clock);
    const double kb_done_at = clock.elapsed();
    throw_if_interrupted();

    const auto reserve = submission_reserve(workspace, probe_launch);
    const double campaign_secs = clock.budget_secs - clock.elapsed();
    if (campaign_secs <= reserve(0.0) + 10.0) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("demo: --minutes {} leaves {:.0f} s after the knowledge-base build ({:.0f} s), not "
                                "enough for a campaign and a submission (about {:.0f} s); give more minutes",
                                options.minutes, std::max(0.0, campaign_secs), kb_done_at, reserve(0.0)));
    }
    clock.say(fmt::format("3/4 campaign: {:.0f} s left, about {:.0f} s of it kept for the submission", campaign_secs,
                          reserve(0.0)));
    RunOptions run_options;
    run_options.dir = dir;
    run_options.budget_minutes = campaign_secs / 60.0;
    run_options.wall_reserve_secs = reserve;
    auto result = run_with_progress(workspace, run_options, global.json);
    if (!global.json) std::cerr << outcome_text(result);
    if (result.stop == campaign::StopReason::interrupted) return k_exit_interrupted;
    const double campaign_done_at = clock.elapsed();

    clock.say(fmt::format("4/4 submit: re-verifying every champion and baseline from scratch ({} seeded runs each)",
                          k_submit_runs));
    campaign::SubmitOptions submit_options;
    submit_options.out_dir = workspace.dir / "submission";
    submit_options.runs = k_submit_runs;
    submit_options.on_progress = [&](const std::string& line) { clock.say("    " + line); };
    auto submission = campaign::build_submission(workspace, submit_options);
    const double submit_done_at = clock.elapsed();
    const campaign::KbFigures kb_figures = campaign::kb_figures(workspace);
    auto report_files =
        report::write_report(*workspace.store, workspace.dir / "report", submission.dir / "manifest.json", &kb_figures);
    const double wall = clock.elapsed();

    if (global.json) {
        nlohmann::json out = submission.manifest;
        out["dir"] = workspace.dir.string();
        out["submission"] = submission.dir.string();
        out["tarball"] = submission.tarball.string();
        out["report"] = report_files.html.string();
        out["wall_secs"] = wall;
        out["budget_secs"] = clock.budget_secs;
        out["phases"] = {{"init_and_kb_build_secs", kb_done_at},
                         {"campaign_secs", campaign_done_at - kb_done_at},
                         {"submission_secs", submit_done_at - campaign_done_at},
                         {"report_secs", wall - submit_done_at}};
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << "\n" << campaign::render_results_table(submission.kernels) << "\n"
                  << fmt::format("campaign:   {}\nsubmission: {}\ntarball:    {}\nreport:     {}\n"
                                 "wall time:  {:.0f} s of {:.0f} s (init and kb build {:.0f} s, campaign {:.0f} s, "
                                 "submission {:.0f} s, report {:.0f} s)\n",
                                 workspace.dir.string(), submission.dir.string(), submission.tarball.string(),
                                 report_files.html.string(), wall, clock.budget_secs, kb_done_at,
                                 campaign_done_at - kb_done_at, submit_done_at - campaign_done_at,
                                 wall - submit_done_at);
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
