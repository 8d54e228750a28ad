#include <doctest/doctest.h>

#include <cstdlib>

#include "config/target_loader.hpp"
#include "config_test_util.hpp"

using namespace npuopt;
using npuopt::test::error_message;
using npuopt::test::ScratchDir;

namespace {

const std::filesystem::path k_knowledge = std::filesystem::path(NPUOPT_TEST_DATA_DIR) / "config" / "knowledge";

const char* const k_valid_target = R"(name: chip
description: d
toolchain:
  bin: c
  commands:
    version: {argv: ["{bin}", --version]}
    check: {argv: ["{bin}", check, "{file}"]}
    schedule: {argv: ["{bin}", schedule]}
    run: {argv: ["{bin}", run]}
facts:
  clock_ghz: {value: 1, unit: GHz, description: Clock.}
docs: docs
microbench: mb
templates: t
kernels: kernels.yaml
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
    auto pos = text.find(from);
    REQUIRE(pos != std::string::npos);
    return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("a valid target.yaml parses into TargetConfig with resolved paths and expanded variables") {
    setenv("NPUOPT_TEST_TOOL_DIR", "/opt/tools", 1);
    auto target = config::load_target_config(k_knowledge / "testchip" / "target.yaml");
    unsetenv("NPUOPT_TEST_TOOL_DIR");
    CHECK(target.name == "testchip");
    CHECK(target.toolchain.bin == "fakec");
    CHECK(target.toolchain.protocol == "npuopt-jsonl/1");
    REQUIRE(target.toolchain.search_paths.size() == 2);
    CHECK(target.toolchain.search_paths[0] == k_knowledge / "testchip" / "bin");
    CHECK(target.toolchain.search_paths[1] == std::filesystem::path("/opt/tools/x"));
    CHECK(target.toolchain.env.at("FAKEC_MODE") == "quiet");
    CHECK(target.toolchain.check.argv == std::vector<std::string>{"{bin}", "check", "{file}"});
    CHECK(target.toolchain.check.timeout_secs == 5.0);
    CHECK(target.toolchain.version.timeout_secs == 60.0);
    CHECK(target.facts.at("clock_ghz").value == 1.5);
    CHECK(target.facts.at("clock_ghz").unit == "GHz");
    CHECK(target.microbench_dir == (k_knowledge / "../microbench/testchip").lexically_normal());
    CHECK(target.kernels_file == k_knowledge / "testchip" / "kernels.yaml");
}

TEST_CASE("the shipped npu-sim target.yaml parses and holds only the public facts") {
    auto target = config::load_target_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    CHECK(target.name == "npu-sim");
    CHECK(target.toolchain.bin == "npuc");
    CHECK(target.toolchain.search_paths.at(0) == std::filesystem::path(NPUOPT_BUILD_DIR) / "npu-sim/1.0/bin");
    CHECK(target.toolchain.run.argv.back() == "json");
    CHECK(target.facts.size() == 13);
    CHECK(target.facts.at("hbm_peak_bytes_per_cycle").value == 1536);
    CHECK_FALSE(target.facts.contains("dma_startup_cycles"));
    CHECK(target.templates_dir == std::filesystem::path(NPUOPT_SOURCE_DIR) / "dsl_templates/npu-sim");
}

TEST_CASE("target.yaml errors name file:line and the key") {
    ScratchDir scratch;
    auto load = [&](const std::string& text) {
        auto file = scratch.write("chip/target.yaml", text);
        return error_message([&] { config::load_target_config(file); }, ErrorKind::invalid_config);
    };
    std::string file = (scratch.path() / "chip/target.yaml").string();

    SUBCASE("missing key") {
        std::string message = load(replace(k_valid_target, "  bin: c\n", ""));
        CHECK(message.find(file + ":4:") != std::string::npos);
        CHECK(message.find("'toolchain.bin'") != std::string::npos);
        CHECK(message.find("missing") != std::string::npos);
    }
    SUBCASE("wrong type") {
        std::string message = load(replace(k_valid_target, "value: 1,", "value: fast,"));
        CHECK(message.find(file + ":11:") != std::string::npos);
        CHECK(message.find("'facts.clock_ghz.value'") != std::string::npos);
        CHECK(message.find("expected a number") != std::string::npos);
    }
    SUBCASE("unknown key") {
        std::string message = load(replace(k_valid_target, "docs: docs", "doc: docs"));
        CHECK(message.find(file + ":12:1") != std::string::npos);
        CHECK(message.find("unknown key 'doc'") != std::string::npos);
    }
    SUBCASE("nested unknown key") {
        std::string message = load(replace(k_valid_target, "    run: {argv", "    runn: {argv"));
        CHECK(message.find(file + ":9:") != std::string::npos);
        CHECK(message.find("unknown key 'toolchain.commands.runn'") != std::string::npos);
    }
    SUBCASE("unsupported protocol") {
        std::string message = load(replace(k_valid_target, "  bin: c\n", "  bin: c\n  protocol: xml/2\n"));
        CHECK(message.find("'toolchain.protocol'") != std::string::npos);
    }
    SUBCASE("undefined variable") {
        std::string message = load(replace(k_valid_target, "docs: docs", "docs: ${NPUOPT_SURELY_UNDEFINED_VAR}/d"));
        CHECK(message.find(file + ":12:") != std::string::npos);
        CHECK(message.find("NPUOPT_SURELY_UNDEFINED_VAR") != std::string::npos);
    }
    SUBCASE("name must match the directory") {
        std::string message = load(replace(k_valid_target, "name: chip", "name: other"));
        CHECK(message.find("'name'") != std::string::npos);
    }
    SUBCASE("syntax error") {
        std::string message = load("name: [unclosed\n");
        CHECK(message.find(file + ":") != std::string::npos);
        CHECK(message.find("invalid YAML") != std::string::npos);
    }
    SUBCASE("duplicate key") {
        std::string message = load(std::string(k_valid_target) + "docs: again\n");
        CHECK(message.find("duplicate key") != std::string::npos);
    }
}

TEST_CASE("kernels.yaml parses tensors, shapes and baselines against the templates dir") {
    auto kernels = config::load_kernels_config(k_knowledge / "testchip" / "kernels.yaml", "/templates");
    REQUIRE(kernels.kernels.size() == 2);
    const auto& gemv = kernels.kernels[0];
    CHECK(gemv.name == "gemv");
    CHECK(gemv.shape.at("cols") == 128);
    CHECK(gemv.atol == 0.01);
    CHECK(gemv.baseline == std::filesystem::path("/templates/gemv/baseline.rs"));
    REQUIRE(gemv.tensors.size() == 3);
    CHECK(gemv.tensors[0].dtype == "fp8_e4m3");
    CHECK(gemv.tensors[2].shape == std::vector<std::string>{"rows", "1"});
}

TEST_CASE("kernels.yaml errors name file:line and the key") {
    ScratchDir scratch;
    const std::string valid = R"(kernels:
  - name: k
    description: d
    shape: {n: 8}
    tolerance: {atol: 0.1, rtol: 0.01}
    baseline: k.rs
    tensors:
      - {name: x, role: input, dtype: f32, shape: [n]}
)";
    auto load = [&](const std::string& text) {
        auto file = scratch.write("kernels.yaml", text);
        return error_message([&] { config::load_kernels_config(file, scratch.path()); }, ErrorKind::invalid_config);
    };
    std::string file = (scratch.path() / "kernels.yaml").string();
    SUBCASE("missing key") {
        std::string message = load(replace(valid, "    baseline: k.rs\n", ""));
        CHECK(message.find(file + ":2:") != std::string::npos);
        CHECK(message.find("'kernels[0].baseline'") != std::string::npos);
    }
    SUBCASE("wrong type") {
        std::string message = load(replace(valid, "{n: 8}", "{n: eight}"));
        CHECK(message.find(file + ":4:") != std::string::npos);
        CHECK(message.find("'kernels[0].shape.n'") != std::string::npos);
        CHECK(message.find("expected an integer") != std::string::npos);
    }
    SUBCASE("unknown key") {
        std::string message = load(replace(valid, "tolerance: {atol", "tolerance: {abstol"));
        CHECK(message.find(file + ":5:") != std::string::npos);
        CHECK(message.find("unknown key 'kernels[0].tolerance.abstol'") != std::string::npos);
    }
    SUBCASE("bad enum value") {
        std::string message = load(replace(valid, "dtype: f32", "dtype: f16"));
        CHECK(message.find(file + ":8:") != std::string::npos);
        CHECK(message.find("'kernels[0].tensors[0].dtype'") != std::string::npos);
    }
    SUBCASE("unknown shape variable in a tensor") {
        std::string message = load(replace(valid, "shape: [n]", "shape: [n*m]"));
        CHECK(message.find("'kernels[0].tensors[0].shape[0]'") != std::string::npos);
        CHECK(message.find("'m'") != std::string::npos);
    }
}

