#pragma once
// The target adapter: turns requests into the toolchain commands a target.yaml declares,
// runs them through proc/ (sandboxed), and parses their npuopt-jsonl/1 output
// (docs/toolchain-protocol.md) into typed results. Decides nothing.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/target_config.hpp"
#include "proc/subprocess.hpp"

namespace npuopt::target {

struct Quantity { std::string name; double value = 0.0; std::optional<double> limit; };
struct Span { std::string file; int line = 0; int column = 0; };

/// One toolchain diagnostic (compile error, legality rule, warning).
struct Diagnostic {
    std::string level;  ///< error | warning
    std::string code;   ///< stable code, e.g. E0201
    std::string message;
    std::optional<Span> span;
    std::vector<Quantity> quantities;
    std::vector<std::string> notes;
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
    std::string error_kind;       ///< from an {"type":"error"} line: transient|device|usage|compile
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

/// Calls the toolchain a TargetConfig declares.
class Toolchain {
public:
    /// `sandbox` is the policy template: each call gets a fresh scratch dir under its scratch_dir
    /// (or the system temp dir when empty), removed after. `limits` is the template for rlimits and
    /// output caps; each command's timeout_secs comes from its CommandSpec.
    Toolchain(config::TargetConfig target, proc::SandboxPolicy sandbox, proc::Limits limits = {});

    /// Absolute path of the toolchain executable, or nullopt with `why` filled.
    std::optional<std::filesystem::path> resolve_bin(std::string* why = nullptr) const;

    VersionResult version() const;
    CheckResult check(const std::filesystem::path& file) const;
    ScheduleResult schedule(const std::filesystem::path& file, const std::string& kernel,
                            const std::map<std::string, std::int64_t>& shape) const;
    RunResult run(const RunRequest& request) const;

    const config::TargetConfig& target() const { return m_target; }
    /// A directory kept across calls (the compiler's cache of content-hashed outputs): bound
    /// writable in the sandbox and substituted for `{cache_dir}` in toolchain.env values. Without
    /// one, `{cache_dir}` is the call's scratch dir (nothing is reused).
    void set_cache_dir(std::filesystem::path dir) { m_cache_dir = std::move(dir); }
    const std::filesystem::path& cache_dir() const { return m_cache_dir; }

private:
    CallInfo call(std::string_view command_name, const config::CommandSpec& spec,
                  std::map<std::string, std::string> values, const std::filesystem::path* file,
                  const std::vector<std::string>& append_args = {}) const;

    config::TargetConfig m_target;
    proc::SandboxPolicy m_sandbox;
    proc::Limits m_limits;
    std::filesystem::path m_cache_dir;
};

/// Parse one npuopt-jsonl/1 diagnostic object (exposed for tests and knowledge/).
std::optional<Diagnostic> parse_diagnostic_line(const std::string& line, std::string* error = nullptr);

/// `{shape}`'s value: "k=v,k=v" sorted by key.
std::string format_shape(const std::map<std::string, std::int64_t>& shape);

/// Replaces each `{name}` in `argv` with values[name]. A `{name}` not in `values` is an
/// Error(invalid_config) naming the placeholder and `command_name`; other braces stay literal.
std::vector<std::string> expand_argv(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& values,
                                     std::string_view command_name);

}  // namespace npuopt::target
