#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "proc/subprocess.hpp"

namespace fs = std::filesystem;
using npuopt::proc::Command;
using npuopt::proc::Result;

namespace {

/// A private directory under the build dir (not /tmp: the sandbox puts a tmpfs there), removed after.
class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "proc-XXXXXX").string();
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

Command shell(const std::string& script, bool sandboxed = false) {
    Command command;
    command.argv = {"/bin/sh", "-c", script};
    command.limits.timeout_secs = 20.0;
    command.sandbox.enabled = sandboxed;
    return command;
}

bool sandbox_available() {
    static const bool available = npuopt::proc::probe_sandbox().available;
    return available;
}

#define SKIP_WITHOUT_SANDBOX()                                                                   \
    do {                                                                                         \
        if (!sandbox_available()) {                                                              \
            MESSAGE("skipped: bubblewrap unusable here: " << npuopt::proc::probe_sandbox().reason); \
            return;                                                                              \
        }                                                                                        \
    } while (false)

/// Whether a live (non-zombie) process has this pid.
bool process_alive(pid_t pid) {
    std::string stat = read_file(fs::path("/proc") / std::to_string(pid) / "stat");
    if (stat.empty()) return false;
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
    char state = stat[close_paren + 2];
    return state != 'Z' && state != 'X';
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
        if (cmdline.find(needle) != std::string::npos && process_alive(std::stoi(name))) return true;
    }
    return false;
}

