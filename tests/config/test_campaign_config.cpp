#include <doctest/doctest.h>

#include <thread>

#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "config_test_util.hpp"

using namespace npuopt;
using npuopt::test::error_message;
using npuopt::test::ScratchDir;

namespace {

/// The invalid_config message of loading `text` as the scratch folder's campaign.yaml.
std::string campaign_error(ScratchDir& scratch, const std::string& text) {
    const auto file = scratch.write("campaign.yaml", text);
    return error_message([&] { config::load_campaign_config(file); }, ErrorKind::invalid_config);
}

}  // namespace

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
    CHECK(campaign.acceptance.score_cap == doctest::Approx(defaults.acceptance.score_cap));
    CHECK(campaign.llm.api_key_env == "OPENAI_API_KEY");
    CHECK_FALSE(campaign.llm.enabled);
    CHECK(campaign.llm.base_url.empty());
    CHECK(campaign.llm.connect_timeout_secs == defaults.llm.connect_timeout_secs);
    CHECK(campaign.llm.request_timeout_secs == defaults.llm.request_timeout_secs);
    CHECK(campaign.llm.stall_timeout_secs == defaults.llm.stall_timeout_secs);
    CHECK(campaign.llm.concurrency == defaults.llm.concurrency);
    CHECK(campaign.llm.max_retries == defaults.llm.max_retries);
    CHECK(campaign.llm.retry_cap_secs == defaults.llm.retry_cap_secs);
    CHECK(campaign.llm.temperature == doctest::Approx(defaults.llm.temperature));
    CHECK(campaign.llm.n == defaults.llm.n);
    CHECK(campaign.llm.max_tokens == defaults.llm.max_tokens);
    CHECK(campaign.llm.response_format == defaults.llm.response_format);
    CHECK(campaign.llm.price_prompt_per_1k == defaults.llm.price_prompt_per_1k);
    CHECK(campaign.llm.price_completion_per_1k == defaults.llm.price_completion_per_1k);
    CHECK(campaign.llm.context_tokens == defaults.llm.context_tokens);
    CHECK(campaign.llm.repair_turns == defaults.llm.repair_turns);
    CHECK(campaign.parallel.builders == 1);
    CHECK(campaign.parallel.devices == 1);
    CHECK(campaign.search.schedule_screen == defaults.search.schedule_screen);
    CHECK(campaign.search.screen_share == defaults.search.screen_share);
    CHECK(campaign.executor.kind == "local");
    CHECK(campaign.executor.time_limit == defaults.executor.time_limit);
    CHECK(campaign.executor.retries == defaults.executor.retries);
    CHECK(campaign.executor.queue_timeout_secs == doctest::Approx(3600.0));
    CHECK(campaign.executor.array_size == 0);
    CHECK(campaign.executor.worker_idle_secs == doctest::Approx(120.0));
    CHECK(campaign.dir == scratch.path());
}

TEST_CASE("campaign.yaml: search.schedule_screen is read and a bad value names the key") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "campaign.yaml").string();
    scratch.write("campaign.yaml", "target: t\nsearch: {schedule_screen: 6}\n");
    CHECK(config::load_campaign_config(file).search.schedule_screen == 6);
    auto load = [&](const std::string& text) { return campaign_error(scratch, text); };
    CHECK(load("target: t\nsearch: {schedule_screen: -1}\n").find("'search.schedule_screen'") != std::string::npos);
    CHECK(load("target: t\nsearch: {schedule_screen: 200}\n").find("in [0, 64]") != std::string::npos);
    CHECK(load("target: t\nsearch: {schedule_screen: lots}\n").find("'search.schedule_screen'") != std::string::npos);
    CHECK(load("target: t\nsearch: {screen: 4}\n").find("screen") != std::string::npos);
}

