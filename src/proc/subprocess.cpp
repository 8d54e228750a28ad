// proc::run: fork + execve in a new process group, poll()-based capped capture, wall-clock
// timeout that kills the whole group, rlimits, scrubbed environment, optional bubblewrap.
//
//   parent                                   child (own process group)
//   ──────                                   ─────────────────────────
//   build argv/envp, pipes ── fork ────────► reset signals, dup2 0/1/2, chdir,
//        │                                   setrlimit, execve ── on failure: errno
//   read exec-error pipe ◄─────────────────── ──────────────────── into the pipe
//   poll stdout/stderr/pidfd until exit;
//   deadline: SIGTERM group, grace, SIGKILL;
//   child gone: SIGKILL the rest of the group, drain, wait4 (rusage)

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "core/log.hpp"
#include "core/error.hpp"
#include "proc/cgroup.hpp"
#include "proc/sandbox.hpp"
#include "proc/subprocess.hpp"

namespace npuopt::proc {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double k_drain_secs = 2.0;       ///< how long to wait for pipe EOF once the group is gone
constexpr double k_poll_slice_secs = 0.02; ///< poll period when pidfd is unavailable
constexpr int k_no_fd = -1;

/// A file descriptor closed on scope exit.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : m_fd(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& other) noexcept : m_fd(other.release()) {}
    Fd& operator=(Fd&& other) noexcept {
        reset(other.release());
        return *this;
    }
    ~Fd() { reset(); }
    int get() const { return m_fd; }
    int release() {
        int fd = m_fd;
        m_fd = k_no_fd;
        return fd;
    }
    void reset(int fd = k_no_fd) {
        if (m_fd >= 0) ::close(m_fd);
        m_fd = fd;
    }

private:
    int m_fd = k_no_fd;
};

/// Keeps the first and last cap/2 bytes of a stream and counts the rest.
class CappedBuffer {
public:
    explicit CappedBuffer(std::size_t cap) : m_head_cap(cap - cap / 2), m_tail_cap(cap / 2) {}

    void append(const char* data, std::size_t size) {
        m_total += size;
        if (m_head.size() < m_head_cap) {
            std::size_t to_head = std::min(size, m_head_cap - m_head.size());
            m_head.append(data, to_head);
            data += to_head;
            size -= to_head;
        }
        if (size == 0 || m_tail_cap == 0) return;
        m_tail.append(data, size);
        if (m_tail.size() > 2 * m_tail_cap + 65536) m_tail.erase(0, m_tail.size() - m_tail_cap);
    }

    std::uint64_t total() const { return m_total; }
    bool truncated() const { return m_total > m_head.size() + std::min(m_tail.size(), m_tail_cap); }

    std::string text() const {
        std::string tail = m_tail.size() > m_tail_cap ? m_tail.substr(m_tail.size() - m_tail_cap) : m_tail;
        if (!truncated()) return m_head + tail;
        std::uint64_t cut = m_total - m_head.size() - tail.size();
        return m_head + cut_marker(cut) + tail;
    }

private:
    std::size_t m_head_cap;
    std::size_t m_tail_cap;
    std::string m_head;
    std::string m_tail;
    std::uint64_t m_total = 0;
};

/// What the child reports through the exec-error pipe before dying.
struct ChildFailure {
    int stage = 0;  ///< 1 chdir, 2 setrlimit, 3 execve, 4 dup2, 5 joining the call's cgroup
    int error_number = 0;
};

/// An fd number >= 3 (so dup2 onto 0/1/2 in the child never aliases), close-on-exec.
int lift_fd(int fd) {
    if (fd < 0 || fd > 2) return fd;
    int lifted = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    return lifted;
}

bool make_pipe(Fd& read_end, Fd& write_end) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    read_end.reset(lift_fd(fds[0]));
    write_end.reset(lift_fd(fds[1]));
    return read_end.get() >= 0 && write_end.get() >= 0;
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The child's environment: allow-listed parent variables, then the command's own, never a secret.
std::map<std::string, std::string> build_environment(const Command& command, const std::filesystem::path& scratch) {
    std::map<std::string, std::string> env;
    for (const auto& name : environment_allow_list()) {
        if (is_secret_name(name)) continue;
        if (const char* value = std::getenv(name.c_str())) env[name] = value;
    }
    if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    env["HOME"] = scratch.string();
    env["TMPDIR"] = scratch.string();
    for (const auto& [name, value] : command.env) {
        if (is_secret_name(name)) {
            log::warn("proc: not passing variable {} to {}: its name looks like a secret", name,
                         command.argv.empty() ? std::string("?") : command.argv[0]);
            continue;
        }
        env[name] = value;
    }
    return env;
}

