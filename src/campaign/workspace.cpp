#include "campaign/workspace.hpp"

#include <cstdlib>
#include <regex>

#include <fmt/format.h>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/cascade.hpp"
#include "eval/speed_of_light.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/microbench.hpp"
#include "knowledge/rules.hpp"
#include "campaign/evaluator.hpp"
#include "store/knowledge_store.hpp"

namespace npuopt::campaign {

namespace fs = std::filesystem;

fs::path resolve_cache_dir(const std::string& setting, const fs::path& campaign_dir) {
    if (setting.empty()) return campaign_dir / "toolchain-cache";
    std::string text = setting;
    for (auto pos = text.find("{campaign_dir}"); pos != std::string::npos; pos = text.find("{campaign_dir}", pos)) {
        text.replace(pos, std::string_view("{campaign_dir}").size(), campaign_dir.string());
        pos += campaign_dir.string().size();
    }
    static const std::regex k_variable(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})");
    std::string expanded;
    auto begin = std::sregex_iterator(text.begin(), text.end(), k_variable);
    std::size_t last = 0;
    for (auto match = begin; match != std::sregex_iterator(); ++match) {
        expanded += text.substr(last, static_cast<std::size_t>(match->position()) - last);
        const char* value = std::getenv((*match)[1].str().c_str());
        if (value == nullptr) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("toolchain cache dir '{}': variable ${{{}}} is not defined", setting, (*match)[1].str()));
        }
        expanded += value;
        last = static_cast<std::size_t>(match->position() + match->length());
    }
    expanded += text.substr(last);
    fs::path path = expanded;
    return path.is_absolute() ? path : campaign_dir / path;
}

Workspace open_workspace(const fs::path& dir, const std::optional<fs::path>& knowledge_dir) {
    auto campaign_yaml = dir / std::string(config::k_campaign_file_name);
    auto campaign_db = dir / std::string(config::k_campaign_db_name);
    if (!fs::is_regular_file(campaign_yaml) || !fs::is_regular_file(campaign_db)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{} is not a campaign directory (no {} or {}; create one with `npuopt init`)",
                                dir.string(), config::k_campaign_file_name, config::k_campaign_db_name));
    }
    Workspace workspace;
    workspace.dir = fs::absolute(dir).lexically_normal();
    workspace.campaign = config::load_campaign_config(campaign_yaml);
    auto knowledge_root = config::locate_knowledge_dir(knowledge_dir);
    workspace.target = config::load_target(knowledge_root, workspace.campaign.target);
    config::apply_campaign_overrides(workspace.campaign, workspace.target);
    workspace.kernels = config::load_kernels_config(workspace.target.kernels_file, workspace.target.templates_dir);
    config::check_campaign_kernels(workspace.campaign, workspace.kernels);
    config::apply_campaign_shape(workspace.campaign, workspace.kernels);
    store::Database::Options open_options;
    open_options.create = false;
    workspace.store = std::make_unique<store::CampaignStore>(store::CampaignStore::open(campaign_db, open_options));

    proc::SandboxStatus sandbox_status = proc::probe_sandbox();
    workspace.sandbox.enabled = sandbox_status.available || workspace.campaign.sandbox.required;
    workspace.sandbox.required = workspace.campaign.sandbox.required;
    workspace.limits.memory_bytes = static_cast<std::uint64_t>(workspace.campaign.sandbox.memory_mb) << 20;
    workspace.limits.cpu_secs = static_cast<std::uint64_t>(workspace.campaign.sandbox.cpu_secs);
    workspace.limits.file_bytes = static_cast<std::uint64_t>(workspace.campaign.sandbox.file_mb) << 20;
    workspace.limits.processes = static_cast<std::uint64_t>(workspace.campaign.sandbox.processes);

    const char* cache_setting = std::getenv("NPUOPT_TOOLCHAIN_CACHE_DIR");
    workspace.cache_dir = resolve_cache_dir(cache_setting ? cache_setting : "", workspace.dir);
    workspace.toolchain = std::make_unique<target::Toolchain>(workspace.target, workspace.sandbox, workspace.limits);
    workspace.toolchain->set_cache_dir(workspace.cache_dir);
    return workspace;
}

std::string Workspace::toolchain_version(std::string* why) const {
    target::VersionResult version = toolchain->version();
    if (version.call.status != target::CallStatus::ok || version.version.empty()) {
        if (why) *why = version.call.message.empty() ? "the toolchain did not report a version" : version.call.message;
        return "";
    }
    return version.version;
}

std::optional<knowledge::HardwareModel> Workspace::hardware_model() {
    std::string version = toolchain_version();
    if (version.empty()) return std::nullopt;
    return knowledge::load_hardware_model(*store, target, version);
}

std::vector<campaign::KernelSetup> Workspace::kernel_setups() const {
    auto setups = campaign::prepare_kernels(kernels, campaign.kernels, target.templates_dir, target.name);
    for (auto& setup : setups) {
        try {
            setup.context.min_bytes_moved = eval::kernel_min_bytes(setup.spec, setup.spec.shape);
        } catch (const Error&) {
            setup.context.min_bytes_moved = 0.0;
        }
    }
    return setups;
}