TEST_CASE("tensor dimensions evaluate products and exact quotients of shape variables") {
    std::map<std::string, std::int64_t> shape = {{"hidden", 3840}, {"heads", 16}, {"head_dim", 256}};
    CHECK(config::evaluate_dimension("7", shape) == 7);
    CHECK(config::evaluate_dimension("heads*head_dim", shape) == 4096);
    CHECK(config::evaluate_dimension("hidden/16", shape) == 240);
    std::string why;
    CHECK_FALSE(config::evaluate_dimension("hidden/7", shape, &why));
    CHECK(why.find("exactly") != std::string::npos);
    CHECK_FALSE(config::evaluate_dimension("heads*", shape, &why));
    CHECK_FALSE(config::evaluate_dimension("ffn", shape, &why));
    CHECK(why.find("'ffn'") != std::string::npos);
}

TEST_CASE("the shipped npu-sim kernels.yaml parses") {
    auto target = config::load_target_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    CHECK(kernels.kernels.size() == 3);
}

TEST_CASE("${VAR} expansion uses the environment, then the build's directories") {
    setenv("NPUOPT_TEST_EXPAND", "abc", 1);
    CHECK(config::expand_variables("x/${NPUOPT_TEST_EXPAND}/y") == std::optional<std::string>("x/abc/y"));
    unsetenv("NPUOPT_TEST_EXPAND");
    CHECK(config::expand_variables("${NPUOPT_SOURCE_DIR}/k") == std::optional<std::string>(std::string(NPUOPT_SOURCE_DIR) + "/k"));
    std::string undefined;
    CHECK_FALSE(config::expand_variables("${NPUOPT_TEST_EXPAND}", &undefined));
    CHECK(undefined == "NPUOPT_TEST_EXPAND");
}

