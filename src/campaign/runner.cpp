#include "campaign/runner.hpp"

#include <fmt/format.h>

#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/cascade.hpp"
#include "eval/speed_of_light.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/rules.hpp"
#include "proc/subprocess.hpp"
#include "store/knowledge_store.hpp"

namespace npuopt::campaign {

CampaignResult run_campaign(const std::filesystem::path& campaign_dir, const RunOptions& options) {
    auto campaign_yaml = campaign_dir / std::string(config::k_campaign_file_name);
    if (!std::filesystem::is_regular_file(campaign_yaml)) {
        throw Error(ErrorKind::invalid_input, fmt::format("{} is not a campaign directory (no {}; create one with "
                                                          "`npuopt init`)",
                                                          campaign_dir.string(), config::k_campaign_file_name));
    }
    config::CampaignConfig campaign = config::load_campaign_config(campaign_yaml);
    auto knowledge_dir = config::locate_knowledge_dir(options.knowledge_dir);
    config::TargetConfig target = config::load_target(knowledge_dir, campaign.target);
    config::apply_campaign_overrides(campaign, target);
    config::KernelsConfig kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    config::check_campaign_kernels(campaign, kernels);

    auto store = store::CampaignStore::open(campaign_dir / std::string(config::k_campaign_db_name));

    proc::SandboxStatus sandbox_status = proc::probe_sandbox();
    proc::SandboxPolicy policy;
    policy.enabled = sandbox_status.available || campaign.sandbox.required;
    policy.required = campaign.sandbox.required;
    proc::Limits limits;
    limits.memory_bytes = static_cast<std::uint64_t>(campaign.sandbox.memory_mb) << 20;
    limits.cpu_secs = static_cast<std::uint64_t>(campaign.sandbox.cpu_secs);
    limits.file_bytes = static_cast<std::uint64_t>(campaign.sandbox.file_mb) << 20;
    limits.processes = static_cast<std::uint64_t>(campaign.sandbox.processes);
    target::Toolchain toolchain(target, policy, limits);

    target::VersionResult version = toolchain.version();
    std::string version_text = version.call.status == target::CallStatus::ok ? version.version : "";
    std::optional<knowledge::HardwareModel> model;
    if (!version_text.empty()) model = knowledge::load_hardware_model(store, target.name, version_text);

    store::KnowledgeStore knowledge_store(store.database());
    knowledge::RuleBook rules(knowledge_store, target.name, version_text);

    eval::CascadeConfig cascade_config;
    cascade_config.seed = campaign.seed;
    cascade_config.acceptance.alpha = campaign.acceptance.alpha;
    cascade_config.acceptance.min_effect = campaign.acceptance.min_effect;
    cascade_config.acceptance.max_pairs = static_cast<std::size_t>(campaign.acceptance.max_runs_per_race);
    eval::Cascade cascade(toolchain, store, &rules, model ? &*model : nullptr, cascade_config);
    CascadeEvaluator evaluator(cascade, toolchain);

    auto setups = prepare_kernels(kernels, campaign.kernels, target.templates_dir, target.name);
    for (auto& setup : setups) {
        try {
            setup.context.min_bytes_moved = eval::kernel_min_bytes(setup.spec, setup.spec.shape);
        } catch (const Error&) {
            setup.context.min_bytes_moved = 0.0;
        }
    }

    CampaignOptions driver_options;
    driver_options.dir = campaign_dir;
    driver_options.target = target.name;
    driver_options.seed = campaign.seed;
    driver_options.wall_budget_secs = campaign.budgets.wall_time_secs;
    driver_options.device_run_budget = campaign.budgets.device_runs;
    driver_options.llm_token_budget = campaign.budgets.llm_tokens;
    driver_options.max_steps = options.max_steps;
    driver_options.progress = options.progress;

    search::RuleCheck rule_check = [&rules](const std::map<std::string, double>& quantities) -> std::optional<std::string> {
        auto violations = rules.check_quantities(quantities);
        if (violations.empty()) return std::nullopt;
        return violations.front().text;
    };
    CampaignDriver driver(store, evaluator, std::move(setups), driver_options, model, rule_check);
    return driver.run();
}

}  // namespace npuopt::campaign