TEST_CASE("campaign.yaml: search.screen_share is a share of the device time or unlimited") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "campaign.yaml").string();
    scratch.write("campaign.yaml", "target: t\n");
    const auto defaults = config::load_campaign_config(file).search;
    CHECK(defaults.schedule_screen == 64);  // the screen is on, capped by its share
    REQUIRE(defaults.screen_share.has_value());
    CHECK(*defaults.screen_share > 0.0);
    scratch.write("campaign.yaml", "target: t\nsearch: {screen_share: 0.25}\n");
    CHECK(config::load_campaign_config(file).search.screen_share == 0.25);
    scratch.write("campaign.yaml", "target: t\nsearch: {screen_share: unlimited}\n");
    CHECK_FALSE(config::load_campaign_config(file).search.screen_share.has_value());
    auto load = [&](const std::string& text) { return campaign_error(scratch, text); };
    CHECK(load("target: t\nsearch: {screen_share: -1}\n").find("'search.screen_share'") != std::string::npos);
    CHECK(load("target: t\nsearch: {screen_share: -1}\n").find("unlimited") != std::string::npos);
    CHECK(load("target: t\nsearch: {screen_share: lots}\n").find("'search.screen_share'") != std::string::npos);
}

TEST_CASE("campaign.yaml: parallel and executor are read and their errors name the key") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "campaign.yaml").string();
    scratch.write("campaign.yaml", "target: t\nparallel: {builders: 3, devices: 2}\nexecutor: {kind: slurm, partition: gpu, "
                                   "account: lab, time_limit: \"1-02:00:00\", retries: 0, queue_timeout: 30m, "
                                   "array_size: 8, worker_idle: 5m}\n");
    const auto campaign = config::load_campaign_config(file);
    CHECK(campaign.parallel.builders == 3);
    CHECK(campaign.parallel.devices == 2);
    CHECK(campaign.executor.kind == "slurm");
    CHECK(campaign.executor.partition == "gpu");
    CHECK(campaign.executor.account == "lab");
    CHECK(campaign.executor.time_limit == "1-02:00:00");
    CHECK(campaign.executor.retries == 0);
    CHECK(campaign.executor.queue_timeout_secs == doctest::Approx(1800.0));
    CHECK(campaign.executor.array_size == 8);
    CHECK(campaign.executor.worker_idle_secs == doctest::Approx(300.0));
    auto load = [&](const std::string& text) { return campaign_error(scratch, text); };
    CHECK(load("target: t\nparallel: {builders: 1, devices: 2}\n").find("'parallel.devices'") != std::string::npos);
    CHECK(load("target: t\nparallel: {builders: 0}\n").find("'parallel.builders'") != std::string::npos);
    CHECK(load("target: t\nparallel: {builders: many}\n").find("'parallel.builders'") != std::string::npos);
    scratch.write("campaign.yaml", "target: t\nparallel: {builders: auto}\n");
    CHECK(config::load_campaign_config(file).parallel.builders ==
          std::max<std::int64_t>(1, std::thread::hardware_concurrency()));
    CHECK(load("target: t\nexecutor: {kind: ray}\n").find("'executor.kind'") != std::string::npos);
    CHECK(load("target: t\nexecutor: {time_limit: soon}\n").find("'executor.time_limit'") != std::string::npos);
    CHECK(load("target: t\nexecutor: {retries: -1}\n").find("'executor.retries'") != std::string::npos);
    CHECK(load("target: t\nexecutor: {array: 4}\n").find("unknown key 'executor.array'") != std::string::npos);
    CHECK(load("target: t\nexecutor: {array_size: -2}\n").find("'executor.array_size'") != std::string::npos);
    CHECK(load("target: t\nexecutor: {worker_idle: later}\n").find("'executor.worker_idle'") != std::string::npos);
}

TEST_CASE("campaign.yaml: acceptance.score_cap is read (1 restores the plain signed-rank test)") {
    ScratchDir scratch;
    auto plain = config::load_campaign_config(scratch.write("campaign.yaml", "target: t\nacceptance: {score_cap: 1}\n"));
    CHECK(plain.acceptance.score_cap == 1.0);
    auto half = config::load_campaign_config(scratch.write("campaign.yaml", "target: t\nacceptance: {score_cap: 0.5}\n"));
    CHECK(half.acceptance.score_cap == 0.5);
    CHECK(config::AcceptanceConfig{}.score_cap == 1.0);
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
    auto load = [&](const std::string& text) { return campaign_error(scratch, text); };
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
    SUBCASE("score_cap out of range") {
        for (const char* value : {"0", "1.5", "-0.2"}) {
            std::string message = load(std::string("target: t\nacceptance: {score_cap: ") + value + "}\n");
            CHECK(message.find("'acceptance.score_cap'") != std::string::npos);
            CHECK(message.find("(0, 1]") != std::string::npos);
        }
    }
    SUBCASE("a negative re-validation interval") {
        std::string message = load("target: t\nacceptance: {revalidate_every_accepts: -1}\n");
        CHECK(message.find("'acceptance.revalidate_every_accepts'") != std::string::npos);
    }
}

