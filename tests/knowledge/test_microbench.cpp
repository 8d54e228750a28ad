// The microbenchmark suite parser (config/) and runner (knowledge/): parse errors name
// file:line:key; sweeps expand; templates instantiate; the runner records successes, retries
// transient failures, records hangs as timeouts and stops monotone probes at their first failure.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/microbench_config.hpp"
#include "core/error.hpp"
#include "numerics/robust.hpp"
#include "knowledge/microbench.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::string pattern = (fs::temp_directory_path() / "npuopt-test-microbench-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~ScratchDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
    fs::path write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name) << text;
        return path / name;
    }
};

const char* k_template = "fn probe() { let (a, b) = (${bytes}, ${packet}); }\nnpu::kernels! { ${kernel} => probe }\n";

const char* k_suite = R"(version: 1
kernel: feedforward
shape: {hidden: 64}
repeats: 3
probes:
  - name: dma
    file: dma.rs
    measures: dma_single_engine
    params: {packet: 256}
    sweep:
      - {param: bytes, values: [1024, 2048, 4096]}
)";

std::string error_message(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    return "";
}

}  // namespace

TEST_CASE("microbench suite: a valid suite parses with defaults / fixed params and the sweep") {
    ScratchDir dir;
    dir.write("dma.rs", k_template);
    auto suite = config::load_microbench_suite(dir.write("suite.yaml", k_suite));
    REQUIRE(suite.probes.size() == 1);
    const auto& probe = suite.probes[0];
    CHECK(probe.kernel == "feedforward");
    CHECK(probe.repeats == 3);
    CHECK(probe.measures == "dma_single_engine");
    CHECK(suite.shape.at("hidden") == 64);
    auto points = config::expand_probe_sweep(probe);
    REQUIRE(points.size() == 3);
    CHECK(points[0].at("packet") == 256);
    CHECK(points[2].at("bytes") == 4096);
}

TEST_CASE("microbench suite: tied parameters and cartesian products expand in order") {
    config::ProbeSpec probe;
    probe.params = {{"fixed", 7}};
    probe.sweep.push_back({{"rows", "cols"}, {{8, 64}, {64, 4096}}});
    probe.sweep.push_back({{"passes"}, {{1}, {2}, {3}}});
    auto points = config::expand_probe_sweep(probe);
    REQUIRE(points.size() == 6);
    CHECK(points[0] == config::ProbeParams{{"cols", 64}, {"fixed", 7}, {"passes", 1}, {"rows", 8}});
    CHECK(points[5] == config::ProbeParams{{"cols", 4096}, {"fixed", 7}, {"passes", 3}, {"rows", 64}});
}

TEST_CASE("microbench suite: parse errors name file / line and key") {
    ScratchDir dir;
    dir.write("dma.rs", k_template);
    SUBCASE("unknown key") {
        std::string text = k_suite;
        text.replace(text.find("    measures:"), 0, "    meassures: x\n");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:8:") != std::string::npos);
        CHECK(message.find("probes[0].meassures") != std::string::npos);
    }
    SUBCASE("a value that is not an integer") {
        std::string text = k_suite;
        text.replace(text.find("2048"), 4, "lots");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:11:") != std::string::npos);
        CHECK(message.find("probes[0].sweep[0].values[1]") != std::string::npos);
    }
    SUBCASE("a template placeholder that is no parameter") {
        dir.write("dma.rs", std::string(k_template) + "// ${stride}\n");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", k_suite)); });
        CHECK(message.find("suite.yaml:7:") != std::string::npos);
        CHECK(message.find("probes[0].file") != std::string::npos);
        CHECK(message.find("${stride}") != std::string::npos);
    }
    SUBCASE("a missing template") {
        std::string text = k_suite;
        text.replace(text.find("dma.rs"), 6, "nope.rs");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:7:") != std::string::npos);
        CHECK(message.find("does not exist") != std::string::npos);
    }
    SUBCASE("a parameter set twice") {
        std::string text = k_suite;
        text.replace(text.find("{packet: 256}"), 13, "{packet: 256, bytes: 1}");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:11:") != std::string::npos);
        CHECK(message.find("'bytes' is set twice") != std::string::npos);
    }
    SUBCASE("tied values of the wrong length") {
        std::string text = k_suite;
        text.replace(text.find("{param: bytes, values: [1024, 2048, 4096]}"), 43, "{params: [bytes], values: [[1, 2]]}");
        text.replace(text.find("params: {packet: 256}"), 21, "params: {packet: 1}");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:11:") != std::string::npos);
        CHECK(message.find("expected 1 values") != std::string::npos);
    }
}

