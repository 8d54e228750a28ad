// The adapter's compile cache (compile writes it, everything else reads it, a corrupt entry is
// evicted and rebuilt once), the paths a call sees, and what a hostile toolchain call can do.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "proc/subprocess.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using npuopt::target::CallStatus;
using npuopt::target::Toolchain;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "cache-XXXXXX").string();
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

std::size_t count_lines(const std::string& text, const std::string& line) {
    std::size_t count = 0;
    std::istringstream lines(text);
    for (std::string item; std::getline(lines, item);) count += item == line ? 1 : 0;
    return count;
}

bool sandbox_available() {
    static const bool available = npuopt::proc::probe_sandbox().available;
    return available;
}

#define SKIP_WITHOUT_SANDBOX()                                                                      \
    do {                                                                                            \
        if (!sandbox_available()) {                                                                 \
            MESSAGE("skipped: bubblewrap unusable here: " << npuopt::proc::probe_sandbox().reason); \
            return;                                                                                 \
        }                                                                                           \
    } while (false)

/// A campaign-like layout: the cache, a writable log for the fake, a kernel file beside a database.
struct CacheFixture {
    TempDir root;
    fs::path cache = root.path() / "toolchain-cache";
    fs::path log_dir = root.path() / "log";
    fs::path log = log_dir / "calls.log";
    fs::path designs = root.path() / "designs";
    fs::path kernel = designs / "kernel.rs";
    CacheFixture() {
        fs::create_directories(cache);
        fs::create_directories(log_dir);
        fs::create_directories(designs);
        std::ofstream(kernel) << "// kernel A\n";
        std::ofstream(designs / "campaign.db") << "secret rows\n";
    }
    std::string calls() const { return read_file(log); }
};

npuopt::config::TargetConfig cache_target(const CacheFixture& fixture, const std::string& mode = "ok",
                                          bool with_compile = true) {
    npuopt::config::TargetConfig target;
    target.name = "fake-cache";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.toolchain.bin = "fake-toolchain/fake-npuc-cache";
    target.toolchain.env = {{"FAKE_MODE", mode}, {"NPUC_CACHE_DIR", "{cache_dir}"}, {"FAKE_LOG", fixture.log.string()}};
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10.0};
    target.toolchain.schedule = {{"{bin}", "schedule", "{file}", "--kernel", "{kernel}"}, 10.0};
    target.toolchain.run = {{"{bin}", "run", "{file}", "--kernel", "{kernel}", "--seed", "{seed}"}, 10.0};
    if (with_compile) {
        target.toolchain.compile =
            npuopt::config::CommandSpec{{"{bin}", "compile", "{file}", "--cache-dir", "{cache_dir}"}, 10.0};
    }
    return target;
}

Toolchain cache_toolchain(const CacheFixture& fixture, const std::string& mode = "ok", bool with_compile = true) {
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    policy.writable_paths = {fixture.log_dir};
    Toolchain toolchain(cache_target(fixture, mode, with_compile), policy);
    toolchain.set_cache_dir(fixture.cache);
    return toolchain;
}

std::string probe_of(const npuopt::target::CallInfo& call) {
    for (const auto& event : call.raw_events) {
        if (event.find("\"type\":\"probe\"") != std::string::npos) return event;
    }
    return {};
}

npuopt::target::RunRequest run_request(const fs::path& file) {
    npuopt::target::RunRequest request;
    request.file = file;
    request.kernel = "ff";
    return request;
}

}  // namespace

TEST_CASE("compile cache: compile runs once per file content / then check, schedule and run use the entry") {
    CacheFixture fixture;
    Toolchain toolchain = cache_toolchain(fixture);
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::ok);
    auto schedule = toolchain.schedule(fixture.kernel, "ff", {});
    CHECK(schedule.call.status == CallStatus::ok);
    auto run = toolchain.run(run_request(fixture.kernel));
    CHECK(run.call.status == CallStatus::ok);
    CHECK(count_lines(fixture.calls(), "compile") == 1);
    CHECK(probe_of(check.call).find("\"source\":\"cached\"") != std::string::npos);
    CHECK(probe_of(run.call).find("\"source\":\"cached\"") != std::string::npos);

    std::ofstream(fixture.kernel) << "// kernel A, edited\n";
    CHECK(toolchain.check(fixture.kernel).call.status == CallStatus::ok);
    CHECK(count_lines(fixture.calls(), "compile") == 2);

    auto compiled = toolchain.compile(fixture.kernel);
    CHECK(compiled.call.status == CallStatus::ok);
    CHECK(compiled.ok);
    CHECK(fs::path(compiled.artifact).parent_path() == fs::absolute(fixture.cache));
    CHECK(compiled.sha256.size() == 64);
}

