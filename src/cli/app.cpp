#include "cli/app.hpp"

#include <algorithm>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/records_cli.hpp"
#include "cli/registry.hpp"
#include "cli/suggest.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"

namespace npuopt::cli {
namespace {

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
    CLI::App app{
        "npuopt — optimises compute kernels for an accelerator it learns by itself:\n"
        "it reads the vendor's docs, measures the chip with microbenchmarks, learns the compiler's\n"
        "rules, and keeps a faster kernel only when an interleaved, statistically sound race says so.",
        "npuopt"};
    app.set_version_flag("--version", std::string("npuopt ") + NPUOPT_VERSION);
    app.footer(exit_codes_help());
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

    std::vector<RegisteredCommand> registered = register_core_commands(app, argc > 0 ? argv[0] : "npuopt");
    registered.push_back(register_export_command(app));
    registered.push_back(register_import_command(app));
    for (auto* subcommand : app.get_subcommands({})) {
        const std::string examples = command_examples(subcommand->get_name());
        const std::string footer = subcommand->get_footer().empty() ? exit_codes_help() : subcommand->get_footer();
        // serve's footer has its own examples
        subcommand->footer(examples.empty() || footer.rfind("Examples:", 0) == 0 ? footer : examples + "\n" + footer);
    }

    const bool json_errors = json_requested(argc, argv);
    if (auto word = first_command_word(argc, argv)) {
        std::vector<std::string> names;
        for (const auto* subcommand : app.get_subcommands({}))
            names.push_back(subcommand->get_name());
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
