#pragma once
// The `npuopt` command line: parses arguments (CLI11), runs a subcommand, maps errors to exit codes.

#include "core/error.hpp"

namespace npuopt::cli {

/// Exit code for an Error kind: usage/config 2, interrupted 3, everything else 1.
int exit_code_for(ErrorKind kind);

/// Entry point of the binary; never throws.
int run_main(int argc, char** argv);

}  // namespace npuopt::cli
