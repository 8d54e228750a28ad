#include "cli/app.hpp"

#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"

namespace npuopt::cli {
namespace {

constexpr const char* k_exit_codes_help =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  failure (a check failed, the toolchain or the database failed)\n"
    "  2  usage or configuration error (bad arguments, invalid campaign.yaml/target.yaml, unknown target)\n"
    "  3  interrupted (SIGINT/SIGTERM)\n"
    "  4  eval: the kernel passed every check but the race did not show it faster than its opponent\n";

}  // namespace

int exit_code_for(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::invalid_input:
        case ErrorKind::invalid_config: return k_exit_usage;
        case ErrorKind::interrupted: return k_exit_interrupted;
        case ErrorKind::io:
        case ErrorKind::toolchain:
        case ErrorKind::store:
        case ErrorKind::internal: return k_exit_failure;
    }
    return k_exit_failure;
}

int run_main(int argc, char** argv) {
    CLI::App app{"npuopt — optimises compute kernels for an accelerator it learns by itself:\n"
                 "it reads the vendor's docs, measures the chip with microbenchmarks, learns the compiler's\n"
                 "rules, and keeps a faster kernel only when an interleaved, statistically sound race says so.",
                 "npuopt"};
    app.set_version_flag("--version", std::string("npuopt ") + NPUOPT_VERSION);
    app.footer(k_exit_codes_help);
    app.require_subcommand(1);
    app.fallthrough();

    GlobalOptions global;
    std::string log_level = "warn";
    std::string knowledge_dir;
    app.add_option("--log-level", log_level, "Log level on stderr: trace, debug, info, warn, error, off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
        ->capture_default_str();
    app.add_flag("--json", global.json, "Machine-readable JSON output on stdout");
    app.add_option("--knowledge-dir", knowledge_dir,
                   "The repository's knowledge/ folder (default: $NPUOPT_KNOWLEDGE_DIR, else the source tree's)");

    InitOptions init_options;
    auto* init = app.add_subcommand("init", "Create a campaign directory: a commented campaign.yaml and campaign.db");
    init->add_option("dir", init_options.dir, "Campaign directory to create (must not exist or be empty)")->required();
    init->add_option("--target", init_options.target, "Target name: a folder under knowledge/")->required();
    init->add_option("--seed", init_options.seed, "Seed of the campaign's random choices")->capture_default_str();
    init->add_option("--shape", init_options.shape,
                     "Shape every kernel is specialised to: a shape name of the target's kernels.yaml "
                     "(default: each kernel's first shape)");

    DoctorOptions doctor_options;
    std::string doctor_target;
    std::string doctor_campaign;
    auto* doctor = app.add_subcommand(
        "doctor", "Check a target's configuration and toolchain, the sandbox, the database and disk space");
    auto* doctor_target_option = doctor->add_option("--target", doctor_target, "Target to check (a folder under knowledge/)");
    doctor->add_option("--campaign", doctor_campaign, "Campaign directory to check (its campaign.yaml and campaign.db)")
        ->excludes(doctor_target_option);

    StatusOptions status_options;
    auto* status = app.add_subcommand("status", "Show what a campaign's database holds");
    status->add_option("dir", status_options.dir, "Campaign directory")->required();

    std::string kb_out, tree_out, report_out, submit_out, demo_dir;
    KbOptions kb_options;
    std::vector<std::string> kb_words;
    auto* kb = app.add_subcommand("kb", "Knowledge base of a campaign: build (docs + microbenchmarks + hardware model + "
                                        "rules), search, show, export, refresh after a toolchain update, diff two versions");
    kb->add_option("action", kb_options.action, "build | search | show | export | refresh | diff")
        ->required()
        ->check(CLI::IsMember({"build", "search", "show", "export", "refresh", "diff"}));
    kb->add_option("args", kb_words, "search: QUERY words; diff: OLD NEW toolchain versions");
    kb->add_option("--campaign", kb_options.campaign_dir, "Campaign directory")->required();
    kb->add_option("--format", kb_options.format, "show/export/diff: md or json")
        ->check(CLI::IsMember({"md", "json"}))
        ->capture_default_str();
    kb->add_option("--out", kb_out, "show/export/diff: write to this file instead of stdout");
    kb->add_option("--limit", kb_options.limit, "search: number of hits")->check(CLI::Range(1, 1000))->capture_default_str();
    kb->add_flag("--quick", kb_options.quick, "build: only the microbenchmarks the cost model needs most (faster)");

    BenchOptions bench_options;
    std::int64_t bench_device_runs = 0;
    auto* bench = app.add_subcommand("bench", "Benchmarks that print npuopt's figure beside the one it is compared with: "
                                              "kb (fitted vs true hardware values), acceptance (the judge vs naive "
                                              "rules), search (npuopt vs random search and hill-climbing on "
                                              "generated chips and named shapes: after --, --chips K | --chip-seeds "
                                              "A,B, --shapes all|NAME,..., --only npuopt,random,hill, --work DIR "
                                              "(resumable: one result file per cell), --verify-runs N), llm (the LLM-backed roles per "
                                              "strategy and n at equal token budgets; a scripted model on loopback "
                                              "unless -- --endpoint URL --model NAME)");
    bench->add_option("what", bench_options.what, "kb | acceptance | search | adversarial (the adversarial "
                                                  "corpus and honest controls through the cascade)")
        ->required()
        ->check(CLI::IsMember({"kb", "acceptance", "search", "refresh", "adversarial", "llm"}));
    std::string bench_dir;
    bench->add_option("--dir", bench_dir, "adversarial: the corpus folder (default tests/data/adversarial)");
    auto* bench_device_runs_option =
        bench->add_option("--device-runs", bench_device_runs, "search: device-run budget per strategy and kernel");
    bench->add_option("args", bench_options.extra_args, "Further arguments for the benchmark program (after --)");

    RunOptions run_options;
    double run_budget_minutes = 0.0;
    std::int64_t run_device_runs = 0;
    std::int64_t run_max_steps = 0;
    auto* run = app.add_subcommand("run", "Run (or resume) a campaign's search until its budget is spent; live "
                                          "progress on stderr; SIGINT/SIGTERM stop after the current step (exit 3)");
    run->add_option("dir", run_options.dir, "Campaign directory")->required();
    auto* run_budget_option =
        run->add_option("--budget-minutes", run_budget_minutes, "Wall time for this run, in minutes (default: "
                                                               "what is left of budgets.wall_time)");
    auto* run_device_option =
        run->add_option("--device-runs", run_device_runs, "Device runs for this run (default: what is left of "
                                                          "budgets.device_runs)");
    auto* run_steps_option = run->add_option("--max-steps", run_max_steps, "Stop after so many steps");

    TreeOptions tree_options;
    auto* tree = app.add_subcommand("tree", "A kernel's design tree: show KERNEL (text) or export (JSON, DOT, SVG)");
    tree->add_option("action", tree_options.action, "show | export")->required()->check(CLI::IsMember({"show", "export"}));
    tree->add_option("kernel", tree_options.kernel, "Kernel name (show: required; export: default all)");
    tree->add_option("--campaign", tree_options.campaign_dir, "Campaign directory")->required();
    tree->add_option("--out", tree_out, "export: output directory (default trees/)");
    tree->add_flag("--reasons", tree_options.reasons, "show: the reason under each design");

    ReportOptions report_options;
    auto* report = app.add_subcommand("report", "Write the campaign's Markdown and HTML/SVG report");
    report->add_option("dir", report_options.dir, "Campaign directory")->required();
    report->add_option("--out", report_out, "Output directory (default DIR/report)");

    SubmitCliOptions submit_options;
    auto* submit = app.add_subcommand("submit", "Package the champions as a submission: sources, manifest.json, "
                                                "replay.log (every champion re-verified now), and a .tar.gz");
    submit->add_option("dir", submit_options.dir, "Campaign directory")->required();
    submit->add_option("--out", submit_out, "Submission directory (default DIR/submission; must be new or empty)");
    submit->add_option("--runs", submit_options.runs, "Seeded runs per champion and baseline")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();

    EvalOptions eval_options;
    std::string eval_campaign;
    std::uint64_t eval_seed = 0;
    auto* eval = app.add_subcommand(
        "eval", "Put your own kernel file through the whole evaluation cascade (compile, correctness with "
                "anti-gaming checks, screen) and an interleaved race against an opponent; prints each stage's "
                "verdict and reason and the race's speedup with its interval");
    eval->add_option("file", eval_options.file, "The kernel source to evaluate")->required();
    eval->add_option("--kernel", eval_options.kernel, "Kernel name (from the target's kernels.yaml)")->required();
    eval->add_option("--campaign", eval_campaign,
                     "Campaign directory: its champion, rules and hardware model; the evaluation is recorded there "
                     "(default: a scratch campaign, removed afterwards)");
    eval->add_option("--against", eval_options.against,
                     "Opponent of the race: champion (the campaign's, else the baseline), baseline, or a kernel file")
        ->capture_default_str();
    eval->add_option("--target", eval_options.target, "Target of the scratch campaign (without --campaign)")
        ->capture_default_str();
    auto* eval_seed_option =
        eval->add_option("--seed", eval_seed, "Seed of the scratch campaign (default: drawn at random, printed)");
    eval->footer(std::string("Exits 0 when the kernel passed every stage and the race says it is faster than the "
                             "opponent, 4 when it passed every check but was not shown faster (race rejected or "
                             "inconclusive), 1 when it failed or was rejected by a check (rules, compile, correctness, "
                             "a checked race launch, speed of light) or the toolchain or database failed, 2 on bad "
                             "usage.\n\n") +
                 k_exit_codes_help);

    AddOptions add_options;
    std::string add_campaign_flag;
    auto* add = app.add_subcommand("add", "Put your own kernel into a campaign's design tree as a design and race it "
                                          "against the kernel's champion (it is a design like any other from then on)");
    add->add_option("file", add_options.file, "The kernel source")->required();
    add->add_option("campaign", add_options.campaign_dir, "Campaign directory (or --campaign)");
    add->add_option("--campaign", add_campaign_flag, "Campaign directory");
    add->add_option("--kernel", add_options.kernel, "Kernel name (from the campaign's kernels.yaml)")->required();
    add->add_flag("--queue-only", add_options.queue_only,
                  "Only record and queue it: the next `npuopt run` races it first");

    DemoOptions demo_options;
    auto* demo = app.add_subcommand("demo", "npuopt's main job on npu-sim in one command: init, kb build, a budgeted "
                                            "campaign and a submission; ends with the results table");
    demo->add_option("dir", demo_dir, "Campaign directory to create (default: a new temporary directory)");
    demo->add_option("--minutes", demo_options.minutes, "Campaign budget in minutes")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    demo->add_flag("--full-kb", demo_options.full_kb, "Run the whole microbenchmark suite (slower)");

    for (auto* subcommand : app.get_subcommands({})) {
        if (subcommand != eval) subcommand->footer(k_exit_codes_help);
    }
    doctor->footer(std::string("Exits 1 when a check fails, 2 when a configuration file is invalid.\n\n") +
                   k_exit_codes_help);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& parse_error) {
        if (parse_error.get_exit_code() == 0) return app.exit(parse_error);  // --help, --version
        std::cerr << fmt::format("npuopt: error: {}\nRun 'npuopt --help' for usage.\n", parse_error.what());
        return k_exit_usage;
    }

    try {
        log::init_stderr(*log::parse_level(log_level));
        install_interrupt_handlers();
        if (!knowledge_dir.empty()) global.knowledge_dir = knowledge_dir;
        int exit_code = k_exit_failure;
        if (init->parsed()) {
            exit_code = run_init(global, init_options);
        } else if (doctor->parsed()) {
            if (!doctor_target.empty()) doctor_options.target = doctor_target;
            if (!doctor_campaign.empty()) doctor_options.campaign_dir = doctor_campaign;
            exit_code = run_doctor(global, doctor_options);
        } else if (status->parsed()) {
            exit_code = run_status(global, status_options);
        } else if (kb->parsed()) {
            if (!kb_out.empty()) kb_options.out = kb_out;
            if (kb_options.action == "search") {
                for (const auto& word : kb_words) kb_options.query += (kb_options.query.empty() ? "" : " ") + word;
            } else if (kb_options.action == "diff") {
                if (kb_words.size() != 2) {
                    throw Error(ErrorKind::invalid_input, "kb diff: expected two toolchain versions: OLD NEW");
                }
                kb_options.old_version = kb_words[0];
                kb_options.new_version = kb_words[1];
            } else if (!kb_words.empty()) {
                throw Error(ErrorKind::invalid_input,
                            fmt::format("kb {}: unexpected argument '{}'", kb_options.action, kb_words.front()));
            }
            exit_code = run_kb(global, kb_options);
        } else if (bench->parsed()) {
            if (bench_device_runs_option->count()) bench_options.device_runs = bench_device_runs;
            bench_options.argv0 = argc > 0 ? argv[0] : "npuopt";
            if (!bench_dir.empty()) bench_options.extra_args.insert(bench_options.extra_args.begin(), {"--dir", bench_dir});
            exit_code = run_bench(global, bench_options);
        } else if (run->parsed()) {
            if (run_budget_option->count()) run_options.budget_minutes = run_budget_minutes;
            if (run_device_option->count()) run_options.device_runs = run_device_runs;
            if (run_steps_option->count()) run_options.max_steps = run_max_steps;
            exit_code = run_run(global, run_options);
        } else if (tree->parsed()) {
            if (!tree_out.empty()) tree_options.out = tree_out;
            exit_code = run_tree(global, tree_options);
        } else if (report->parsed()) {
            if (!report_out.empty()) report_options.out = report_out;
            exit_code = run_report(global, report_options);
        } else if (submit->parsed()) {
            if (!submit_out.empty()) submit_options.out = submit_out;
            exit_code = run_submit(global, submit_options);
        } else if (eval->parsed()) {
            if (!eval_campaign.empty()) eval_options.campaign_dir = eval_campaign;
            if (eval_seed_option->count()) eval_options.seed = eval_seed;
            exit_code = run_eval(global, eval_options);
        } else if (add->parsed()) {
            if (!add_campaign_flag.empty()) add_options.campaign_dir = add_campaign_flag;
            if (add_options.campaign_dir.empty()) {
                throw Error(ErrorKind::invalid_input, "add: a campaign is required (`npuopt add FILE --kernel K --campaign DIR`)");
            }
            exit_code = run_add(global, add_options);
        } else if (demo->parsed()) {
            if (!demo_dir.empty()) demo_options.dir = demo_dir;
            exit_code = run_demo(global, demo_options);
        }
        if (interrupted()) return k_exit_interrupted;
        return exit_code;
    } catch (const Error& error) {
        std::cerr << fmt::format("npuopt: error: {}\n", error.what());
        return exit_code_for(error.kind());
    } catch (const std::exception& error) {
        std::cerr << fmt::format("npuopt: error: internal: {}\n", error.what());
        return k_exit_failure;
    }
}

}  // namespace npuopt::cli
