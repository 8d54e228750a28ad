#include "cli/app.hpp"

#include <algorithm>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/records_cli.hpp"
#include "cli/suggest.hpp"
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

/// The first word of the command line that is not a global option or its value: the subcommand
/// as typed; nullopt when there is none (before a `--`).
std::optional<std::string> first_command_word(int argc, char** argv) {
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string arg = argv[arg_idx];
        if (arg == "--") return std::nullopt;
        if (arg.rfind('-', 0) == 0) {
            if (arg == "--log-level" || arg == "--knowledge-dir") ++arg_idx;  // their value follows
            continue;
        }
        return arg;
    }
    return std::nullopt;
}

/// Whether --json was given (before a `--`): errors are then a JSON object on stdout too.
bool json_requested(int argc, char** argv) {
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string_view arg = argv[arg_idx];
        if (arg == "--") return false;
        if (arg == "--json") return true;
    }
    return false;
}

/// An error that ends the command: `npuopt: error: …` on stderr and, with --json, the object
/// {"kind", "message", "exit_code"} on stdout. Returns the exit code.
int report_error(bool json, std::string_view kind, const std::string& message, int exit_code,
                 const std::string& hint = "") {
    std::cerr << fmt::format("npuopt: error: {}\n{}", message, hint);
    if (json) {
        std::cout << nlohmann::json{{"kind", kind}, {"message", message}, {"exit_code", exit_code}}.dump() << '\n';
    }
    return exit_code;
}

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
    std::string init_dir, init_campaign;
    init->add_option("dir", init_dir, "Campaign directory to create (must not exist or be empty)");
    init->add_option("--campaign", init_campaign, "The same as DIR");
    init->add_option("--target", init_options.target, "Target name: a folder under knowledge/")->required();
    init->add_option("--seed", init_options.seed, "Seed of the campaign's random choices")->capture_default_str();
    init->add_option("--shape", init_options.shape,
                     "Shape every kernel is specialised to: a shape name of the target's kernels.yaml "
                     "(default: each kernel's first shape)");

    DoctorOptions doctor_options;
    std::string doctor_target;
    std::string doctor_campaign, doctor_dir;
    auto* doctor = app.add_subcommand(
        "doctor", "Check a target's configuration and toolchain (end to end: the first kernel's baseline compiled, "
                  "run once and its output checked, in the sandbox), the sandbox, the database and disk space");
    auto* doctor_target_option = doctor->add_option("--target", doctor_target, "Target to check (a folder under knowledge/)");
    doctor->add_option("dir", doctor_dir, "Campaign directory to check (its campaign.yaml and campaign.db)")
        ->excludes(doctor_target_option);
    doctor->add_option("--campaign", doctor_campaign, "The same as DIR")->excludes(doctor_target_option);

    // The campaign is named the same way everywhere: positionally or with --campaign (or, for a
    // command on an existing campaign, the current directory when it is one).
    std::string status_dir, status_campaign;
    StatusOptions status_options;
    auto* status = app.add_subcommand("status", "Show what a campaign's database holds");
    status->add_option("dir", status_dir, "Campaign directory");
    status->add_option("--campaign", status_campaign, "The same as DIR");

    std::string kb_out, tree_out, report_out, submit_out, demo_dir;
    KbOptions kb_options;
    std::vector<std::string> kb_words;
    auto* kb = app.add_subcommand("kb", "Knowledge base of a campaign: build (docs + microbenchmarks + hardware model + "
                                        "rules), search, show, export, refresh after a toolchain update, diff two versions");
    kb->add_option("action", kb_options.action, "build | search | show | export | refresh | diff")
        ->required()
        ->check(CLI::IsMember({"build", "search", "show", "export", "refresh", "diff"}));
    kb->add_option("args", kb_words, "search: QUERY words; diff: OLD NEW toolchain versions");
    std::string kb_campaign;
    kb->add_option("--campaign", kb_campaign, "Campaign directory (or name it among the arguments: `kb show DIR`)");
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
    std::string run_dir, run_campaign;
    double run_budget_minutes = 0.0;
    std::int64_t run_device_runs = 0;
    std::int64_t run_max_steps = 0;
    auto* run = app.add_subcommand("run", "Run (or resume) a campaign's search until its budget is spent; live "
                                          "progress on stderr; SIGINT/SIGTERM stop after the current step (exit 3)");
    run->add_option("dir", run_dir, "Campaign directory");
    run->add_option("--campaign", run_campaign, "The same as DIR");
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
    std::vector<std::string> tree_words;
    std::string tree_campaign;
    tree->add_option("args", tree_words, "KERNEL (show: required; export: default all) and the campaign DIR, in any order");
    tree->add_option("--campaign", tree_campaign, "Campaign directory");
    tree->add_option("--out", tree_out, "export: output directory (default trees/)");
    tree->add_flag("--reasons", tree_options.reasons, "show: the reason under each design");

    ReportOptions report_options;
    std::string report_dir, report_campaign;
    auto* report = app.add_subcommand("report", "Write the campaign's Markdown and HTML/SVG report");
    report->add_option("dir", report_dir, "Campaign directory");
    report->add_option("--campaign", report_campaign, "The same as DIR");
    report->add_option("--out", report_out, "Output directory (default DIR/report)");

    SubmitCliOptions submit_options;
    std::string submit_dir, submit_campaign;
    auto* submit = app.add_subcommand("submit", "Package the champions as a submission: sources, manifest.json, "
                                                "replay.log (every champion re-verified now), and a .tar.gz");
    submit->add_option("dir", submit_dir, "Campaign directory");
    submit->add_option("--campaign", submit_campaign, "The same as DIR");
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
    std::string eval_dir;
    eval->add_option("file", eval_options.file, "The kernel source to evaluate")->required();
    eval->add_option("dir", eval_dir, "Campaign directory (the same as --campaign)");
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
    std::string add_dir;
    std::string add_campaign_flag;
    auto* add = app.add_subcommand("add", "Put your own kernel into a campaign's design tree as a design and race it "
                                          "against the kernel's champion (it is a design like any other from then on)");
    add->add_option("file", add_options.file, "The kernel source")->required();
    add->add_option("campaign", add_dir, "Campaign directory (or --campaign)");
    add->add_option("--campaign", add_campaign_flag, "Campaign directory");
    add->add_option("--kernel", add_options.kernel, "Kernel name (from the campaign's kernels.yaml)")->required();
    add->add_flag("--queue-only", add_options.queue_only,
                  "Only record and queue it: the next `npuopt run` races it first");

    DemoOptions demo_options;
    auto* demo = app.add_subcommand("demo", "npuopt's main job on npu-sim in one command: init, kb build, a budgeted "
                                            "campaign and a submission; ends with the results table");
    std::string demo_campaign;
    demo->add_option("dir", demo_dir, "Campaign directory to create (default: a new temporary directory)");
    demo->add_option("--campaign", demo_campaign, "The same as DIR");
    demo->add_option("--minutes", demo_options.minutes, "Campaign budget in minutes")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    demo->add_flag("--full-kb", demo_options.full_kb, "Run the whole microbenchmark suite (slower)");

    const std::vector<RegisteredCommand> registered = {register_export_command(app), register_import_command(app)};

    for (auto* subcommand : app.get_subcommands({})) {
        if (subcommand != eval) subcommand->footer(k_exit_codes_help);
    }
    doctor->footer(std::string("Exits 1 when a check fails, 2 when a configuration file is invalid.\n\n") +
                   k_exit_codes_help);

    const bool json_errors = json_requested(argc, argv);
    if (auto word = first_command_word(argc, argv)) {
        std::vector<std::string> names;
        for (const auto* subcommand : app.get_subcommands({})) names.push_back(subcommand->get_name());
        if (std::find(names.begin(), names.end(), *word) == names.end()) {
            auto nearest = closest_name(*word, names);
            return report_error(json_errors, "invalid_input",
                                nearest ? fmt::format("no such command '{}'; did you mean '{}'?", *word, *nearest)
                                        : fmt::format("no such command '{}'", *word),
                                k_exit_usage, "Run 'npuopt --help' for the list of commands.\n");
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& parse_error) {
        if (parse_error.get_exit_code() == 0) return app.exit(parse_error);  // --help, --version
        return report_error(json_errors, "invalid_input", parse_error.what(), k_exit_usage,
                            "Run 'npuopt --help' for usage.\n");
    }

    try {
        log::init_stderr(*log::parse_level(log_level));
        install_interrupt_handlers();
        if (!knowledge_dir.empty()) global.knowledge_dir = knowledge_dir;
        int exit_code = k_exit_failure;
        if (init->parsed()) {
            if (init_dir.empty() && init_campaign.empty()) {
                throw Error(ErrorKind::invalid_input, "init: name the campaign directory to create: `npuopt init DIR "
                                                      "--target NAME` (or --campaign DIR)");
            }
            init_options.dir = *resolve_campaign_dir("init", init_dir, init_campaign, true);
            exit_code = run_init(global, init_options);
        } else if (doctor->parsed()) {
            if (!doctor_target.empty()) doctor_options.target = doctor_target;
            if (!doctor_dir.empty() || !doctor_campaign.empty()) {
                doctor_options.campaign_dir = resolve_campaign_dir("doctor", doctor_dir, doctor_campaign, true);
            }
            exit_code = run_doctor(global, doctor_options);
        } else if (status->parsed()) {
            status_options.dir = *resolve_campaign_dir("status", status_dir, status_campaign, true);
            exit_code = run_status(global, status_options);
        } else if (kb->parsed()) {
            if (!kb_out.empty()) kb_options.out = kb_out;
            std::string kb_dir;  // a word that is a campaign directory names the campaign
            if (kb_campaign.empty()) {
                auto found = std::find_if(kb_words.begin(), kb_words.end(),
                                          [](const std::string& word) { return is_campaign_dir(word); });
                if (found != kb_words.end()) {
                    kb_dir = *found;
                    kb_words.erase(found);
                }
            }
            kb_options.campaign_dir = *resolve_campaign_dir("kb " + kb_options.action, kb_dir, kb_campaign, true);
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
                            fmt::format("kb {}: unexpected argument '{}'{}", kb_options.action, kb_words.front(),
                                        std::filesystem::is_directory(kb_words.front())
                                            ? " (a directory without campaign.yaml: not a campaign)"
                                            : ""));
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
            run_options.dir = *resolve_campaign_dir("run", run_dir, run_campaign, true);
            exit_code = run_run(global, run_options);
        } else if (tree->parsed()) {
            if (!tree_out.empty()) tree_options.out = tree_out;
            std::string tree_dir;
            for (const auto& word : tree_words) {
                if (tree_dir.empty() && tree_campaign.empty() && is_campaign_dir(word)) {
                    tree_dir = word;
                } else if (tree_options.kernel.empty()) {
                    tree_options.kernel = word;
                } else {
                    throw Error(ErrorKind::invalid_input,
                                fmt::format("tree {}: unexpected argument '{}' (one KERNEL and the campaign DIR)",
                                            tree_options.action, word));
                }
            }
            tree_options.campaign_dir =
                *resolve_campaign_dir("tree " + tree_options.action, tree_dir, tree_campaign, true);
            exit_code = run_tree(global, tree_options);
        } else if (report->parsed()) {
            if (!report_out.empty()) report_options.out = report_out;
            report_options.dir = *resolve_campaign_dir("report", report_dir, report_campaign, true);
            exit_code = run_report(global, report_options);
        } else if (submit->parsed()) {
            if (!submit_out.empty()) submit_options.out = submit_out;
            submit_options.dir = *resolve_campaign_dir("submit", submit_dir, submit_campaign, true);
            exit_code = run_submit(global, submit_options);
        } else if (eval->parsed()) {
            if (!eval_dir.empty() || !eval_campaign.empty()) {
                eval_options.campaign_dir = resolve_campaign_dir("eval", eval_dir, eval_campaign, true);
            }
            if (eval_seed_option->count()) eval_options.seed = eval_seed;
            exit_code = run_eval(global, eval_options);
        } else if (add->parsed()) {
            add_options.campaign_dir = *resolve_campaign_dir("add", add_dir, add_campaign_flag, true);
            exit_code = run_add(global, add_options);
        } else if (demo->parsed()) {
            if (!demo_dir.empty() || !demo_campaign.empty()) {
                demo_options.dir = resolve_campaign_dir("demo", demo_dir, demo_campaign, false);
            }
            exit_code = run_demo(global, demo_options);
        }
        for (const RegisteredCommand& command : registered) {
            if (command.subcommand->parsed()) exit_code = command.run(global);
        }
        if (interrupted()) return k_exit_interrupted;
        return exit_code;
    } catch (const Error& error) {
        return report_error(global.json || json_errors, error_kind_name(error.kind()), error.what(),
                            exit_code_for(error.kind()));
    } catch (const std::exception& error) {
        return report_error(global.json || json_errors, "internal", fmt::format("internal: {}", error.what()),
                            k_exit_failure);
    }
}

}  // namespace npuopt::cli
