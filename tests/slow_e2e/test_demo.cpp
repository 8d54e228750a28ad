// Slow end-to-end: `npuopt demo --minutes 1` on the real simulator (skips when npuc is not built).

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

int run_command(const std::string& command, std::string& output) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), count);
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("demo with a one-minute budget ends in a verified submission and the results table within the minute") {
    const fs::path npuc = fs::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
    if (!fs::exists(npuc)) {
        MESSAGE("skipped: npu-sim is not built (" << npuc.string() << ")");
        return;
    }
    std::random_device random;
    fs::path dir = fs::current_path() / ("slow-e2e-demo-" + std::to_string(random()));
    std::string output;
    int exit_code = run_command(std::string("'") + NPUOPT_BINARY + "' demo '" + dir.string() + "' --minutes 1", output);
    CAPTURE(output);
    REQUIRE(exit_code == 0);
    CHECK(output.find("geomean") != std::string::npos);
    CHECK(output.find("champion/min") != std::string::npos);
    // --minutes bounds the whole command: kb build, campaign and submission
    std::smatch wall;
    REQUIRE(std::regex_search(output, wall, std::regex("wall time: +([0-9]+) s of ([0-9]+) s")));
    CHECK(std::stod(wall[1].str()) <= std::stod(wall[2].str()));
    CHECK(std::stod(wall[2].str()) == 60.0);

    // run --message-format json: one JSON object per line, every event, progress after each step, then finished
    std::string stream;
    REQUIRE(run_command(std::string("'") + NPUOPT_BINARY + "' run '" + dir.string() +
                            "' --max-steps 2 --device-runs 40 --message-format json 2>/dev/null",
                        stream) == 0);
    std::istringstream lines(stream);
    std::vector<nlohmann::json> events;
    for (std::string line; std::getline(lines, line);) {
        CAPTURE(line);
        auto event = nlohmann::json::parse(line, nullptr, false);
        REQUIRE(event.is_object());
        REQUIRE(event.contains("event"));
        events.push_back(event);
    }
    REQUIRE(events.size() >= 3);
    CHECK(events.front()["event"] == "campaign_resumed");
    CHECK(events.back()["event"] == "finished");
    CHECK(events.back()["kernels"].size() == 3);
    std::size_t progress = 0;
    for (const auto& event : events) progress += event["event"] == "progress";
    CHECK(progress == 2);

    fs::path submission = dir / "submission";
    REQUIRE(fs::exists(submission / "manifest.json"));
    CHECK(fs::exists(submission / "replay.log"));
    fs::path tarball = submission;
    tarball += ".tar.gz";
    CHECK(fs::exists(tarball));

    std::ifstream manifest_file(submission / "manifest.json");
    auto manifest = nlohmann::json::parse(manifest_file);
    CHECK(manifest["target"] == "npu-sim");
    CHECK(!manifest["toolchain_version"].get<std::string>().empty());
    CHECK(manifest["runs_per_design"] == 7);
    REQUIRE(manifest["kernels"].is_array());
    CHECK(manifest["kernels"].size() == 3);
    for (const auto& kernel : manifest["kernels"]) {
        CAPTURE(kernel.dump());
        if (kernel["champion_cycles"].is_null()) continue;
        CHECK(kernel["all_runs_passed_correctness"] == true);
        CHECK(kernel["champion_runs"].size() == 7);
        CHECK(kernel["source_sha256"].get<std::string>().size() == 64);
        CHECK(fs::exists(submission / kernel["source_file"].get<std::string>()));
        CHECK(kernel["speedup"].get<double>() > 0.0);
    }
    CHECK(manifest["geomean_speedup"].get<double>() > 0.0);
    std::error_code ignored;
    fs::remove_all(dir, ignored);
    fs::remove(tarball, ignored);
}
