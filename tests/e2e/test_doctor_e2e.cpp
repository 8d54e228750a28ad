// `npuopt doctor` on the real npu-sim toolchain: a baseline compiled and run end to end through
// the sandbox, and a clear failure when npuc cannot run rustc.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

struct Doctor {
    int exit_code = -1;
    nlohmann::json report;
    nlohmann::json end_to_end;  ///< the "end to end" check
};

Doctor doctor(const std::string& args) {
    const std::string command = std::string("'") + NPUOPT_BINARY + "' --json doctor " + args + " 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string output;
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), count);
    const int status = pclose(pipe);
    Doctor result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const auto begin = output.find('{');
    REQUIRE_MESSAGE(begin != std::string::npos, output);
    result.report = nlohmann::json::parse(output.substr(begin));
    for (const auto& check : result.report["checks"]) {
        if (check["name"] == "end to end") result.end_to_end = check;
    }
    return result;
}

/// npuc 1.0 as the build made it: build/npu-sim/1.0 beside the npuopt binary.
fs::path built_release() { return fs::path(NPUOPT_BINARY).parent_path() / "npu-sim" / "1.0"; }

}  // namespace

TEST_CASE("doctor compiles and runs an npu-sim baseline end to end in the sandbox") {
    REQUIRE(fs::is_regular_file(built_release() / "bin" / "npuc"));
    auto result = doctor("--target npu-sim");
    REQUIRE(result.end_to_end.is_object());
    CHECK_MESSAGE(result.end_to_end["status"] == "OK", result.end_to_end.dump());
    CHECK(result.end_to_end["detail"].get<std::string>().find("output check passed") != std::string::npos);
}

TEST_CASE("doctor fails naming rustc when npuc cannot run it, though npuc --version works") {
    const fs::path release = built_release();
    REQUIRE(fs::is_regular_file(release / "bin" / "npuc"));
    npuopt::fakes::TempDir scratch("npuopt-doctor-e2e");
    // a copy of the release whose npuc.conf names a rustc that does not exist
    const fs::path copy = scratch.path() / "npuc-1.0";
    fs::create_directories(copy / "bin");
    fs::create_directories(copy / "lib");
    fs::create_directories(copy / "device");
    fs::copy_file(release / "bin" / "npuc", copy / "bin" / "npuc");
    fs::copy_file(release / "lib" / "libnpu.rlib", copy / "lib" / "libnpu.rlib");
    std::ofstream(copy / "lib" / "npuc.conf") << "rustc=/nonexistent/npuopt-test/bin/rustc\n";
    for (int slot = 0; slot < 8; ++slot) std::ofstream(copy / "device" / ("slot" + std::to_string(slot) + ".lock"));

    const fs::path campaign = scratch.path() / "campaign";
    const std::string init = std::string("'") + NPUOPT_BINARY + "' init '" + campaign.string() + "' --target npu-sim >/dev/null 2>&1";
    REQUIRE(std::system(init.c_str()) == 0);
    std::ifstream in(campaign / "campaign.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const auto at = yaml.find("  bin: \"\"");
    REQUIRE(at != std::string::npos);
    yaml.replace(at, std::string("  bin: \"\"").size(), "  bin: " + (copy / "bin" / "npuc").string());
    std::ofstream(campaign / "campaign.yaml") << yaml;

    auto result = doctor("--campaign '" + campaign.string() + "'");
    CHECK(result.exit_code == 1);
    CHECK(result.report["ok"] == false);
    REQUIRE(result.end_to_end.is_object());
    CHECK(result.end_to_end["status"] == "FAIL");
    const std::string detail = result.end_to_end["detail"];
    CHECK_MESSAGE(detail.find("did not compile: E0901 cannot run rustc /nonexistent/npuopt-test/bin/rustc") !=
                      std::string::npos,
                  detail);
    for (const auto& check : result.report["checks"]) {
        if (check["name"] == "toolchain") CHECK(check["status"] == "OK");
    }
}