/// A fresh private directory under the system temp dir.
std::optional<std::filesystem::path> make_temp_dir(const char* prefix) {
    std::error_code error;
    std::filesystem::path base = std::filesystem::temp_directory_path(error);
    if (error) base = "/tmp";
    std::string pattern = (base / fmt::format("{}XXXXXX", prefix)).string();
    if (::mkdtemp(pattern.data()) == nullptr) return std::nullopt;
    return std::filesystem::path(pattern);
}

/// The rlimits to set in the child, prepared before fork.
struct RlimitPlan {
    int resource;
    rlimit value;
};

/// With a per-call cgroup, memory and processes are limited there (summed over the call), not per process.
std::vector<RlimitPlan> plan_rlimits(const Limits& limits, bool in_cgroup) {
    std::vector<RlimitPlan> plans;
    auto add = [&](int resource, const std::optional<std::uint64_t>& value) {
        if (!value) return;
        rlimit limit{};
        limit.rlim_cur = static_cast<rlim_t>(*value);
        limit.rlim_max = static_cast<rlim_t>(*value);
        plans.push_back({resource, limit});
    };
    add(RLIMIT_CPU, limits.cpu_secs);
    if (!in_cgroup) add(RLIMIT_AS, limits.memory_bytes);
    add(RLIMIT_FSIZE, limits.file_bytes);
    if (!in_cgroup) add(RLIMIT_NPROC, limits.processes);
    return plans;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
    std::vector<char*> pointers;
    pointers.reserve(strings.size() + 1);
    for (auto& text : strings) pointers.push_back(text.data());
    pointers.push_back(nullptr);
    return pointers;
}

[[noreturn]] void child_fail(int error_pipe, int stage) {
    ChildFailure failure{stage, errno};
    ssize_t written = ::write(error_pipe, &failure, sizeof failure);
    (void)written;
    ::_exit(127);
}

/// Runs in the child between fork and execve: async-signal-safe calls only.
[[noreturn]] void exec_child(int stdin_fd, int stdout_fd, int stderr_fd, int error_pipe, const char* cwd,
                             const std::vector<RlimitPlan>& rlimits, const std::vector<int>& cgroup_procs_fds,
                             char* const* argv, char* const* envp) {
    ::setpgid(0, 0);
    for (int fd : cgroup_procs_fds) {  // "0": this process; everything it starts follows
        if (::write(fd, "0", 1) != 1) child_fail(error_pipe, 5);
    }
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
        ::sigaction(signal_number, &default_action, nullptr);  // fails harmlessly for KILL/STOP
    }
    sigset_t empty_set;
    ::sigemptyset(&empty_set);
    ::sigprocmask(SIG_SETMASK, &empty_set, nullptr);

    if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) child_fail(error_pipe, 4);
#ifdef SYS_close_range
    ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
#endif
    if (cwd != nullptr && ::chdir(cwd) != 0) child_fail(error_pipe, 1);
    for (const auto& plan : rlimits) {
        if (::setrlimit(plan.resource, &plan.value) != 0) child_fail(error_pipe, 2);
    }
    ::execve(argv[0], argv, envp);
    child_fail(error_pipe, 3);
}

std::string describe_child_failure(const ChildFailure& failure, const std::string& program, const std::string& cwd) {
    switch (failure.stage) {
        case 1: return fmt::format("cannot enter working directory {}: {}", cwd, std::strerror(failure.error_number));
        case 2: return fmt::format("cannot set resource limits: {}", std::strerror(failure.error_number));
        case 5: return fmt::format("cannot join the call's cgroup: {}", std::strerror(failure.error_number));
        case 3:
            if (failure.error_number == ENOENT) return "no such file: " + program;
            return fmt::format("cannot execute {}: {}", program, std::strerror(failure.error_number));
        default: return fmt::format("cannot set up the child's standard streams: {}", std::strerror(failure.error_number));
    }
}