TEST_CASE("microbench: templates instantiate every placeholder and reject unknown ones") {
    std::string text = "a ${x} b ${kernel} c ${x}";
    CHECK(knowledge::instantiate_probe(text, {{"x", "1"}, {"kernel", "ff"}}, "t.rs") == "a 1 b ff c 1");
    auto message = error_message([&] { knowledge::instantiate_probe(text, {{"x", "1"}}, "t.rs"); });
    CHECK(message.find("${kernel}") != std::string::npos);
    CHECK(config::template_placeholders(text) == std::vector<std::string>{"x", "kernel"});
}

namespace {

config::TargetConfig fake_target(const std::string& mode) {
    config::TargetConfig target;
    target.name = "fakechip";
    target.toolchain.bin = fs::path(NPUOPT_TEST_DATA_DIR) / "fake-toolchain" / "fake-npuc";
    target.toolchain.env = {{"FAKE_MODE", mode}};
    target.toolchain.version = {{"/usr/bin/env", "FAKE_MODE=ok", "{bin}", "--version"}, 10};  // only runs misbehave
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10};
    target.toolchain.schedule = {{"{bin}", "schedule", "{file}", "--kernel", "{kernel}"}, 10};
    target.toolchain.run = {{"{bin}", "run", "{file}", "--kernel", "{kernel}", "--seed", "{seed}", "--repeat", "{repeat}"}, 10};
    return target;
}

config::MicrobenchSuite fake_suite(const ScratchDir& dir, bool monotone, double timeout_secs) {
    config::MicrobenchSuite suite;
    suite.file = dir.path / "suite.yaml";
    suite.kernel = "feedforward";
    config::ProbeSpec probe;
    probe.name = "dma";
    probe.file = dir.write("dma.rs", k_template);
    probe.measures = "dma_single_engine";
    probe.kernel = "feedforward";
    probe.params = {{"packet", 256}};
    probe.sweep.push_back({{"bytes"}, {{1024}, {2048}, {4096}}});
    probe.repeats = 3;
    probe.retries = 2;
    probe.timeout_secs = timeout_secs;
    probe.monotone_failure = monotone;
    suite.probes.push_back(probe);
    return suite;
}

knowledge::MicrobenchOptions fake_options(const ScratchDir& dir) {
    knowledge::MicrobenchOptions options;
    options.sandbox.enabled = false;
    options.work_dir = dir.path / "work";
    options.seed = 10;
    return options;
}

}  // namespace

TEST_CASE("microbench runner: every point is measured with its repeats / median and MAD") {
    ScratchDir dir;
    auto run = knowledge::run_microbench_suite(fake_target("ok"), fake_suite(dir, false, 10), fake_options(dir));
    CHECK(run.target == "fakechip");
    REQUIRE(run.points.size() == 3);
    for (std::size_t idx = 0; idx < run.points.size(); ++idx) {
        const auto& point = run.points[idx];
        CHECK(point.status == knowledge::PointStatus::ok);
        REQUIRE(point.cycles.size() == 3);
        // fake-npuc: cycles = 1000 + 10*seed + repeat; seeds are 10, 11, 12
        CHECK(point.cycles_median == doctest::Approx(1000 + 10 * (10 + static_cast<double>(idx)) + 1));
        CHECK(point.cycles_mad == doctest::Approx(1));
        CHECK(point.attempts == 1);
        CHECK(point.source_sha256.size() == 64);
    }
    auto copy = knowledge::microbench_run_from_json(knowledge::to_json(run));
    CHECK(copy.points.size() == 3);
    CHECK(copy.points[1].cycles == run.points[1].cycles);
    CHECK(fs::exists(dir.path / "work" / "dma"));
}

