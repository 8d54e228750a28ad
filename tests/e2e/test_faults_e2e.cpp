// End-to-end faults of trusted measurement: a missing toolchain named by `run`, a zero-byte
// campaign.db refused unchanged, `status` of a read-only campaign, `kb build` beside a run.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace {

struct Run {
    int exit_code = -1;
    std::string output;
    bool has(const std::string& text) const { return output.find(text) != std::string::npos; }
};

Run sh(const std::string& command) {
    Run run;
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), count);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return run;
}

Run npuopt(const std::string& args) {
    return sh("'" + std::string(NPUOPT_BINARY) + "' --knowledge-dir '" + std::string(NPUOPT_TEST_DATA_DIR) +
              "/eval/knowledge' " + args);
}

struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::random_device random;
        path = fs::temp_directory_path() / ("npuopt-faults-e2e-" + std::to_string(random()));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        (void)std::system(("chmod -R u+w '" + path.string() + "' 2>/dev/null").c_str());
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
};

void set_bin(const fs::path& dir, const std::string& bin) {
    std::ifstream in(dir / "campaign.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const auto pos = yaml.find("  bin: \"\"");
    REQUIRE(pos != std::string::npos);
    yaml.replace(pos, 9, "  bin: " + bin);
    std::ofstream(dir / "campaign.yaml") << yaml;
}

}  // namespace

TEST_CASE("run with a missing toolchain exits 1 naming it and where it was searched") {
    ScratchDir scratch;
    const fs::path dir = scratch.path / "campaign";
    REQUIRE(npuopt("init '" + dir.string() + "' --target evalchip").exit_code == 0);
    set_bin(dir, "/nonexistent/npuopt-test/npuc");
    const Run run = npuopt("run '" + dir.string() + "' --device-runs 5");
    INFO(run.output);
    CHECK(run.exit_code == 1);
    CHECK(run.has("/nonexistent/npuopt-test/npuc"));
    CHECK(run.has("not found"));
    CHECK(run.has("nothing was run"));
}

TEST_CASE("a zero-byte campaign.db makes status and run fail naming the file, and it stays empty") {
    ScratchDir scratch;
    const fs::path dir = scratch.path / "campaign";
    REQUIRE(npuopt("init '" + dir.string() + "' --target evalchip").exit_code == 0);
    std::ofstream(dir / "campaign.db", std::ios::trunc).close();
    for (const std::string command : {"status", "run"}) {
        const Run run = npuopt(command + " '" + dir.string() + "'");
        INFO(command << ": " << run.output);
        CHECK(run.exit_code == 1);
        CHECK(run.has((dir / "campaign.db").string()));
        CHECK(run.has("empty (0 bytes)"));
        CHECK(fs::file_size(dir / "campaign.db") == 0);
    }
}

TEST_CASE("status works on a read-only campaign directory") {
    ScratchDir scratch;
    const fs::path dir = scratch.path / "campaign";
    REQUIRE(npuopt("init '" + dir.string() + "' --target evalchip").exit_code == 0);
    REQUIRE(sh("chmod a-w '" + (dir / "campaign.db").string() + "' '" + dir.string() + "'").exit_code == 0);
    const Run status = npuopt("status '" + dir.string() + "'");
    INFO(status.output);
    CHECK(status.exit_code == 0);
    CHECK(status.has("target     evalchip"));
}

TEST_CASE("kb build beside a process holding the campaign lock is refused with exit 2") {
    ScratchDir scratch;
    const fs::path dir = scratch.path / "campaign";
    REQUIRE(npuopt("init '" + dir.string() + "' --target evalchip").exit_code == 0);
    const fs::path ready = scratch.path / "ready";
    REQUIRE(sh("(flock -x '" + (dir / "campaign.lock").string() + "' -c 'touch " + ready.string() +
               "; sleep 4' >/dev/null 2>&1 &) ").exit_code == 0);  // no pipe held open: popen returns now
    for (int wait_idx = 0; wait_idx < 50 && !fs::exists(ready); ++wait_idx) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(fs::exists(ready));
    const Run build = npuopt("kb build --quick --campaign '" + dir.string() + "'");
    INFO(build.output);
    CHECK(build.exit_code == 2);
    CHECK(build.has("is busy"));
    CHECK(build.has("`npuopt kb build` cannot run"));
}
