#include "cli/app.hpp"

#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"

namespace npuopt::cli {
namespace {

constexpr const char* k_exit_codes_help =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  failure (a check failed, the toolchain or the database failed, not implemented yet)\n"
    "  2  usage or configuration error (bad arguments, invalid campaign.yaml/target.yaml, unknown target)\n"
    "  3  interrupted (SIGINT/SIGTERM)\n";

/// A subcommand whose feature arrives with a later issue.
struct PlannedCommand {
    CLI::App* app;
    const char* planned;
};

int not_implemented(const std::string& name, const char* planned) {
    std::cerr << fmt::format("npuopt: error: '{}' is not implemented yet (planned: {})\n", name, planned);
    return k_exit_failure;
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
    init->add_option("dir", init_options.dir, "Campaign directory to create (must not exist or be empty)")->required();
    init->add_option("--target", init_options.target, "Target name: a folder under knowledge/")->required();
    init->add_option("--seed", init_options.seed, "Seed of the campaign's random choices")->capture_default_str();

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

    std::vector<PlannedCommand> planned;
    std::string ignored_text;
    int ignored_number = 0;
    bool ignored_flag = false;

    auto* kb = app.add_subcommand("kb", "Knowledge base: ingest docs, run microbenchmarks, fit the hardware model, "
                                        "list rules, refresh after a toolchain update");
    kb->add_option("action", ignored_text, "ingest | probe | fit | rules | show | refresh")
        ->check(CLI::IsMember({"ingest", "probe", "fit", "rules", "show", "refresh"}));
    kb->add_option("--campaign", ignored_text, "Campaign directory");
    kb->add_option("--query", ignored_text, "Search the knowledge base (BM25)");
    planned.push_back({kb, "issue 4"});

    auto* bench = app.add_subcommand("bench", "Evaluate one design through the cascade and measure it");
    bench->add_option("--campaign", ignored_text, "Campaign directory");
    bench->add_option("--kernel", ignored_text, "Kernel name from kernels.yaml");
    bench->add_option("--design", ignored_text, "Design source file (default: the kernel's baseline)");
    bench->add_option("--seeds", ignored_number, "Number of seeded runs");
    bench->add_option("--repeat", ignored_number, "Repeats per run");
    planned.push_back({bench, "issues 3-6"});

    auto* run = app.add_subcommand("run", "Run (or resume) a campaign's search until its budget is spent");
    run->add_option("dir", ignored_text, "Campaign directory");
    run->add_option("--wall-time", ignored_text, "Override budgets.wall_time (e.g. 30m)");
    run->add_option("--device-runs", ignored_number, "Override budgets.device_runs");
    planned.push_back({run, "issue 6"});

    auto* tree = app.add_subcommand("tree", "Show a kernel's design tree");
    tree->add_option("dir", ignored_text, "Campaign directory");
    tree->add_option("--kernel", ignored_text, "Kernel name");
    tree->add_option("--format", ignored_text, "text | dot | svg")->check(CLI::IsMember({"text", "dot", "svg"}));
    planned.push_back({tree, "issue 6"});

    auto* report = app.add_subcommand("report", "Write the campaign's HTML/SVG report");
    report->add_option("dir", ignored_text, "Campaign directory");
    report->add_option("--out", ignored_text, "Output file");
    planned.push_back({report, "issue 6"});

    auto* submit = app.add_subcommand("submit", "Package the champions as a competition submission");
    submit->add_option("dir", ignored_text, "Campaign directory");
    submit->add_option("--out", ignored_text, "Output directory");
    planned.push_back({submit, "issue 6"});

    auto* demo = app.add_subcommand("demo", "A short end-to-end campaign on npu-sim in a scratch directory");
    demo->add_option("--dir", ignored_text, "Where to put the demo campaign");
    demo->add_flag("--quick", ignored_flag, "Smallest budget");
    planned.push_back({demo, "issue 6"});

    for (auto* subcommand : app.get_subcommands({})) subcommand->footer(k_exit_codes_help);
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
        } else {
            for (const auto& command : planned) {
                if (command.app->parsed()) exit_code = not_implemented(command.app->get_name(), command.planned);
            }
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
