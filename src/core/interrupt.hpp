#pragma once
// SIGINT/SIGTERM turn into a flag that long-running commands poll; main maps it to exit code 3.

namespace npuopt {

/// Install SIGINT and SIGTERM handlers that set the interrupted flag (idempotent).
void install_interrupt_handlers();

/// Whether SIGINT or SIGTERM arrived since the handlers were installed.
bool interrupted();

/// Throw Error(interrupted) when a signal arrived; call between steps of a long command.
void throw_if_interrupted();

}  // namespace npuopt
