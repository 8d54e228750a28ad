// What a sandboxed call can see and how much it can take: only the declared paths, no
// capabilities, nothing outliving the call, memory and processes limited over the whole call.

#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "proc/cgroup.hpp"
#include "proc/sandbox.hpp"
#include "proc/subprocess.hpp"

namespace fs = std::filesystem;
using npuopt::proc::Command;
using npuopt::proc::LimitMechanism;
using npuopt::proc::Result;

namespace {

/// A private directory under the build dir (not /tmp: the sandbox puts a tmpfs there), removed after.
class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "isolation-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        m_path = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

Command shell(const std::string& script, bool sandboxed) {
    Command command;
    command.argv = {"/bin/sh", "-c", script};
    command.limits.timeout_secs = 30.0;
    command.sandbox.enabled = sandboxed;
    return command;
}

bool sandbox_available() {
    static const bool available = npuopt::proc::probe_sandbox().available;
    return available;
}

bool cgroups_available() { return npuopt::proc::limit_support().mechanism != LimitMechanism::rlimit; }

#define SKIP_WITHOUT_SANDBOX()                                                                      \
    do {                                                                                            \
        if (!sandbox_available()) {                                                                 \
            MESSAGE("skipped: bubblewrap unusable here: " << npuopt::proc::probe_sandbox().reason); \
            return;                                                                                 \
        }                                                                                           \
    } while (false)

#define SKIP_WITHOUT_CGROUPS()                                                                           \
    do {                                                                                                 \
        if (!cgroups_available()) {                                                                      \
            MESSAGE("skipped: no usable cgroup here: " << npuopt::proc::limit_support().detail);         \
            return;                                                                                      \
        }                                                                                                \
    } while (false)

std::size_t count_of(const std::string& text, const std::string& needle) {
    std::size_t count = 0;
    for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++count;
    return count;
}

/// Whether any live process has `needle` in its command line.
bool any_process_with_cmdline(const std::string& needle) {
    for (const auto& entry : fs::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::string cmdline = read_file(entry.path() / "cmdline");
        for (auto& ch : cmdline) {
            if (ch == '\0') ch = ' ';
        }
        if (cmdline.find(needle) == std::string::npos) continue;
        std::string stat = read_file(entry.path() / "stat");
        auto close_paren = stat.rfind(')');
        if (close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] != 'Z') {
            return true;
        }
    }
    return false;
}

