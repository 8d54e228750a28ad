#pragma once
// A campaign directory opened for the commands above the campaign loop: its config, target,
// kernels, store and sandboxed toolchain (with the compile cache bound writable), plus the
// knowledge-base build and the campaign run with budget overrides the CLI asks for.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "campaign/driver.hpp"
#include "llm/client.hpp"
#include "config/campaign_config.hpp"
#include "proc/executor.hpp"
#include "config/target_config.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"
#include "knowledge/refresh.hpp"
#include "proc/subprocess.hpp"
#include "store/campaign_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::campaign {

/// Everything a command needs from one campaign directory.
struct Workspace {
    std::filesystem::path dir;
    config::CampaignConfig campaign;
    config::TargetConfig target;
    config::KernelsConfig kernels;
    std::unique_ptr<store::CampaignStore> store;
    proc::SandboxPolicy sandbox;
    proc::Limits limits;
    std::filesystem::path cache_dir;  ///< the toolchain's compile cache (bound writable)
    std::unique_ptr<target::Toolchain> toolchain;
    /// Where the toolchain's calls run (campaign.yaml `executor:`); null: here.
    std::shared_ptr<proc::Executor> executor;

    /// The toolchain's version ("" with `why` filled when it cannot be read).
    std::string toolchain_version(std::string* why = nullptr) const;
    /// The fitted hardware model of the current toolchain version, when one was recorded.
    std::optional<knowledge::HardwareModel> hardware_model();
    /// eval::KernelContext-ready setups of the campaign's kernels (templates, min bytes).
    std::vector<campaign::KernelSetup> kernel_setups() const;
};

/// The executor campaign.yaml's `executor:` asks for (null: local), spooling under <dir>/spool.
std::shared_ptr<proc::Executor> make_executor(const config::ExecutorConfig& config, const std::filesystem::path& dir);

/// Open `dir` (campaign.yaml + campaign.db). Error(invalid_input) when it is not a campaign.
Workspace open_workspace(const std::filesystem::path& dir, const std::optional<std::filesystem::path>& knowledge_dir);

/// Expand `{campaign_dir}` and `${VAR}` in a cache-dir setting; empty → <campaign>/toolchain-cache.
std::filesystem::path resolve_cache_dir(const std::string& setting, const std::filesystem::path& campaign_dir);

/// How `build_knowledge` runs the microbenchmarks.
struct KbBuildOptions {
    bool quick = false;  ///< a subset of the suite (the probes the campaign's cost model needs most)
    bool force = true;   ///< rebuild even when the toolchain version did not change
    int parallel = 2;
    std::function<void(const std::string& line)> on_progress;  ///< one line per point, with an ETA
    std::function<void(const knowledge::MicrobenchPoint&)> on_point;  ///< every point measured (demo: launch times)
    /// With llm.enabled and `librarian` in llm.roles the docs are summarised by the LLM librarian
    /// (search/llm_librarian); these let tests replace its client's clock, sleeper and environment.
    llm::ClientDeps llm_deps = {};
};

/// Ingest docs, run the microbenchmarks, fit and record the hardware model, re-validate rules:
/// a knowledge::refresh with the microbenchmarks as its remeasure hook.
knowledge::RefreshReport build_knowledge(Workspace& workspace, const KbBuildOptions& options);

/// What `npuopt run` overrides of campaign.yaml.
struct RunOverrides {
    std::optional<double> budget_minutes;     ///< more wall time, from now
    std::optional<std::int64_t> device_runs;  ///< more device runs, from now
    std::optional<std::int64_t> max_steps;
    std::function<void(const campaign::Progress&)> progress;
    std::function<bool()> stop_requested;     ///< empty: SIGINT/SIGTERM (core/interrupt)
    std::function<double(double)> wall_reserve_secs;  ///< CampaignOptions::wall_reserve_secs (demo: the submission)
    std::function<void(const std::string&, const nlohmann::json&)> on_event;  ///< CampaignOptions::on_event
    llm::ClientDeps llm_deps;                 ///< the LLM client's clock, sleeper, environment (tests)
    bool only_queued = false;                 ///< evaluate only the designs users added (`npuopt add`)
    std::optional<config::ParallelConfig> parallel;  ///< instead of campaign.yaml's `parallel:` (benchmarks)
    std::optional<config::SearchConfig> search;      ///< instead of campaign.yaml's `search:` (benchmarks)
    RoleFactory roles;  ///< instead of the campaign's roles (benchmarks: `bench throughput`'s A/A copies)
};

/// Run or resume the campaign (the driver with the workspace's toolchain and cascade).
campaign::CampaignResult run_workspace(Workspace& workspace, const RunOverrides& overrides);

/// The cascade's settings as campaign.yaml (seed, acceptance) and target.yaml (run_check) give them.
eval::CascadeConfig cascade_config(const Workspace& workspace);

}  // namespace npuopt::campaign
