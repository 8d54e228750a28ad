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
#include <string_view>
#include <vector>

namespace npuopt::proc {

/// Resource limits applied to the child (setrlimit) and the sandbox policy.
struct Limits {
    double timeout_secs = 60.0;                 ///< wall clock; the process group is killed after it (<= 0: none)
    double kill_grace_secs = 0.5;               ///< after the timeout: SIGTERM, this long, then SIGKILL
    std::optional<std::uint64_t> cpu_secs;      ///< RLIMIT_CPU
    std::optional<std::uint64_t> memory_bytes;  ///< RLIMIT_AS
    std::optional<std::uint64_t> file_bytes;    ///< RLIMIT_FSIZE
    std::optional<std::uint64_t> processes;     ///< RLIMIT_NPROC (per real uid; not enforced for root)
    std::size_t output_cap_bytes = 1 << 20;     ///< per stream; head and tail are kept
};

/// How the child is isolated.
struct SandboxPolicy {
    bool enabled = true;                               ///< run inside bubblewrap
    bool required = false;                             ///< refuse (Error toolchain) when bwrap is missing
    bool allow_network = false;
    std::filesystem::path scratch_dir;                 ///< private writable dir (also HOME, TMPDIR, cwd); empty: a fresh temp dir, removed after
    std::vector<std::filesystem::path> writable_paths; ///< extra writable binds (rare)
    std::vector<std::filesystem::path> read_only_paths;///< extra read-only binds (the whole / is read-only anyway)
    std::filesystem::path bwrap_path;                  ///< empty: find bwrap on PATH
};

/// A command to run.
struct Command {
    std::vector<std::string> argv;           ///< argv[0] is searched on the child's PATH unless it has a '/'
    std::map<std::string, std::string> env;  ///< the ONLY variables the child sees, besides the allow-list (secret-looking names are dropped)
    std::optional<std::filesystem::path> cwd;///< default: the scratch dir
    std::optional<std::string> stdin_data;   ///< default: /dev/null
    Limits limits;
    SandboxPolicy sandbox;
};

/// What happened; a failure to run is data here, not an exception.
struct Result {
    bool started = false;            ///< false: could not spawn (see error)
    bool timed_out = false;
    std::optional<int> exit_code;    ///< set when it exited
    std::optional<int> term_signal;  ///< set when a signal ended it (in the sandbox: bwrap's exit 128+N)
    double wall_secs = 0.0;
    std::uint64_t peak_rss_bytes = 0;
    std::string stdout_text;         ///< capped: head + marker + tail
    std::string stderr_text;
    bool stdout_truncated = false;
    bool stderr_truncated = false;
    std::uint64_t stdout_bytes = 0;  ///< total bytes the child wrote, before the cap
    std::uint64_t stderr_bytes = 0;
    bool sandboxed = false;
    std::optional<std::string> error;  ///< spawn error, sandbox setup error
    bool ok() const { return started && !timed_out && exit_code && *exit_code == 0; }
};

/// Run a command to completion (or timeout). Thread-safe.
/// Throws Error(toolchain) only when the sandbox is required and unusable.
Result run(const Command& command);

/// Variables copied from the parent environment when present (never secrets).
const std::vector<std::string>& environment_allow_list();

/// Whether a variable name looks like a secret (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*, ...).
bool is_secret_name(std::string_view name);

/// The executable `name` resolves to: itself when it holds a '/', else searched in `search_path`
/// (colon-separated). nullopt when nothing executable is found.
std::optional<std::filesystem::path> find_executable(const std::string& name, const std::string& search_path);

/// Whether bubblewrap is installed and usable here; `reason` says why not.
struct SandboxStatus { bool available = false; std::string bwrap_path; std::string reason; };
/// Finds bwrap (`bwrap_path`, or on PATH) and runs a trivial sandboxed command. Not cached.
SandboxStatus probe_sandbox(const std::filesystem::path& bwrap_path = {});

/// The message that marks a cut in captured output.
std::string cut_marker(std::uint64_t cut_bytes);

}  // namespace npuopt::proc
