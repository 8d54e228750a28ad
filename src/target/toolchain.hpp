#pragma once
// The target adapter: turns requests into the toolchain commands a target.yaml declares,
// runs them through proc/ (sandboxed), and parses their npuopt-jsonl/1 output
// (docs/toolchain-protocol.md) into typed results. Decides nothing.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/target_config.hpp"
#include "proc/subprocess.hpp"

namespace npuopt::target {

/// Caps on toolchain text that may reach the knowledge base (rules, the search index): the parser
/// cuts longer text, so that a compile_error!(include_str!(...)) cannot carry a file into campaign.db.
inline constexpr std::size_t k_diagnostic_message_max_chars = 1000;  ///< diagnostic and error-line messages
inline constexpr std::size_t k_diagnostic_notes_max = 8;             ///< notes kept per diagnostic
inline constexpr std::size_t k_diagnostic_note_max_chars = 300;
inline constexpr std::size_t k_diagnostic_quantities_max = 32;
inline constexpr std::size_t k_diagnostic_field_max_chars = 200;     ///< level, code, span file, quantity name, error kind
inline constexpr std::size_t k_raw_line_max_chars = 4000;            ///< an unparsable line or an unknown event, kept
inline constexpr std::size_t k_raw_events_max = 64;                  ///< unknown events kept per call

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
    /// Compiles `file` into the cache (target.yaml's `compile` command). check/schedule/run call it
    /// themselves, once per file content per process; nothing to do without a compile command or a
    /// cache dir (ok, with call.status not_started and an explaining message).
    CompileResult compile(const std::filesystem::path& file) const;
    CheckResult check(const std::filesystem::path& file) const;
    ScheduleResult schedule(const std::filesystem::path& file, const std::string& kernel,
                            const std::map<std::string, std::int64_t>& shape) const;
    RunResult run(const RunRequest& request) const;

    const config::TargetConfig& target() const { return m_target; }
    /// A directory kept across calls (the compiler's cache of content-hashed outputs), substituted
    /// for `{cache_dir}` in toolchain.env values and argv. With a `compile` command it is bound
    /// writable for compile only and read-only for every other command (the kernel's own code runs
    /// there); without one, writable for all. Without a cache dir, `{cache_dir}` is the call's
    /// scratch dir (nothing is reused) and no compile step runs.
    void set_cache_dir(std::filesystem::path dir) { m_cache_dir = std::move(dir); }
    const std::filesystem::path& cache_dir() const { return m_cache_dir; }

    /// What the sandbox exposes besides the system paths: target.yaml's read_only_paths, what the
    /// `paths` command printed (run once per process, unsandboxed: the toolchain is trusted) and the
    /// toolchain executable; without a `paths` command (or when it fails) the toolchain's install root.
    std::vector<std::filesystem::path> toolchain_paths() const;

private:
    enum class CacheAccess { writable, read_only };
    /// A file's compile state in this process, by (cache dir, content hash).
    struct CompileMemo { bool ok = false; std::vector<Diagnostic> diagnostics; double compile_secs = 0.0; CallInfo call; };

    CallInfo call(std::string_view command_name, const config::CommandSpec& spec,
                  std::map<std::string, std::string> values, const std::filesystem::path* file,
                  const std::vector<std::string>& append_args, CacheAccess cache_access) const;
    /// check/schedule/run of a file: compile first (once per content), run, and on a cache error
    /// evict the named entry, recompile and retry once.
    CallInfo call_on_file(std::string_view command_name, const config::CommandSpec& spec,
                          std::map<std::string, std::string> values, const std::filesystem::path& file,
                          const std::vector<std::string>& append_args = {}) const;
    /// The compile memo for `file`, compiling unless already done (or `force`); nullopt when no
    /// compile step applies (no compile command, no cache dir, unreadable file).
    std::optional<CompileMemo> ensure_compiled(const std::filesystem::path& file, bool force) const;
    /// Removes a cache entry the toolchain named, only if it lies inside the cache dir.
    bool evict_cache_entry(const std::string& entry, std::string* why) const;
    bool uses_compile_step() const {
        return m_target.toolchain.compile.has_value() && !m_cache_dir.empty() && !m_compile_unsupported->load();
    }

    config::TargetConfig m_target;
    proc::SandboxPolicy m_sandbox;
    proc::Limits m_limits;
    std::filesystem::path m_cache_dir;
    std::shared_ptr<std::mutex> m_compile_mutex = std::make_shared<std::mutex>();
    std::shared_ptr<std::atomic<bool>> m_compile_unsupported = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<std::map<std::string, CompileMemo>> m_compiled =
        std::make_shared<std::map<std::string, CompileMemo>>();
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
