#pragma once
// Run a command as a subprocess: wall-clock timeout that kills the whole process group,
// capped output capture (head and tail kept), rlimits, scrubbed environment, optional
// bubblewrap sandbox. Interprets nothing: the caller reads the result.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace npuopt::proc {

/// Resource limits applied to the child (setrlimit) and the sandbox policy.
struct Limits {
    double timeout_secs = 60.0;                 ///< wall clock; the process group is killed after it
    std::optional<std::uint64_t> cpu_secs;      ///< RLIMIT_CPU
    std::optional<std::uint64_t> memory_bytes;  ///< RLIMIT_AS
    std::optional<std::uint64_t> file_bytes;    ///< RLIMIT_FSIZE
    std::optional<std::uint64_t> processes;     ///< RLIMIT_NPROC
    std::size_t output_cap_bytes = 1 << 20;     ///< per stream; head and tail are kept
};

/// How the child is isolated.
struct SandboxPolicy {
    bool enabled = true;                               ///< run inside bubblewrap
    bool required = false;                             ///< refuse (Error toolchain) when bwrap is missing
    bool allow_network = false;
    std::filesystem::path scratch_dir;                 ///< private writable dir (also HOME, TMPDIR, cwd)
    std::vector<std::filesystem::path> writable_paths; ///< extra writable binds (rare)
    std::vector<std::filesystem::path> read_only_paths;///< extra read-only binds (the whole / is read-only anyway)
};

/// A command to run.
struct Command {
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;  ///< the ONLY variables the child sees, besides the allow-list
    std::optional<std::filesystem::path> cwd;
    std::optional<std::string> stdin_data;
    Limits limits;
    SandboxPolicy sandbox;
};

/// What happened; a failure to run is data here, not an exception.
struct Result {
    bool started = false;            ///< false: could not spawn (see error)
    bool timed_out = false;
    std::optional<int> exit_code;    ///< set when it exited
    std::optional<int> term_signal;  ///< set when a signal ended it
    double wall_secs = 0.0;
    std::uint64_t peak_rss_bytes = 0;
    std::string stdout_text;         ///< capped: head + marker + tail
    std::string stderr_text;
    bool stdout_truncated = false;
    bool stderr_truncated = false;
    bool sandboxed = false;
    std::optional<std::string> error;  ///< spawn error, sandbox setup error
    bool ok() const { return started && !timed_out && exit_code && *exit_code == 0; }
};

/// Run a command to completion (or timeout). Thread-safe.
Result run(const Command& command);

/// Variables copied from the parent environment when present (never secrets).
const std::vector<std::string>& environment_allow_list();

/// Whether bubblewrap is installed and usable here; `reason` says why not.
struct SandboxStatus { bool available = false; std::string bwrap_path; std::string reason; };
SandboxStatus probe_sandbox();

}  // namespace npuopt::proc
