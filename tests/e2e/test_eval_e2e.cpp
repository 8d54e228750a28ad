// End-to-end: `npuopt eval` on the evalchip test target (tests/data/eval/knowledge), whose fake
// toolchain runs kernels that say how they behave: exit codes 0 / 4 / 1 / 2, the stages and the
// race in text and JSON, a scratch campaign that is removed, and a campaign that records it.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Run {
    int exit_code = -1;
    std::string output;  ///< stdout and stderr together (stdout only with `stdout_only`)
    bool has(const std::string& text) const { return output.find(text) != std::string::npos; }
};

const std::string k_data = NPUOPT_TEST_DATA_DIR;

/// A private TMPDIR, so that the test can see what a scratch campaign leaves behind.
struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::random_device random;
        path = fs::temp_directory_path() / ("npuopt-eval-e2e-" + std::to_string(random()));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
};

Run npuopt(const std::string& args, const fs::path& tmpdir, bool stdout_only = false) {
    const std::string command = "TMPDIR='" + tmpdir.string() + "' '" + NPUOPT_BINARY + "' --knowledge-dir '" + k_data +
                                "/eval/knowledge' " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
    Run run;
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), count);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return run;
}

std::string kernel_file(const std::string& name) { return "'" + k_data + "/eval/" + name + "'"; }

bool leaves_scratch_campaign(const fs::path& tmpdir) {
    for (const auto& entry : fs::directory_iterator(tmpdir)) {
        if (entry.path().filename().string().rfind("npuopt-eval-", 0) == 0) return true;
    }
    return false;
}

}  // namespace

TEST_CASE("eval: a faster correct kernel is accepted against the baseline (exit 0) in a scratch campaign") {
    ScratchDir tmp;
    const Run run = npuopt("eval " + kernel_file("faster.rs") + " --kernel dot --target evalchip --seed 5", tmp.path);
    INFO(run.output);
    CHECK(run.exit_code == 0);
    for (const char* stage : {"rules", "estimate", "compile", "correctness", "screen", "race"}) CHECK(run.has(stage));
    CHECK(run.has("accepted, faster"));
    CHECK(run.has("baseline"));
    CHECK(run.has("no champion for this kernel yet"));
    CHECK(run.has("scratch (seed 5), removed afterwards"));
    CHECK_FALSE(leaves_scratch_campaign(tmp.path));

    const Run json = npuopt("eval " + kernel_file("faster.rs") + " --kernel dot --target evalchip --json", tmp.path, true);
    INFO(json.output);
    CHECK(json.exit_code == 0);
    const auto out = nlohmann::json::parse(json.output);
    CHECK(out["verdict"] == "accepted");
    CHECK(out["exit_code"] == 0);
    CHECK(out["scratch_campaign"] == true);
    CHECK(out["opponent"]["kind"] == "baseline");
    REQUIRE(out["race"].is_object());
    CHECK(out["race"]["verdict"] == "accept");
    const double speedup = out["race"]["speedup"].get<double>();
    CHECK(speedup > 1.15);
    CHECK(out["race"]["interval"][0].get<double>() <= speedup);
    CHECK(out["race"]["interval"][1].get<double>() >= speedup);
    CHECK(out["stages"].size() == 6);
    CHECK(out["stages"][3]["stage"] == "correctness");
    CHECK(out["stages"][3]["verdict"] == "pass");
    CHECK_FALSE(leaves_scratch_campaign(tmp.path));
}

TEST_CASE("eval: a correct kernel that is not faster exits 4, a kernel wrong in the race exits 1") {
    ScratchDir tmp;
    const Run same = npuopt("eval " + kernel_file("same_speed.rs") + " --kernel dot --target evalchip --against baseline",
                            tmp.path);
    INFO(same.output);
    CHECK(same.exit_code == 4);
    CHECK(same.has("not shown faster"));

    const Run wrong = npuopt("eval " + kernel_file("wrong_after_warmup.rs") + " --kernel dot --target evalchip", tmp.path);
    INFO(wrong.output);
    CHECK(wrong.exit_code == 1);
    CHECK(wrong.has("incorrect"));
    CHECK(wrong.has("failed: race"));
    CHECK_FALSE(leaves_scratch_campaign(tmp.path));
}

TEST_CASE("eval: wrong usage exits 2 and names the problem") {
    ScratchDir tmp;
    CHECK(npuopt("eval " + kernel_file("faster.rs") + " --target evalchip", tmp.path).exit_code == 2);  // no --kernel
    const Run unknown = npuopt("eval " + kernel_file("faster.rs") + " --kernel nope --target evalchip", tmp.path);
    CHECK(unknown.exit_code == 2);
    CHECK(unknown.has("unknown kernel 'nope'"));
    CHECK(unknown.has("dot"));
    const Run missing = npuopt("eval /nonexistent/kernel.rs --kernel dot --target evalchip", tmp.path);
    CHECK(missing.exit_code == 2);
    CHECK(missing.has("/nonexistent/kernel.rs"));
    const Run against = npuopt("eval " + kernel_file("faster.rs") + " --kernel dot --target evalchip --against /nonexistent/b.rs",
                               tmp.path);
    CHECK(against.exit_code == 2);
    CHECK(against.has("/nonexistent/b.rs"));
    const Run not_campaign = npuopt("eval " + kernel_file("faster.rs") + " --kernel dot --campaign '" + tmp.path.string() + "'",
                                    tmp.path);
    CHECK(not_campaign.exit_code == 2);
    CHECK(not_campaign.has("not a campaign directory"));
    CHECK_FALSE(leaves_scratch_campaign(tmp.path));
    const Run help = npuopt("eval --help", tmp.path);
    CHECK(help.exit_code == 0);
    CHECK(help.has("Exits 0 when"));
    CHECK(help.has("4 when"));
}

TEST_CASE("eval --campaign records the design and races the campaign's champion or another file") {
    ScratchDir tmp;
    const std::string dir = (tmp.path / "campaign").string();
    REQUIRE(npuopt("init '" + dir + "' --target evalchip", tmp.path).exit_code == 0);
    const Run first = npuopt("eval " + kernel_file("faster.rs") + " --kernel dot --campaign '" + dir + "' --against " +
                                 kernel_file("same_speed.rs"),
                             tmp.path);
    INFO(first.output);
    CHECK(first.exit_code == 0);
    CHECK(first.has("same_speed.rs"));
    const Run status = npuopt("--json status '" + dir + "'", tmp.path, true);
    const auto summary = nlohmann::json::parse(status.output);
    CHECK(summary["designs_by_kernel"]["dot"] == 2);  // the file and its opponent, recorded
    CHECK(fs::exists(fs::path(dir) / "campaign.db"));
}
