// `npuopt demo [DIR] [--minutes N]`: npuopt's main job in one command on npu-sim — init, a short
// knowledge-base build, a budgeted campaign and a submission — ending in the results table.

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/campaign_output.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "report/report.hpp"
#include "campaign/submission.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {

namespace fs = std::filesystem;

int run_demo(const GlobalOptions& global, const DemoOptions& options) {
    if (options.minutes <= 0) throw Error(ErrorKind::invalid_input, "demo: --minutes must be positive");
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    auto say = [&](const std::string& line) {
        if (!global.json) std::cerr << fmt::format("[demo {:5.0f}s] {}\n", elapsed(), line);
    };

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
    auto kb_report = campaign::build_knowledge(workspace, kb_options);
    say(fmt::format("    {} doc sections, {} summaries; hardware model {}", kb_report.ingest.sections,
                    kb_report.ingest.summaries_written + kb_report.ingest.summaries_reused,
                    workspace.hardware_model() ? "fitted" : "missing"));
    throw_if_interrupted();

    say(fmt::format("3/4 campaign, budget {:.1f} minutes", options.minutes));
    RunOptions run_options;
    run_options.dir = dir;
    run_options.budget_minutes = options.minutes;
    auto result = run_with_progress(workspace, run_options, global.json);
    if (!global.json) std::cerr << outcome_text(result);
    if (result.stop == campaign::StopReason::interrupted) return k_exit_interrupted;

    say("4/4 submit: re-verifying every champion and baseline from scratch (7 seeded runs each)");
    campaign::SubmitOptions submit_options;
    submit_options.out_dir = workspace.dir / "submission";
    auto submission = campaign::build_submission(workspace, submit_options);
    auto report_files =
        report::write_report(*workspace.store, workspace.dir / "report", submission.dir / "manifest.json");

    if (global.json) {
        nlohmann::json out = submission.manifest;
        out["dir"] = workspace.dir.string();
        out["submission"] = submission.dir.string();
        out["tarball"] = submission.tarball.string();
        out["report"] = report_files.html.string();
        out["wall_secs"] = elapsed();
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << "\n" << campaign::render_results_table(submission.kernels) << "\n"
                  << fmt::format("campaign:   {}\nsubmission: {}\ntarball:    {}\nreport:     {}\nwall time:  {:.0f} s\n",
                                 workspace.dir.string(), submission.dir.string(), submission.tarball.string(),
                                 report_files.html.string(), elapsed());
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
