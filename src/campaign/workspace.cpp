#include "campaign/workspace.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <regex>

#include <fmt/format.h>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "eval/cascade.hpp"
#include "eval/speed_of_light.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/microbench.hpp"
#include "knowledge/rewrites.hpp"
#include "knowledge/rules.hpp"
#include "core/log.hpp"
#include "store/tree_store.hpp"
#include "campaign/evaluator.hpp"
#include "campaign/llm_setup.hpp"
#include "campaign/pipeline.hpp"
#include "proc/slurm.hpp"
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
    workspace.executor = make_executor(workspace.campaign.executor, workspace.dir);
    if (workspace.executor) workspace.toolchain->set_executor(workspace.executor);
    return workspace;
}

std::shared_ptr<proc::Executor> make_executor(const config::ExecutorConfig& config, const fs::path& dir) {
    if (config.kind != "slurm") return nullptr;
    proc::SlurmOptions options;
    options.spool = dir / "spool";
    options.partition = config.partition;
    options.account = config.account;
    options.time_limit = config.time_limit;
    options.retries = static_cast<int>(config.retries);
    options.queue_timeout_secs = config.queue_timeout_secs;
    options.array_size = static_cast<int>(config.array_size);
    options.worker_idle_secs = config.worker_idle_secs;
    if (const char* worker = std::getenv("NPUOPT_SLURM_WORKER")) options.worker = worker;
    return std::make_shared<proc::SlurmExecutor>(options);
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
        PhaseClock clock;
        std::string point_line;
        if (options.on_progress) {
            run_options.on_point = [&](const knowledge::MicrobenchPoint& point) {
                point_line = fmt::format("  probe {:<16} {:<9} {}", point.probe, knowledge::point_status_name(point.status),
                                         point.status == knowledge::PointStatus::ok
                                             ? fmt::format("{:.0f} cycles", point.cycles_median)
                                             : point.message.substr(0, 80));
            };
            run_options.on_count = [&](std::size_t done, std::size_t total) {
                options.on_progress(fmt::format("{:<60} [{}]", point_line, clock.text(done, total)));
            };
        }
        if (options.on_point) {
            auto print = run_options.on_point;
            run_options.on_point = [print, &options](const knowledge::MicrobenchPoint& point) {
                if (print) print(point);
                options.on_point(point);
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
    // The LLM librarian, where the campaign asks for one: it shares the campaign's token budget
    // and audit; the extractive librarian stands in for any section its calls fail on.
    std::unique_ptr<search::LlmLibrarian> librarian;
    const auto& roles = workspace.campaign.llm.roles;
    if (workspace.campaign.llm.enabled && std::find(roles.begin(), roles.end(), "librarian") != roles.end()) {
        const std::string version = workspace.toolchain_version();
        if (auto runtime = make_llm_runtime(workspace, std::nullopt, version, options.llm_deps)) {
            librarian = make_librarian(workspace, *runtime);
            refresh_options.summarizer = librarian.get();
        }
    }
    auto report = knowledge::refresh(kb, *workspace.toolchain, refresh_options);
    if (librarian && options.on_progress) {
        const auto& stats = librarian->stats();
        options.on_progress(fmt::format("librarian {}: {} sections, {} calls, {} tokens; {} claims written, {} "
                                        "unsupported by the checking call, {} sections fell back to the extractive summary",
                                        librarian->name(), stats.sections, stats.calls, stats.tokens, stats.claims_written,
                                        stats.claims_unsupported, stats.fallbacks));
    }
    return report;
}

eval::CascadeConfig cascade_config(const Workspace& workspace) {
    eval::CascadeConfig config;
    config.seed = workspace.campaign.seed;
    config.acceptance.alpha = workspace.campaign.acceptance.alpha;
    config.acceptance.min_effect = workspace.campaign.acceptance.min_effect;
    config.acceptance.max_pairs = static_cast<std::size_t>(workspace.campaign.acceptance.max_runs_per_race);
    config.acceptance.score_cap = workspace.campaign.acceptance.score_cap;
    config.check_fraction = workspace.target.run_check_fraction;
    config.clear_win_ratio = workspace.campaign.acceptance.clear_win_ratio;
    config.race_min_accept_probability = workspace.campaign.acceptance.race_min_chance;
    return config;
}

namespace {

/// The hardware parameters that moved between two fits (outside each other's 95% intervals and
/// by more than 5%), and the cost terms that read them: what the search re-opens.
nlohmann::json model_changes(const knowledge::HardwareModel& before, const knowledge::HardwareModel& after) {
    nlohmann::json moved = nlohmann::json::array();
    std::vector<std::string> names;
    for (const auto& param : after.params) {
        const knowledge::HardwareParam* old = before.param(param.name);
        if (!old || old->value == 0.0) continue;
        const double change = param.value / old->value - 1.0;
        const bool disjoint = param.ci95_lower > old->ci95_upper || param.ci95_upper < old->ci95_lower;
        if (std::abs(change) <= 0.05 || !(disjoint || param.ci95_lower == param.ci95_upper)) continue;
        moved.push_back({{"param", param.name}, {"before", old->value}, {"after", param.value}, {"change", change}});
        names.push_back(param.name);
    }
    nlohmann::json terms = nlohmann::json::array();
    if (after.cost_model) {
        auto mentions = [&](const std::string& text) {
            for (const auto& name : names) {
                const std::string needle = "hw." + name;
                for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
                    const std::size_t end = at + needle.size();
                    if (end >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) return true;
                }
            }
            return false;
        };
        for (const auto& term : after.cost_model->terms) {
            bool reads = mentions(term.expression.text);
            for (const auto& [name, let] : after.cost_model->let) {
                if (!reads && term.expression.text.find(name) != std::string::npos && mentions(let.text)) reads = true;
            }
            if (reads) terms.push_back({{"term", term.name}, {"lever", term.lever}, {"reduce", term.reduce}});
        }
    }
    return {{"moved", moved}, {"terms", terms}};
}

/// One run of the loop on the toolchain found now. The knowledge base is refreshed first when it
/// has no hardware model for this toolchain version (a toolchain update): the chip is measured
/// again, and the parameters and cost terms that moved are recorded for the search.
campaign::CampaignResult run_once(Workspace& workspace, const RunOverrides& overrides) {
    std::string version = workspace.toolchain_version();
    std::optional<knowledge::HardwareModel> model;
    if (!version.empty()) model = knowledge::load_hardware_model(*workspace.store, workspace.target, version);
    if (!version.empty() && !model) {
        store::TreeStore trees(workspace.store->database());
        const auto last_version = trees.state("toolchain_version");
        std::optional<knowledge::HardwareModel> before;
        if (last_version && !last_version->empty() && *last_version != version) {
            before = knowledge::load_hardware_model(*workspace.store, workspace.target, *last_version);
        }
        if (before) {  // a campaign that had a model on its old toolchain: measure the chip again
            log::info("toolchain {} has no hardware model yet (the campaign last ran on {}): refreshing the knowledge base",
                      version, *last_version);
            KbBuildOptions kb;
            kb.quick = true;
            kb.force = false;
            kb.on_progress = [](const std::string& line) { log::info("kb: {}", line); };
            build_knowledge(workspace, kb);
            model = knowledge::load_hardware_model(*workspace.store, workspace.target, version);
            if (model) {
                nlohmann::json changes = model_changes(*before, *model);
                changes["from"] = *last_version;
                changes["to"] = version;
                workspace.store->record_event("hardware_model_changed", changes.dump());
            }
        }
    }

    store::KnowledgeStore knowledge_store(workspace.store->database());
    knowledge::RuleBook rules(knowledge_store, workspace.target.name, version);
    const std::string toolchain_name = version.empty() ? std::string() : workspace.toolchain->version().name;
    knowledge::SourceRules source_rules(knowledge_store, workspace.target.name, version,
                                        toolchain_name.empty() ? workspace.target.toolchain.bin : toolchain_name);

    eval::Cascade cascade(*workspace.toolchain, *workspace.store, &rules, model ? &*model : nullptr,
                          cascade_config(workspace));
    if (!version.empty()) cascade.set_source_rules(&source_rules);
    store::CampaignStore* store = workspace.store.get();
    cascade.set_launch_hook([store] { store->count_device_launch(); });
    campaign::CascadeEvaluator evaluator(cascade, *workspace.toolchain);
    // The pipeline: one evaluator per builder, their launches through `devices` shared slots.
    const config::ParallelConfig parallel = overrides.parallel.value_or(workspace.campaign.parallel);
    const Pipeline pipeline = make_pipeline(parallel.builders, parallel.devices, *workspace.toolchain, *workspace.store,
                                            &rules, model ? &*model : nullptr, cascade_config(workspace),
                                            version.empty() ? nullptr : &source_rules);

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
    const config::SearchConfig& search = overrides.search ? *overrides.search : workspace.campaign.search;
    driver_options.schedule_screen = search.schedule_screen;
    driver_options.screen_share = search.screen_share;
    driver_options.progress = overrides.progress;
    driver_options.stop_requested = overrides.stop_requested;
    driver_options.wall_reserve_secs = overrides.wall_reserve_secs;
    driver_options.on_event = overrides.on_event;
    if (!version.empty()) driver_options.source_rules = &source_rules;

    search::RuleCheck rule_check = [&rules](const std::map<std::string, double>& quantities) -> std::optional<std::string> {
        auto violations = rules.check_quantities(quantities);
        if (violations.empty()) return std::nullopt;
        return violations.front().text;
    };
    std::shared_ptr<LlmRuntime> llm;
    if (auto runtime = make_llm_runtime(workspace, model, version, overrides.llm_deps)) {
        llm = std::make_shared<LlmRuntime>(std::move(*runtime));
        driver_options.llm_budget = llm->budget;
        driver_options.device_secs_per_1k_tokens = workspace.campaign.llm.device_secs_per_1k_tokens;
    }
    driver_options.only_queued = overrides.only_queued;
    driver_options.parallel_evaluators = pipeline.evaluators();
    store::TreeStore steps(workspace.store->database());
    auto step = [&steps]() -> std::int64_t {
        const auto text = steps.state("counters");
        if (!text) return 0;
        const nlohmann::json counters = nlohmann::json::parse(*text, nullptr, false);
        return (counters.is_object() ? counters.value("step", std::int64_t{0}) : 0) + 1;  // the step in flight
    };
    driver_options.porter_factory = make_porter_factory(workspace, llm, step);
    campaign::CampaignDriver driver(*workspace.store, evaluator, workspace.kernel_setups(), driver_options, model,
                                    rule_check, overrides.roles ? overrides.roles : make_role_factory(workspace, llm, step));
    return driver.run();
}

}  // namespace

campaign::CampaignResult run_workspace(Workspace& workspace, const RunOverrides& overrides) {
    // A toolchain that changes under the loop ends that run; the campaign goes on on the new
    // version (its knowledge refreshed, its champions ported), a few times at most.
    constexpr int k_max_toolchain_restarts = 3;
    const campaign::CampaignStatus at_start = campaign::campaign_status(*workspace.store);
    RunOverrides run_overrides = overrides;
    for (int restart = 0;; ++restart) {
        if (restart > 0) {  // the budgets asked for on the command line are this command's, not each run's
            const campaign::CampaignStatus now = campaign::campaign_status(*workspace.store);
            if (overrides.device_runs) {
                run_overrides.device_runs = std::max<std::int64_t>(
                    0, at_start.device_runs_used + *overrides.device_runs - now.device_runs_used);
            }
            if (overrides.budget_minutes) {
                run_overrides.budget_minutes =
                    std::max(0.0, *overrides.budget_minutes - (now.wall_secs_used - at_start.wall_secs_used) / 60.0);
            }
        }
        campaign::CampaignResult result = run_once(workspace, run_overrides);
        if (result.stop != campaign::StopReason::toolchain_changed || restart == k_max_toolchain_restarts) return result;
        log::warn("{}: the campaign resumes on the new toolchain", result.message);
        workspace.toolchain = std::make_unique<target::Toolchain>(workspace.target, workspace.sandbox, workspace.limits);
        workspace.toolchain->set_cache_dir(workspace.cache_dir);
        if (workspace.executor) workspace.toolchain->set_executor(workspace.executor);
    }
}

}  // namespace npuopt::campaign