TEST_CASE("microbench runner: transient failures are retried / then recorded as failed") {
    ScratchDir dir;
    auto run = knowledge::run_microbench_suite(fake_target("transient"), fake_suite(dir, false, 10),
                                               fake_options(dir));
    for (const auto& point : run.points) {
        CHECK(point.status == knowledge::PointStatus::failed);
        CHECK(point.attempts == 3);
    }
}

TEST_CASE("microbench runner: a hang is a timeout / and a monotone probe skips the larger points") {
    ScratchDir dir;
    auto run = knowledge::run_microbench_suite(fake_target("hang"), fake_suite(dir, true, 0.5),
                                               fake_options(dir));
    REQUIRE(run.points.size() == 3);
    CHECK(run.points[0].status == knowledge::PointStatus::timed_out);
    CHECK(run.points[0].attempts == 1);
    CHECK(run.points[1].status == knowledge::PointStatus::skipped);
    CHECK(run.points[2].status == knowledge::PointStatus::skipped);
}

TEST_CASE("microbench runner: an unknown probe name is invalid input") {
    ScratchDir dir;
    auto options = fake_options(dir);
    options.only_probes = {"nope"};
    CHECK_THROWS_AS(knowledge::run_microbench_suite(fake_target("ok"), fake_suite(dir, false, 10), options),
                    Error);
}

TEST_CASE("microbench suite: model entries parse / their errors name file, line and key") {
    ScratchDir dir;
    dir.write("dma.rs", k_template);
    const std::string model = std::string(k_suite) + R"(model:
  - form: linear
    measures: dma_single_engine
    response: cycles
    terms: ["1", bytes]
    params:
      - {name: startup, unit: cycles, coefficient: 0}
      - {name: rate, unit: bytes/cycle, coefficient: 1, transform: reciprocal}
)";
    auto suite = config::load_microbench_suite(dir.write("suite.yaml", model));
    REQUIRE(suite.model.size() == 1);
    CHECK(suite.model[0].form == config::ModelForm::linear);
    CHECK(suite.model[0].terms.size() == 2);
    CHECK(suite.model[0].params[1].reciprocal);
    CHECK(config::declared_param_names(suite.model) == std::vector<std::string>{"startup", "rate"});
    SUBCASE("an unknown form") {
        std::string text = model;
        text.replace(text.find("form: linear"), 12, "form: cubic");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:13:") != std::string::npos);
        CHECK(message.find("model[0].form") != std::string::npos);
    }
    SUBCASE("a coefficient the terms do not have") {
        std::string text = model;
        text.replace(text.find("coefficient: 1"), 14, "coefficient: 2");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("suite.yaml:19:") != std::string::npos);
        CHECK(message.find("model[0].params[1].coefficient") != std::string::npos);
    }
    SUBCASE("a key of another form") {
        std::string text = model;
        text.replace(text.find("    response: cycles"), 0, "    knee: 0.5\n");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("model[0].knee") != std::string::npos);
        CHECK(message.find("not a key of a linear entry") != std::string::npos);
    }
    SUBCASE("a parameter declared twice") {
        std::string text = model;
        text.replace(text.find("name: rate"), 10, "name: startup");
        auto message = error_message([&] { config::load_microbench_suite(dir.write("suite.yaml", text)); });
        CHECK(message.find("model[0].params[1].name") != std::string::npos);
        CHECK(message.find("declared twice") != std::string::npos);
    }
}
