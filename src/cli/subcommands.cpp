// The flags of npuopt's core subcommands (registry.hpp): each register_* declares one
// subcommand's flags over its own state and returns what to run when it was parsed — the
// campaign directory resolved the same way everywhere (positionally or with --campaign, or the
// current directory when it is one), then the command's function in cmd_*.cpp.

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/registry.hpp"

#include "proc/executor.hpp"
#include "proc/slurm.hpp"
#include "cli/suggest.hpp"
#include "core/error.hpp"

namespace npuopt::cli {
namespace {

/// A subcommand's positional DIR and its --campaign twin.
struct CampaignArgs {
    std::string dir;
    std::string campaign;
};

void add_campaign_args(CLI::App* sub, CampaignArgs& args, const std::string& dir_help = "Campaign directory") {
    sub->add_option("dir", args.dir, dir_help);
    sub->add_option("--campaign", args.campaign, "The same as DIR");
}

RegisteredCommand register_init(CLI::App& app) {
    struct State {
        InitOptions options;
        CampaignArgs where;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("init", "Create a campaign directory: a commented campaign.yaml and campaign.db");
    add_campaign_args(sub, state->where, "Campaign directory to create (must not exist or be empty)");
    sub->add_option("--target", state->options.target, "Target name: a folder under knowledge/")->required();
    sub->add_option("--seed", state->options.seed, "Seed of the campaign's random choices")->capture_default_str();
    sub->add_option("--shape", state->options.shape,
                    "Shape every kernel is specialised to: a shape name of the target's kernels.yaml "
                    "(default: each kernel's first shape)");
    return {sub, [state](const GlobalOptions& global) {
                if (state->where.dir.empty() && state->where.campaign.empty()) {
                    throw Error(ErrorKind::invalid_input,
                                "init: name the campaign directory to create: `npuopt init DIR "
                                "--target NAME` (or --campaign DIR)");
                }
                state->options.dir = *resolve_campaign_dir("init", state->where.dir, state->where.campaign, true);
                return run_init(global, state->options);
            }};
}

RegisteredCommand register_doctor(CLI::App& app) {
    struct State {
        DoctorOptions options;
        std::string target;
        CampaignArgs where;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand(
        "doctor",
        "Check a target's configuration and toolchain (end to end: the first kernel's baseline compiled, "
        "run once and its output checked, in the sandbox), the sandbox, the database and disk space");
    auto* target_option = sub->add_option("--target", state->target, "Target to check (a folder under knowledge/)");
    sub->add_option("dir", state->where.dir, "Campaign directory to check (its campaign.yaml and campaign.db)")
        ->excludes(target_option);
    sub->add_option("--campaign", state->where.campaign, "The same as DIR")->excludes(target_option);
    sub->footer(std::string("Exits 1 when a check fails, 2 when a configuration file is invalid.\n\n") +
                exit_codes_help());
    return {sub, [state](const GlobalOptions& global) {
                if (!state->target.empty()) state->options.target = state->target;
                if (!state->where.dir.empty() || !state->where.campaign.empty()) {
                    state->options.campaign_dir =
                        resolve_campaign_dir("doctor", state->where.dir, state->where.campaign, true);
                }
                return run_doctor(global, state->options);
            }};
}

RegisteredCommand register_status(CLI::App& app) {
    auto where = std::make_shared<CampaignArgs>();
    auto* sub = app.add_subcommand("status", "Show what a campaign's database holds");
    add_campaign_args(sub, *where);
    return {sub, [where](const GlobalOptions& global) {
                StatusOptions options;
                options.dir = *resolve_campaign_dir("status", where->dir, where->campaign, true);
                return run_status(global, options);
            }};
}

/// `npuopt exec-call CALL RESULT`: what a Slurm job runs on its node (proc/slurm.hpp). Not for
/// people: hidden from --help.
RegisteredCommand register_exec_call(CLI::App& app) {
    auto files = std::make_shared<std::pair<std::string, std::string>>();
    auto* sub = app.add_subcommand("exec-call", "Run one toolchain call from a JSON file (the Slurm executor's job)");
    sub->group("");  // hidden
    sub->add_option("call", files->first, "The call (JSON)")->required();
    sub->add_option("result", files->second, "Where its result goes (JSON, written atomically)")->required();
    return {sub, [files](const GlobalOptions&) {
                proc::execute_call_file(files->first, files->second);
                return 0;
            }};
}

/// `npuopt exec-worker POOL`: one task of the Slurm executor's worker pool (proc/slurm.hpp). Not
/// for people: hidden from --help.
RegisteredCommand register_exec_worker(CLI::App& app) {
    struct State {
        std::string pool;
        double idle_secs = 120.0;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("exec-worker", "Take toolchain calls from a pool's queue (the Slurm executor's worker)");
    sub->group("");  // hidden
    sub->add_option("pool", state->pool, "The pool directory")->required();
    sub->add_option("--idle-secs", state->idle_secs, "End after this long without a call")->check(CLI::PositiveNumber);
    return {sub, [state](const GlobalOptions&) {
                proc::run_pool_worker(state->pool, state->idle_secs);
                return 0;
            }};
}

RegisteredCommand register_kb(CLI::App& app) {
    struct State {
        KbOptions options;
        std::vector<std::string> words;
        std::string campaign;
        std::string out;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("kb",
                                   "Knowledge base of a campaign: build (docs + microbenchmarks + hardware model + "
                                   "rules), search, show, export, refresh after a toolchain update, diff two versions");
    sub->add_option("action", state->options.action, "build | search | show | export | refresh | diff")
        ->required()
        ->check(CLI::IsMember({"build", "search", "show", "export", "refresh", "diff"}));
    sub->add_option("args", state->words, "search: QUERY words; diff: OLD NEW toolchain versions");
    sub->add_option("--campaign", state->campaign,
                    "Campaign directory (or name it among the arguments: `kb show DIR`)");
    sub->add_option("--format", state->options.format, "show/export/diff: md or json")
        ->check(CLI::IsMember({"md", "json"}))
        ->capture_default_str();
    sub->add_option("--out", state->out, "show/export/diff: write to this file instead of stdout");
    sub->add_option("--limit", state->options.limit, "search: number of hits")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    sub->add_flag("--quick", state->options.quick,
                  "build: only the microbenchmarks the cost model needs most (faster)");
    return {sub, [state](const GlobalOptions& global) {
                KbOptions& options = state->options;
                std::vector<std::string>& words = state->words;
                if (!state->out.empty()) options.out = state->out;
                std::string dir;  // a word that is a campaign directory names the campaign
                if (state->campaign.empty()) {
                    auto found = std::find_if(words.begin(), words.end(),
                                              [](const std::string& word) { return is_campaign_dir(word); });
                    if (found != words.end()) {
                        dir = *found;
                        words.erase(found);
                    }
                }
                options.campaign_dir = *resolve_campaign_dir("kb " + options.action, dir, state->campaign, true);
                if (options.action == "search") {
                    for (const auto& word : words)
                        options.query += (options.query.empty() ? "" : " ") + word;
                } else if (options.action == "diff") {
                    if (words.size() != 2)
                        throw Error(ErrorKind::invalid_input, "kb diff: expected two toolchain versions: OLD NEW");
                    options.old_version = words[0];
                    options.new_version = words[1];
                } else if (!words.empty()) {
                    throw Error(ErrorKind::invalid_input,
                                fmt::format("kb {}: unexpected argument '{}'{}", options.action, words.front(),
                                            std::filesystem::is_directory(words.front())
                                                ? " (a directory without campaign.yaml: not a campaign)"
                                                : ""));
                }
                return run_kb(global, options);
            }};
}

RegisteredCommand register_bench(CLI::App& app, const char* argv0) {
    struct State {
        BenchOptions options;
        std::int64_t device_runs = 0;
        std::string dir;
    };
    auto state = std::make_shared<State>();
    state->options.argv0 = argv0;
    auto* sub = app.add_subcommand(
        "bench",
        "Benchmarks that print npuopt's figure beside the one it is compared with: kb (fitted vs true hardware "
        "values), acceptance (the judge vs naive rules), search (npuopt vs random search and hill-climbing on "
        "generated chips and named shapes: after --, --chips K | --chip-seeds A,B, --shapes all|NAME,..., --only "
        "npuopt,random,hill, --work DIR (resumable: one result file per cell), --verify-runs N), refresh (a campaign "
        "carried across a toolchain update vs one started on the new toolchain), throughput (the evaluation pipeline: "
        "device runs and designs per hour and device utilisation with 1-3 builders and device slots beside the serial "
        "loop: after --, --configs serial,b2d1,b2d2,b3d3), adversarial (the adversarial "
        "corpus and honest controls through the cascade), llm (the LLM-backed roles per strategy and n at equal "
        "token budgets; a scripted model on loopback unless -- --endpoint URL --model NAME)");
    sub->add_option("what", state->options.what, "kb | acceptance | search | refresh | throughput | adversarial | llm")
        ->required()
        ->check(CLI::IsMember({"kb", "acceptance", "search", "refresh", "throughput", "adversarial", "llm"}));
    sub->add_option("--dir", state->dir, "adversarial: the corpus folder (default tests/data/adversarial)");
    auto* device_runs_option =
        sub->add_option("--device-runs", state->device_runs, "search: device-run budget per strategy and kernel");
    sub->add_option("args", state->options.extra_args, "Further arguments for the benchmark program (after --)");
    return {sub, [state, device_runs_option](const GlobalOptions& global) {
                BenchOptions& options = state->options;
                if (device_runs_option->count()) options.device_runs = state->device_runs;
                if (!state->dir.empty()) options.extra_args.insert(options.extra_args.begin(), {"--dir", state->dir});
                return run_bench(global, options);
            }};
}

RegisteredCommand register_run(CLI::App& app) {
    struct State {
        RunOptions options;
        CampaignArgs where;
        double budget_minutes = 0.0;
        std::int64_t device_runs = 0;
        std::int64_t max_steps = 0;
        std::string message_format = "human";
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("run",
                                   "Run (or resume) a campaign's search until its budget is spent; live "
                                   "progress on stderr; SIGINT/SIGTERM stop after the current step (exit 3)");
    add_campaign_args(sub, state->where);
    auto* budget_option =
        sub->add_option("--budget-minutes", state->budget_minutes,
                        "Wall time for this run, in minutes (default: what is left of budgets.wall_time)");
    auto* device_option = sub->add_option("--device-runs", state->device_runs,
                                          "Device runs for this run (default: what is left of budgets.device_runs)");
    auto* steps_option = sub->add_option("--max-steps", state->max_steps, "Stop after so many steps");
    sub->add_option("--message-format", state->message_format,
                    "human (progress on stderr, summary at the end) or json (one JSON object per line on stdout "
                    "for every event and step as it happens, then {\"event\":\"finished\",...}, as cargo does)")
        ->check(CLI::IsMember({"human", "json"}))
        ->capture_default_str();
    return {sub, [state, budget_option, device_option, steps_option](const GlobalOptions& global) {
                RunOptions& options = state->options;
                options.stream_json = state->message_format == "json";
                if (budget_option->count()) options.budget_minutes = state->budget_minutes;
                if (device_option->count()) options.device_runs = state->device_runs;
                if (steps_option->count()) options.max_steps = state->max_steps;
                options.dir = *resolve_campaign_dir("run", state->where.dir, state->where.campaign, true);
                return run_run(global, options);
            }};
}

RegisteredCommand register_tree(CLI::App& app) {
    struct State {
        TreeOptions options;
        std::vector<std::string> words;
        std::string campaign;
        std::string out;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("tree", "A kernel's design tree: show KERNEL (text) or export (JSON, DOT, SVG)");
    sub->add_option("action", state->options.action, "show | export")
        ->required()
        ->check(CLI::IsMember({"show", "export"}));
    sub->add_option("args", state->words,
                    "KERNEL (show: required; export: default all) and the campaign DIR, in any order");
    sub->add_option("--campaign", state->campaign, "Campaign directory");
    sub->add_option("--out", state->out, "export: output directory (default trees/)");
    sub->add_flag("--reasons", state->options.reasons, "show: the reason under each design");
    return {sub, [state](const GlobalOptions& global) {
                TreeOptions& options = state->options;
                if (!state->out.empty()) options.out = state->out;
                std::string dir;
                for (const auto& word : state->words) {
                    if (dir.empty() && state->campaign.empty() && is_campaign_dir(word)) {
                        dir = word;
                    } else if (options.kernel.empty()) {
                        options.kernel = word;
                    } else {
                        throw Error(ErrorKind::invalid_input,
                                    fmt::format("tree {}: unexpected argument '{}' (one KERNEL and the campaign DIR)",
                                                options.action, word));
                    }
                }
                options.campaign_dir = *resolve_campaign_dir("tree " + options.action, dir, state->campaign, true);
                return run_tree(global, options);
            }};
}

RegisteredCommand register_report(CLI::App& app) {
    struct State {
        ReportOptions options;
        CampaignArgs where;
        std::string out;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("report", "Write the campaign's Markdown and HTML/SVG report");
    add_campaign_args(sub, state->where);
    sub->add_option("--out", state->out, "Output directory (default DIR/report)");
    return {sub, [state](const GlobalOptions& global) {
                if (!state->out.empty()) state->options.out = state->out;
                state->options.dir = *resolve_campaign_dir("report", state->where.dir, state->where.campaign, true);
                return run_report(global, state->options);
            }};
}

RegisteredCommand register_serve(CLI::App& app) {
    struct State {
        ServeOptions options;
        CampaignArgs where;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("serve",
                                   "A live dashboard of the campaign in the browser (read-only, beside a running "
                                   "`npuopt run`): champions, best-so-far plots and the latest steps, updated "
                                   "as steps land");
    add_campaign_args(sub, state->where);
    sub->add_option("--port", state->options.port, "TCP port (0: any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    sub->add_option("--bind", state->options.bind, "Address to listen on (beyond loopback needs --allow-remote)")
        ->capture_default_str();
    sub->add_flag("--allow-remote", state->options.allow_remote,
                  "Allow a non-loopback --bind; every request then needs the token serve prints "
                  "(or $NPUOPT_DASHBOARD_TOKEN)");
    sub->add_flag("--require-token", state->options.require_token, "Ask for the token on loopback too");
    sub->footer("Examples:\n"
                "  npuopt serve camp                      # http://127.0.0.1:8765/\n"
                "  npuopt serve camp --port 0 --json      # any free port; prints {\"url\": …}\n"
                "  npuopt serve camp --bind 0.0.0.0 --allow-remote   # prints a URL with ?token=…\n\n"
                "Stops on Ctrl-C (SIGINT) or SIGTERM with exit 0.");
    return {sub, [state](const GlobalOptions& global) {
                state->options.dir = *resolve_campaign_dir("serve", state->where.dir, state->where.campaign, true);
                return run_serve(global, state->options);
            }};
}

RegisteredCommand register_submit(CLI::App& app) {
    struct State {
        SubmitCliOptions options;
        CampaignArgs where;
        std::string out;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("submit",
                                   "Package the champions as a submission: sources, manifest.json, "
                                   "replay.log (every champion re-verified now), and a .tar.gz");
    add_campaign_args(sub, state->where);
    sub->add_option("--out", state->out, "Submission directory (default DIR/submission; must be new or empty)");
    sub->add_option("--runs", state->options.runs, "Seeded runs per champion and baseline")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    return {sub, [state](const GlobalOptions& global) {
                if (!state->out.empty()) state->options.out = state->out;
                state->options.dir = *resolve_campaign_dir("submit", state->where.dir, state->where.campaign, true);
                return run_submit(global, state->options);
            }};
}

RegisteredCommand register_eval(CLI::App& app) {
    struct State {
        EvalOptions options;
        CampaignArgs where;
        std::uint64_t seed = 0;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand(
        "eval",
        "Put your own kernel file through the whole evaluation cascade (compile, correctness with "
        "anti-gaming checks, screen) and an interleaved race against an opponent; prints each stage's "
        "verdict and reason and the race's speedup with its interval");
    sub->add_option("file", state->options.file, "The kernel source to evaluate")->required();
    sub->add_option("dir", state->where.dir, "Campaign directory (the same as --campaign)");
    sub->add_option("--kernel", state->options.kernel, "Kernel name (from the target's kernels.yaml)")->required();
    sub->add_option("--campaign", state->where.campaign,
                    "Campaign directory: its champion, rules and hardware model; the evaluation is recorded there "
                    "(default: a scratch campaign, removed afterwards)");
    sub->add_option("--against", state->options.against,
                    "Opponent of the race: champion (the campaign's, else the baseline), baseline, or a kernel file")
        ->capture_default_str();
    sub->add_option("--target", state->options.target, "Target of the scratch campaign (without --campaign)")
        ->capture_default_str();
    auto* seed_option =
        sub->add_option("--seed", state->seed, "Seed of the scratch campaign (default: drawn at random, printed)");
    sub->footer(std::string("Exits 0 when the kernel passed every stage and the race says it is faster than the "
                            "opponent, 4 when it passed every check but was not shown faster (race rejected or "
                            "inconclusive), 1 when it failed or was rejected by a check (rules, compile, correctness, "
                            "a checked race launch, speed of light) or the toolchain or database failed, 2 on bad "
                            "usage.\n\n") +
                exit_codes_help());
    return {sub, [state, seed_option](const GlobalOptions& global) {
                EvalOptions& options = state->options;
                if (!state->where.dir.empty() || !state->where.campaign.empty()) {
                    options.campaign_dir = resolve_campaign_dir("eval", state->where.dir, state->where.campaign, true);
                }
                if (seed_option->count()) options.seed = state->seed;
                return run_eval(global, options);
            }};
}

RegisteredCommand register_add(CLI::App& app) {
    struct State {
        AddOptions options;
        CampaignArgs where;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("add",
                                   "Put your own kernel into a campaign's design tree as a design and race it "
                                   "against the kernel's champion (it is a design like any other from then on)");
    sub->add_option("file", state->options.file, "The kernel source")->required();
    sub->add_option("campaign", state->where.dir, "Campaign directory (or --campaign)");
    sub->add_option("--campaign", state->where.campaign, "Campaign directory");
    sub->add_option("--kernel", state->options.kernel, "Kernel name (from the campaign's kernels.yaml)")->required();
    sub->add_flag("--queue-only", state->options.queue_only,
                  "Only record and queue it: the next `npuopt run` races it first");
    return {sub, [state](const GlobalOptions& global) {
                state->options.campaign_dir =
                    *resolve_campaign_dir("add", state->where.dir, state->where.campaign, true);
                return run_add(global, state->options);
            }};
}

RegisteredCommand register_demo(CLI::App& app) {
    struct State {
        DemoOptions options;
        CampaignArgs where;
    };
    auto state = std::make_shared<State>();
    auto* sub = app.add_subcommand("demo",
                                   "npuopt's main job on npu-sim in one command: init, kb build, a budgeted "
                                   "campaign and a submission; ends with the results table");
    add_campaign_args(sub, state->where, "Campaign directory to create (default: a new temporary directory)");
    sub->add_option("--minutes", state->options.minutes,
                    "Wall time for the whole command in minutes: kb build, campaign and submission")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    sub->add_flag("--full-kb", state->options.full_kb, "Run the whole microbenchmark suite (slower)");
    return {sub, [state](const GlobalOptions& global) {
                if (!state->where.dir.empty() || !state->where.campaign.empty()) {
                    state->options.dir = resolve_campaign_dir("demo", state->where.dir, state->where.campaign, false);
                }
                return run_demo(global, state->options);
            }};
}

}  // namespace

const char* exit_codes_help() {
    return "Exit codes:\n"
           "  0  ok\n"
           "  1  failure (a check failed, the toolchain or the database failed)\n"
           "  2  usage or configuration error (bad arguments, invalid campaign.yaml/target.yaml, unknown target)\n"
           "  3  interrupted (SIGINT/SIGTERM)\n"
           "  4  eval: the kernel passed every check but the race did not show it faster than its opponent\n";
}

std::string command_examples(const std::string& name) {
    static const std::map<std::string, std::string> examples = {
        {"init", "  npuopt init camp --target npu-sim          # camp/campaign.yaml (commented) and camp/campaign.db\n"},
        {"doctor", "  npuopt doctor --target npu-sim             # the toolchain end to end, sandbox, disk\n"
                   "  npuopt doctor camp --json                  # a campaign's target, database and disk\n"},
        {"status", "  npuopt status camp                         # steps, budgets, each kernel's champion\n"
                   "  npuopt status camp --json\n"},
        {"kb", "  npuopt kb build camp --quick               # docs, microbenchmarks, the fitted hardware model\n"
               "  npuopt kb search \"DMA packet\" camp\n"
               "  npuopt kb show camp --format md\n"
               "  npuopt kb refresh camp                     # after a toolchain update\n"},
        {"run", "  npuopt run camp                            # run or resume until the budget is spent\n"
                "  npuopt run camp --budget-minutes 60 --device-runs 500\n"
                "  npuopt run camp --message-format json      # one JSON object per step and event\n"},
        {"tree", "  npuopt tree show feedforward camp --reasons\n"
                 "  npuopt tree export camp                    # camp/trees/*.json, .dot, .svg\n"},
        {"report", "  npuopt report camp                         # camp/report/report.html and report.md\n"},
        {"submit", "  npuopt submit camp                         # camp/submission/ and camp/submission.tar.gz\n"
                   "  npuopt submit camp --out /tmp/final --runs 11\n"},
        {"eval", "  npuopt eval my_ff.rs --kernel feedforward --campaign camp\n"
                 "  npuopt eval my_ff.rs --kernel feedforward --against baseline --json\n"},
        {"add", "  npuopt add my_ff.rs --kernel feedforward camp   # raced against the champion on the next run\n"},
        {"demo", "  npuopt demo --minutes 3                    # everything in 3 minutes, in a temporary directory\n"
                 "  npuopt demo /tmp/d --minutes 10 --json\n"},
        {"bench", "  npuopt bench kb --json\n"
                  "  npuopt bench search --device-runs 100 -- --chips 8 --shapes all --work W\n"},
        {"export", "  npuopt export camp --out camp.records.json\n"},
        {"import", "  npuopt import camp.records.json other_camp\n"},
    };
    auto found = examples.find(name);
    return found == examples.end() ? std::string() : "Examples:\n" + found->second;
}

std::vector<RegisteredCommand> register_core_commands(CLI::App& app, const char* argv0) {
    return {register_init(app),         register_doctor(app), register_status(app), register_kb(app),
            register_bench(app, argv0), register_run(app),    register_tree(app),   register_report(app),
            register_serve(app),        register_submit(app),       register_eval(app),   register_add(app),    register_demo(app),
            register_exec_call(app),    register_exec_worker(app)};
}

}  // namespace npuopt::cli