/// Polls `condition` for up to `secs`.
template <typename Condition>
bool eventually(Condition condition, double secs = 3.0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(secs * 1000));
    while (std::chrono::steady_clock::now() < until) {
        if (condition()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return condition();
}

/// A TCP listener on 127.0.0.1 in this process; connections complete in the kernel's backlog.
class Listener {
public:
    Listener() {
        m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        REQUIRE(m_fd >= 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        address.sin_port = 0;
        REQUIRE(::bind(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
        REQUIRE(::listen(m_fd, 16) == 0);
        socklen_t length = sizeof address;
        REQUIRE(::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
        m_port = ntohs(address.sin_port);
    }
    ~Listener() { ::close(m_fd); }
    int port() const { return m_port; }

private:
    int m_fd = -1;
    int m_port = 0;
};

}  // namespace

TEST_CASE("exit code / stdout and stderr are recorded") {
    Result result = npuopt::proc::run(shell("echo out; echo err >&2; exit 7"));
    CHECK(result.started);
    CHECK_FALSE(result.timed_out);
    REQUIRE(result.exit_code);
    CHECK(*result.exit_code == 7);
    CHECK_FALSE(result.term_signal);
    CHECK(result.stdout_text == "out\n");
    CHECK(result.stderr_text == "err\n");
    CHECK_FALSE(result.ok());
    CHECK(result.wall_secs > 0.0);
    CHECK(result.peak_rss_bytes > 0);
}

TEST_CASE("a command ended by a signal records the signal") {
    Result result = npuopt::proc::run(shell("kill -SEGV $$"));
    CHECK(result.started);
    CHECK_FALSE(result.exit_code);
    REQUIRE(result.term_signal);
    CHECK(*result.term_signal == SIGSEGV);
}

TEST_CASE("stdin data reaches the child / without it stdin is /dev/null") {
    Command command = shell("cat");
    command.stdin_data = std::string("hello\nworld\n");
    CHECK(npuopt::proc::run(command).stdout_text == "hello\nworld\n");
    Result empty = npuopt::proc::run(shell("cat; echo end"));
    CHECK(empty.stdout_text == "end\n");
}

TEST_CASE("a command that outlives its timeout is killed with its children: no orphan left") {
    TempDir dir;
    fs::path pid_file = dir.path() / "grandchild.pid";
    Command command = shell("sleep 100 & echo $! > '" + pid_file.string() + "'; sleep 100");
    command.limits.timeout_secs = 0.5;
    Result result = npuopt::proc::run(command);
    CHECK(result.started);
    CHECK(result.timed_out);
    CHECK(result.wall_secs < 10.0);
    CHECK_FALSE(result.ok());
    std::string pid_text = read_file(pid_file);
    REQUIRE_FALSE(pid_text.empty());
    pid_t grandchild = static_cast<pid_t>(std::stol(pid_text));
    CHECK(eventually([&] { return !process_alive(grandchild); }));
}

TEST_CASE("a child that ignores SIGTERM is killed with SIGKILL after the grace period") {
    Command command = shell("trap '' TERM; sleep 100");
    command.limits.timeout_secs = 0.3;
    command.limits.kill_grace_secs = 0.3;
    Result result = npuopt::proc::run(command);
    CHECK(result.timed_out);
    REQUIRE(result.term_signal);
    CHECK(*result.term_signal == SIGKILL);
    CHECK(result.wall_secs < 10.0);
}

TEST_CASE("background processes left behind by a finished command are killed") {
    const std::string marker = std::to_string(900 + ::getpid() % 97) + ".125";
    Result result = npuopt::proc::run(shell("sleep " + marker + " & echo started"));
    CHECK(result.ok());
    CHECK(result.wall_secs < 10.0);
    CHECK(eventually([&] { return !any_process_with_cmdline("sleep " + marker); }));
}

TEST_CASE("output over the cap is cut / head and tail kept / with a marker") {
    Command command = shell("printf HEAD; head -c 100000 /dev/zero | tr '\\0' x; printf TAIL");
    command.limits.output_cap_bytes = 1000;
    Result result = npuopt::proc::run(command);
    CHECK(result.ok());
    CHECK(result.stdout_truncated);
    CHECK(result.stdout_bytes == 100008);
    CHECK(result.stdout_text.rfind("HEADxxx", 0) == 0);
    CHECK(result.stdout_text.size() >= 8);
    CHECK(result.stdout_text.substr(result.stdout_text.size() - 7) == "xxxTAIL");
    CHECK(result.stdout_text.find(npuopt::proc::cut_marker(100008 - 1000)) != std::string::npos);
    CHECK(result.stdout_text.size() == 1000 + npuopt::proc::cut_marker(99008).size());
    CHECK_FALSE(result.stderr_truncated);

    Command small = shell("printf 0123456789");
    small.limits.output_cap_bytes = 10;
    Result exact = npuopt::proc::run(small);
    CHECK_FALSE(exact.stdout_truncated);
    CHECK(exact.stdout_text == "0123456789");
}

TEST_CASE("a missing binary is data / not an exception") {
    Command command;
    command.argv = {"/nonexistent/dir/npuc", "--version"};
    command.sandbox.enabled = false;
    Result result = npuopt::proc::run(command);
    CHECK_FALSE(result.started);
    REQUIRE(result.error);
    CHECK(*result.error == "no such file: /nonexistent/dir/npuc");

    command.argv = {"npuopt-no-such-tool-xyz"};
    command.sandbox.enabled = true;
    result = npuopt::proc::run(command);
    CHECK_FALSE(result.started);
    REQUIRE(result.error);
    CHECK(result.error->find("no such file: npuopt-no-such-tool-xyz") != std::string::npos);
}

TEST_CASE("secret-looking names are recognised") {
    using npuopt::proc::is_secret_name;
    CHECK(is_secret_name("OPENAI_API_KEY"));
    CHECK(is_secret_name("github_token"));
    CHECK(is_secret_name("AWS_SECRET_ACCESS_KEY"));
    CHECK(is_secret_name("DB_PASSWORD"));
    CHECK_FALSE(is_secret_name("PATH"));
    CHECK_FALSE(is_secret_name("FAKE_MODE"));
    for (const auto& name : npuopt::proc::environment_allow_list()) CHECK_FALSE(is_secret_name(name));
}

namespace {

void check_environment_scrubbed(bool sandboxed) {
    ::setenv("OPENAI_API_KEY", "sk-npuopt-test-secret", 1);
    ::setenv("NPUOPT_TEST_NOT_ALLOWED", "parent-only", 1);
    Command command = shell("env", sandboxed);
    command.env = {{"FAKE_MODE", "diag"}, {"MY_SERVICE_TOKEN", "tok-npuopt-test"}};
    Result result = npuopt::proc::run(command);
    ::unsetenv("OPENAI_API_KEY");
    ::unsetenv("NPUOPT_TEST_NOT_ALLOWED");
    REQUIRE(result.ok());
    CHECK(result.sandboxed == sandboxed);
    CHECK(result.stdout_text.find("OPENAI_API_KEY") == std::string::npos);
    CHECK(result.stdout_text.find("sk-npuopt-test-secret") == std::string::npos);
    CHECK(result.stdout_text.find("NPUOPT_TEST_NOT_ALLOWED") == std::string::npos);
    CHECK(result.stdout_text.find("tok-npuopt-test") == std::string::npos);
    CHECK(result.stdout_text.find("FAKE_MODE=diag\n") != std::string::npos);
    CHECK(result.stdout_text.find("PATH=") != std::string::npos);
    CHECK(result.stdout_text.find("HOME=") != std::string::npos);
}

}  // namespace

TEST_CASE("an API key set in the parent is not seen by the child (unsandboxed)") {
    check_environment_scrubbed(false);
}

TEST_CASE("an API key set in the parent is not seen by the child (sandboxed)") {
    SKIP_WITHOUT_SANDBOX();
    check_environment_scrubbed(true);
}

TEST_CASE("the scratch dir is HOME / TMPDIR and cwd") {
    TempDir scratch;
    Command command = shell("echo $HOME; echo $TMPDIR; pwd");
    command.sandbox.scratch_dir = scratch.path();
    Result result = npuopt::proc::run(command);
    std::string expected = scratch.path().string() + "\n";
    CHECK(result.stdout_text == expected + expected + expected);
}

TEST_CASE("the file-size rlimit stops a writer") {
    TempDir scratch;
    Command command = shell("head -c 10000000 /dev/zero > big");
    command.sandbox.scratch_dir = scratch.path();
    command.limits.file_bytes = 1 << 20;
    Result result = npuopt::proc::run(command);
    CHECK_FALSE(result.ok());
    CHECK(fs::file_size(scratch.path() / "big") <= (1U << 20));
}

TEST_CASE("the memory rlimit stops an allocator") {
    Command command = shell("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo allocated ${#x}");
    command.limits.memory_bytes = 64U << 20;
    Result result = npuopt::proc::run(command);
    CHECK_FALSE(result.ok());
    CHECK(result.stdout_text.find("allocated") == std::string::npos);
}

TEST_CASE("sandbox: cannot open a TCP connection / while unsandboxed the same command can") {
    SKIP_WITHOUT_SANDBOX();
    Listener listener;
    const std::string script = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port()) + " && echo connected";
    Command command;
    command.argv = {"bash", "-c", script};
    command.limits.timeout_secs = 20.0;

    command.sandbox.enabled = false;
    Result open_result = npuopt::proc::run(command);
    CHECK(open_result.ok());
    CHECK(open_result.stdout_text == "connected\n");

    command.sandbox.enabled = true;
    Result sandboxed = npuopt::proc::run(command);
    CHECK(sandboxed.sandboxed);
    CHECK(sandboxed.started);
    CHECK_FALSE(sandboxed.ok());
    CHECK(sandboxed.stdout_text.find("connected") == std::string::npos);

    command.sandbox.allow_network = true;
    CHECK(npuopt::proc::run(command).ok());
}

TEST_CASE("sandbox: cannot write outside scratch / can write inside it") {
    SKIP_WITHOUT_SANDBOX();
    TempDir outside;
    TempDir scratch;
    const std::string outside_file = (outside.path() / "escaped.txt").string();
    Command command = shell("echo x > '" + outside_file + "'", true);
    command.sandbox.scratch_dir = scratch.path();
    Result blocked = npuopt::proc::run(command);
    CHECK(blocked.sandboxed);
    CHECK_FALSE(blocked.ok());
    CHECK_FALSE(fs::exists(outside_file));

    // The same write unsandboxed succeeds, so the check above proves the sandbox blocked it.
    command.sandbox.enabled = false;
    CHECK(npuopt::proc::run(command).ok());
    CHECK(fs::exists(outside_file));

    Command inside = shell("echo inside > out.txt && echo home > \"$HOME/home.txt\" && echo tmp > /tmp/t.txt", true);
    inside.sandbox.scratch_dir = scratch.path();
    Result wrote = npuopt::proc::run(inside);
    CHECK(wrote.ok());
    CHECK(read_file(scratch.path() / "out.txt") == "inside\n");
    CHECK(read_file(scratch.path() / "home.txt") == "home\n");
}

TEST_CASE("sandbox: extra read-only and writable binds") {
    SKIP_WITHOUT_SANDBOX();
    TempDir read_only;
    TempDir writable;
    {
        std::ofstream(read_only.path() / "input.txt") << "data\n";
    }
    Command command = shell("cat '" + (read_only.path() / "input.txt").string() + "' > '" +
                                (writable.path() / "copy.txt").string() + "' && ! echo y > '" +
                                (read_only.path() / "nope.txt").string() + "'",
                            true);
    command.sandbox.read_only_paths = {read_only.path()};
    command.sandbox.writable_paths = {writable.path()};
    Result result = npuopt::proc::run(command);
    CHECK(result.ok());
    CHECK(read_file(writable.path() / "copy.txt") == "data\n");
    CHECK_FALSE(fs::exists(read_only.path() / "nope.txt"));
}

TEST_CASE("sandbox: a signal inside is reported as a signal / timeout kills everything inside") {
    SKIP_WITHOUT_SANDBOX();
    Result crashed = npuopt::proc::run(shell("kill -SEGV $$", true));
    CHECK(crashed.sandboxed);
    REQUIRE(crashed.term_signal);
    CHECK(*crashed.term_signal == SIGSEGV);

    const std::string marker = std::to_string(800 + ::getpid() % 97) + ".375";
    Command command = shell("sleep " + marker + " & sleep " + marker, true);
    command.limits.timeout_secs = 0.5;
    Result result = npuopt::proc::run(command);
    CHECK(result.timed_out);
    CHECK(result.wall_secs < 10.0);
    CHECK(eventually([&] { return !any_process_with_cmdline("sleep " + marker); }));
}

TEST_CASE("sandbox: the file-size rlimit applies inside") {
    SKIP_WITHOUT_SANDBOX();
    TempDir scratch;
    Command command = shell("head -c 10000000 /dev/zero > big", true);
    command.sandbox.scratch_dir = scratch.path();
    command.limits.file_bytes = 1 << 20;
    Result result = npuopt::proc::run(command);
    CHECK(result.sandboxed);
    CHECK_FALSE(result.ok());
    CHECK(fs::file_size(scratch.path() / "big") <= (1U << 20));
}

TEST_CASE("missing bubblewrap: refused when required / warned and unsandboxed otherwise") {
    Command command = shell("echo ran", true);
    command.sandbox.bwrap_path = "/nonexistent/bin/bwrap";
    command.sandbox.required = true;
    try {
        npuopt::proc::run(command);
        FAIL("expected an Error");
    } catch (const npuopt::Error& error) {
        CHECK(error.kind() == npuopt::ErrorKind::toolchain);
        CHECK(std::string(error.what()).find("apt-get install bubblewrap") != std::string::npos);
        CHECK(std::string(error.what()).find("/nonexistent/bin/bwrap") != std::string::npos);
    }
    command.sandbox.required = false;
    Result result = npuopt::proc::run(command);
    CHECK(result.ok());
    CHECK_FALSE(result.sandboxed);
    CHECK(result.stdout_text == "ran\n");

    auto status = npuopt::proc::probe_sandbox("/nonexistent/bin/bwrap");
    CHECK_FALSE(status.available);
    CHECK_FALSE(status.reason.empty());
}

TEST_CASE("find_executable searches the given PATH") {
    auto sh_path = npuopt::proc::find_executable("sh", "/nonexistent:/bin:/usr/bin");
    REQUIRE(sh_path);
    CHECK(sh_path->filename() == "sh");
    CHECK_FALSE(npuopt::proc::find_executable("sh", "/nonexistent"));
    CHECK_FALSE(npuopt::proc::find_executable("/etc/passwd", ""));  // not executable
}
