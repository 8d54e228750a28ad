#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "proc/subprocess.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using npuopt::target::CallStatus;
using npuopt::target::Toolchain;

namespace {

/// A private directory under the build dir (not /tmp: the sandbox puts a tmpfs there), removed after.
class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "target-XXXXXX").string();
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

/// The fake target: tests/data/fake-toolchain/fake-npuc found through a relative search path.
npuopt::config::TargetConfig fake_target(const std::string& mode = "ok") {
    npuopt::config::TargetConfig target;
    target.name = "fake";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.toolchain.bin = "fake-npuc";
    target.toolchain.search_paths = {"no-such-dir", "fake-toolchain"};
    target.toolchain.env = {{"FAKE_MODE", mode}};
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10.0};
    target.toolchain.schedule = {{"{bin}", "schedule", "{file}", "--kernel", "{kernel}", "--shape", "{shape}"}, 10.0};
    target.toolchain.run = {
        {"{bin}", "run", "{file}", "--kernel", "{kernel}", "--seed", "{seed}", "--repeat", "{repeat}", "{check}"}, 10.0};
    return target;
}

npuopt::proc::SandboxPolicy default_sandbox() {
    npuopt::proc::SandboxPolicy policy;
    policy.enabled = true;
    policy.required = false;  // bubblewrap-less machines run the adapter tests unsandboxed
    return policy;
}

Toolchain fake_toolchain(const std::string& mode = "ok") { return Toolchain(fake_target(mode), default_sandbox()); }

/// A kernel source file in its own directory.
struct KernelFile {
    TempDir dir;
    fs::path path;
    KernelFile() : path(dir.path() / "kernel.rs") { std::ofstream(path) << "// kernel\n"; }
};

bool contains(const std::vector<std::string>& items, const std::string& wanted) {
    return std::find(items.begin(), items.end(), wanted) != items.end();
}

}  // namespace

TEST_CASE("version: name and version parsed / unknown keys ignored / bin found via search_paths") {
    auto result = fake_toolchain().version();
    CHECK(result.call.status == CallStatus::ok);
    CHECK(result.name == "fake-npuc");
    CHECK(result.version == "1.2.3");
    REQUIRE_FALSE(result.call.argv.empty());
    CHECK(result.call.argv[0] == (fs::path(NPUOPT_TEST_DATA_DIR) / "fake-toolchain" / "fake-npuc").string());
    CHECK(result.call.argv[1] == "--version");
}

TEST_CASE("check: a clean file is ok") {
    KernelFile kernel;
    auto result = fake_toolchain().check(kernel.path);
    CHECK(result.call.status == CallStatus::ok);
    CHECK(result.ok);
    CHECK(result.diagnostics.empty());
    CHECK(result.compile_secs == doctest::Approx(0.5));
    CHECK(contains(result.call.argv, kernel.path.string()));
}

TEST_CASE("check: diagnostics with code / span / quantities and notes") {
    KernelFile kernel;
    auto result = fake_toolchain("diag").check(kernel.path);
    CHECK(result.call.status == CallStatus::failed);
    CHECK_FALSE(result.ok);
    CHECK(result.compile_secs == doctest::Approx(0.25));
    REQUIRE(result.diagnostics.size() == 2);
    const auto& error = result.diagnostics[0];
    CHECK(error.level == "error");
    CHECK(error.code == "E0201");
    CHECK(error.message == "DM allocation exceeds slice capacity");
    REQUIRE(error.span);
    CHECK(error.span->file == "kernel.rs");
    CHECK(error.span->line == 41);
    CHECK(error.span->column == 17);
    REQUIRE(error.quantities.size() == 2);
    CHECK(error.quantities[0].name == "dm_bytes");
    CHECK(error.quantities[0].value == 786432.0);
    REQUIRE(error.quantities[0].limit);
    CHECK(*error.quantities[0].limit == 524288.0);
    CHECK(error.quantities[1].name == "tiles");
    CHECK_FALSE(error.quantities[1].limit);
    REQUIRE(error.notes.size() == 1);
    CHECK(error.notes[0] == "help: split the tile");
    const auto& warning = result.diagnostics[1];
    CHECK(warning.level == "warning");
    CHECK(warning.code == "E0402");
    CHECK_FALSE(warning.span);
    CHECK(result.call.message.find("E0201") != std::string::npos);
}

