#include <doctest/doctest.h>

#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "config_test_util.hpp"

using namespace npuopt;
using npuopt::test::error_message;
using npuopt::test::ScratchDir;

TEST_CASE("the template npuopt init writes parses back to the defaults") {
    ScratchDir scratch;
    auto file = scratch.write("campaign.yaml", config::campaign_yaml_template("npu-sim", {"a", "b"}, 42));
    auto campaign = config::load_campaign_config(file);
    config::CampaignConfig defaults;
    CHECK(campaign.target == "npu-sim");
    CHECK(campaign.kernels.empty());
    CHECK(campaign.seed == 42);
    CHECK(campaign.budgets.wall_time_secs == defaults.budgets.wall_time_secs);
    CHECK(campaign.budgets.device_runs == defaults.budgets.device_runs);
    CHECK(campaign.sandbox.required == defaults.sandbox.required);
    CHECK(campaign.sandbox.memory_mb == defaults.sandbox.memory_mb);
    CHECK_FALSE(campaign.toolchain_bin);
    CHECK(campaign.acceptance.alpha == doctest::Approx(defaults.acceptance.alpha));
    CHECK(campaign.acceptance.max_runs_per_race == defaults.acceptance.max_runs_per_race);
    CHECK(campaign.acceptance.revalidate_every_accepts == defaults.acceptance.revalidate_every_accepts);
    CHECK(campaign.acceptance.strict_after == doctest::Approx(defaults.acceptance.strict_after));
    CHECK(campaign.llm.api_key_env == "OPENAI_API_KEY");
    CHECK(campaign.dir == scratch.path());
}

TEST_CASE("campaign.yaml: a minimal file takes defaults, overrides resolve against the campaign dir") {
    ScratchDir scratch;
    auto file = scratch.write("campaign.yaml", "target: t\nkernels: [gemv]\ntoolchain: {bin: bin/fakec}\n"
                                               "budgets: {wall_time: 1h30m}\n");
    auto campaign = config::load_campaign_config(file);
    CHECK(campaign.kernels == std::vector<std::string>{"gemv"});
    CHECK(campaign.budgets.wall_time_secs == 5400.0);
    REQUIRE(campaign.toolchain_bin);
    CHECK(*campaign.toolchain_bin == scratch.path() / "bin/fakec");

    config::TargetConfig target;
    target.toolchain.bin = "npuc";
    target.toolchain.search_paths = {"/x"};
    config::apply_campaign_overrides(campaign, target);
    CHECK(target.toolchain.bin == (scratch.path() / "bin/fakec").string());
    CHECK(target.toolchain.search_paths.empty());

    config::KernelsConfig kernels;
    config::KernelSpec add_kernel;
    add_kernel.name = "add";
    kernels.kernels.push_back(add_kernel);
    std::string message = error_message([&] { config::check_campaign_kernels(campaign, kernels); },
                                        ErrorKind::invalid_config);
    CHECK(message.find("unknown kernel 'gemv'") != std::string::npos);
}

TEST_CASE("campaign.yaml errors name file:line and the key") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "campaign.yaml").string();
    auto load = [&](const std::string& text) {
        scratch.write("campaign.yaml", text);
        return error_message([&] { config::load_campaign_config(file); }, ErrorKind::invalid_config);
    };
    SUBCASE("missing key") {
        std::string message = load("seed: 1\n");
        CHECK(message.find(file + ":1:") != std::string::npos);
        CHECK(message.find("'target'") != std::string::npos);
        CHECK(message.find("missing") != std::string::npos);
    }
    SUBCASE("wrong type") {
        std::string message = load("target: t\nsandbox:\n  required: maybe\n");
        CHECK(message.find(file + ":3:13") != std::string::npos);
        CHECK(message.find("'sandbox.required'") != std::string::npos);
        CHECK(message.find("expected true or false") != std::string::npos);
    }
    SUBCASE("unknown key") {
        std::string message = load("target: t\nbudgets:\n  wall_tme: 2h\n");
        CHECK(message.find(file + ":3:3") != std::string::npos);
        CHECK(message.find("unknown key 'budgets.wall_tme'") != std::string::npos);
    }
    SUBCASE("bad duration") {
        std::string message = load("target: t\nbudgets: {wall_time: soon}\n");
        CHECK(message.find("'budgets.wall_time'") != std::string::npos);
    }
    SUBCASE("an API key where its variable's name belongs") {
        std::string message = load("target: t\nllm: {api_key_env: sk-abc123}\n");
        CHECK(message.find("'llm.api_key_env'") != std::string::npos);
        CHECK(message.find("never the key") != std::string::npos);
    }
    SUBCASE("alpha out of range") {
        std::string message = load("target: t\nacceptance: {alpha: 2}\n");
        CHECK(message.find("'acceptance.alpha'") != std::string::npos);
    }
    SUBCASE("strict_after out of range") {
        std::string message = load("target: t\nacceptance: {strict_after: 1.5}\n");
        CHECK(message.find("'acceptance.strict_after'") != std::string::npos);
    }
    SUBCASE("a negative re-validation interval") {
        std::string message = load("target: t\nacceptance: {revalidate_every_accepts: -1}\n");
        CHECK(message.find("'acceptance.revalidate_every_accepts'") != std::string::npos);
    }
}

TEST_CASE("durations parse with units and reject garbage") {
    CHECK(config::parse_duration_secs("45s") == 45.0);
    CHECK(config::parse_duration_secs("2h") == 7200.0);
    CHECK(config::parse_duration_secs("1d2h") == 93600.0);
    CHECK_FALSE(config::parse_duration_secs("2"));
    CHECK_FALSE(config::parse_duration_secs("h"));
    CHECK_FALSE(config::parse_duration_secs("2x"));
}