TEST_CASE("compile cache: read-only for check / schedule / run, writable for compile only") {
    SKIP_WITHOUT_SANDBOX();
    CacheFixture fixture;
    Toolchain toolchain = cache_toolchain(fixture);
    auto check = toolchain.check(fixture.kernel);
    REQUIRE(check.call.status == CallStatus::ok);
    CHECK(check.call.process.sandboxed);
    CHECK(probe_of(check.call).find("\"cache_writable\":false") != std::string::npos);
    auto run = toolchain.run(run_request(fixture.kernel));
    CHECK(probe_of(run.call).find("\"cache_writable\":false") != std::string::npos);
    CHECK_FALSE(fs::exists(fixture.cache / "hostile-write"));

    // Without a compile command the old behaviour: every command may write the cache.
    Toolchain legacy = cache_toolchain(fixture, "ok", false);
    auto legacy_check = legacy.check(fixture.kernel);
    CHECK(probe_of(legacy_check.call).find("\"cache_writable\":true") != std::string::npos);
}

TEST_CASE("compile cache: a run cannot poison another design's cached binary") {
    SKIP_WITHOUT_SANDBOX();
    CacheFixture fixture;
    fs::path champion = fixture.designs / "champion.rs";
    std::ofstream(champion) << "// champion\n";
    Toolchain honest = cache_toolchain(fixture);
    REQUIRE(honest.check(champion).call.status == CallStatus::ok);
    Toolchain hostile = cache_toolchain(fixture, "poison");
    auto run = hostile.run(run_request(fixture.kernel));
    CHECK(run.call.status == CallStatus::ok);
    CHECK(probe_of(run.call).find("\"poisoned\":0") != std::string::npos);
    // The champion's entry is intact: its next check uses it.
    auto again = honest.check(champion);
    CHECK(probe_of(again.call).find("\"source\":\"cached\"") != std::string::npos);
}

TEST_CASE("compile cache: a flipped byte in a cached binary is caught / evicted / recompiled once") {
    CacheFixture fixture;
    Toolchain toolchain = cache_toolchain(fixture);
    auto compiled = toolchain.compile(fixture.kernel);
    REQUIRE(compiled.ok);
    {
        std::fstream binary(compiled.artifact, std::ios::in | std::ios::out | std::ios::binary);
        binary.seekp(3);
        binary.put('#');
    }
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::ok);
    CHECK(probe_of(check.call).find("\"source\":\"cached\"") != std::string::npos);
    CHECK(count_lines(fixture.calls(), "compile") == 2);  // the explicit one, and the one after eviction
    CHECK(read_file(compiled.artifact) == read_file(fixture.kernel));
}

TEST_CASE("compile cache: an entry that stays corrupt is a clear error naming it") {
    CacheFixture fixture;
    Toolchain toolchain = cache_toolchain(fixture, "always_bad");
    auto run = toolchain.run(run_request(fixture.kernel));
    CHECK(run.call.status == CallStatus::failed);
    CHECK(run.error_kind == "cache");
    CHECK(run.call.message.find("compile cache error") != std::string::npos);
    CHECK(run.call.message.find(fs::absolute(fixture.cache).string()) != std::string::npos);
    CHECK(count_lines(fixture.calls(), "compile") == 2);  // once, then once more after eviction: no loop
    CHECK(count_lines(fixture.calls(), "run") == 2);
}

TEST_CASE("compile cache: an entry named outside the cache dir is never removed") {
    CacheFixture fixture;
    fs::path precious = fixture.designs / "campaign.db";
    auto target = cache_target(fixture, "outside");
    target.toolchain.env["FAKE_OUTSIDE"] = precious.string();
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    policy.writable_paths = {fixture.log_dir};
    Toolchain toolchain(target, policy);
    toolchain.set_cache_dir(fixture.cache);
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::failed);
    CHECK(fs::exists(precious));
    CHECK(read_file(precious) == "secret rows\n");
    CHECK(count_lines(fixture.calls(), "check") == 1);  // no retry on an entry it will not touch

    target.toolchain.env["FAKE_OUTSIDE"] = (fixture.cache / ".." / "designs" / "campaign.db").string();
    Toolchain dotdot(target, policy);
    dotdot.set_cache_dir(fixture.cache);
    dotdot.check(fixture.kernel);
    CHECK(fs::exists(precious));
}

