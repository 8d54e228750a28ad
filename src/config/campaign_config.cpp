#include "config/campaign_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/target_loader.hpp"
#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {
namespace {

using detail::Fields;

std::int64_t positive_integer(const Fields& fields, std::string_view key, std::int64_t fallback) {
    std::int64_t value = fields.integer_or(key, fallback);
    if (value <= 0) fields.fail_at(key, fmt::format("expected a positive integer, got {}", value));
    return value;
}

double positive_number(const Fields& fields, std::string_view key, double fallback) {
    double value = fields.number_or(key, fallback);
    if (!(value > 0)) fields.fail_at(key, fmt::format("expected a number > 0, got {}", value));
    return value;
}

double non_negative_number(const Fields& fields, std::string_view key, double fallback) {
    double value = fields.number_or(key, fallback);
    if (!(value >= 0)) fields.fail_at(key, fmt::format("expected a number >= 0, got {}", value));
    return value;
}

std::int64_t non_negative_integer(const Fields& fields, std::string_view key, std::int64_t fallback) {
    std::int64_t value = fields.integer_or(key, fallback);
    if (value < 0) fields.fail_at(key, fmt::format("expected an integer >= 0, got {}", value));
    return value;
}

LlmConfig parse_llm(const Fields& top, const BudgetConfig& budgets) {
    Fields llm = top.map("llm", {"enabled", "base_url", "endpoint", "model", "api_key_env", "connect_timeout_secs",
                                 "request_timeout_secs", "stall_timeout_secs", "concurrency", "max_retries",
                                 "retry_cap_secs", "temperature", "n", "max_tokens", "response_format",
                                 "price_prompt_per_1k", "price_completion_per_1k", "context_tokens",
                                 "repair_turns", "strategy", "roles", "replace_heuristic", "heuristic_roles",
                                 "device_secs_per_1k_tokens"});
    LlmConfig config;
    config.enabled = llm.boolean_or("enabled", config.enabled);
    // `endpoint` is the name campaign.yaml files written before base_url used; both mean the same.
    if (llm.has("base_url") && llm.has("endpoint")) {
        llm.fail_at("endpoint", "is the former name of llm.base_url; give only one of them");
    }
    std::string url_key = llm.has("endpoint") ? "endpoint" : "base_url";
    config.base_url = llm.string_or(url_key, "");
    while (!config.base_url.empty() && config.base_url.back() == '/') config.base_url.pop_back();
    if (!config.base_url.empty()) {
        if (config.base_url.rfind("http://", 0) != 0 && config.base_url.rfind("https://", 0) != 0) {
            llm.fail_at(url_key, fmt::format("'{}' is not an http(s) URL (expected e.g. https://api.openai.com/v1)",
                                             config.base_url));
        }
        static constexpr std::string_view k_path_suffix = "/chat/completions";
        if (config.base_url.size() >= k_path_suffix.size() &&
            config.base_url.compare(config.base_url.size() - k_path_suffix.size(), k_path_suffix.size(),
                                    k_path_suffix) == 0) {
            llm.fail_at(url_key, fmt::format("'{}' ends in /chat/completions; give the base URL (e.g. "
                                             "http://127.0.0.1:8080/v1), the client appends the path",
                                             config.base_url));
        }
    }
    config.model = llm.string_or("model", "");
    config.api_key_env = llm.string_or("api_key_env", config.api_key_env);
    static const std::regex k_env_name_pattern("[A-Za-z_][A-Za-z0-9_]*");
    if (!std::regex_match(config.api_key_env, k_env_name_pattern)) {
        llm.fail_at("api_key_env", "expected the NAME of an environment variable holding the key "
                                   "(e.g. OPENAI_API_KEY), never the key itself");
    }
    config.connect_timeout_secs = positive_number(llm, "connect_timeout_secs", config.connect_timeout_secs);
    config.request_timeout_secs = positive_number(llm, "request_timeout_secs", config.request_timeout_secs);
    config.stall_timeout_secs = positive_number(llm, "stall_timeout_secs", config.stall_timeout_secs);
    config.concurrency = positive_integer(llm, "concurrency", config.concurrency);
    config.max_retries = non_negative_integer(llm, "max_retries", config.max_retries);
    config.retry_cap_secs = non_negative_number(llm, "retry_cap_secs", config.retry_cap_secs);
    config.temperature = llm.number_or("temperature", config.temperature);
    if (!(config.temperature >= 0 && config.temperature <= 2)) {
        llm.fail_at("temperature", fmt::format("expected a number in [0, 2], got {}", config.temperature));
    }
    config.n = positive_integer(llm, "n", config.n);
    config.max_tokens = positive_integer(llm, "max_tokens", config.max_tokens);
    if (llm.has("response_format")) {
        std::string format = llm.string("response_format");
        if (format == llm_response_format_name(LlmResponseFormat::fenced_code)) {
            config.response_format = LlmResponseFormat::fenced_code;
        } else if (format == llm_response_format_name(LlmResponseFormat::json_schema)) {
            config.response_format = LlmResponseFormat::json_schema;
        } else {
            llm.fail_at("response_format", fmt::format("'{}' is not a response format (expected fenced_code, or "
                                                       "json_schema where the server supports structured output)",
                                                       format));
        }
    }
    config.price_prompt_per_1k = non_negative_number(llm, "price_prompt_per_1k", config.price_prompt_per_1k);
    config.price_completion_per_1k =
        non_negative_number(llm, "price_completion_per_1k", config.price_completion_per_1k);
    config.context_tokens = positive_integer(llm, "context_tokens", config.context_tokens);
    config.repair_turns = non_negative_integer(llm, "repair_turns", config.repair_turns);
    config.strategy = llm.string_or("strategy", config.strategy);
    const auto& strategies = llm_strategy_names();
    if (std::find(strategies.begin(), strategies.end(), config.strategy) == strategies.end()) {
        llm.fail_at("strategy", fmt::format("'{}' is not a strategy (expected one of {})", config.strategy,
                                            fmt::join(strategies, ", ")));
    }
    config.roles = llm.string_list_or("roles", config.roles);
    for (const auto& role : config.roles) {
        const auto& known = llm_role_names();
        if (std::find(known.begin(), known.end(), role) == known.end()) {
            llm.fail_at("roles", fmt::format("'{}' is not an LLM-backed role (expected some of {})", role, fmt::join(known, ", ")));
        }
    }
    config.replace_heuristic = llm.boolean_or("replace_heuristic", config.replace_heuristic);
    config.heuristic_roles = llm.string_list_or("heuristic_roles", config.heuristic_roles);
    config.device_secs_per_1k_tokens = non_negative_number(llm, "device_secs_per_1k_tokens", config.device_secs_per_1k_tokens);
    for (const auto& role : config.heuristic_roles) {
        if (role != "analyst" && role != "architect" && role != "tuner") {
            llm.fail_at("heuristic_roles", fmt::format("'{}' is not a heuristic role (expected some of analyst, architect, tuner)", role));
        }
    }
    if (config.enabled) {
        if (config.base_url.empty()) {
            llm.fail_at(url_key, "llm.enabled is true but no base URL is given (expected e.g. "
                                 "https://api.openai.com/v1 or http://127.0.0.1:8080/v1)");
        }
        if (config.model.empty()) llm.fail_at("model", "llm.enabled is true but no model name is given");
        if (budgets.llm_tokens == 0) {
            llm.fail_at("enabled", "llm.enabled is true but budgets.llm_tokens is 0, so the LLM would never be "
                                   "called; give budgets.llm_tokens a token budget");
        }
    }
    return config;
}

AcceptanceConfig parse_acceptance(const Fields& top) {
    AcceptanceConfig config;
    Fields acceptance = top.map("acceptance", {"alpha", "min_effect", "max_runs_per_race",
                                                      "revalidate_every_accepts", "strict_after", "clear_win_ratio",
                                                      "race_min_chance", "score_cap"});
    config.alpha = acceptance.number_or("alpha", config.alpha);
    if (!(config.alpha > 0 && config.alpha < 0.5)) {
        acceptance.fail_at("alpha", "expected a probability between 0 and 0.5 (e.g. 0.05)");
    }
    config.min_effect = acceptance.number_or("min_effect", config.min_effect);
    if (!(config.min_effect >= 0 && config.min_effect < 1)) {
        acceptance.fail_at("min_effect", "expected a fraction in [0, 1) (0.01 = 1 % faster)");
    }
    config.max_runs_per_race =
        acceptance.integer_or("max_runs_per_race", config.max_runs_per_race);
    if (config.max_runs_per_race < 2) {
        acceptance.fail_at("max_runs_per_race", "expected an integer >= 2 (runs are paired)");
    }
    config.revalidate_every_accepts =
        acceptance.integer_or("revalidate_every_accepts", config.revalidate_every_accepts);
    if (config.revalidate_every_accepts < 0) {
        acceptance.fail_at("revalidate_every_accepts",
                           "expected an integer >= 0 (0: re-validate only after a toolchain change)");
    }
    config.clear_win_ratio = acceptance.number_or("clear_win_ratio", config.clear_win_ratio);
    if (!(config.clear_win_ratio >= 0 && config.clear_win_ratio < 1)) {
        acceptance.fail_at("clear_win_ratio", "expected a ratio in [0, 1) (0.9: every launch 10 % faster; 0: always race)");
    }
    config.race_min_chance = acceptance.number_or("race_min_chance", config.race_min_chance);
    if (!(config.race_min_chance >= 0 && config.race_min_chance < 1)) {
        acceptance.fail_at("race_min_chance", "expected a probability in [0, 1) (0.3: race when 3 races in 10 would accept; 0: always race)");
    }
    config.score_cap = acceptance.number_or("score_cap", config.score_cap);
    if (!(config.score_cap > 0 && config.score_cap <= 1)) {
        acceptance.fail_at("score_cap", "expected a share of the ranks in (0, 1] (1: the plain signed-rank test; 0.6: the top 40 % of |log-ratio| score alike)");
    }
    config.strict_after = acceptance.number_or("strict_after", config.strict_after);
    if (!(config.strict_after >= 0 && config.strict_after <= 1)) {
        acceptance.fail_at("strict_after", "expected a share of the budget in [0, 1] (1: never strict)");
    }
    return config;
}

ParallelConfig parse_parallel(const Fields& top) {
    ParallelConfig config;
    Fields parallel = top.map("parallel", {"builders", "devices"});
    if (parallel.has("builders") && parallel.string("builders") == "auto") {
        config.builders = std::max<std::int64_t>(1, std::thread::hardware_concurrency());  // this machine's cores
    } else {
        config.builders = positive_integer(parallel, "builders", config.builders);
    }
    config.devices = positive_integer(parallel, "devices", config.devices);
    if (config.devices > config.builders) {
        parallel.fail_at("devices", fmt::format("{} devices need at least as many builders (steps in flight; "
                                                "builders is {})",
                                                config.devices, config.builders));
    }
    return config;
}

ExecutorConfig parse_executor(const Fields& top) {
    ExecutorConfig config;
    Fields executor = top.map("executor", {"kind", "partition", "account", "time_limit", "retries", "queue_timeout",
                                           "array_size", "worker_idle"});
    config.kind = executor.string_or("kind", config.kind);
    if (config.kind != "local" && config.kind != "slurm") {
        executor.fail_at("kind", fmt::format("'{}' is not an executor (local or slurm)", config.kind));
    }
    config.partition = executor.string_or("partition", "");
    config.account = executor.string_or("account", "");
    config.time_limit = executor.string_or("time_limit", config.time_limit);
    if (!std::regex_match(config.time_limit, std::regex(R"(([0-9]+-)?[0-9]+(:[0-9]+){0,2})"))) {
        executor.fail_at("time_limit", fmt::format("'{}' is not a Slurm time limit (minutes, MM:SS, HH:MM:SS or "
                                                   "D-HH:MM:SS)",
                                                   config.time_limit));
    }
    config.retries = executor.integer_or("retries", config.retries);
    if (config.retries < 0) executor.fail_at("retries", "expected an integer >= 0");
    if (executor.has("queue_timeout")) {
        const std::string text = executor.string("queue_timeout");
        auto secs = parse_duration_secs(text);
        if (!secs || *secs <= 0) executor.fail_at("queue_timeout", fmt::format("'{}' is not a duration (e.g. 30m, 2h)", text));
        config.queue_timeout_secs = *secs;
    }
    config.array_size = executor.integer_or("array_size", config.array_size);
    if (config.array_size < 0 || config.array_size > 10000) {
        executor.fail_at("array_size", "expected an integer from 0 (a job per call) to 10000 (workers in the array)");
    }
    if (executor.has("worker_idle")) {
        const std::string text = executor.string("worker_idle");
        auto secs = parse_duration_secs(text);
        if (!secs || *secs <= 0) executor.fail_at("worker_idle", fmt::format("'{}' is not a duration (e.g. 2m)", text));
        config.worker_idle_secs = *secs;
    }
    return config;
}

}  // namespace

