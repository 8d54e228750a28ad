#pragma once
// Internal to target/: npuopt-jsonl/1 stdout → typed lines (docs/toolchain-protocol.md).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "target/toolchain.hpp"

namespace npuopt::target::detail {

struct ErrorLine { std::string kind; std::string message; };
struct VersionLine { std::string name; std::string version; };
struct CheckLine { bool ok = false; std::int64_t errors = 0; std::int64_t warnings = 0; double compile_secs = 0.0; };
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
    std::optional<ScheduleLine> schedule;
    std::vector<double> run_cycles;
    std::optional<Verify> verify;
    std::vector<ErrorLine> errors;
    std::vector<std::string> raw_events;  ///< unknown types, verbatim
};

/// Parses every non-blank line of `stdout_text`; never throws.
ParsedOutput parse_output(const std::string& stdout_text);

}  // namespace npuopt::target::detail
