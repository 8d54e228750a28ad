#pragma once
// Internal to target/: npuopt-jsonl/1 stdout → typed lines (docs/toolchain-protocol.md).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "target/toolchain.hpp"

namespace npuopt::target::detail {

struct ErrorLine { std::string kind; std::string message; std::string entry; };  ///< entry: kind "cache" only
struct VersionLine { std::string name; std::string version; };
struct CheckLine { bool ok = false; std::int64_t errors = 0; std::int64_t warnings = 0; double compile_secs = 0.0; };
struct CompileLine {
    bool ok = false; std::int64_t errors = 0; std::int64_t warnings = 0; double compile_secs = 0.0;
    std::string artifact; std::string sha256;
};
struct PathsLine { std::vector<std::string> read_only; };
struct ScheduleLine {
    std::string kernel;
    double cycles = 0.0;
    std::map<std::string, double> breakdown;
    std::map<std::string, double> counts;
};

/// Everything a toolchain printed on stdout, by line type. The first bad line is kept verbatim.
struct ParsedOutput {
    std::optional<std::string> bad_line;
    std::string parse_error;  ///< why bad_line is bad, with its line number
    std::vector<Diagnostic> diagnostics;
    std::optional<VersionLine> version;
    std::optional<CheckLine> check;
    std::optional<CompileLine> compile;
    std::optional<PathsLine> paths;
    std::optional<ScheduleLine> schedule;
    std::vector<double> run_cycles;
    std::optional<Verify> verify;
    std::vector<ErrorLine> errors;
    std::vector<std::string> raw_events;  ///< unknown types, verbatim
    bool rustc_messages = false;          ///< rustc/cargo JSON messages were among the lines
    std::optional<bool> build_finished;   ///< cargo's `build-finished` success
    std::string cargo_artifact;           ///< cargo's `compiler-artifact` executable, rustc's `artifact`
};

/// `text` cut on a UTF-8 boundary to at most `max_chars` bytes, a marker saying how much was cut included.
std::string cap_text(const std::string& text, std::size_t max_chars);

/// Parses every non-blank line of `stdout_text`; never throws. Text that may reach the knowledge
/// base (diagnostics, error messages) is capped (toolchain.hpp's k_diagnostic_* limits).
ParsedOutput parse_output(const std::string& stdout_text);

}  // namespace npuopt::target::detail
