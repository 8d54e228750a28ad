// `npuopt demo [DIR] [--minutes N]`: npuopt's main job in one command on npu-sim — init, a short
// knowledge-base build, a budgeted campaign and a submission — ending in the results table.
// --minutes bounds the whole command: the campaign gets what the kb build left, less a reserve
// for the submission re-estimated before every step from the launches' measured wall time.

#include <unistd.h>

#include <algorithm>
#include <chrono>
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

int run_demo(const GlobalOptions& global, const DemoOptions& options) {
    if (options.minutes <= 0) throw Error(ErrorKind::invalid_input, "demo: --minutes must be positive");
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    const double budget_secs = options.minutes * 60.0;
    auto say = [&](const std::string& line) {
        if (!global.json) std::cerr << fmt::format("[demo {:5.0f}s of {:.0f}s] {}\n", elapsed(), budget_secs, line);
    };
    constexpr int k_submit_runs = 7;

    fs::path dir;
    if (options.dir) {
        dir = *options.dir;
    } else {
        std::string pattern = (fs::temp_directory_path() / "npuopt-demo-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw Error(ErrorKind::io, "demo: cannot create a temporary directory");
        dir = pattern;
    }

    say(fmt::format("1/4 init {} (target npu-sim)", dir.string()));
    InitOptions init_options;
    init_options.dir = dir;
    init_options.target = "npu-sim";
    GlobalOptions quiet = global;
    quiet.json = true;  // init's own summary is not part of the demo's output
    {
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

    auto workspace = campaign::open_workspace(dir, global.knowledge_dir);
    std::string why;
    if (workspace.toolchain_version(&why).empty()) {
        throw Error(ErrorKind::toolchain, fmt::format("demo: the npu-sim toolchain is not usable: {} (build it with "
                                                      "`cmake --build <build> --target npu_sim`)",
                                                      why));
    }

    say(options.full_kb ? "2/4 kb build (docs, the whole microbenchmark suite, hardware model)"
                        : "2/4 kb build (docs, the quick microbenchmark subset, hardware model)");
    campaign::KbBuildOptions kb_options;
    kb_options.quick = !options.full_kb;
    double last_said = -1e9;
    kb_options.on_progress = [&](const std::string& line) {  // a line every few seconds, and the last one
        const bool last = line.find("ETA 0s]") != std::string::npos || line.rfind("hardware model", 0) == 0;
        if (!last && elapsed() - last_said < 5.0) return;
        last_said = elapsed();
        say(line);
    };
    std::vector<double> probe_launch_secs;  // a first estimate of one launch's wall time, for the reserve
    kb_options.on_point = [&](const knowledge::MicrobenchPoint& point) {
        if (point.status == knowledge::PointStatus::ok && point.attempts > 0)
            probe_launch_secs.push_back(point.wall_secs / point.attempts);
    };
    auto kb_report = campaign::build_knowledge(workspace, kb_options);
    const double kb_done_at = elapsed();
    say(fmt::format("    {} doc sections, {} summaries; hardware model {}", kb_report.ingest.sections,
                    kb_report.ingest.summaries_written + kb_report.ingest.summaries_reused,
                    workspace.hardware_model() ? "fitted" : "missing"));
    throw_if_interrupted();

    // The submission measures each kernel's champion and reference k_submit_runs times: its
    // reserve is that many launches at the larger of the campaign's and the probes' mean launch
    // time, with a margin for compiles, the report and the tarball.
    const double kernels = static_cast<double>(std::max<std::size_t>(1, workspace.kernel_setups().size()));
    double probe_launch = 0.0;
    if (!probe_launch_secs.empty()) {
        std::sort(probe_launch_secs.begin(), probe_launch_secs.end());
        probe_launch = probe_launch_secs[probe_launch_secs.size() / 2];
    }
    auto reserve = [kernels, probe_launch](double mean_launch_secs) {
        const double launch = std::max(mean_launch_secs, probe_launch);
        return 1.3 * kernels * 2.0 * k_submit_runs * launch + 1.0 * kernels + 3.0;
    };
    const double campaign_secs = budget_secs - elapsed();
    if (campaign_secs <= reserve(0.0) + 5.0) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("demo: --minutes {} leaves {:.0f} s after the knowledge-base build ({:.0f} s), not "
                                "enough for a campaign and a submission (about {:.0f} s); give more minutes",
                                options.minutes, std::max(0.0, campaign_secs), kb_done_at, reserve(0.0)));
    }
    say(fmt::format("3/4 campaign: {:.0f} s left, about {:.0f} s of it kept for the submission", campaign_secs,
                    reserve(0.0)));
    RunOptions run_options;
    run_options.dir = dir;
    run_options.budget_minutes = campaign_secs / 60.0;
    run_options.wall_reserve_secs = reserve;
    auto result = run_with_progress(workspace, run_options, global.json);
    if (!global.json) std::cerr << outcome_text(result);
    if (result.stop == campaign::StopReason::interrupted) return k_exit_interrupted;
    const double campaign_done_at = elapsed();

    say(fmt::format("4/4 submit: re-verifying every champion and baseline from scratch ({} seeded runs each)",
                    k_submit_runs));
    campaign::SubmitOptions submit_options;
    submit_options.out_dir = workspace.dir / "submission";
    submit_options.runs = k_submit_runs;
    submit_options.on_progress = [&](const std::string& line) { say("    " + line); };
    auto submission = campaign::build_submission(workspace, submit_options);
    const double submit_done_at = elapsed();
    const campaign::KbFigures kb_figures = campaign::kb_figures(workspace);
    auto report_files =
        report::write_report(*workspace.store, workspace.dir / "report", submission.dir / "manifest.json", &kb_figures);
    const double wall = elapsed();
    const nlohmann::json phases = {{"init_and_kb_build_secs", kb_done_at},
                                   {"campaign_secs", campaign_done_at - kb_done_at},
                                   {"submission_secs", submit_done_at - campaign_done_at},
                                   {"report_secs", wall - submit_done_at}};

    if (global.json) {
        nlohmann::json out = submission.manifest;
        out["dir"] = workspace.dir.string();
        out["submission"] = submission.dir.string();
        out["tarball"] = submission.tarball.string();
        out["report"] = report_files.html.string();
        out["wall_secs"] = wall;
        out["budget_secs"] = budget_secs;
        out["phases"] = phases;
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << "\n" << campaign::render_results_table(submission.kernels) << "\n"
                  << fmt::format("campaign:   {}\nsubmission: {}\ntarball:    {}\nreport:     {}\n"
                                 "wall time:  {:.0f} s of {:.0f} s (init and kb build {:.0f} s, campaign {:.0f} s, "
                                 "submission {:.0f} s, report {:.0f} s)\n",
                                 workspace.dir.string(), submission.dir.string(), submission.tarball.string(),
                                 report_files.html.string(), wall, budget_secs, kb_done_at,
                                 campaign_done_at - kb_done_at, submit_done_at - campaign_done_at,
                                 wall - submit_done_at);
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