TEST_CASE("compile cache: a compile that fails with diagnostics answers check without a second compile") {
    CacheFixture fixture;
    Toolchain toolchain = cache_toolchain(fixture, "illegal");
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::failed);
    CHECK_FALSE(check.ok);
    REQUIRE(check.diagnostics.size() == 1);
    CHECK(check.diagnostics[0].code == "E0001");
    CHECK(count_lines(fixture.calls(), "compile") == 1);
    CHECK(count_lines(fixture.calls(), "check") == 0);
    toolchain.check(fixture.kernel);
    CHECK(count_lines(fixture.calls(), "compile") == 1);  // remembered for this content
}

TEST_CASE("compile cache: without a cache dir no compile step runs") {
    CacheFixture fixture;
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    policy.writable_paths = {fixture.log_dir};
    Toolchain toolchain(cache_target(fixture), policy);
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::ok);
    CHECK(probe_of(check.call).find("\"source\":\"private\"") != std::string::npos);
    CHECK(count_lines(fixture.calls(), "compile") == 0);
    CHECK(toolchain.compile(fixture.kernel).call.status == CallStatus::not_started);
}

TEST_CASE("paths command: what the toolchain declares is visible / run once per process") {
    SKIP_WITHOUT_SANDBOX();
    CacheFixture fixture;
    TempDir declared;
    std::ofstream(declared.path() / "declared.txt") << "toolchain file\n";
    auto target = cache_target(fixture);
    target.toolchain.paths = npuopt::config::CommandSpec{{"{bin}", "paths"}, 10.0};
    target.toolchain.env["FAKE_PATHS_DIR"] = declared.path().string();
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    policy.writable_paths = {fixture.log_dir};
    Toolchain toolchain(target, policy);
    auto paths = toolchain.toolchain_paths();
    CHECK(std::find(paths.begin(), paths.end(), declared.path()) != paths.end());
    auto check = toolchain.check(fixture.kernel);
    CHECK(probe_of(check.call).find("\"declared_readable\":true") != std::string::npos);
    toolchain.check(fixture.kernel);
    toolchain.toolchain_paths();
    CHECK(count_lines(fixture.calls(), "paths") == 1);

    // Not declared: not visible.
    auto undeclared = cache_target(fixture);
    undeclared.toolchain.env["FAKE_PATHS_DIR"] = declared.path().string();
    auto hidden = Toolchain(undeclared, policy).check(fixture.kernel);
    CHECK(probe_of(hidden.call).find("\"declared_readable\":false") != std::string::npos);
}

namespace {

npuopt::config::TargetConfig hostile_target(const std::string& mode) {
    npuopt::config::TargetConfig target;
    target.name = "fake-hostile";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.toolchain.bin = "fake-toolchain/fake-npuc-hostile";
    target.toolchain.env = {{"FAKE_MODE", mode}};
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 20.0};
    target.toolchain.schedule = target.toolchain.check;
    target.toolchain.run = target.toolchain.check;
    return target;
}

npuopt::target::CheckResult hostile_check(const std::string& mode, const fs::path& file,
                                          const std::map<std::string, std::string>& env = {},
                                          npuopt::proc::Limits limits = {}) {
    auto target = hostile_target(mode);
    for (const auto& [name, value] : env) target.toolchain.env[name] = value;
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    return Toolchain(target, policy, limits).check(file);
}

}  // namespace

TEST_CASE("hostile: host files read at compile time never reach a diagnostic") {
    SKIP_WITHOUT_SANDBOX();
    CacheFixture fixture;
    TempDir home;
    fs::path secret = home.path() / "id_rsa";
    std::ofstream(secret) << "BEGIN PRIVATE KEY npuopt-test\n";
    auto result = hostile_check("read_host", fixture.kernel, {{"FAKE_SECRET_FILE", secret.string()}});
    REQUIRE(result.diagnostics.size() == 1);
    const std::string& message = result.diagnostics[0].message;
    CHECK(message.find("PRIVATE KEY") == std::string::npos);
    CHECK(message.find("secret rows") == std::string::npos);  // the campaign.db beside the kernel
    CHECK(message.find("root:") == std::string::npos);        // /etc/passwd, /etc/shadow
}

