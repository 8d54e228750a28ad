#pragma once
// The values that cross the target boundary: diagnostics, call status and the results of
// version, check, compile, schedule and run, as the toolchain protocol (protocol.hpp) parses
// them. Plain data, failures included; no behaviour.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/subprocess.hpp"

namespace npuopt::target {

/// Caps on toolchain text that may reach the knowledge base (rules, the search index): the parser
/// cuts longer text, so that a compile_error!(include_str!(...)) cannot carry a file into campaign.db.
inline constexpr std::size_t k_diagnostic_message_max_chars = 1000;  ///< diagnostic and error-line messages
inline constexpr std::size_t k_diagnostic_notes_max = 8;             ///< notes kept per diagnostic
inline constexpr std::size_t k_diagnostic_note_max_chars = 300;
inline constexpr std::size_t k_diagnostic_quantities_max = 32;
inline constexpr std::size_t k_diagnostic_suggestions_max = 32;     ///< fix-its kept per diagnostic
inline constexpr std::size_t k_diagnostic_field_max_chars = 200;     ///< level, code, span file, quantity name, error kind
inline constexpr std::size_t k_raw_line_max_chars = 4000;            ///< an unparsable line or an unknown event, kept
inline constexpr std::size_t k_raw_events_max = 64;                  ///< unknown events kept per call

struct Quantity { std::string name; double value = 0.0; std::optional<double> limit; };
struct Span { std::string file; int line = 0; int column = 0; };

/// How safe a suggested replacement is to apply unseen (rustc's `suggestion_applicability`).
enum class Applicability { machine_applicable, maybe_incorrect, has_placeholders, unspecified };
std::string_view applicability_name(Applicability applicability);  ///< "MachineApplicable", …

/// A fix-it, in rustc's manner: replace bytes [byte_start, byte_end) of `file` with `replacement`.
struct Suggestion {
    std::string message;             ///< the help that carries it ("use `to_trf`")
    std::string file;
    std::int64_t byte_start = 0;
    std::int64_t byte_end = 0;
    int line = 0;
    int column = 0;
    std::string replacement;
    Applicability applicability = Applicability::unspecified;
};

/// One toolchain diagnostic (compile error, legality rule, warning).
struct Diagnostic {
    std::string level;  ///< error | warning
    std::string code;   ///< stable code, e.g. E0201
    std::string message;
    std::optional<Span> span;
    std::vector<Quantity> quantities;
    std::vector<std::string> notes;
    std::vector<Suggestion> suggestions;  ///< from `children[].spans[]` (and rustc's own `spans[]`)
};

/// How a toolchain call ended, beyond its parsed content.
enum class CallStatus { ok, failed, transient, timed_out, crashed, unparsable, not_started };

/// Printable name of a call status (e.g. "timed_out").
std::string_view call_status_name(CallStatus status);

/// Common to every call: the process record and raw text kept for diagnosis.
struct CallInfo {
    CallStatus status = CallStatus::not_started;
    std::string message;      ///< human explanation when status != ok
    proc::Result process;     ///< raw process result (capped stdout/stderr: the raw text, always kept)
    std::vector<std::string> argv;        ///< the expanded command (before sandbox wrapping)
    std::optional<std::string> bad_line;  ///< unparsable: the first offending stdout line, verbatim
    std::vector<std::string> raw_events;  ///< lines of a `type` this adapter does not know, verbatim
};

struct VersionResult { CallInfo call; std::string name; std::string version; };
struct CheckResult { CallInfo call; bool ok = false; std::vector<Diagnostic> diagnostics; double compile_secs = 0.0; };
/// The `compile` command: the only one that writes the compile cache (its cache dir bound writable).
struct CompileResult {
    CallInfo call; bool ok = false; std::vector<Diagnostic> diagnostics; double compile_secs = 0.0;
    std::string artifact;  ///< the cache entry the toolchain wrote
    std::string sha256;    ///< the artifact's hash as the toolchain recorded it
};
struct ScheduleResult {
    CallInfo call; std::vector<Diagnostic> diagnostics;
    std::optional<double> cycles;
    std::map<std::string, double> breakdown;  ///< e.g. dma_cycles
    std::map<std::string, double> counts;     ///< e.g. passes, hbm_read_bytes
};
struct OutputInfo { std::string name; std::int64_t elements = 0; std::string fingerprint; double mean_abs = 0, ref_mean_abs = 0; };
struct Verify {
    bool passed = false; double max_abs_err = 0, max_rel_err = 0;
    std::int64_t mismatches = 0, nonfinite = 0, elements = 0;
    std::vector<OutputInfo> outputs;
};
struct RunResult {
    CallInfo call; std::vector<Diagnostic> diagnostics;
    std::vector<double> cycles;   ///< one per repeat, in order
    std::optional<Verify> verify; ///< with check=true
    std::string error_kind;       ///< from an {"type":"error"} line: transient|device|usage|compile|cache
};

/// A run request. In the run command's argv: {file} (absolute) {kernel} {seed} {repeat}
/// {shape} ("k=v,k=v" sorted), {check} ("--check" when `check`, else the argument is dropped;
/// a run argv without {check} gets "--check" appended when `check`), and the names in `extra`.
/// `extra_args` are appended verbatim after expansion (a flag a test or benchmark needs that
/// target.yaml's argv cannot carry per call).
struct RunRequest {
    std::filesystem::path file;
    std::string kernel;
    std::uint64_t seed = 0;
    int repeat = 1;
    bool check = false;
    std::map<std::string, std::int64_t> shape;
    std::map<std::string, std::string> extra;  ///< extra {placeholders}
    std::vector<std::string> extra_args;       ///< appended verbatim to the expanded argv
};

}  // namespace npuopt::target
