// Anti-gaming checks over synthetic verify lines, and the speed-of-light bound and byte count.

#include <filesystem>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/cost_model_config.hpp"
#include "core/error.hpp"
#include "eval/anti_gaming.hpp"
#include "eval/speed_of_light.hpp"

using namespace npuopt::eval;
using npuopt::target::OutputInfo;
using npuopt::target::Verify;

namespace {

Verify verify_of(const std::string& fingerprint, bool passed = true, double mean_abs = 1.0, double ref_mean_abs = 1.0,
                 std::int64_t nonfinite = 0) {
    Verify verify;
    verify.passed = passed;
    verify.elements = 256;
    verify.nonfinite = nonfinite;
    verify.mismatches = passed ? 0 : 200;
    verify.outputs.push_back(OutputInfo{"out", 256, fingerprint, mean_abs, ref_mean_abs});
    return verify;
}

std::vector<CorrectnessRun> runs_of(std::vector<std::pair<std::uint64_t, Verify>> items) {
    std::vector<CorrectnessRun> runs;
    for (std::size_t position = 0; position < items.size(); ++position) {
        runs.push_back({items[position].first, position, items[position].second});
    }
    return runs;
}

GamingCheck check_of(const std::vector<CorrectnessRun>& runs) { return check_correctness_runs(runs, {}).check; }

}  // namespace

TEST_CASE("honest runs pass every check") {
    const auto runs = runs_of({{0, verify_of("a")}, {11, verify_of("b")}, {12, verify_of("c")}, {11, verify_of("b")}});
    const auto verdict = check_correctness_runs(runs, {});
    CHECK(verdict.passed());
    CHECK(verdict.notes.empty());
}

TEST_CASE("non-finite output fails first and names the count") {
    const auto runs = runs_of({{0, verify_of("a")}, {11, verify_of("b", false, 1.0, 1.0, 3)}});
    const auto verdict = check_correctness_runs(runs, {});
    CHECK(verdict.check == GamingCheck::nonfinite);
    CHECK(verdict.reason.find("3 of 256") != std::string::npos);
}

TEST_CASE("an all-zero output fails even when verify passed") {
    CHECK(check_of(runs_of({{0, verify_of("z", true, 0.0, 0.004)}, {11, verify_of("z2", true, 0.0, 0.004)}})) ==
          GamingCheck::all_zero);
}

TEST_CASE("a magnitude outside the factor is implausible / inside it is fine") {
    CHECK(check_of(runs_of({{1, verify_of("a", true, 5.0, 1.0)}, {2, verify_of("b")}})) ==
          GamingCheck::implausible_magnitude);
    CHECK(check_of(runs_of({{1, verify_of("a", true, 0.2, 1.0)}, {2, verify_of("b")}})) ==
          GamingCheck::implausible_magnitude);
    CHECK(check_of(runs_of({{1, verify_of("a", true, 3.0, 1.0)}, {2, verify_of("b")}})) == GamingCheck::none);
    CHECK(check_magnitude(verify_of("a", true, 0.0, 0.0), 1, {}).passed());  // zero reference: nothing to compare
}

TEST_CASE("a correct output returned again for other inputs is leftovers") {
    const auto runs = runs_of({{0, verify_of("seed0")}, {11, verify_of("seed0", false)}, {12, verify_of("seed0", false)}});
    const auto verdict = check_correctness_runs(runs, {});
    CHECK(verdict.check == GamingCheck::leftovers);
    CHECK(verdict.reason.find("seed 11") != std::string::npos);
    CHECK(verdict.reason.find("seed 0") != std::string::npos);
}

TEST_CASE("the same wrong output for different inputs is input independent") {
    CHECK(check_of(runs_of({{0, verify_of("c", false)}, {11, verify_of("c", false)}})) == GamingCheck::input_independent);
    // correct both times yet identical: still does not depend on the inputs
    CHECK(check_of(runs_of({{11, verify_of("c")}, {12, verify_of("c")}})) == GamingCheck::leftovers);
}

TEST_CASE("a seed whose output changes with what ran before is order dependent") {
    const auto runs = runs_of({{0, verify_of("a")}, {11, verify_of("b")}, {12, verify_of("c")}, {11, verify_of("b2")}});
    const auto verdict = check_correctness_runs(runs, {});
    CHECK(verdict.check == GamingCheck::order_dependent);
    CHECK(verdict.reason.find("launch 1 and launch 3") != std::string::npos);
}

TEST_CASE("a plain mismatch is a wrong result") {
    CHECK(check_of(runs_of({{0, verify_of("a")}, {11, verify_of("b", false)}})) == GamingCheck::wrong_result);
}