/// Reads whatever is available on `fd` into `buffer`; false at EOF or a hard error.
bool drain_available(int fd, CappedBuffer& buffer) {
    char chunk[65536];
    while (true) {
        ssize_t got = ::read(fd, chunk, sizeof chunk);
        if (got > 0) {
            buffer.append(chunk, static_cast<std::size_t>(got));
            continue;
        }
        if (got == 0) return false;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
}

/// Whether `pid` has exited, without reaping it (so its pid, and the group id, stay reserved).
bool has_exited(pid_t pid) {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != EINTR) return true;  // ECHILD: nothing left to wait for
    }
    return info.si_pid == pid;
}

void warn_unsandboxed_once(const std::string& reason) {
    static std::atomic<bool> warned{false};
    if (warned.exchange(true)) return;
    log::warn("SANDBOX UNAVAILABLE: {}. Toolchain commands and generated code run UNSANDBOXED "
                 "(network, your files and this machine are reachable). Fix: apt-get install bubblewrap",
                 reason);
}

void warn_cgroup_failed_once(const std::string& reason) {
    static std::atomic<bool> warned{false};
    if (warned.exchange(true)) return;
    log::warn("proc: cannot make a cgroup for a call ({}); this call's memory and process limits fall back to "
                 "rlimits (per process)",
                 reason);
}

/// A cgroup for one call where the machine has one (memory and processes summed over the call,
/// and whatever the call leaves behind killed with it); none where it has not, or making it failed.
std::optional<detail::CallCgroup> make_call_cgroup(const Limits& limits) {
    if (!limits.use_cgroups) return std::nullopt;
    const detail::CgroupHome& home = detail::cached_cgroup_home();
    if (home.mechanism == LimitMechanism::rlimit) return std::nullopt;
    std::string cgroup_error;
    auto made = detail::CallCgroup::create(home, limits, &cgroup_error);
    if (!made) warn_cgroup_failed_once(cgroup_error);
    return made;
}

/// The child's stdin: the command's data in a memory file, else /dev/null; an invalid Fd on failure.
Fd stdin_for(const Command& command) {
    Fd stdin_fd;
    if (command.stdin_data) {
        stdin_fd.reset(lift_fd(static_cast<int>(::syscall(SYS_memfd_create, "npuopt-stdin", MFD_CLOEXEC))));
        const std::string& data = *command.stdin_data;
        std::size_t offset = 0;
        while (stdin_fd.get() >= 0 && offset < data.size()) {
            ssize_t written = ::write(stdin_fd.get(), data.data() + offset, data.size() - offset);
            if (written < 0 && errno == EINTR) continue;
            if (written <= 0) {
                stdin_fd.reset();
                break;
            }
            offset += static_cast<std::size_t>(written);
        }
        if (stdin_fd.get() >= 0) ::lseek(stdin_fd.get(), 0, SEEK_SET);
    } else {
        stdin_fd.reset(lift_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
    }
    return stdin_fd;
}

/// How supervising a child ended.
struct Supervised {
    bool timed_out = false;
    bool pipes_left_open = false;  ///< the drain ended with a pipe still open: an escaped process holds it
};

/// The running child's output read until it exits (and its pipes drain) or the timeout kills it:
/// SIGTERM to its process group at the deadline, SIGKILL after the grace.
Supervised supervise(pid_t pid, Fd& out_read, Fd& err_read, std::optional<detail::CallCgroup>& cgroup,
                     const Limits& limits, Clock::time_point start, CappedBuffer& stdout_buffer,
                     CappedBuffer& stderr_buffer) {
    Supervised result;
#ifdef SYS_pidfd_open
    Fd pid_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
    Fd pid_fd;
#endif
    const bool has_deadline = limits.timeout_secs > 0;
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(has_deadline ? limits.timeout_secs : 0.0));
    std::optional<Clock::time_point> kill_at;  // set when SIGTERM went out
    bool killed_hard = false;
    std::optional<Clock::time_point> drain_until;  // set once the child has exited

    while (out_read.get() >= 0 || err_read.get() >= 0 || !drain_until) {
        const auto now = Clock::now();
        if (!drain_until && has_exited(pid)) {
            ::kill(-pid, SIGKILL);           // nothing of the call outlives it (the zombie keeps the group id ours)
            if (cgroup) cgroup->kill_all();  // not even what left the process group
            drain_until =
                now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(k_drain_secs));
            continue;
        }
        if (drain_until && now >= *drain_until) break;  // an escaped process holds the pipes: stop reading
        if (!drain_until && has_deadline && now >= deadline && !kill_at) {
            result.timed_out = true;
            ::kill(-pid, SIGTERM);
            kill_at = now + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(std::max(0.0, limits.kill_grace_secs)));
        }
        if (!drain_until && kill_at && now >= *kill_at && !killed_hard) {
            ::kill(-pid, SIGKILL);
            if (cgroup) cgroup->kill_all();
            killed_hard = true;
        }

        // How long poll may sleep: to the next thing we must do.
        Clock::time_point wake = Clock::time_point::max();
        if (drain_until)
            wake = *drain_until;
        else if (kill_at && !killed_hard)
            wake = *kill_at;
        else if (has_deadline && !kill_at)
            wake = deadline;
        double wait_secs =
            wake == Clock::time_point::max() ? 3600.0 : std::chrono::duration<double>(wake - now).count();
        if (!drain_until && pid_fd.get() < 0) wait_secs = std::min(wait_secs, k_poll_slice_secs);
        int wait_ms = static_cast<int>(std::clamp(wait_secs * 1000.0 + 1.0, 0.0, 3'600'000.0));

        pollfd fds[3];
        nfds_t count = 0;
        int out_index = -1, err_index = -1;
        if (out_read.get() >= 0) {
            out_index = static_cast<int>(count);
            fds[count++] = {out_read.get(), POLLIN, 0};
        }
        if (err_read.get() >= 0) {
            err_index = static_cast<int>(count);
            fds[count++] = {err_read.get(), POLLIN, 0};
        }
        if (!drain_until && pid_fd.get() >= 0) fds[count++] = {pid_fd.get(), POLLIN, 0};
        int ready = ::poll(fds, count, wait_ms);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        if (out_index >= 0 && fds[out_index].revents != 0 && !drain_available(out_read.get(), stdout_buffer)) {
            out_read.reset();
        }
        if (err_index >= 0 && fds[err_index].revents != 0 && !drain_available(err_read.get(), stderr_buffer)) {
            err_read.reset();
        }
    }

    result.pipes_left_open = drain_until && (out_read.get() >= 0 || err_read.get() >= 0);
    return result;
}

