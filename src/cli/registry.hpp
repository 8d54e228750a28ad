#pragma once
// How a subcommand joins `npuopt`: a file declares its flags on the CLI11 app and hands back what
// to run when it was parsed (registry.hpp); app.cpp registers each with one call and dispatches
// without knowing any flag. The flags of the core commands are in subcommands.cpp, those of
// `export` and `import` in records_cli.cpp.

#include <functional>
#include <vector>

#include "cli/commands.hpp"

namespace CLI {
class App;
}

namespace npuopt::cli {

/// A registered subcommand: app.cpp calls `run` when `subcommand` was parsed.
struct RegisteredCommand {
    CLI::App* subcommand = nullptr;
    std::function<int(const GlobalOptions&)> run;
};

/// The exit codes, as --help prints them under every subcommand.
const char* exit_codes_help();
/// "Examples:\n  npuopt …" for `--help` of subcommand `name` ("" when it has none).
std::string command_examples(const std::string& name);

/// init, doctor, status, kb, bench, run, tree, report, submit, eval, add, demo — in --help order.
std::vector<RegisteredCommand> register_core_commands(CLI::App& app, const char* argv0);

}  // namespace npuopt::cli