TEST_CASE("targets are found in the knowledge dir, an unknown one lists the known") {
    CHECK(config::list_targets(k_knowledge) == std::vector<std::string>{"testchip"});
    std::string message = error_message([&] { config::load_target(k_knowledge, "nochip"); }, ErrorKind::invalid_input);
    CHECK(message.find("unknown target 'nochip'") != std::string::npos);
    CHECK(message.find("testchip") != std::string::npos);
    CHECK(config::locate_knowledge_dir(k_knowledge) == k_knowledge);
    error_message([&] { config::locate_knowledge_dir(k_knowledge / "absent"); }, ErrorKind::invalid_config);
}

namespace {

const char* k_shaped_kernels = R"(kernels:
  - name: k
    description: d
    shapes:
      small: {n: 256, m: 8}
      big:   {n: 1024, m: 16}
    limits:
      - {dim: n, multiple_of: 256, why: "aligned rows"}
      - {dim: n*m, max: 16384, why: "one operand"}
    tolerance: {atol: 0.1, rtol: 0.01}
    baseline: k.rs
    tensors:
      - {name: x, role: input, dtype: f32, shape: [n, m]}
      - {name: w, role: weight, dtype: fp8_e4m3, shape: [n/256]}
)";

}  // namespace

TEST_CASE("kernels.yaml: named shapes, the first one the default, and the declared limits") {
    ScratchDir scratch;
    auto kernels = config::load_kernels_config(scratch.write("kernels.yaml", k_shaped_kernels), scratch.path());
    REQUIRE(kernels.kernels.size() == 1);
    const auto& kernel = kernels.kernels[0];
    REQUIRE(kernel.shapes.size() == 2);
    CHECK(kernel.shapes[0].name == "small");
    CHECK(kernel.shapes[1].name == "big");
    CHECK(kernel.shape_name == "small");
    CHECK(kernel.shape.at("n") == 256);
    REQUIRE(kernel.limits.size() == 2);
    CHECK(kernel.limits[0].multiple_of == 256);
    CHECK(kernel.limits[1].max == 16384);
    CHECK(kernel.limits[1].why == "one operand");
    CHECK(config::shape_names(kernels) == std::vector<std::string>{"small", "big"});

    config::select_shape(kernels, "big", {}, "campaign.yaml: key 'shape'");
    CHECK(kernels.kernels[0].shape_name == "big");
    CHECK(kernels.kernels[0].shape.at("n") == 1024);
    CHECK(kernels.kernels[0].shape.at("m") == 16);

    auto violation = config::shape_limit_violation(kernel, {{"n", 512}, {"m", 64}});
    REQUIRE(violation);
    CHECK(violation->find("n*m = 32768 must be at most 16384 (one operand)") != std::string::npos);
    CHECK_FALSE(config::shape_limit_violation(kernel, {{"n", 512}, {"m", 32}}));
    violation = config::shape_limit_violation(kernel, {{"n", 300}, {"m", 1}});
    REQUIRE(violation);
    CHECK(violation->find("must be a multiple of 256") != std::string::npos);
}