TEST_CASE("schedule: cycles / breakdown and counts / {shape} is k=v sorted") {
    KernelFile kernel;
    auto result = fake_toolchain().schedule(kernel.path, "feedforward", {{"n", 8}, {"m", 4}});
    CHECK(result.call.status == CallStatus::ok);
    REQUIRE(result.cycles);
    CHECK(*result.cycles == 32000.0);  // fake: 1000 x product of the shape values
    CHECK(contains(result.call.argv, "m=4,n=8"));
    CHECK(result.breakdown.at("dma_cycles") == 700.0);
    CHECK(result.breakdown.at("tensor_cycles") == 250.5);
    CHECK(result.counts.at("passes") == 64.0);
    CHECK(result.counts.at("hbm_read_bytes") == 94371840.0);
}

TEST_CASE("schedule: an illegal kernel gives diagnostics and no cycles") {
    KernelFile kernel;
    auto result = fake_toolchain("diag").schedule(kernel.path, "feedforward", {});
    CHECK(result.call.status == CallStatus::failed);
    CHECK_FALSE(result.cycles);
    CHECK(result.diagnostics.size() == 2);
}

TEST_CASE("run: per-repeat cycles in order and the verify verdict") {
    KernelFile kernel;
    npuopt::target::RunRequest request;
    request.file = kernel.path;
    request.kernel = "feedforward";
    request.seed = 2;
    request.repeat = 3;
    request.check = true;
    auto result = fake_toolchain().run(request);
    CHECK(result.call.status == CallStatus::ok);
    CHECK(result.cycles == std::vector<double>{1020.0, 1021.0, 1022.0});
    REQUIRE(result.verify);
    CHECK(result.verify->passed);
    CHECK(result.verify->max_abs_err == doctest::Approx(0.0031));
    CHECK(result.verify->elements == 3840);
    REQUIRE(result.verify->outputs.size() == 1);
    CHECK(result.verify->outputs[0].name == "out");
    CHECK(result.verify->outputs[0].fingerprint == "9f3c");
    CHECK(contains(result.call.argv, "--check"));
    CHECK(result.error_kind.empty());
}

TEST_CASE("run: without check / {check} vanishes from argv and there is no verdict") {
    KernelFile kernel;
    npuopt::target::RunRequest request{kernel.path, "feedforward", 5, 1, false, {}, {}, {}};
    auto result = fake_toolchain().run(request);
    CHECK(result.call.status == CallStatus::ok);
    CHECK(result.cycles == std::vector<double>{1050.0});
    CHECK_FALSE(result.verify);
    CHECK_FALSE(contains(result.call.argv, "--check"));
    CHECK_FALSE(contains(result.call.argv, ""));
    CHECK(result.call.argv.size() == 9);
}

TEST_CASE("run: a verify failure and a device error are failures with their details") {
    KernelFile kernel;
    npuopt::target::RunRequest request{kernel.path, "feedforward", 1, 1, true, {}, {}, {}};
    auto verify_failed = fake_toolchain("verify_fail").run(request);
    CHECK(verify_failed.call.status == CallStatus::failed);
    REQUIRE(verify_failed.verify);
    CHECK_FALSE(verify_failed.verify->passed);
    CHECK(verify_failed.verify->mismatches == 17);
    CHECK(verify_failed.verify->nonfinite == 2);

    auto device = fake_toolchain("device").run(request);
    CHECK(device.call.status == CallStatus::failed);
    CHECK(device.error_kind == "device");
    CHECK(device.call.message.find("DMA fault") != std::string::npos);
}

