// target.yaml's toolchain section beyond the four commands: compile, paths, sandbox.system_paths.

#include <doctest/doctest.h>

#include "config/target_loader.hpp"
#include "config_test_util.hpp"

using namespace npuopt;
using npuopt::test::error_message;
using npuopt::test::ScratchDir;

namespace {

const char* const k_target_head = R"(name: chip
description: d
toolchain:
  bin: c
)";

const char* const k_target_tail = R"(facts:
  clock_ghz: {value: 1, unit: GHz, description: Clock.}
docs: docs
microbench: mb
templates: t
kernels: kernels.yaml
)";

const char* const k_commands = R"(  commands:
    version: {argv: ["{bin}", --version]}
    check: {argv: ["{bin}", check, "{file}"]}
    schedule: {argv: ["{bin}", schedule]}
    run: {argv: ["{bin}", run]}
)";

}  // namespace

TEST_CASE("target.yaml: compile and paths commands / sandbox.system_paths are optional and parsed") {
    ScratchDir scratch;
    auto plain = config::load_target_config(
        scratch.write("chip/target.yaml", std::string(k_target_head) + k_commands + k_target_tail));
    CHECK_FALSE(plain.toolchain.compile);
    CHECK_FALSE(plain.toolchain.paths);
    CHECK_FALSE(plain.toolchain.system_paths);

    const std::string extended = std::string(k_target_head) +
                                 "  sandbox:\n    system_paths: [/usr, /etc/ld.so.cache, extra]\n" + k_commands +
                                 "    compile: {argv: [\"{bin}\", compile, \"{file}\", --cache-dir, \"{cache_dir}\"], "
                                 "timeout_secs: 200}\n"
                                 "    paths: {argv: [\"{bin}\", paths], timeout_secs: 5}\n" +
                                 k_target_tail;
    auto target = config::load_target_config(scratch.write("chip/target.yaml", extended));
    REQUIRE(target.toolchain.compile);
    CHECK(target.toolchain.compile->argv ==
          std::vector<std::string>{"{bin}", "compile", "{file}", "--cache-dir", "{cache_dir}"});
    CHECK(target.toolchain.compile->timeout_secs == 200.0);
    REQUIRE(target.toolchain.paths);
    CHECK(target.toolchain.paths->timeout_secs == 5.0);
    REQUIRE(target.toolchain.system_paths);
    CHECK(*target.toolchain.system_paths ==
          std::vector<std::filesystem::path>{"/usr", "/etc/ld.so.cache", scratch.path() / "chip" / "extra"});
}

TEST_CASE("target.yaml: errors in the sandbox section and the new commands name the key") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "chip/target.yaml").string();
    auto load = [&](const std::string& middle, const std::string& commands_extra) {
        auto path = scratch.write("chip/target.yaml",
                                  std::string(k_target_head) + middle + k_commands + commands_extra + k_target_tail);
        return error_message([&] { config::load_target_config(path); }, ErrorKind::invalid_config);
    };
    SUBCASE("unknown key under sandbox") {
        std::string message = load("  sandbox:\n    system_path: [/usr]\n", "");
        CHECK(message.find(file + ":6:") != std::string::npos);
        CHECK(message.find("unknown key 'toolchain.sandbox.system_path'") != std::string::npos);
    }
    SUBCASE("system_paths not a list") {
        std::string message = load("  sandbox:\n    system_paths: /usr\n", "");
        CHECK(message.find("'toolchain.sandbox.system_paths'") != std::string::npos);
        CHECK(message.find("expected a list of paths") != std::string::npos);
    }
    SUBCASE("compile with an empty argv") {
        std::string message = load("", "    compile: {argv: []}\n");
        CHECK(message.find("'toolchain.commands.compile.argv'") != std::string::npos);
    }
    SUBCASE("paths with a bad placeholder") {
        std::string message = load("", "    paths: {argv: [\"{Bin}\"]}\n");
        CHECK(message.find("'toolchain.commands.paths.argv[0]'") != std::string::npos);
    }
}

TEST_CASE("the shipped npu-sim target.yaml declares compile and paths for npuc") {
    auto target =
        config::load_target_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    REQUIRE(target.toolchain.compile);
    CHECK(target.toolchain.compile->argv.at(1) == "compile");
    CHECK(std::find(target.toolchain.compile->argv.begin(), target.toolchain.compile->argv.end(), "{cache_dir}") !=
          target.toolchain.compile->argv.end());
    REQUIRE(target.toolchain.paths);
    CHECK(target.toolchain.paths->argv.at(1) == "paths");
    CHECK(target.toolchain.env.at("NPUC_CACHE_DIR") == "{cache_dir}");
}