TEST_CASE("kernels.yaml: an unknown shape names the known ones and a kernel outside the campaign keeps its default") {
    ScratchDir scratch;
    auto kernels = config::load_kernels_config(scratch.write("kernels.yaml", k_shaped_kernels), scratch.path());
    std::string message = error_message([&] { config::select_shape(kernels, "huge", {}, "campaign.yaml: key 'shape'"); },
                                        ErrorKind::invalid_config);
    CHECK(message.find("campaign.yaml: key 'shape': unknown shape 'huge' for kernel k") != std::string::npos);
    CHECK(message.find("known shapes in") != std::string::npos);
    CHECK(message.find("small, big") != std::string::npos);
    config::select_shape(kernels, "huge", {"other"}, "campaign.yaml: key 'shape'");  // k is not selected
    CHECK(kernels.kernels[0].shape_name == "small");
}

TEST_CASE("kernels.yaml: shape and limit errors name the key") {
    ScratchDir scratch;
    auto load = [&](const std::string& text) {
        auto file = scratch.write("kernels.yaml", text);
        return error_message([&] { config::load_kernels_config(file, scratch.path()); }, ErrorKind::invalid_config);
    };
    const std::string valid = k_shaped_kernels;
    SUBCASE("a named shape outside the limits") {
        std::string message = load(replace(valid, "big:   {n: 1024, m: 16}", "big:   {n: 1000, m: 16}"));
        CHECK(message.find("'kernels[0].shapes.big'") != std::string::npos);
        CHECK(message.find("shape 'big' is outside the kernel's declared limits") != std::string::npos);
        CHECK(message.find("n = 1000 must be a multiple of 256 (aligned rows)") != std::string::npos);
    }
    SUBCASE("shapes with different variables") {
        std::string message = load(replace(valid, "big:   {n: 1024, m: 16}", "big:   {n: 1024, k: 16}"));
        CHECK(message.find("'kernels[0].shapes.big'") != std::string::npos);
        CHECK(message.find("expected the same variables as shape 'small' (m, n)") != std::string::npos);
    }
    SUBCASE("both shape and shapes") {
        std::string message = load(replace(valid, "    shapes:\n", "    shape: {n: 256, m: 8}\n    shapes:\n"));
        CHECK(message.find("exactly one of 'shape'") != std::string::npos);
    }
    SUBCASE("a bad shape name") {
        std::string message = load(replace(valid, "small:", "Small One:"));
        CHECK(message.find("expected a shape name") != std::string::npos);
    }
    SUBCASE("a limit without a bound") {
        std::string message = load(replace(valid, "{dim: n, multiple_of: 256, why: \"aligned rows\"}",
                                           "{dim: n, why: \"aligned rows\"}"));
        CHECK(message.find("'kernels[0].limits[0].dim'") != std::string::npos);
        CHECK(message.find("at least one bound") != std::string::npos);
    }
    SUBCASE("a limit on an unknown variable") {
        std::string message = load(replace(valid, "{dim: n*m, max", "{dim: n*q, max"));
        CHECK(message.find("'kernels[0].limits[1].dim'") != std::string::npos);
        CHECK(message.find("'q'") != std::string::npos);
    }
    SUBCASE("a tensor dimension that is not exact at one shape") {
        std::string message = load(replace(valid, "shape: [n/256]", "shape: [n/512]"));
        CHECK(message.find("'kernels[0].tensors[1].shape[0]'") != std::string::npos);
        CHECK(message.find("at shape 'small'") != std::string::npos);
    }
}

TEST_CASE("the shipped npu-sim kernels name the same shapes, each within its kernel's limits") {
    auto target = config::load_target_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    const auto names = config::shape_names(kernels);
    REQUIRE(names.size() >= 3);
    CHECK(names.front() == "gemma4-12b");
    for (const auto& kernel : kernels.kernels) {
        CHECK(kernel.shapes.size() == names.size());
        CHECK(kernel.shape_name == "gemma4-12b");
        CHECK_FALSE(kernel.limits.empty());
        CHECK(kernel.shape.at("hidden") == 3840);
    }
    for (const auto& name : names) {
        auto shaped = kernels;
        config::select_shape(shaped, name, {}, "test");
        for (const auto& kernel : shaped.kernels) CHECK_FALSE(config::shape_limit_violation(kernel, kernel.shape));
    }
}
