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

/// How memory and process-count limits are enforced (see limit_support()).
enum class LimitMechanism {
    cgroup_v2,  ///< a cgroup v2 child per call: memory and processes summed over the whole call
    cgroup_v1,  ///< v1 memory + pids controllers, a child of each per call: summed over the whole call
    rlimit,     ///< no usable cgroup: setrlimit in the child, per process (RLIMIT_NPROC per uid)
};

/// Resource limits of one call. Memory and process count are summed over every process of the
/// call where a per-call cgroup can be made (limit_support()); otherwise they fall back to rlimits.
struct Limits {
    double timeout_secs = 60.0;                 ///< wall clock; the process group is killed after it (<= 0: none)
    double kill_grace_secs = 0.5;               ///< after the timeout: SIGTERM, this long, then SIGKILL
    std::optional<std::uint64_t> cpu_secs;      ///< RLIMIT_CPU (per process)
    std::optional<std::uint64_t> memory_bytes;  ///< the call's cgroup memory limit; fallback RLIMIT_AS per process
    std::optional<std::uint64_t> file_bytes;    ///< RLIMIT_FSIZE (per process)
    std::optional<std::uint64_t> processes;     ///< the call's cgroup pids.max (processes and threads, bwrap's
                                                ///< own 2 included); fallback RLIMIT_NPROC (per uid; not for root)
    std::size_t output_cap_bytes = 1 << 20;     ///< per stream; head and tail are kept
    bool use_cgroups = true;                    ///< false: rlimits even where cgroups work (tests, comparisons)
};

/// How the child is isolated. Inside the sandbox it sees only the system paths, the paths named
/// here, the scratch dir, a fresh /proc, a minimal /dev and a private /tmp: no host file system.
struct SandboxPolicy {
    bool enabled = true;                               ///< run inside bubblewrap
    bool required = false;                             ///< refuse (Error toolchain) when bwrap is missing
    bool allow_network = false;
    std::filesystem::path scratch_dir;                 ///< private writable dir (also HOME, TMPDIR, cwd); empty: a fresh temp dir, removed after
    std::vector<std::filesystem::path> writable_paths; ///< extra writable binds (rare)
    std::vector<std::filesystem::path> read_only_paths;///< directories or single files exposed read-only
    std::optional<std::vector<std::filesystem::path>> system_paths;  ///< read-only system paths (symlinks kept as
                                                                     ///< symlinks; missing ones skipped); nullopt: default_system_paths()
    std::filesystem::path bwrap_path;                  ///< empty: find bwrap on PATH
};

/// What a dynamically linked program (and a compiler driving cc) needs: /usr, the /bin /lib
/// links or dirs, the loader's cache and config, /etc/alternatives. No /home, /root, /etc/passwd.
const std::vector<std::filesystem::path>& default_system_paths();

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
    LimitMechanism limit_mechanism = LimitMechanism::rlimit;  ///< how memory / processes were limited in this call
    std::optional<std::uint64_t> call_memory_peak_bytes;      ///< peak memory of the whole call (cgroups only)
    bool memory_limit_hit = false;   ///< the call went over its memory limit and the OOM killer ran (cgroups only)
    bool process_limit_hit = false;  ///< a fork was refused at the call's process limit (cgroups only)
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

/// How this machine enforces Limits::memory_bytes and Limits::processes, probed once per process.
struct LimitSupport {
    LimitMechanism mechanism = LimitMechanism::rlimit;
    std::string detail;                    ///< where the per-call cgroups go, or why cgroups are not usable
    std::vector<std::string> unenforced;   ///< what is NOT limited as asked (empty with cgroups)
};
LimitSupport limit_support();

/// "cgroup-v2", "cgroup-v1" or "rlimit".
std::string_view limit_mechanism_name(LimitMechanism mechanism);

/// The message that marks a cut in captured output.
std::string cut_marker(std::uint64_t cut_bytes);

}  // namespace npuopt::proc
