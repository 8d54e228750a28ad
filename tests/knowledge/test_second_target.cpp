// A second target must need no C++ change: tests/data/lanechip is a chip with other hardware
// concepts (load latency, lane bandwidth, a lane count found by measuring), declared as data only
// — its suite's `model:` section, its cost_model.yaml, a template — with a scripted device
// (toolchain/fake-lanec). Its hardware model is fitted through the real microbenchmark runner and
// a short search ranks its designs with its declared cost terms.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "eval/speed_of_light.hpp"
#include "eval/stats.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"
#include "search/cost_model.hpp"
#include "search/design.hpp"
#include "search/roles.hpp"
#include "target/toolchain.hpp"

using namespace npuopt;
namespace fs = std::filesystem;

namespace {

// The fake device's constants (toolchain/fake-lanec); npuopt must find them by measuring.
constexpr double k_load_latency_cycles = 173.0;
constexpr double k_lane_bytes_per_cycle = 48.0;
constexpr double k_lanes = 6.0;

const fs::path k_root = fs::path(NPUOPT_TEST_DATA_DIR) / "lanechip";

struct Scratch {
    fs::path path = fs::temp_directory_path() / fmt::format("npuopt-lanechip-{}", ::getpid());
    Scratch() { fs::create_directories(path); }
    ~Scratch() { fs::remove_all(path); }
};

proc::SandboxPolicy no_sandbox() {
    proc::SandboxPolicy sandbox;
    sandbox.enabled = false;
    return sandbox;
}

/// The median cycles of `design` on the fake device.
double measure(const config::TargetConfig& target, const search::Design& design, const config::KernelSpec& kernel,
               const fs::path& dir) {
    const fs::path file = dir / (design.content_hash.substr(0, 16) + ".lane");
    std::ofstream(file) << design.source;
    target::Toolchain toolchain(target, no_sandbox());
    target::RunRequest request;
    request.file = file;
    request.kernel = kernel.name;
    request.seed = 5;
    request.repeat = 3;
    request.shape = kernel.shape;
    const auto result = toolchain.run(request);
    REQUIRE(result.call.status == target::CallStatus::ok);
    return eval::median(result.cycles);
}

}  // namespace

TEST_CASE("second target: lanechip's hardware model is fitted and its designs ranked from data alone") {
    Scratch scratch;
    const auto target = config::load_target_config(k_root / "knowledge" / "lanechip" / "target.yaml");
    REQUIRE(target.cost_model != nullptr);
    const auto suite = config::load_microbench_suite(target.microbench_dir / "suite.yaml");
    knowledge::MicrobenchOptions options;
    options.sandbox = no_sandbox();
    options.work_dir = scratch.path / "microbench";
    const auto run = knowledge::run_microbench_suite(target, suite, options);
    const auto model = knowledge::fit_hardware_model(run, target, suite);
    INFO(knowledge::to_json(model).dump(1));

    // The fitted parameters are the device's constants.
    CHECK(model.missing.empty());
    REQUIRE(model.param("load_latency_cycles") != nullptr);
    CHECK(model.value("load_latency_cycles") == doctest::Approx(k_load_latency_cycles).epsilon(0.02));
    CHECK(model.value("lane_bytes_per_cycle") == doctest::Approx(k_lane_bytes_per_cycle).epsilon(0.02));
    CHECK(model.value("lanes") == k_lanes);
    CHECK(model.value("chip_bytes_per_cycle") == doctest::Approx(k_lanes * k_lane_bytes_per_cycle).epsilon(0.02));
    CHECK(model.param("load_latency_cycles")->ci95_lower <= model.value("load_latency_cycles"));
    CHECK(model.param("lanes")->source == "lane_count");
    REQUIRE(model.findings.size() == 1);
    CHECK(model.findings.front() == "the chip has 6 lanes: 7 were refused");
    // No npu-sim parameter leaks in.
    CHECK(model.param("dma_startup_cycles") == nullptr);

    // Its cost model: the declared terms, combined serially (overlap 1).
    const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    const auto& kernel = kernels.kernels.front();
    const auto specs = config::load_template_dir(target.templates_dir);
    REQUIRE(specs.size() == 1);
    auto tmpl = search::Template::load(specs.front(), kernel, target.name);
    search::CostModel cost(model);
    search::Assignment assignment = {{"LANES", 4}, {"CHUNK", 8192}};
    const auto terms = cost.terms(tmpl->evaluate_quantities(assignment));
    CHECK(terms.names == std::vector<std::string>{"load_wait", "lane_stream"});
    const double loads = std::ceil(1048576.0 * 2 / 4 / 8192);
    CHECK(terms.value("load_wait") == doctest::Approx(loads * model.value("load_latency_cycles")));
    CHECK(terms.value("lane_stream") == doctest::Approx(1048576.0 * 2 / (4 * model.value("lane_bytes_per_cycle"))));
    CHECK(terms.combined() == doctest::Approx(terms.value("load_wait") + terms.value("lane_stream")));

    // It ranks every design of the template as the device does.
    std::vector<double> predicted, measured;
    std::vector<search::Assignment> assignments;
    for (double lanes : specs.front().params[0].values) {
        for (double chunk : specs.front().params[1].values) {
            search::Assignment point = {{"LANES", lanes}, {"CHUNK", chunk}};
            assignments.push_back(point);
            predicted.push_back(*cost.predict_base(tmpl->evaluate_quantities(point)));
            measured.push_back(measure(target, tmpl->instantiate(point), kernel, scratch.path));
        }
    }
    CHECK(eval::spearman_correlation(predicted, measured) > 0.97);
    const auto best_predicted = std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
    const auto best_measured = std::min_element(measured.begin(), measured.end()) - measured.begin();
    CHECK(assignments[static_cast<std::size_t>(best_predicted)] == assignments[static_cast<std::size_t>(best_measured)]);

    // A short search from the defaults: the tuner's first proposal is faster on the device.
    search::SearchContext context;
    context.kernel = kernel.name;
    context.templates = {tmpl};
    context.cost_model = &cost;
    context.champion = tmpl->instantiate(tmpl->default_assignment());
    context.champion_cycles = measure(target, *context.champion, kernel, scratch.path);
    context.max_proposals = 3;
    auto proposals = search::make_tuner()->propose(context);
    REQUIRE_FALSE(proposals.empty());
    CHECK(measure(target, proposals.front().design, kernel, scratch.path) < context.champion_cycles);
    const auto attribution = search::attribute(context);
    CHECK(attribution.dominant == "load_wait");  // 512-byte loads on one lane
    CHECK(attribution.text.find("larger chunks") != std::string::npos);

    // The speed-of-light bound is its declared expression and holds for the best design.
    const double min_bytes = eval::kernel_min_bytes(kernel, kernel.shape);
    const auto bound = eval::speed_of_light(&model, min_bytes);
    CHECK(bound.dominant == "stream");
    CHECK(bound.cycles == doctest::Approx(min_bytes / (2 * model.param("chip_bytes_per_cycle")->ci95_upper)));
    CHECK(bound.cycles < *std::min_element(measured.begin(), measured.end()));
    CHECK(model.weight_movement_min_cycles(min_bytes) > 0);
}
