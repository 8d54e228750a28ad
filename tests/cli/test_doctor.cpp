// `npuopt doctor` runs a kernel end to end through the sandbox: the first kernel's baseline
// compiled, checked and run once with its output check, on a fake toolchain
// (tests/data/fake-toolchain/fake-npuc) whose FAKE_MODE picks how it fails.

#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_capture.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

/// A knowledge dir holding one target, `fakechip`, whose toolchain is fake-npuc in `mode`.
void write_fake_target(const fs::path& knowledge, const std::string& mode) {
    const fs::path dir = knowledge / "fakechip";
    fs::create_directories(dir / "templates" / "k");
    fs::create_directories(dir / "docs");
    fs::create_directories(dir / "microbench");
    const std::string fake = std::string(NPUOPT_TEST_DATA_DIR) + "/fake-toolchain/fake-npuc";
    std::ofstream(dir / "target.yaml") << "name: fakechip\n"
                                          "description: A chip that exists only in the doctor's tests.\n"
                                          "toolchain:\n"
                                          "  bin: " << fake << "\n"
                                          "  env: {FAKE_MODE: " << mode << "}\n"
                                          "  commands:\n"
                                          "    version: {argv: [\"{bin}\", --version]}\n"
                                          "    check: {argv: [\"{bin}\", check, \"{file}\"], timeout_secs: 20}\n"
                                          "    schedule: {argv: [\"{bin}\", schedule, \"{file}\", --kernel, \"{kernel}\"]}\n"
                                          "    run: {argv: [\"{bin}\", run, \"{file}\", --kernel, \"{kernel}\", --seed, "
                                          "\"{seed}\", --repeat, \"{repeat}\", \"{check}\"], timeout_secs: 20}\n"
                                          "facts:\n"
                                          "  clock_ghz: {value: 1, unit: GHz, description: Clock.}\n"
                                          "docs: docs\n"
                                          "microbench: microbench\n"
                                          "templates: templates\n"
                                          "kernels: kernels.yaml\n";
    std::ofstream(dir / "kernels.yaml") << "kernels:\n"
                                           "  - name: add\n"
                                           "    description: z = x + y\n"
                                           "    shape: {n: 32}\n"
                                           "    tolerance: {atol: 0, rtol: 0.001}\n"
                                           "    baseline: k/baseline.rs\n"
                                           "    tensors:\n"
                                           "      - {name: z, role: output, dtype: f32, shape: [n]}\n";
    std::ofstream(dir / "templates" / "k" / "baseline.rs") << "// the fake toolchain only reads it\n";
}

struct DoctorOutcome {
    npuopt::testing::Captured captured;
    nlohmann::json end_to_end;  ///< the "end to end" check, null when absent
    nlohmann::json report;
};

DoctorOutcome doctor_on(const std::string& mode) {
    npuopt::fakes::TempDir knowledge("npuopt-doctor-test");
    write_fake_target(knowledge.path(), mode);
    DoctorOutcome outcome;
    outcome.captured =
        npuopt::testing::run_cli({"--knowledge-dir", knowledge.path().string(), "--json", "doctor", "--target", "fakechip"});
    INFO("stdout: " << outcome.captured.out << "\nstderr: " << outcome.captured.err);
    REQUIRE(outcome.captured.out.find('{') != std::string::npos);
    outcome.report = nlohmann::json::parse(outcome.captured.out);
    for (const auto& check : outcome.report["checks"]) {
        if (check["name"] == "end to end") outcome.end_to_end = check;
    }
    CHECK_MESSAGE(outcome.end_to_end.is_object(), outcome.captured.out);
    return outcome;
}

}  // namespace

TEST_CASE("doctor compiles and runs the first kernel's baseline with its output check") {
    auto outcome = doctor_on("ok");
    REQUIRE(outcome.end_to_end.is_object());
    CHECK(outcome.end_to_end["status"] == "OK");
    const std::string detail = outcome.end_to_end["detail"];
    CHECK(detail.find("baseline.rs (add, shape default) compiled and checked in ") != std::string::npos);
    CHECK(detail.find("1010 cycles, output check passed") != std::string::npos);  // fake: 1000 + 10 x seed 1
}

TEST_CASE("doctor fails naming the problem when the toolchain cannot run its compiler") {
    auto outcome = doctor_on("no_compiler");
    CHECK(outcome.captured.exit_code == 1);
    CHECK(outcome.report["ok"] == false);
    REQUIRE(outcome.end_to_end.is_object());
    CHECK(outcome.end_to_end["status"] == "FAIL");
    const std::string detail = outcome.end_to_end["detail"];
    CHECK(detail.find("baseline.rs did not compile: E0901 cannot run rustc /nonexistent/rustc") != std::string::npos);
    CHECK(outcome.end_to_end["fix"].get<std::string>().find("runnable inside the sandbox") != std::string::npos);
    bool version_ok = false;  // `--version` alone still works: only the end-to-end check sees it
    for (const auto& check : outcome.report["checks"]) {
        if (check["name"] == "toolchain") version_ok = check["status"] == "OK";
    }
    CHECK(version_ok);
}

TEST_CASE("doctor fails when the kernel compiles but does not run, or runs wrong") {
    auto device = doctor_on("device");
    CHECK(device.captured.exit_code == 1);
    REQUIRE(device.end_to_end.is_object());
    CHECK(device.end_to_end["status"] == "FAIL");
    CHECK_MESSAGE(device.end_to_end["detail"].get<std::string>().find("compiled but did not run: device error: DMA fault at 0x40") !=
                      std::string::npos,
                  device.end_to_end.dump());

    auto wrong = doctor_on("verify_fail");
    CHECK(wrong.captured.exit_code == 1);
    REQUIRE(wrong.end_to_end.is_object());
    CHECK(wrong.end_to_end["status"] == "FAIL");
    const std::string detail = wrong.end_to_end["detail"];
    CHECK(detail.find("its output check failed (17 of 3840 elements wrong)") != std::string::npos);
}