TEST_CASE("extra placeholders from the request are expanded") {
    KernelFile kernel;
    auto target = fake_target();
    target.toolchain.run.argv = {"{bin}", "run", "{file}", "--kernel", "{kernel}-{variant}", "--seed", "{seed}"};
    Toolchain toolchain(target, default_sandbox());
    npuopt::target::RunRequest request{kernel.path, "ff", 0, 1, false, {}, {{"variant", "fast"}}, {}};
    auto result = toolchain.run(request);
    CHECK(result.call.status == CallStatus::ok);
    CHECK(contains(result.call.argv, "ff-fast"));
}

TEST_CASE("non-JSON output is unparsable and the raw text is kept") {
    auto result = fake_toolchain("garbage").version();
    CHECK(result.call.status == CallStatus::unparsable);
    REQUIRE(result.call.bad_line);
    CHECK(*result.call.bad_line == "Segmentation fault in the frobnicator (core dumped)");
    CHECK(result.call.message.find("line 2") != std::string::npos);
    CHECK(result.call.process.stdout_text.find("frobnicator") != std::string::npos);
    CHECK(result.call.process.stdout_text.find("\"version\"") != std::string::npos);
}

TEST_CASE("a JSON line of the wrong shape is unparsable") {
    KernelFile kernel;
    auto result = fake_toolchain("wrong_shape").check(kernel.path);
    CHECK(result.call.status == CallStatus::unparsable);
    CHECK_FALSE(result.ok);
    CHECK(result.call.message.find("\"code\" must be a string") != std::string::npos);
    REQUIRE(result.call.bad_line);
    CHECK(result.call.bad_line->find("\"code\":201") != std::string::npos);
}

TEST_CASE("exit 0 without the required line is unparsable") {
    KernelFile kernel;
    CHECK(fake_toolchain("no_summary").check(kernel.path).call.status == CallStatus::unparsable);
    CHECK(fake_toolchain("no_summary").version().call.status == CallStatus::unparsable);
    auto schedule = fake_toolchain("no_summary").schedule(kernel.path, "ff", {});
    CHECK(schedule.call.status == CallStatus::unparsable);
    CHECK(schedule.call.message.find("\"schedule\"") != std::string::npos);
}

TEST_CASE("events of an unknown type are kept verbatim and do not fail the call") {
    auto result = fake_toolchain("unknown_type").version();
    CHECK(result.call.status == CallStatus::ok);
    REQUIRE(result.call.raw_events.size() == 1);
    CHECK(result.call.raw_events[0] == R"({"type":"progress","percent":50})");
}

TEST_CASE("a hang is timed_out / killed within its limit") {
    auto target = fake_target("hang");
    target.toolchain.version.timeout_secs = 0.5;
    auto result = Toolchain(target, default_sandbox()).version();
    CHECK(result.call.status == CallStatus::timed_out);
    CHECK(result.call.process.timed_out);
    CHECK(result.call.process.wall_secs < 10.0);
}

TEST_CASE("transient failures: exit 3 / or an error line of kind transient") {
    KernelFile kernel;
    npuopt::target::RunRequest request{kernel.path, "ff", 0, 1, false, {}, {}, {}};
    auto by_exit = fake_toolchain("transient").run(request);
    CHECK(by_exit.call.status == CallStatus::transient);
    CHECK(by_exit.error_kind == "transient");
    CHECK(by_exit.call.message == "device busy: link reset, retry");
    auto by_line = fake_toolchain("transient_line").run(request);
    CHECK(by_line.call.status == CallStatus::transient);
    CHECK(by_line.error_kind == "transient");
}

TEST_CASE("a signal or an exit status outside the protocol is a crash") {
    CHECK(fake_toolchain("crash").version().call.status == CallStatus::crashed);
    auto exited = fake_toolchain("exit_42").version();
    CHECK(exited.call.status == CallStatus::crashed);
    CHECK(exited.call.message.find("42") != std::string::npos);
    CHECK(exited.call.process.stderr_text.find("internal failure") != std::string::npos);
}