/// Everything the process itself produced: spawn, capture, timeout, reap.
Result spawn_and_wait(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                      const std::filesystem::path& cwd, const Command& command) {
    Result result;
    const Limits& limits = command.limits;
    const auto start = Clock::now();

    std::vector<std::string> env_strings;
    for (const auto& [name, value] : env)
        env_strings.push_back(name + "=" + value);
    std::vector<char*> argv_pointers = c_strings(argv);
    std::vector<char*> envp_pointers = c_strings(env_strings);
    // A cgroup per call where the machine has one: memory and processes summed over the call,
    // and whatever the call leaves behind (a daemon in its own session) is killed with it.
    std::optional<detail::CallCgroup> cgroup = make_call_cgroup(limits);
    static const std::vector<int> k_no_fds;
    const std::vector<int>& cgroup_fds = cgroup ? cgroup->procs_fds() : k_no_fds;
    std::vector<RlimitPlan> rlimits = plan_rlimits(limits, cgroup.has_value());
    std::string cwd_text = cwd.string();
    result.limit_mechanism = cgroup ? detail::cached_cgroup_home().mechanism : LimitMechanism::rlimit;

    Fd stdin_fd = stdin_for(command);
    Fd out_read, out_write, err_read, err_write, fail_read, fail_write;
    if (stdin_fd.get() < 0 || !make_pipe(out_read, out_write) || !make_pipe(err_read, err_write) ||
        !make_pipe(fail_read, fail_write)) {
        result.error = fmt::format("cannot create pipes for the child: {}", std::strerror(errno));
        return result;
    }

    pid_t pid = ::fork();
    if (pid < 0) {
        result.error = fmt::format("fork failed: {}", std::strerror(errno));
        return result;
    }
    if (pid == 0) {
        exec_child(stdin_fd.get(), out_write.get(), err_write.get(), fail_write.get(), cwd_text.c_str(), rlimits,
                   cgroup_fds, argv_pointers.data(), envp_pointers.data());
    }
    ::setpgid(pid, pid);  // also done in the child; whichever runs first wins the race
    out_write.reset();
    err_write.reset();
    fail_write.reset();
    stdin_fd.reset();

    ChildFailure failure;
    ssize_t got;
    do {
        got = ::read(fail_read.get(), &failure, sizeof failure);
    } while (got < 0 && errno == EINTR);
    fail_read.reset();
    if (got == static_cast<ssize_t>(sizeof failure)) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        result.error = describe_child_failure(failure, argv[0], cwd_text);
        result.wall_secs = seconds_since(start);
        return result;
    }
    result.started = true;

    ::fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(err_read.get(), F_SETFL, O_NONBLOCK);
    CappedBuffer stdout_buffer(limits.output_cap_bytes);
    CappedBuffer stderr_buffer(limits.output_cap_bytes);
    const Supervised supervised =
        supervise(pid, out_read, err_read, cgroup, limits, start, stdout_buffer, stderr_buffer);
    result.timed_out = supervised.timed_out;

    int status = 0;
    rusage usage{};
    while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }
    result.wall_secs = seconds_since(start);
    result.peak_rss_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024U;
    if (cgroup) {
        detail::CgroupReport report = cgroup->finish();
        result.call_memory_peak_bytes = report.memory_peak_bytes;
        result.memory_limit_hit = report.memory_limit_hit;
        result.process_limit_hit = report.process_limit_hit;
    }
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
    result.stdout_text = stdout_buffer.text();
    result.stderr_text = stderr_buffer.text();
    result.stdout_truncated = stdout_buffer.truncated();
    result.stderr_truncated = stderr_buffer.truncated();
    result.stdout_bytes = stdout_buffer.total();
    result.stderr_bytes = stderr_buffer.total();
    if (supervised.pipes_left_open) {
        log::warn("proc: {} left a process holding its output open (it escaped the process group)", argv[0]);
    }
    return result;
}

}  // namespace

