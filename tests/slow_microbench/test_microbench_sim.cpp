// Runs a small part of the npu-sim microbenchmark suite on the real simulator (sandboxed, as
// npuopt does) and fits it. Skips cleanly when no npuc is built. npuc is looked up as
// $NPUOPT_TEST_NPUC, then the build's npu-sim/1.0/bin/npuc, then build-mb/cargo/release/npuc.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <filesystem>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "numerics/robust.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

std::optional<fs::path> find_npuc() {
    if (const char* env = std::getenv("NPUOPT_TEST_NPUC"); env && *env) return fs::path(env);
    for (fs::path candidate : {fs::path(NPUOPT_BUILD_DIR) / "npu-sim/1.0/bin/npuc",
                               fs::path(NPUOPT_SOURCE_DIR) / "build/npu-sim/1.0/bin/npuc",
                               fs::path(NPUOPT_SOURCE_DIR) / "build-mb/cargo/release/npuc"}) {
        if (fs::exists(candidate)) return candidate;
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("microbench on npu-sim: a small DMA sweep fits a line / and a long same-bank run hangs") {
    auto npuc = find_npuc();
    if (!npuc) {
        MESSAGE("skipped: no npuc built (set NPUOPT_TEST_NPUC or build tools/npu-sim)");
        return;
    }
    auto target = config::load_target_config(fs::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    target.toolchain.bin = npuc->string();
    auto suite = config::load_microbench_suite(target.microbench_dir / "suite.yaml");
    for (auto& probe : suite.probes) {
        if (probe.name == "dma_engine") {
            probe.repeats = 5;
            probe.sweep = {{{"packet", "bytes"}, {{1024, 1024}, {1024, 1048576}, {4096, 4096}, {4096, 16384}, {4096, 1048576}}}};
        }
        if (probe.name == "bank_hang") {
            probe.sweep = {{{"run_len"}, {{16}, {512}, {1024}}}};
            // a loaded CI machine compiles slowly: the time limit must tell a hang from a slow
            // compile, and the device's rare transient failures are retried, not taken as a verdict
            probe.timeout_secs = std::max(probe.timeout_secs, 20.0);
            probe.retries = std::max(probe.retries, 2);
        }
    }
    knowledge::MicrobenchOptions options;
    options.only_probes = {"dma_engine", "bank_hang"};
    auto run = knowledge::run_microbench_suite(target, suite, options);
    CHECK(run.toolchain_name == "npuc");
    for (const auto& point : run.points) {
        INFO(point.probe, " ", point.message);
        if (point.probe == "dma_engine") CHECK(point.status == knowledge::PointStatus::ok);
    }
    auto hang = run.points_measuring("bank_hang");
    REQUIRE(hang.size() == 3);
    std::string verdicts;
    for (const auto* point : hang) {
        verdicts += fmt::format("[{} after {} attempt(s): {}] ", knowledge::point_status_name(point->status), point->attempts,
                                point->message);
    }
    INFO("bank_hang points: ", verdicts);
    CHECK(hang[0]->status == knowledge::PointStatus::ok);
    CHECK(hang[1]->status == knowledge::PointStatus::timed_out);
    CHECK(hang[2]->status == knowledge::PointStatus::skipped);

    auto model = knowledge::fit_hardware_model(run, target, suite);
    const auto* startup = model.param("dma_startup_cycles");
    REQUIRE(startup != nullptr);
    CHECK(startup->value > 0);
    CHECK(startup->r_squared.value_or(0) > 0.99);
    CHECK(model.value("dma_engine_bytes_per_cycle") > 0);
    CHECK(model.value("bank_hang_run") == 512);
}