TEST_CASE("a missing toolchain is not_started / naming the bin and where it looked") {
    auto target = fake_target();
    target.toolchain.bin = "npuc-not-installed";
    Toolchain toolchain(target, default_sandbox());
    std::string why;
    CHECK_FALSE(toolchain.resolve_bin(&why));
    auto result = toolchain.version();
    CHECK(result.call.status == CallStatus::not_started);
    CHECK_FALSE(result.call.process.started);
    CHECK(result.call.message.find("npuc-not-installed") != std::string::npos);
    CHECK(result.call.message.find((fs::path(NPUOPT_TEST_DATA_DIR) / "fake-toolchain").string()) != std::string::npos);
    CHECK(result.call.message.find("PATH") != std::string::npos);
    CHECK(result.call.message == why);

    target.toolchain.bin = "/nonexistent/npuc";
    auto absolute = Toolchain(target, default_sandbox()).version();
    CHECK(absolute.call.status == CallStatus::not_started);
    CHECK(absolute.call.message.find("/nonexistent/npuc") != std::string::npos);
}

TEST_CASE("bin as a path relative to the target dir / or absolute") {
    auto target = fake_target();
    target.toolchain.bin = "fake-toolchain/fake-npuc";
    target.toolchain.search_paths.clear();
    CHECK(Toolchain(target, default_sandbox()).version().call.status == CallStatus::ok);
    target.toolchain.bin = (fs::path(NPUOPT_TEST_DATA_DIR) / "fake-toolchain" / "fake-npuc").string();
    CHECK(Toolchain(target, default_sandbox()).version().call.status == CallStatus::ok);
}

TEST_CASE("an unknown placeholder is a configuration error naming it") {
    auto target = fake_target();
    target.toolchain.check.argv = {"{bin}", "check", "{file}", "--opt={bogus}"};
    KernelFile kernel;
    try {
        Toolchain(target, default_sandbox()).check(kernel.path);
        FAIL("expected an Error");
    } catch (const npuopt::Error& error) {
        CHECK(error.kind() == npuopt::ErrorKind::invalid_config);
        CHECK(std::string(error.what()).find("{bogus}") != std::string::npos);
        CHECK(std::string(error.what()).find("check") != std::string::npos);
    }
    // {seed} exists for run, not for check.
    target.toolchain.check.argv = {"{bin}", "check", "{file}", "{seed}"};
    CHECK_THROWS_AS(Toolchain(target, default_sandbox()).check(kernel.path), npuopt::Error);
}

TEST_CASE("expand_argv: substrings / literal braces / an empty {check} dropped / other empties kept") {
    using npuopt::target::expand_argv;
    std::map<std::string, std::string> values = {{"seed", "7"}, {"check", ""}, {"shape", "a=1"}, {"empty", ""}};
    auto expanded = expand_argv({"--seed={seed}", "{check}", R"({"json":1})", "x{shape}y", "{", "{check}x", "{empty}"},
                                values, "run");
    CHECK(expanded == std::vector<std::string>{"--seed=7", R"({"json":1})", "xa=1y", "{", "x", ""});
    values["check"] = "--check";
    CHECK(expand_argv({"{check}"}, values, "run") == std::vector<std::string>{"--check"});
    // {kernel} and {shape} are flag values: empty, they go with the flag before them.
    std::map<std::string, std::string> no_kernel = {{"file", "k.rs"}, {"kernel", ""}, {"shape", ""}};
    CHECK(expand_argv({"check", "{file}", "--kernel", "{kernel}", "--shape", "{shape}", "--json"}, no_kernel, "check") ==
          std::vector<std::string>{"check", "k.rs", "--json"});
    no_kernel["kernel"] = "ao";
    no_kernel["shape"] = "hidden=8";
    CHECK(expand_argv({"check", "{file}", "--kernel", "{kernel}", "--shape", "{shape}"}, no_kernel, "check") ==
          std::vector<std::string>{"check", "k.rs", "--kernel", "ao", "--shape", "hidden=8"});
    // Not a flag before it: only the empty argument goes.
    no_kernel["kernel"] = "";
    CHECK(expand_argv({"{file}", "{kernel}"}, no_kernel, "check") == std::vector<std::string>{"k.rs"});
    CHECK(npuopt::target::format_shape({{"seq", 1}, {"hidden", 3840}}) == "hidden=3840,seq=1");
    CHECK(npuopt::target::format_shape({}).empty());
}

