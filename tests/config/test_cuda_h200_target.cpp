// The cuda-h200 target is data only: its target.yaml, kernels.yaml, templates, microbenchmark suite
// (with its hardware-model declaration) and cost model load through the same loaders as npu-sim's,
// with no C++ of its own in src/.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "eval/speed_of_light.hpp"

using namespace npuopt;
namespace fs = std::filesystem;

namespace {
const fs::path k_target_yaml = fs::path(NPUOPT_SOURCE_DIR) / "knowledge/cuda-h200/target.yaml";
}

TEST_CASE("cuda-h200: target.yaml names cudac's commands and only public facts") {
    auto target = config::load_target_config(k_target_yaml);
    CHECK(target.name == "cuda-h200");
    CHECK(target.toolchain.bin == "cudac");
    CHECK(target.toolchain.compile.has_value());
    CHECK(target.toolchain.paths.has_value());
    CHECK(target.toolchain.search_paths.at(0) == fs::path(NPUOPT_BUILD_DIR) / "cuda-h200/bin");
    CHECK(target.run_check_fraction == doctest::Approx(0.25));
    CHECK(target.facts.at("sm_count").value == 132);
    CHECK(target.facts.at("hbm_peak_bytes_per_ns").value == 4800);
    CHECK(target.facts.at("l2_bytes").value == 52428800);
    CHECK(target.facts.at("cycle_ns").unit == "ns");
    for (const auto& [key, fact] : target.facts) {
        INFO(key);
        CHECK_FALSE(fact.description.empty());
    }
    REQUIRE(target.cost_model);
    std::set<std::string> terms;
    for (const auto& term : target.cost_model->terms) terms.insert(term.name);
    CHECK(terms == std::set<std::string>{"hbm", "latency", "launch"});
    CHECK(target.cost_model->speed_of_light.size() == 1);
}

TEST_CASE("cuda-h200: kernels.yaml holds the three Gemma-4-12B chains at batch 1, 4 and 8") {
    auto target = config::load_target_config(k_target_yaml);
    auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    REQUIRE(kernels.kernels.size() == 3);
    for (const auto& kernel : kernels.kernels) {
        INFO(kernel.name);
        REQUIRE(kernel.shapes.size() == 3);
        CHECK(kernel.shapes[0].name == "gemma4-12b-b1");
        CHECK(kernel.shapes[2].values.at("batch") == 8);
        CHECK(fs::exists(kernel.baseline));
    }
    // weight bytes at batch 1 (bf16): QKV 8192 x 3840, O 3840 x 4096, FF 3 x 15360 x 3840
    const auto& qkv = kernels.kernels[0];
    const auto& ao = kernels.kernels[1];
    const auto& ff = kernels.kernels[2];
    CHECK(qkv.name == "project_qkv");
    const double qkv_bytes = eval::kernel_min_bytes(qkv, qkv.shape);
    const double ao_bytes = eval::kernel_min_bytes(ao, ao.shape);
    const double ff_bytes = eval::kernel_min_bytes(ff, ff.shape);
    CHECK(qkv_bytes >= 8192.0 * 3840 * 2);
    CHECK(qkv_bytes < 8192.0 * 3840 * 2 * 1.001);
    CHECK(ao_bytes >= 3840.0 * 4096 * 2);
    CHECK(ff_bytes >= 3.0 * 15360 * 3840 * 2);
    CHECK(ff_bytes < 3.0 * 15360 * 3840 * 2 * 1.001);
}

TEST_CASE("cuda-h200: every template parses, each kernel has one, with the quantities the cost model reads") {
    auto target = config::load_target_config(k_target_yaml);
    std::vector<std::string> errors;
    auto templates = config::load_template_dir(target.templates_dir, &errors);
    CHECK(errors.empty());
    REQUIRE(templates.size() >= 3);
    std::set<std::string> kernels;
    std::map<std::string, int> per_family;
    for (const auto& spec : templates) {
        per_family[spec.family + "/" + spec.kernel] += 1;
        INFO(spec.name);
        kernels.insert(spec.kernel);
        std::set<std::string> quantities;
        for (const auto& quantity : spec.quantities) quantities.insert(quantity.name);
        for (const auto& [name, fallback] : target.cost_model->quantities) CHECK(quantities.count(name) == 1);
        CHECK(quantities.count("smem_bytes") == 1);
        std::set<std::string> params;
        for (const auto& param : spec.params) params.insert(param.name);
        // physical parameters every family shares: warps per block and blocks per SM
        for (const char* physical : {"WARPS", "BPS"}) CHECK(params.count(physical) == 1);
        if (spec.family != "gemv_stream") {
            for (const char* physical : {"ROWS", "UNROLL", "LOADHINT", "XSRC"}) CHECK(params.count(physical) == 1);
        } else {
            for (const char* physical : {"SROWS", "STAGES", "LOADER"}) CHECK(params.count(physical) == 1);
        }
    }
    CHECK(kernels == std::set<std::string>{"project_qkv", "attention_output", "feedforward"});
    for (const auto& [family_kernel, count] : per_family) {
        INFO(family_kernel);
        CHECK(count == 1);  // one template per family and kernel
    }
}

TEST_CASE("cuda-h200: the microbenchmark suite declares read, copy, launch and L2 probes and the model fitted from them") {
    auto target = config::load_target_config(k_target_yaml);
    auto suite = config::load_microbench_suite(target.microbench_dir / "suite.yaml");
    CHECK(suite.kernel == "probe");
    std::set<std::string> measures;
    for (const auto& probe : suite.probes) measures.insert(probe.measures);
    CHECK(measures == std::set<std::string>{"hbm_read", "copy", "launch_overhead", "l2_read"});
    auto names = config::declared_param_names(suite.model);
    for (const char* wanted : {"hbm_read_bytes_per_ns", "hbm_latency_ns", "copy_bytes_per_ns", "launch_ns", "l2_bytes_per_ns"}) {
        INFO(wanted);
        CHECK(std::find(names.begin(), names.end(), wanted) != names.end());
    }
}