const std::vector<std::string>& llm_strategy_names() {
    static const std::vector<std::string> k_names = {"zero_shot", "profiling_guided", "iterative_refinement", "multi_agent"};
    return k_names;
}

const std::vector<std::string>& llm_role_names() {
    static const std::vector<std::string> k_names = {"architect", "tuner", "porter", "librarian"};
    return k_names;
}

std::string_view llm_response_format_name(LlmResponseFormat format) {
    switch (format) {
        case LlmResponseFormat::fenced_code: return "fenced_code";
        case LlmResponseFormat::json_schema: return "json_schema";
    }
    return "fenced_code";
}

std::optional<double> parse_duration_secs(std::string_view text) {
    if (text.empty()) return std::nullopt;
    double total_secs = 0.0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t digits_end = pos;
        while (digits_end < text.size() && std::isdigit(static_cast<unsigned char>(text[digits_end]))) ++digits_end;
        if (digits_end == pos || digits_end == text.size()) return std::nullopt;
        double amount = std::stod(std::string(text.substr(pos, digits_end - pos)));
        switch (text[digits_end]) {
            case 's': total_secs += amount; break;
            case 'm': total_secs += amount * 60; break;
            case 'h': total_secs += amount * 3600; break;
            case 'd': total_secs += amount * 86400; break;
            default: return std::nullopt;
        }
        pos = digits_end + 1;
    }
    return total_secs;
}