TEST_CASE("campaign.yaml: every llm key is read") {
    ScratchDir scratch;
    auto file = scratch.write("campaign.yaml", R"(target: t
budgets: {llm_tokens: 200000}
llm:
  enabled: true
  base_url: http://127.0.0.1:8080/v1/
  model: qwen2.5-coder-7b
  api_key_env: LOCAL_LLM_KEY
  connect_timeout_secs: 2.5
  request_timeout_secs: 120
  stall_timeout_secs: 30
  concurrency: 3
  max_retries: 6
  retry_cap_secs: 20
  temperature: 0.2
  n: 8
  max_tokens: 2048
  response_format: json_schema
  price_prompt_per_1k: 0.15
  price_completion_per_1k: 0.6
  context_tokens: 16000
  repair_turns: 3
)");
    auto llm = config::load_campaign_config(file).llm;
    CHECK(llm.enabled);
    CHECK(llm.base_url == "http://127.0.0.1:8080/v1");
    CHECK(llm.model == "qwen2.5-coder-7b");
    CHECK(llm.api_key_env == "LOCAL_LLM_KEY");
    CHECK(llm.connect_timeout_secs == 2.5);
    CHECK(llm.request_timeout_secs == 120.0);
    CHECK(llm.stall_timeout_secs == 30.0);
    CHECK(llm.concurrency == 3);
    CHECK(llm.max_retries == 6);
    CHECK(llm.retry_cap_secs == 20.0);
    CHECK(llm.temperature == doctest::Approx(0.2));
    CHECK(llm.n == 8);
    CHECK(llm.max_tokens == 2048);
    CHECK(llm.response_format == config::LlmResponseFormat::json_schema);
    CHECK(llm.price_prompt_per_1k == doctest::Approx(0.15));
    CHECK(llm.price_completion_per_1k == doctest::Approx(0.6));
    CHECK(llm.context_tokens == 16000);
    CHECK(llm.repair_turns == 3);
}

TEST_CASE("campaign.yaml: llm.endpoint, the former name of llm.base_url, is still read") {
    ScratchDir scratch;
    auto file = scratch.write("campaign.yaml", "target: t\nllm: {endpoint: 'https://api.example.com/v1'}\n");
    CHECK(config::load_campaign_config(file).llm.base_url == "https://api.example.com/v1");
}