template <typename Condition>
bool eventually(Condition condition, double secs = 5.0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(secs * 1000));
    while (std::chrono::steady_clock::now() < until) {
        if (condition()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return condition();
}

/// Per-call cgroups of this process still on disk.
int leftover_call_cgroups() {
    const auto& home = npuopt::proc::detail::cached_cgroup_home();
    int count = 0;
    const std::string prefix = "npuopt-call-" + std::to_string(::getpid()) + "-";
    for (const auto& parent : {home.memory_parent, home.pids_parent}) {
        if (parent.empty()) continue;
        std::error_code error;
        for (const auto& entry : fs::directory_iterator(parent, error)) {
            if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
        }
    }
    return count;
}

bool starts_under(const fs::path& path, const fs::path& dir) {
    const auto rel = fs::weakly_canonical(path).lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

TEST_CASE("sandbox: only the system paths / the declared file and scratch are visible, not the file's directory") {
    SKIP_WITHOUT_SANDBOX();
    TempDir campaign;
    TempDir scratch;
    std::ofstream(campaign.path() / "kernel.rs") << "fn kernel() {}\n";
    std::ofstream(campaign.path() / "campaign.db") << "SQLite format 3 secret rows\n";
    const fs::path kernel = campaign.path() / "kernel.rs";
    const std::string script =
        "cat '" + kernel.string() + "'; "
        "cat '" + (campaign.path() / "campaign.db").string() + "' && echo DB-READ; "
        "ls '" + campaign.path().string() + "'; "
        "for p in /etc/shadow /etc/passwd /root /home /var /srv /opt /sys '" + NPUOPT_SOURCE_DIR + "/CMakeLists.txt'; do "
        "  [ -e \"$p\" ] && echo \"VISIBLE $p\"; done; "
        "echo x > '" + campaign.path().string() + "/written' && echo WROTE-BESIDE; "
        "echo x > /new-at-root && echo WROTE-ROOT; "
        "echo ok > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"";
    Command command = shell(script, true);
    command.sandbox.scratch_dir = scratch.path();
    command.sandbox.read_only_paths = {kernel};
    Result result = npuopt::proc::run(command);
    INFO(result.stdout_text << result.stderr_text);
    CHECK(result.sandboxed);
    CHECK(result.stdout_text.find("fn kernel() {}") != std::string::npos);
    CHECK(result.stdout_text.find("DB-READ") == std::string::npos);
    CHECK(result.stdout_text.find("secret rows") == std::string::npos);
    CHECK(result.stdout_text.find("VISIBLE") == std::string::npos);
    CHECK(result.stdout_text.find("WROTE-ROOT") == std::string::npos);
    // Beside the file: refused, or (when the file lives under /tmp, whose private tmpfs holds the
    // bind's directories) written into that tmpfs only; never onto the host (checked below).
    if (!starts_under(campaign.path(), "/tmp")) CHECK(result.stdout_text.find("WROTE-BESIDE") == std::string::npos);
    CHECK(result.stdout_text.find("kernel.rs\n") != std::string::npos);  // ls: the one file, nothing beside it
    CHECK(result.stdout_text.find("campaign.db\n") == std::string::npos);
    CHECK(result.stdout_text.find("ok\n") != std::string::npos);
    CHECK_FALSE(fs::exists(campaign.path() / "written"));

    // The same script unsandboxed sees the database: the check above is the sandbox's doing.
    command.sandbox.enabled = false;
    CHECK(npuopt::proc::run(command).stdout_text.find("DB-READ") != std::string::npos);
}

TEST_CASE("sandbox: a fresh /proc and a minimal /dev") {
    SKIP_WITHOUT_SANDBOX();
    ::setenv("NPUOPT_TEST_PARENT_SECRET_TOKEN", "tok-in-parent-env", 1);
    Result result = npuopt::proc::run(shell(
        "ls /proc | grep -c '^[0-9]'; ls /dev; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c tok-in-parent", true));
    ::unsetenv("NPUOPT_TEST_PARENT_SECRET_TOKEN");
    INFO(result.stdout_text);
    std::istringstream lines(result.stdout_text);
    int process_count = 0;
    lines >> process_count;
    CHECK(process_count > 0);
    CHECK(process_count < 10);  // its own pid namespace: not the host's processes
    CHECK(result.stdout_text.find("null\n") != std::string::npos);
    CHECK(result.stdout_text.find("urandom\n") != std::string::npos);
    for (const char* device : {"kmsg\n", "mem\n", "sda", "nvme", "fuse\n", "kvm\n"}) {
        CHECK(result.stdout_text.find(device) == std::string::npos);
    }
    CHECK(result.stdout_text.substr(result.stdout_text.rfind('\n', result.stdout_text.size() - 2) + 1) == "0\n");
}

TEST_CASE("sandbox: no capabilities inside, even when npuopt runs as root") {
    SKIP_WITHOUT_SANDBOX();
    // A nested exec: as root, a plain exec would regain the bounding set unless bwrap dropped it all.
    Result result = npuopt::proc::run(shell("sh -c 'grep -E \"^Cap(Eff|Prm|Amb)\" /proc/self/status'", true));
    INFO(result.stdout_text);
    CHECK(result.ok());
    CHECK(count_of(result.stdout_text, "0000000000000000") == 3);
    if (::geteuid() == 0) {
        // Unsandboxed, as root, the same command has capabilities: the sandbox is what removed them.
        Result open = npuopt::proc::run(shell("grep -E '^CapEff' /proc/self/status", false));
        CHECK(open.stdout_text.find("0000000000000000") == std::string::npos);
    }
}

TEST_CASE("sandbox: system paths from the policy replace the default list") {
    SKIP_WITHOUT_SANDBOX();
    TempDir extra;
    std::ofstream(extra.path() / "tool.txt") << "system tool\n";
    auto paths = npuopt::proc::default_system_paths();
    paths.push_back(extra.path());
    Command command = shell("cat '" + (extra.path() / "tool.txt").string() + "'; [ -e /etc/ld.so.cache ] && echo CACHE", true);
    command.sandbox.system_paths = paths;
    Result with_extra = npuopt::proc::run(command);
    CHECK(with_extra.stdout_text.find("system tool") != std::string::npos);
    CHECK((with_extra.stdout_text.find("CACHE") != std::string::npos) == fs::exists("/etc/ld.so.cache"));
    command.sandbox.system_paths = npuopt::proc::default_system_paths();
    Result without = npuopt::proc::run(command);
    CHECK(without.stdout_text.find("system tool") == std::string::npos);

    // The command line: symlinks stay symlinks, missing paths are left out.
    npuopt::proc::SandboxPolicy policy;
    policy.system_paths = std::vector<fs::path>{"/usr", "/nonexistent-system-dir"};
    auto argv = npuopt::proc::detail::sandbox_argv("bwrap", policy, "/s", "/s", {}, {"/usr/bin/true"});
    std::string joined;
    for (const auto& arg : argv) joined += arg + " ";
    CHECK(joined.find("--ro-bind /usr /usr") != std::string::npos);
    CHECK(joined.find("nonexistent-system-dir") == std::string::npos);
    CHECK(joined.find("--ro-bind / /") == std::string::npos);
    CHECK(joined.find("--cap-drop ALL") != std::string::npos);
    CHECK(joined.find("--die-with-parent") != std::string::npos);
    CHECK(joined.find("--new-session") != std::string::npos);
    CHECK(joined.find("--unshare-pid") != std::string::npos);
    CHECK(joined.find("--unshare-net") != std::string::npos);
    if (fs::is_symlink("/bin")) {
        policy.system_paths = std::vector<fs::path>{"/bin"};
        auto with_link = npuopt::proc::detail::sandbox_argv("bwrap", policy, "/s", "/s", {}, {"/usr/bin/true"});
        joined.clear();
        for (const auto& arg : with_link) joined += arg + " ";
        CHECK(joined.find("--symlink " + fs::read_symlink("/bin").string() + " /bin") != std::string::npos);
    }
}

TEST_CASE("a daemon in its own session does not outlive the call (sandboxed / unsandboxed with cgroups)") {
    const std::string marker = std::to_string(700 + ::getpid() % 97) + ".625";
    const std::string script = "setsid sh -c 'sleep " + marker + "' </dev/null >/dev/null 2>&1 & echo started";
    if (sandbox_available()) {
        Result sandboxed = npuopt::proc::run(shell(script, true));
        CHECK(sandboxed.ok());
        CHECK(eventually([&] { return !any_process_with_cmdline("sleep " + marker); }));
    }
    if (cgroups_available()) {
        Result open = npuopt::proc::run(shell(script, false));
        CHECK(open.ok());
        CHECK(open.limit_mechanism != LimitMechanism::rlimit);
        CHECK(eventually([&] { return !any_process_with_cmdline("sleep " + marker); }));
    }
}

TEST_CASE("limits: memory is summed over the call's processes (cgroups) / per process without them") {
    SKIP_WITHOUT_CGROUPS();
    // Four processes of ~48 MiB each: each is under the 128 MiB limit, together they are not.
    const std::string script =
        "for i in 1 2 3 4; do ( x=$(head -c 50000000 /dev/zero | tr '\\0' a); echo held; sleep 2; echo ${#x} >/dev/null ) & done; wait";
    Command command = shell(script, sandbox_available());
    command.limits.memory_bytes = 128ULL << 20;
    Result summed = npuopt::proc::run(command);
    INFO(summed.stdout_text << summed.stderr_text);
    CHECK(summed.limit_mechanism != LimitMechanism::rlimit);
    CHECK(summed.memory_limit_hit);
    CHECK(count_of(summed.stdout_text, "held") < 4);
    REQUIRE(summed.call_memory_peak_bytes);
    CHECK(*summed.call_memory_peak_bytes <= (128ULL << 20));

    // Per-process rlimits let all four through: the cgroup is what sums them.
    command.limits.use_cgroups = false;
    command.limits.memory_bytes = 256ULL << 20;  // RLIMIT_AS counts address space, not resident memory
    Result per_process = npuopt::proc::run(command);
    CHECK(per_process.limit_mechanism == LimitMechanism::rlimit);
    CHECK(count_of(per_process.stdout_text, "held") == 4);
    CHECK_FALSE(per_process.memory_limit_hit);
}

TEST_CASE("limits: the process count is summed over the call, also for root (cgroups)") {
    SKIP_WITHOUT_CGROUPS();
    const std::string script = "n=0; for i in $(seq 1 40); do sleep 3 & n=$((n+1)); done 2>/dev/null; "
                               "echo forked; wait";
    Command command = shell(script, sandbox_available());
    command.limits.processes = 16;
    Result limited = npuopt::proc::run(command);
    INFO(limited.stdout_text << limited.stderr_text);
    CHECK(limited.process_limit_hit);
    CHECK(limited.wall_secs < 25.0);
    CHECK(leftover_call_cgroups() == 0);
    if (::geteuid() == 0) {
        // RLIMIT_NPROC does not bind root: without the cgroup all 40 start.
        command.limits.use_cgroups = false;
        Result rlimited = npuopt::proc::run(command);
        CHECK_FALSE(rlimited.process_limit_hit);
        CHECK(rlimited.ok());
    }
}

TEST_CASE("limits: a fork bomb is stopped and leaves nothing behind") {
    SKIP_WITHOUT_CGROUPS();
    Command command = shell("b() { b | b & }; b; sleep 3; echo survived", sandbox_available());
    command.limits.processes = 64;
    command.limits.timeout_secs = 10.0;
    Result result = npuopt::proc::run(command);
    CHECK(result.process_limit_hit);
    CHECK(result.wall_secs < 20.0);
    CHECK(leftover_call_cgroups() == 0);  // a v1/v2 cgroup cannot be removed while a process is in it
}

TEST_CASE("limit_support: names the mechanism / says what is not enforced") {
    auto support = npuopt::proc::limit_support();
    CHECK_FALSE(support.detail.empty());
    CHECK_FALSE(npuopt::proc::limit_mechanism_name(support.mechanism).empty());
    if (support.mechanism == LimitMechanism::rlimit) {
        CHECK_FALSE(support.unenforced.empty());
        if (::geteuid() == 0) {
            bool names_nproc = false;
            for (const auto& line : support.unenforced) names_nproc |= line.find("RLIMIT_NPROC") != std::string::npos;
            CHECK(names_nproc);
        }
    } else {
        CHECK(support.unenforced.empty());
        CHECK(support.detail.find("summed") != std::string::npos);
    }
    CHECK(npuopt::proc::limit_mechanism_name(LimitMechanism::cgroup_v1) == "cgroup-v1");
    CHECK(npuopt::proc::limit_mechanism_name(LimitMechanism::cgroup_v2) == "cgroup-v2");
    CHECK(npuopt::proc::limit_mechanism_name(LimitMechanism::rlimit) == "rlimit");
}

TEST_CASE("a call's cgroup is removed after it, also after a timeout") {
    SKIP_WITHOUT_CGROUPS();
    Command command = shell("sleep 30 & sleep 30", false);
    command.limits.timeout_secs = 0.3;
    Result result = npuopt::proc::run(command);
    CHECK(result.timed_out);
    CHECK(leftover_call_cgroups() == 0);
    CHECK(npuopt::proc::run(shell("true", false)).ok());
    CHECK(leftover_call_cgroups() == 0);
}

TEST_CASE("an output flood is capped and the call still ends") {
    Command command = shell("head -c 300000000 /dev/zero", sandbox_available());
    command.limits.output_cap_bytes = 4096;
    Result result = npuopt::proc::run(command);
    CHECK(result.ok());
    CHECK(result.stdout_truncated);
    CHECK(result.stdout_bytes == 300000000ULL);
    CHECK(result.stdout_text.size() < 4096 + 100);
}