TEST_CASE("hostile: diagnostics are capped (message, notes) in the parser") {
    CacheFixture fixture;
    std::ofstream(fixture.kernel) << std::string(2000, 'k') << "\n";
    auto result = hostile_check("huge_diag", fixture.kernel);
    REQUIRE(result.diagnostics.size() == 1);
    const auto& diagnostic = result.diagnostics[0];
    CHECK(diagnostic.message.size() <= npuopt::target::k_diagnostic_message_max_chars);
    CHECK(diagnostic.message.find("bytes cut") != std::string::npos);
    CHECK(diagnostic.notes.size() == npuopt::target::k_diagnostic_notes_max);
    for (const auto& note : diagnostic.notes) CHECK(note.size() <= npuopt::target::k_diagnostic_note_max_chars);
    CHECK(result.call.message.size() < 1200);
}

TEST_CASE("hostile: an output flood is capped and reported as such") {
    CacheFixture fixture;
    auto result = hostile_check("flood", fixture.kernel);
    CHECK(result.call.status == CallStatus::unparsable);
    CHECK(result.call.message.find("output flood") != std::string::npos);
    CHECK(result.call.process.stdout_text.size() < (2U << 20));
    CHECK_FALSE(result.ok);
}

TEST_CASE("hostile: a fork bomb and memory spread over processes hit the call's limits") {
    if (npuopt::proc::limit_support().mechanism == npuopt::proc::LimitMechanism::rlimit) {
        MESSAGE("skipped: no usable cgroup here: " << npuopt::proc::limit_support().detail);
        return;
    }
    CacheFixture fixture;
    npuopt::proc::Limits limits;
    limits.processes = 64;
    auto bomb = hostile_check("fork_bomb", fixture.kernel, {}, limits);
    CHECK(bomb.call.process.process_limit_hit);
    CHECK(bomb.call.process.wall_secs < 20.0);

    npuopt::proc::Limits memory;
    memory.memory_bytes = 128ULL << 20;
    auto spread = hostile_check("memory", fixture.kernel, {}, memory);
    CHECK(spread.call.status == CallStatus::crashed);
    CHECK(spread.call.message.find("memory limit") != std::string::npos);
    CHECK_FALSE(spread.ok);
}

TEST_CASE("hostile: a daemon does not outlive the call / no capabilities inside") {
    CacheFixture fixture;
    const std::string marker = std::to_string(600 + ::getpid() % 89) + ".875";
    auto daemon = hostile_check("daemon", fixture.kernel, {{"FAKE_MARKER", marker}});
    CHECK(daemon.call.status == CallStatus::ok);
    auto alive = [&] {
        for (const auto& entry : fs::directory_iterator("/proc")) {
            std::string cmdline = read_file(entry.path() / "cmdline");
            for (auto& ch : cmdline) ch = ch == '\0' ? ' ' : ch;
            std::string stat = read_file(entry.path() / "stat");
            auto paren = stat.rfind(')');
            bool zombie = paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
            if (cmdline.find("sleep " + marker) != std::string::npos && !zombie) return true;
        }
        return false;
    };
    if (daemon.call.process.sandboxed ||
        daemon.call.process.limit_mechanism != npuopt::proc::LimitMechanism::rlimit) {
        bool gone = false;
        for (int attempt = 0; attempt < 100 && !(gone = !alive()); ++attempt) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        CHECK(gone);
    }
    if (sandbox_available()) {
        auto caps = hostile_check("caps", fixture.kernel);
        CHECK(probe_of(caps.call).find("\"cap_eff\":\"0000000000000000\"") != std::string::npos);
    }
}

TEST_CASE("a toolchain older than its target.yaml: no compile or paths support / the old behaviour") {
    CacheFixture fixture;
    npuopt::config::TargetConfig target;
    target.name = "fake-old";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.toolchain.bin = "fake-toolchain/fake-npuc";
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10.0};
    target.toolchain.schedule = target.toolchain.check;
    target.toolchain.run = target.toolchain.check;
    target.toolchain.compile = npuopt::config::CommandSpec{{"{bin}", "compile", "{file}"}, 10.0};
    target.toolchain.paths = npuopt::config::CommandSpec{{"{bin}", "paths"}, 10.0};
    npuopt::proc::SandboxPolicy policy;
    policy.required = false;
    Toolchain toolchain(target, policy);
    toolchain.set_cache_dir(fixture.cache);
    // `paths` fails (usage error): the install root stands in for what it would have declared.
    auto paths = toolchain.toolchain_paths();
    CHECK(std::find(paths.begin(), paths.end(), fs::path(NPUOPT_TEST_DATA_DIR) / "fake-toolchain") != paths.end());
    // `compile` fails (usage error): check still runs and answers.
    auto check = toolchain.check(fixture.kernel);
    CHECK(check.call.status == CallStatus::ok);
    CHECK(check.ok);
    CHECK(toolchain.compile(fixture.kernel).call.status == CallStatus::failed);
}