TEST_CASE("campaign.yaml: llm errors name file:line and the key") {
    ScratchDir scratch;
    std::string file = (scratch.path() / "campaign.yaml").string();
    auto load = [&](const std::string& text) { return campaign_error(scratch, text); };
    SUBCASE("enabled without a base URL") {
        std::string message = load("target: t\nbudgets: {llm_tokens: 1000}\nllm:\n  enabled: true\n  model: m\n");
        CHECK(message.find(file + ":4:") != std::string::npos);
        CHECK(message.find("'llm.base_url'") != std::string::npos);
        CHECK(message.find("no base URL") != std::string::npos);
    }
    SUBCASE("enabled without a model") {
        std::string message = load("target: t\nbudgets: {llm_tokens: 1000}\n"
                                   "llm:\n  enabled: true\n  base_url: http://127.0.0.1:1/v1\n");
        CHECK(message.find(file + ":4:") != std::string::npos);
        CHECK(message.find("'llm.model'") != std::string::npos);
        CHECK(message.find("no model") != std::string::npos);
    }
    SUBCASE("enabled with no token budget") {
        std::string message = load("target: t\nllm:\n  enabled: true\n  base_url: http://h/v1\n  model: m\n");
        CHECK(message.find(file + ":3:12") != std::string::npos);
        CHECK(message.find("'llm.enabled'") != std::string::npos);
        CHECK(message.find("budgets.llm_tokens") != std::string::npos);
    }
    SUBCASE("unknown key") {
        std::string message = load("target: t\nllm:\n  temprature: 0.1\n");
        CHECK(message.find(file + ":3:3") != std::string::npos);
        CHECK(message.find("unknown key 'llm.temprature'") != std::string::npos);
    }
    SUBCASE("not an http(s) URL") {
        std::string message = load("target: t\nllm:\n  base_url: ftp://h/v1\n");
        CHECK(message.find(file + ":3:13") != std::string::npos);
        CHECK(message.find("'llm.base_url'") != std::string::npos);
    }
    SUBCASE("the full path where the base URL belongs") {
        std::string message = load("target: t\nllm: {base_url: 'http://h/v1/chat/completions'}\n");
        CHECK(message.find("'llm.base_url'") != std::string::npos);
        CHECK(message.find("appends the path") != std::string::npos);
    }
    SUBCASE("both base_url and endpoint") {
        std::string message = load("target: t\nllm: {base_url: 'http://a/v1', endpoint: 'http://b/v1'}\n");
        CHECK(message.find("'llm.endpoint'") != std::string::npos);
    }
    SUBCASE("an unknown response format") {
        std::string message = load("target: t\nllm:\n  response_format: xml\n");
        CHECK(message.find(file + ":3:20") != std::string::npos);
        CHECK(message.find("'llm.response_format'") != std::string::npos);
    }
    SUBCASE("out-of-range numbers") {
        CHECK(load("target: t\nllm: {temperature: 3}\n").find("'llm.temperature'") != std::string::npos);
        CHECK(load("target: t\nllm: {concurrency: 0}\n").find("'llm.concurrency'") != std::string::npos);
        CHECK(load("target: t\nllm: {n: 0}\n").find("'llm.n'") != std::string::npos);
        CHECK(load("target: t\nllm: {max_retries: -1}\n").find("'llm.max_retries'") != std::string::npos);
        CHECK(load("target: t\nllm: {request_timeout_secs: 0}\n").find("'llm.request_timeout_secs'") !=
              std::string::npos);
        CHECK(load("target: t\nllm: {price_prompt_per_1k: -0.5}\n").find("'llm.price_prompt_per_1k'") !=
              std::string::npos);
        CHECK(load("target: t\nllm: {repair_turns: -2}\n").find("'llm.repair_turns'") != std::string::npos);
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

TEST_CASE("campaign.yaml: shape chooses a named shape for every kernel and an unknown one lists the known ones") {
    ScratchDir scratch;
    auto written = scratch.write("campaign.yaml", config::campaign_yaml_template("npu-sim", {"a"}, 1, "big", {"small", "big"}));
    auto campaign = config::load_campaign_config(written);
    CHECK(campaign.shape == "big");

    config::KernelsConfig kernels;
    kernels.file = scratch.path() / "kernels.yaml";
    config::KernelSpec kernel;
    kernel.name = "a";
    kernel.shapes = {{"small", {{"n", 8}}}, {"big", {{"n", 64}}}};
    kernel.shape_name = "small";
    kernel.shape = kernel.shapes[0].values;
    kernels.kernels.push_back(kernel);
    config::check_campaign_kernels(campaign, kernels);
    config::apply_campaign_shape(campaign, kernels);
    CHECK(kernels.kernels[0].shape_name == "big");
    CHECK(kernels.kernels[0].shape.at("n") == 64);

    auto file = scratch.write("campaign.yaml", "target: t\nshape: huge\n");
    auto unknown = config::load_campaign_config(file);
    std::string message = error_message([&] { config::check_campaign_kernels(unknown, kernels); },
                                        ErrorKind::invalid_config);
    CHECK(message.find(file.string() + ": key 'shape': unknown shape 'huge' for kernel a") != std::string::npos);
    CHECK(message.find("small, big") != std::string::npos);

    auto defaults = config::load_campaign_config(scratch.write("campaign.yaml", "target: t\n"));
    CHECK(defaults.shape.empty());
    config::apply_campaign_shape(defaults, kernels);  // no shape: nothing changes
    CHECK(kernels.kernels[0].shape_name == "big");
}