std::string cut_marker(std::uint64_t cut_bytes) {
    return fmt::format("\n[… {} bytes cut …]\n", cut_bytes);
}

Result run(const Command& command) {
    Result result;
    if (command.argv.empty() || command.argv[0].empty()) {
        result.error = "empty command";
        return result;
    }

    // Scratch: the caller's, or a fresh one removed afterwards.
    std::filesystem::path scratch = command.sandbox.scratch_dir;
    bool own_scratch = false;
    if (scratch.empty()) {
        auto made = make_temp_dir("npuopt-scratch-");
        if (!made) {
            result.error = fmt::format("cannot create a scratch directory: {}", std::strerror(errno));
            return result;
        }
        scratch = *made;
        own_scratch = true;
    } else {
        std::error_code error;
        std::filesystem::create_directories(scratch, error);
        scratch = std::filesystem::absolute(scratch, error);
    }
    struct ScratchCleanup {
        std::filesystem::path path;
        bool active;
        ~ScratchCleanup() {
            std::error_code ignored;
            if (active) std::filesystem::remove_all(path, ignored);
        }
    } cleanup{scratch, own_scratch};

    std::map<std::string, std::string> env = build_environment(command, scratch);
    std::filesystem::path cwd = command.cwd ? *command.cwd : scratch;

    auto program = find_executable(command.argv[0], env["PATH"]);
    if (!program) {
        result.error = "no such file: " + command.argv[0];
        return result;
    }
    std::vector<std::string> argv = command.argv;
    argv[0] = program->string();

    bool sandboxed = false;
    if (command.sandbox.enabled) {
        SandboxStatus status = detail::cached_sandbox_status(command.sandbox.bwrap_path);
        if (status.available) {
            argv = detail::sandbox_argv(status.bwrap_path, command.sandbox, scratch, cwd, env, argv);
            sandboxed = true;
        } else if (command.sandbox.required) {
            throw Error(ErrorKind::toolchain,
                        fmt::format("the sandbox is required but unusable: {}. Fix: apt-get install bubblewrap "
                                    "(or allow unsandboxed runs in the configuration)",
                                    status.reason));
        } else {
            warn_unsandboxed_once(status.reason);
        }
    }

    result = spawn_and_wait(std::move(argv), env, sandboxed ? scratch : cwd, command);
    result.sandboxed = sandboxed;
    if (sandboxed && result.exit_code && *result.exit_code > 128 && *result.exit_code < 128 + NSIG) {
        // bwrap reports a signal that ended the sandboxed command as exit 128+N.
        result.term_signal = *result.exit_code - 128;
        result.exit_code.reset();
    }
    if (sandboxed && result.exit_code == 1 && result.stderr_text.rfind("bwrap: ", 0) == 0) {
        result.error = "sandbox setup failed: " + result.stderr_text.substr(0, result.stderr_text.find('\n'));
    }
    return result;
}

}  // namespace npuopt::proc