knowledge::RefreshReport build_knowledge(Workspace& workspace, const KbBuildOptions& options) {
    auto kb = knowledge::KnowledgeBase::for_target(workspace.store->database(), workspace.target);
    knowledge::RefreshOptions refresh_options;
    refresh_options.force = options.force;
    refresh_options.scratch_dir = workspace.dir / "kb-scratch";
    refresh_options.remeasure = [&](const std::string& version) {
        auto suite_file = workspace.target.microbench_dir / "suite.yaml";
        if (!fs::is_regular_file(suite_file)) {
            if (options.on_progress) options.on_progress(fmt::format("no microbenchmark suite at {}", suite_file.string()));
            return;
        }
        auto suite = config::load_microbench_suite(suite_file);
        knowledge::MicrobenchOptions run_options;
        run_options.parallel = options.parallel;
        run_options.sandbox = workspace.sandbox;
        run_options.limits = workspace.limits;
        run_options.seed = workspace.campaign.seed;
        run_options.work_dir = workspace.dir / "microbench";
        if (options.quick) {  // the probes the suite marks quick (what the bound and the cost model need)
            for (const auto& probe : suite.probes) {
                if (probe.quick) run_options.only_probes.push_back(probe.name);
            }
        }
        if (options.on_progress) {
            run_options.on_point = [&](const knowledge::MicrobenchPoint& point) {
                options.on_progress(fmt::format("  probe {:<16} {:<9} {}", point.probe,
                                                knowledge::point_status_name(point.status),
                                                point.status == knowledge::PointStatus::ok
                                                    ? fmt::format("{:.0f} cycles", point.cycles_median)
                                                    : point.message.substr(0, 80)));
            };
        }
        // The suite's launches get the same compile cache as every other call.
        config::TargetConfig target = workspace.target;
        for (auto& [name, value] : target.toolchain.env) {
            for (auto pos = value.find("{cache_dir}"); pos != std::string::npos; pos = value.find("{cache_dir}", pos)) {
                value.replace(pos, std::string_view("{cache_dir}").size(), workspace.cache_dir.string());
                pos += workspace.cache_dir.string().size();
            }
        }
        fs::create_directories(workspace.cache_dir);
        run_options.sandbox.writable_paths.push_back(workspace.cache_dir);
        auto run = knowledge::run_microbench_suite(target, suite, run_options);
        auto model = knowledge::fit_hardware_model(run, target, suite);
        if (model.toolchain_version.empty()) model.toolchain_version = version;
        knowledge::record_hardware_model(*workspace.store, model, run);
        if (options.on_progress) {
            options.on_progress(fmt::format("hardware model: {} parameters fitted, {} missing", model.params.size(),
                                            model.missing.size()));
        }
    };
    return knowledge::refresh(kb, *workspace.toolchain, refresh_options);
}

eval::CascadeConfig cascade_config(const Workspace& workspace) {
    eval::CascadeConfig config;
    config.seed = workspace.campaign.seed;
    config.acceptance.alpha = workspace.campaign.acceptance.alpha;
    config.acceptance.min_effect = workspace.campaign.acceptance.min_effect;
    config.acceptance.max_pairs = static_cast<std::size_t>(workspace.campaign.acceptance.max_runs_per_race);
    config.check_fraction = workspace.target.run_check_fraction;
    return config;
}

campaign::CampaignResult run_workspace(Workspace& workspace, const RunOverrides& overrides) {
    std::string version = workspace.toolchain_version();
    std::optional<knowledge::HardwareModel> model;
    if (!version.empty()) model = knowledge::load_hardware_model(*workspace.store, workspace.target, version);

    store::KnowledgeStore knowledge_store(workspace.store->database());
    knowledge::RuleBook rules(knowledge_store, workspace.target.name, version);

    eval::Cascade cascade(*workspace.toolchain, *workspace.store, &rules, model ? &*model : nullptr,
                          cascade_config(workspace));
    store::CampaignStore* store = workspace.store.get();
    cascade.set_launch_hook([store] { store->count_device_launch(); });
    campaign::CascadeEvaluator evaluator(cascade, *workspace.toolchain);

    campaign::CampaignStatus before = campaign::campaign_status(*workspace.store);
    campaign::CampaignOptions driver_options;
    driver_options.dir = workspace.dir;
    driver_options.target = workspace.target.name;
    driver_options.seed = workspace.campaign.seed;
    driver_options.wall_budget_secs = workspace.campaign.budgets.wall_time_secs;
    driver_options.device_run_budget = workspace.campaign.budgets.device_runs;
    if (overrides.budget_minutes) driver_options.wall_budget_secs = before.wall_secs_used + *overrides.budget_minutes * 60.0;
    if (overrides.device_runs) driver_options.device_run_budget = before.device_runs_used + *overrides.device_runs;
    driver_options.llm_token_budget = workspace.campaign.budgets.llm_tokens;
    driver_options.revalidate_every_accepts = static_cast<int>(workspace.campaign.acceptance.revalidate_every_accepts);
    driver_options.strict_after = workspace.campaign.acceptance.strict_after;
    driver_options.max_steps = overrides.max_steps;
    driver_options.progress = overrides.progress;
    driver_options.stop_requested = overrides.stop_requested;

    search::RuleCheck rule_check = [&rules](const std::map<std::string, double>& quantities) -> std::optional<std::string> {
        auto violations = rules.check_quantities(quantities);
        if (violations.empty()) return std::nullopt;
        return violations.front().text;
    };
    campaign::CampaignDriver driver(*workspace.store, evaluator, workspace.kernel_setups(), driver_options, model,
                                    rule_check);
    return driver.run();
}

}  // namespace npuopt::campaign