TEST_CASE("parse_diagnostic_line: good / not JSON / wrong shape") {
    std::string error;
    auto diagnostic = npuopt::target::parse_diagnostic_line(
        R"({"type":"diagnostic","level":"error","code":"E0101","message":"m","span":null,"quantities":[]})", &error);
    REQUIRE(diagnostic);
    CHECK(diagnostic->code == "E0101");
    CHECK_FALSE(npuopt::target::parse_diagnostic_line("error: oops", &error));
    CHECK(error == "not a JSON object");
    CHECK_FALSE(npuopt::target::parse_diagnostic_line(R"({"type":"diagnostic","level":"error"})", &error));
    CHECK(error.find("code") != std::string::npos);
}

TEST_CASE("sandboxed calls: file dir read-only / private scratch removed after / no secrets") {
    if (!npuopt::proc::probe_sandbox().available) {
        MESSAGE("skipped: bubblewrap unusable here: " << npuopt::proc::probe_sandbox().reason);
        return;
    }
    ::setenv("OPENAI_API_KEY", "sk-npuopt-target-test", 1);
    KernelFile kernel;
    TempDir scratch_base;
    auto policy = default_sandbox();
    policy.scratch_dir = scratch_base.path();
    Toolchain toolchain(fake_target("probe"), policy);
    auto result = toolchain.check(kernel.path);
    ::unsetenv("OPENAI_API_KEY");
    CHECK(result.call.status == CallStatus::ok);  // the file was readable
    CHECK(result.call.process.sandboxed);
    REQUIRE(result.call.raw_events.size() == 1);
    const std::string& probe = result.call.raw_events[0];
    // Beside the file: refused — or, for a file under /tmp, whose bind sits in directories of the
    // call's private /tmp tmpfs, written into that tmpfs only; never onto the host (below).
    const auto rel = fs::weakly_canonical(kernel.dir.path()).lexically_relative("/tmp");
    if (rel.empty() || *rel.begin() == "..") CHECK(probe.find("\"beside_file\":false") != std::string::npos);
    CHECK(probe.find("\"scratch\":true") != std::string::npos);
    CHECK(probe.find("\"secret\":\"absent\"") != std::string::npos);
    CHECK_FALSE(fs::exists(kernel.dir.path() / "fake-npuc-wrote-here"));
    // The per-call scratch dir lived under the policy's scratch_dir and is gone now.
    auto cwd_at = probe.find("\"cwd\":\"") + 7;
    std::string cwd = probe.substr(cwd_at, probe.find('"', cwd_at) - cwd_at);
    CHECK(fs::path(cwd).parent_path() == scratch_base.path());
    CHECK(probe.find("\"home\":\"" + cwd + "\"") != std::string::npos);
    CHECK_FALSE(fs::exists(cwd));
    CHECK(fs::is_empty(scratch_base.path()));
}

TEST_CASE("a required sandbox without bubblewrap refuses to run the toolchain") {
    auto policy = default_sandbox();
    policy.required = true;
    policy.bwrap_path = "/nonexistent/bwrap";
    Toolchain toolchain(fake_target(), policy);
    CHECK_THROWS_AS(toolchain.version(), npuopt::Error);
}

TEST_CASE("call status names are stable") {
    CHECK(npuopt::target::call_status_name(CallStatus::timed_out) == "timed_out");
    CHECK(npuopt::target::call_status_name(CallStatus::not_started) == "not_started");
}