TEST_CASE("checks without their data leave notes instead of failing") {
    Verify bare;
    bare.passed = true;
    bare.elements = 10;
    const auto verdict = check_correctness_runs(runs_of({{1, bare}, {2, bare}}), {});
    CHECK(verdict.passed());
    CHECK_FALSE(verdict.notes.empty());
    const auto single = check_correctness_runs(runs_of({{1, verify_of("a")}}), {});
    CHECK(single.passed());
    CHECK(single.notes.size() == 2);  // one seed; no seed ran twice
}

TEST_CASE("gaming check names are stable") {
    CHECK(gaming_check_name(GamingCheck::leftovers) == "leftovers");
    CHECK(gaming_check_name(GamingCheck::input_independent) == "input_independent");
    CHECK(gaming_check_name(GamingCheck::all_zero) == "all_zero");
    CHECK(gaming_check_name(GamingCheck::order_dependent) == "order_dependent");
}

TEST_CASE("kernel_min_bytes names the tensor and dimension it cannot evaluate") {
    npuopt::config::KernelSpec spec;
    spec.name = "feedforward";
    spec.shape = {{"hidden", 3840}};
    spec.tensors = {{"x", "input", "bf16", {"q_heads*head_dim"}}};
    CHECK(kernel_min_bytes(spec, {{"q_heads", 16}, {"head_dim", 256}}) == doctest::Approx(4096 * 2));
    for (const std::string dim : {"hidden/7", "ffn", "hidden*", "0"}) {
        spec.tensors = {{"x", "input", "bf16", {dim}}};
        try {
            kernel_min_bytes(spec, {});
            FAIL("dimension '" << dim << "' was accepted");
        } catch (const npuopt::Error& error) {
            const std::string message = error.what();
            CHECK(error.kind() == npuopt::ErrorKind::invalid_input);
            CHECK(message.find("tensor 'x'") != std::string::npos);
            CHECK(message.find("'" + dim + "'") != std::string::npos);
        }
    }
}

TEST_CASE("kernel_min_bytes counts weights inputs and outputs at their dtype widths and skips state") {
    npuopt::config::KernelSpec spec;
    spec.name = "feedforward";
    spec.shape = {{"hidden", 3840}, {"ffn", 15360}};
    spec.tensors = {
        {"x", "input", "bf16", {"hidden"}},
        {"w_gate", "weight", "fp4_e2m1", {"ffn", "hidden"}},
        {"w_gate_bs", "weight", "fp8_e4m3", {"ffn", "hidden/16"}},
        {"w_gate_s", "weight", "f32", {"1"}},
        {"cache", "state", "bf16", {"ffn", "hidden"}},
        {"out", "output", "bf16", {"hidden"}},
    };
    const double expected = 3840 * 2 + 15360.0 * 3840 * 0.5 + 15360.0 * 240 + 4 + 3840 * 2;
    CHECK(kernel_min_bytes(spec, {}) == doctest::Approx(expected));
    // the run's shape overrides kernels.yaml's
    const double small = 256 * 2 + 1024.0 * 256 * 0.5 + 1024.0 * 16 + 4 + 256 * 2;
    CHECK(kernel_min_bytes(spec, {{"hidden", 256}, {"ffn", 1024}}) == doctest::Approx(small));
    spec.tensors.push_back({"odd", "input", "fp6", {"1"}});
    CHECK_THROWS_AS(kernel_min_bytes(spec, {}), npuopt::Error);
}

TEST_CASE("speed of light: bytes over the upper end of the bandwidth interval / tolerance") {
    npuopt::knowledge::HardwareModel model;
    model.cost_model = std::make_shared<npuopt::config::CostModelSpec>(npuopt::config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    CHECK(speed_of_light(&model, 1e6).cycles == 0.0);  // no bandwidth known: no bound
    CHECK(speed_of_light(nullptr, 1e6).cycles == 0.0);
    model.set("sustained_bytes_per_cycle", 1000.0);
    CHECK(speed_of_light(&model, 1e6).cycles == doctest::Approx(1000.0));
    npuopt::knowledge::HardwareParam param;
    param.name = "sustained_bytes_per_cycle";
    param.value = 1000.0;
    param.ci95_lower = 950.0;
    param.ci95_upper = 1250.0;
    model.params = {param};
    const auto bound = speed_of_light(&model, 1e6);
    CHECK(bound.cycles == doctest::Approx(800.0));
    CHECK_FALSE(speed_of_light_violation(800.0, bound).has_value());
    CHECK_FALSE(speed_of_light_violation(0.98 * 800.0, bound).has_value());  // within the tolerance
    const auto violation = speed_of_light_violation(700.0, bound);
    REQUIRE(violation.has_value());
    CHECK(violation->find("800") != std::string::npos);
}
