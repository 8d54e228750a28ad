#pragma once
// Typed contents of a campaign's campaign.yaml (written by `npuopt init`), its parser and the
// commented template `npuopt init` writes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/target_config.hpp"

namespace npuopt::config {

/// How much a campaign may spend before it stops.
struct BudgetConfig {
    std::string wall_time_text = "2h";   ///< as written, e.g. "2h", "1h30m", "45m", "2d"
    double wall_time_secs = 7200.0;
    std::int64_t device_runs = 2000;     ///< toolchain `run` invocations
    std::int64_t llm_tokens = 0;         ///< 0: the LLM is never called
};

/// Sandbox policy and limits for every toolchain call.
struct SandboxConfig {
    bool required = true;                ///< refuse to run when bubblewrap is missing
    std::int64_t memory_mb = 8192;       ///< RLIMIT_AS per call
    std::int64_t cpu_secs = 600;         ///< RLIMIT_CPU per call
    std::int64_t file_mb = 1024;         ///< RLIMIT_FSIZE per call
    std::int64_t processes = 256;        ///< RLIMIT_NPROC per call
};

/// The judge's acceptance rule (see DESIGN.md "The statistics of acceptance").
struct AcceptanceConfig {
    double alpha = 0.05;                 ///< false-accept rate of the sequential test
    double min_effect = 0.01;            ///< minimum speedup to accept (0.01 = 1 %)
    std::int64_t max_runs_per_race = 16; ///< paired runs before a race gives up
    std::int64_t revalidate_every_accepts = 5;  ///< re-race the champion against its predecessor (0: only
                                                ///< after a toolchain change)
    double strict_after = 0.75;          ///< share of the budget after which the strict preset applies (1: never)
    double clear_win_ratio = 0.90;       ///< accept without a race when the slowest correctness launch is
                                         ///< under this share of the champion's median (0: always race)
    double race_min_chance = 0.3;        ///< race a candidate past the screen only when the race it can afford
                                         ///< would accept with this chance at its screened gain and the launch
                                         ///< noise measured so far (0: always race)
    double score_cap = 1.0;              ///< the race's signed-rank scores stop growing at this share of the
                                         ///< pairs' ranks, so outlier launches weigh no more than the pairs of
                                         ///< ordinary size (1, the default: the plain Wilcoxon signed-rank test)
};

/// How a reply is asked to carry its payload.
enum class LlmResponseFormat {
    fenced_code,  ///< free text; the payload is taken from a fenced code block (works with every server)
    json_schema,  ///< response_format {type: json_schema} is sent (servers that support structured output)
};

/// OpenAI-compatible chat-completions endpoint; the key is read from the variable named by api_key_env
/// at call time. The token budget is budgets.llm_tokens.
struct LlmConfig {
    bool enabled = false;
    std::string base_url;                ///< e.g. https://api.openai.com/v1 (/chat/completions is appended)
    std::string model;
    std::string api_key_env = "OPENAI_API_KEY";  ///< NAME of the environment variable, never the key
    double connect_timeout_secs = 10.0;
    double request_timeout_secs = 300.0; ///< whole request, reply included
    double stall_timeout_secs = 60.0;    ///< abort when (almost) no byte arrives for this long
    std::int64_t concurrency = 4;        ///< calls in flight at once, across all threads
    std::int64_t max_retries = 4;        ///< extra attempts after 408, 429, 5xx or a transport error
    double retry_cap_secs = 60.0;        ///< longest wait before a retry (Retry-After included)
    double temperature = 0.7;
    std::int64_t n = 1;                  ///< choices per call (best-of-n)
    std::int64_t max_tokens = 16384;     ///< completion tokens per choice (a whole kernel source is up to ~10k)
    LlmResponseFormat response_format = LlmResponseFormat::fenced_code;
    double price_prompt_per_1k = 0.0;    ///< cost per 1000 prompt tokens (any currency; 0: free)
    double price_completion_per_1k = 0.0;
    std::int64_t context_tokens = 8192;  ///< what a prompt may hold (retrieval fills it)
    std::int64_t repair_turns = 2;       ///< follow-up turns that feed diagnostics back
    /// What goes into a prompt: zero_shot | profiling_guided | iterative_refinement | multi_agent
    std::string strategy = "multi_agent";
    std::vector<std::string> roles = {"architect", "tuner", "porter"};  ///< the LLM-backed roles (the porter acts in ports only)
    bool replace_heuristic = false;      ///< true: they replace the heuristic ones of the same name; false: join them
    /// What 1000 tokens cost in the role scheduler's currency (device-seconds): the price a user
    /// puts on tokens against device time when roles are paid per device-second and per token.
    double device_secs_per_1k_tokens = 1.0;
    /// The heuristic roles that take part when the LLM is enabled ([] : the LLM-backed roles alone).
    std::vector<std::string> heuristic_roles = {"analyst", "architect", "tuner"};
};

/// The strategies llm.strategy accepts, and the LLM-backed roles llm.roles accepts.
const std::vector<std::string>& llm_strategy_names();
const std::vector<std::string>& llm_role_names();

/// "fenced_code" or "json_schema".
std::string_view llm_response_format_name(LlmResponseFormat format);

/// The evaluation pipeline (campaign.yaml `parallel:`): `builders` steps in flight at once (each
/// compiles and checks its own design), `devices` device slots their launches share (a step holds
/// one slot from its first launch to its end, so a race's pairs stay on one device). 1 and 1: the
/// serial loop.
struct ParallelConfig {
    std::int64_t builders = 1;
    std::int64_t devices = 1;
};

/// How the search spends what costs no device run (campaign.yaml `search:`).
struct SearchConfig {
    /// Template proposals per step that the toolchain's static schedule estimates before the
    /// device is used (a compile each, cached by design); the best combined estimate of the
    /// schedule (with its bias learnt per family) and the cost model is evaluated. 0: the cost
    /// model's order alone.
    std::int64_t schedule_screen = 64;
    /// The wall time the screen may always spend, as a share of the device time spent so far (the
    /// launches' wall time); beyond it the screen spends slack only: while the campaign, at what a
    /// device run has cost so far, would spend its device-run budget well inside its wall budget
    /// (CampaignDriver::Impl::screen_budget_open). A step screens only while it is open, and a
    /// window stops asking once it closes. nullopt (`unlimited`): no cap; 0: no screen.
    std::optional<double> screen_share = 1.0;
};

/// Where toolchain calls run (campaign.yaml `executor:`): here, or each one as a Slurm batch job
/// whose result comes back through the campaign's spool directory.
struct ExecutorConfig {
    std::string kind = "local";   ///< local | slurm
    std::string partition;        ///< sbatch --partition ("" : the cluster's default)
    std::string account;          ///< sbatch --account ("" : none)
    std::string time_limit = "10";///< sbatch --time per job (minutes, or [D-]HH:MM:SS)
    std::int64_t retries = 2;     ///< submissions after the first when a job ends without a result
    double queue_timeout_secs = 3600.0;  ///< a job pending longer is cancelled and its call fails
    /// > 0: one job array of this many workers takes the calls from a queue (a call pays a file's
    /// latency, not a job's); 0: each call its own job.
    std::int64_t array_size = 0;
    double worker_idle_secs = 120.0;     ///< a pool worker with no call for this long ends
};

/// campaign.yaml
struct CampaignConfig {
    std::filesystem::path file;          ///< the campaign.yaml read
    std::filesystem::path dir;           ///< the campaign directory (holds campaign.db, events.jsonl)
    std::string target;                  ///< a directory name under knowledge/
    std::vector<std::string> kernels;    ///< subset of kernels.yaml; empty = all
    std::string shape;                   ///< a shape name of kernels.yaml for every kernel; empty = each one's default
    std::uint64_t seed = 1;
    BudgetConfig budgets;
    SandboxConfig sandbox;
    std::optional<std::filesystem::path> toolchain_bin;  ///< overrides target.yaml's bin (resolved against dir)
    AcceptanceConfig acceptance;
    ParallelConfig parallel;
    SearchConfig search;
    ExecutorConfig executor;
    LlmConfig llm;
};

/// File names inside a campaign directory.
inline constexpr std::string_view k_campaign_file_name = "campaign.yaml";
inline constexpr std::string_view k_campaign_db_name = "campaign.db";

/// Parse and validate campaign.yaml; errors name file:line:column and the key.
CampaignConfig load_campaign_config(const std::filesystem::path& campaign_yaml);

/// Check the campaign's kernel subset and shape against kernels.yaml (error names campaign.yaml,
/// the unknown kernel or shape and the known ones).
void check_campaign_kernels(const CampaignConfig& campaign, const KernelsConfig& kernels);

/// Give the campaign's kernels the campaign's shape (nothing when `shape` is empty); an unknown
/// shape is Error(invalid_config) naming campaign.yaml and listing the known shapes.
void apply_campaign_shape(const CampaignConfig& campaign, KernelsConfig& kernels);

/// Parse a duration such as "45s", "30m", "2h", "1h30m", "2d" into seconds; nullopt when malformed.
std::optional<double> parse_duration_secs(std::string_view text);

/// The commented campaign.yaml `npuopt init` writes (defaults of CampaignConfig, all kernels).
/// `shape` is written as the campaign's shape ("" = the kernels' defaults); `shape_names` are
/// listed in the comment above it.
std::string campaign_yaml_template(const std::string& target, const std::vector<std::string>& kernel_names,
                                   std::uint64_t seed, const std::string& shape = "",
                                   const std::vector<std::string>& shape_names = {});

/// Apply a campaign's overrides to its target: toolchain bin (search paths are dropped then).
void apply_campaign_overrides(const CampaignConfig& campaign, TargetConfig& target);

}  // namespace npuopt::config