CampaignConfig load_campaign_config(const std::filesystem::path& campaign_yaml) {
    YAML::Node root = detail::load_yaml_file(campaign_yaml);
    Fields top(campaign_yaml, root, "",
               {"target", "kernels", "shape", "seed", "budgets", "sandbox", "toolchain", "acceptance", "parallel", "search", "executor",
                "llm"});
    CampaignConfig config;
    config.file = campaign_yaml;
    config.dir = std::filesystem::absolute(campaign_yaml).parent_path().lexically_normal();
    config.target = top.string("target");
    if (config.target.empty()) top.fail_at("target", "expected a target name (a folder under knowledge/)");
    config.kernels = top.string_list_or("kernels", {});
    for (std::size_t kernel_idx = 0; kernel_idx < config.kernels.size(); ++kernel_idx) {
        if (std::count(config.kernels.begin(), config.kernels.end(), config.kernels[kernel_idx]) > 1) {
            top.fail_at("kernels", fmt::format("kernel '{}' is listed twice", config.kernels[kernel_idx]));
        }
    }
    config.shape = top.string_or("shape", "");
    std::int64_t seed = top.integer_or("seed", 1);
    if (seed < 0) top.fail_at("seed", "expected an integer >= 0");
    config.seed = static_cast<std::uint64_t>(seed);

    if (top.has("budgets")) {
        Fields budgets = top.map("budgets", {"wall_time", "device_runs", "llm_tokens"});
        if (budgets.has("wall_time")) {
            config.budgets.wall_time_text = budgets.string("wall_time");
            auto secs = parse_duration_secs(config.budgets.wall_time_text);
            if (!secs || *secs <= 0) {
                budgets.fail_at("wall_time", fmt::format("'{}' is not a duration (expected e.g. 45m, 2h, 1h30m, 3d)",
                                                         config.budgets.wall_time_text));
            }
            config.budgets.wall_time_secs = *secs;
        }
        config.budgets.device_runs = positive_integer(budgets, "device_runs", config.budgets.device_runs);
        config.budgets.llm_tokens = budgets.integer_or("llm_tokens", config.budgets.llm_tokens);
        if (config.budgets.llm_tokens < 0) budgets.fail_at("llm_tokens", "expected an integer >= 0");
    }
    if (top.has("sandbox")) {
        Fields sandbox = top.map("sandbox", {"required", "memory_mb", "cpu_secs", "file_mb", "processes"});
        config.sandbox.required = sandbox.boolean_or("required", config.sandbox.required);
        config.sandbox.memory_mb = positive_integer(sandbox, "memory_mb", config.sandbox.memory_mb);
        config.sandbox.cpu_secs = positive_integer(sandbox, "cpu_secs", config.sandbox.cpu_secs);
        config.sandbox.file_mb = positive_integer(sandbox, "file_mb", config.sandbox.file_mb);
        config.sandbox.processes = positive_integer(sandbox, "processes", config.sandbox.processes);
    }
    if (top.has("toolchain")) {
        Fields toolchain = top.map("toolchain", {"bin"});
        std::string bin = toolchain.string_or("bin", "");
        if (!bin.empty()) {
            std::filesystem::path bin_path(bin);
            config.toolchain_bin = bin_path.is_absolute() ? bin_path : (config.dir / bin_path).lexically_normal();
        }
    }
    if (top.has("acceptance")) config.acceptance = parse_acceptance(top);
    if (top.has("parallel")) config.parallel = parse_parallel(top);
    if (top.has("search")) {
        Fields search = top.map("search", {"schedule_screen", "screen_share"});
        config.search.schedule_screen = search.integer_or("schedule_screen", config.search.schedule_screen);
        if (config.search.schedule_screen < 0 || config.search.schedule_screen > 64) {
            search.fail_at("schedule_screen", "expected candidates per step in [0, 64] (0: no static screen)");
        }
        if (search.has("screen_share")) {
            if (search.node()["screen_share"].IsScalar() && search.string("screen_share") == "unlimited") {
                config.search.screen_share.reset();
            } else {
                const double share = search.number("screen_share");
                if (!std::isfinite(share) || share < 0.0) {
                    search.fail_at("screen_share",
                                   "expected the screen's share of the device time, a number >= 0, or 'unlimited'");
                }
                config.search.screen_share = share;
            }
        }
    }
    if (top.has("executor")) config.executor = parse_executor(top);
    if (top.has("llm")) config.llm = parse_llm(top, config.budgets);
    return config;
}

void check_campaign_kernels(const CampaignConfig& campaign, const KernelsConfig& kernels) {
    std::vector<std::string> known;
    for (const auto& kernel : kernels.kernels) known.push_back(kernel.name);
    for (const auto& name : campaign.kernels) {
        if (std::find(known.begin(), known.end(), name) == known.end()) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key 'kernels': unknown kernel '{}' (kernels of {} in {}: {})",
                                    campaign.file.string(), name, campaign.target, kernels.file.string(),
                                    fmt::join(known, ", ")));
        }
    }
    KernelsConfig shaped = kernels;
    apply_campaign_shape(campaign, shaped);
}

void apply_campaign_shape(const CampaignConfig& campaign, KernelsConfig& kernels) {
    if (campaign.shape.empty()) return;
    select_shape(kernels, campaign.shape, campaign.kernels, fmt::format("{}: key 'shape'", campaign.file.string()));
}

void apply_campaign_overrides(const CampaignConfig& campaign, TargetConfig& target) {
    if (campaign.toolchain_bin) {
        target.toolchain.bin = campaign.toolchain_bin->string();
        target.toolchain.search_paths.clear();
    }
}

std::string campaign_yaml_template(const std::string& target, const std::vector<std::string>& kernel_names,
                                   std::uint64_t seed, const std::string& shape,
                                   const std::vector<std::string>& shape_names) {
    CampaignConfig defaults;
    return fmt::format(
        R"(# npuopt campaign — written by `npuopt init`. Check it with `npuopt doctor --campaign <dir>`.
# Unknown keys are errors; every key below except `target` may be left out (the value shown is the default).

# The target: a folder under knowledge/ holding target.yaml, kernels.yaml and the vendor docs.
target: {target}

# Kernels to optimise (names from kernels.yaml); an empty list means all of them:
#   {kernels}
kernels: []

# The shape every kernel is specialised to: a shape name of kernels.yaml, "" for each kernel's
# default (its first shape). Shapes of this target: {shapes}
shape: "{shape}"

# Seed of every random choice the campaign makes; the same seed replays the same campaign.
seed: {seed}

# What the campaign may spend before it stops.
budgets:
  wall_time: {wall_time}        # duration: 45m, 2h, 1h30m, 3d
  device_runs: {device_runs}      # toolchain `run` invocations (scarce, noisy hardware time)
  llm_tokens: {llm_tokens}          # 0: the LLM is never called

# Every toolchain call (compiling and running generated code) runs in a bubblewrap sandbox.
sandbox:
  required: {required}      # true: refuse to run when bubblewrap is missing; false: warn and run unsandboxed
  memory_mb: {memory_mb}       # address-space limit per call
  cpu_secs: {cpu_secs}         # CPU-time limit per call
  file_mb: {file_mb}         # largest file a call may write
  processes: {processes}        # process limit per call

# Toolchain override: a path to the executable, used instead of target.yaml's bin and search paths.
toolchain:
  bin: ""               # e.g. /opt/npu-sim/1.1/bin/npuc (relative paths are relative to this folder)

# When a candidate replaces the champion (sequential test on paired, interleaved log-ratios).
acceptance:
  alpha: {alpha}           # false-accept rate
  min_effect: {min_effect}      # minimum speedup worth accepting (0.01 = 1 %)
  max_runs_per_race: {max_runs}  # paired runs before a race gives up
  revalidate_every_accepts: {revalidate}  # re-race the champion against its predecessor every N accepts (0: only after a toolchain change)
  strict_after: {strict_after}    # share of the budget spent after which acceptance gets stricter (1: never)
  clear_win_ratio: {clear_win}   # accept without a race when every correctness launch is under this x the champion's median and x the fastest of two fresh champion launches (0: always race)
  score_cap: {score_cap}   # the race's signed-rank scores stop growing at this share of the ranks, so a slow outlier launch weighs no more than an ordinary pair (1: the plain signed-rank test; below 1 helps races of 9+ pairs on devices with many outliers)
  race_min_chance: {race_min_chance}   # race a screened candidate only when the race the budget affords would accept with this chance, at its screened gain and the launch noise measured so far (0: always race)

# The evaluation pipeline: several steps in flight at once, committed in the order planned (a
# fixed seed gives the same tree whatever order results arrive in). builders: steps in flight
# (each compiles and checks its own design; several of one kernel when builders outnumber
# kernels); devices: device slots
# their launches share (a race keeps its pairs on one device). 1 and 1: one step at a time.
# builders: auto takes this machine's core count (the tree for a seed then depends on the machine).
parallel:
  builders: 1
  devices: 1

# What the search may spend besides device runs. schedule_screen: template proposals per step
# that the toolchain's static schedule estimates first (a compile each, no device run; cached per
# design); the schedule's bias is learnt per family from the designs then measured, and it is
# weighed against the cost model by how well each predicted them. Above 4, every one-parameter
# move of the champion is among them (the schedule sees effects the model's quantities do not).
# 0: the cost model's order. screen_share: the wall time the screen may always spend, as a share
# of the device runs' wall time so far; beyond it, only while the campaign would still spend its
# device-run budget well inside its wall budget (slow, scarce device runs or a device-run budget
# that binds: every step; a campaign the wall budget ends: its share). unlimited: no cap (the
# tree for a seed then no longer depends on the machine's speed); 0: no screen.
search:
  schedule_screen: {schedule_screen}
  screen_share: {screen_share}

# Where toolchain calls run: local (here), or slurm (each call a batch job through sbatch, its
# result back through <campaign>/spool on a file system the nodes share; a job that ends without a
# result is submitted again, up to retries times). `npuopt status` lists the jobs in flight.
executor:
  kind: local
  partition: ""         # sbatch --partition ("" : the cluster's default)
  account: ""           # sbatch --account
  time_limit: "10"      # sbatch --time per job
  retries: 2
  queue_timeout: 1h     # a job pending longer is cancelled and its call fails
  array_size: 0         # > 0: a job array of this many workers takes the calls (no job per call)
  worker_idle: 2m       # a worker of the array with no call for this long ends

# Optional LLM (OpenAI-compatible chat-completions API: OpenAI, llama.cpp's server, vLLM, Ollama).
# Without it every role uses its deterministic policy. Enabling it needs base_url, model and
# budgets.llm_tokens > 0.
llm:
  enabled: false
  base_url: ""          # e.g. https://api.openai.com/v1, http://127.0.0.1:8080/v1 (/chat/completions is appended)
  model: ""             # e.g. gpt-4o-mini
  api_key_env: {api_key_env}  # the NAME of the environment variable holding the key; never the key itself
  connect_timeout_secs: {connect_timeout}
  request_timeout_secs: {request_timeout}  # the whole call, reply included
  stall_timeout_secs: {stall_timeout}     # give up when no data arrives for this long
  concurrency: {concurrency}            # calls in flight at once
  max_retries: {max_retries}            # after 408, 429, 5xx and transport errors (Retry-After is honoured)
  retry_cap_secs: {retry_cap}         # longest wait before a retry
  temperature: {temperature}
  n: {n}                      # choices per call (best-of-n; the cascade picks)
  max_tokens: {max_tokens}            # completion tokens per choice
  response_format: {response_format}  # fenced_code (any server) or json_schema (servers with structured output)
  price_prompt_per_1k: {price_prompt}     # cost per 1000 prompt tokens (0: free, e.g. a local server)
  price_completion_per_1k: {price_completion}
  context_tokens: {context_tokens}        # what one prompt may hold
  repair_turns: {repair_turns}           # follow-up turns that feed diagnostics back
  strategy: multi_agent     # zero_shot | profiling_guided | iterative_refinement | multi_agent (see `npuopt bench llm`)
  roles: [architect, tuner, porter] # LLM-backed roles: architect writes whole kernels, tuner edits the champion, porter ports designs a toolchain update broke; add librarian for LLM doc summaries
  replace_heuristic: false  # false: they join the heuristic roles and the scheduler decides; true: replace them
  heuristic_roles: [analyst, architect, tuner]  # the deterministic roles that take part beside them ([]: none)
  device_secs_per_1k_tokens: 1.0  # the scheduler pays roles per device-second and per token at this price
)",
        fmt::arg("target", target),
        fmt::arg("kernels", kernel_names.empty() ? std::string("(none found)") : fmt::format("{}", fmt::join(kernel_names, ", "))),
        fmt::arg("shape", shape),
        fmt::arg("shapes", shape_names.empty() ? std::string("(none named)") : fmt::format("{}", fmt::join(shape_names, ", "))),
        fmt::arg("seed", seed), fmt::arg("wall_time", defaults.budgets.wall_time_text),
        fmt::arg("device_runs", defaults.budgets.device_runs), fmt::arg("llm_tokens", defaults.budgets.llm_tokens),
        fmt::arg("required", defaults.sandbox.required ? "true" : "false"),
        fmt::arg("memory_mb", defaults.sandbox.memory_mb), fmt::arg("cpu_secs", defaults.sandbox.cpu_secs),
        fmt::arg("file_mb", defaults.sandbox.file_mb), fmt::arg("processes", defaults.sandbox.processes),
        fmt::arg("alpha", defaults.acceptance.alpha), fmt::arg("min_effect", defaults.acceptance.min_effect),
        fmt::arg("max_runs", defaults.acceptance.max_runs_per_race),
        fmt::arg("revalidate", defaults.acceptance.revalidate_every_accepts),
        fmt::arg("strict_after", defaults.acceptance.strict_after), fmt::arg("clear_win", defaults.acceptance.clear_win_ratio),
        fmt::arg("race_min_chance", defaults.acceptance.race_min_chance),
        fmt::arg("score_cap", defaults.acceptance.score_cap),
        fmt::arg("api_key_env", defaults.llm.api_key_env),
        fmt::arg("connect_timeout", defaults.llm.connect_timeout_secs),
        fmt::arg("request_timeout", defaults.llm.request_timeout_secs),
        fmt::arg("stall_timeout", defaults.llm.stall_timeout_secs), fmt::arg("concurrency", defaults.llm.concurrency),
        fmt::arg("max_retries", defaults.llm.max_retries), fmt::arg("retry_cap", defaults.llm.retry_cap_secs),
        fmt::arg("temperature", defaults.llm.temperature), fmt::arg("n", defaults.llm.n),
        fmt::arg("max_tokens", defaults.llm.max_tokens), fmt::arg("schedule_screen", defaults.search.schedule_screen),
        fmt::arg("screen_share", defaults.search.screen_share ? fmt::format("{}", *defaults.search.screen_share) : std::string("unlimited")),
        fmt::arg("response_format", llm_response_format_name(defaults.llm.response_format)),
        fmt::arg("price_prompt", defaults.llm.price_prompt_per_1k),
        fmt::arg("price_completion", defaults.llm.price_completion_per_1k),
        fmt::arg("context_tokens", defaults.llm.context_tokens), fmt::arg("repair_turns", defaults.llm.repair_turns));
}

}  // namespace npuopt::config
