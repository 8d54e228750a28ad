#include "campaign/llm_setup.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "knowledge/retrieval.hpp"
#include "llm/prompt.hpp"
#include "store/knowledge_store.hpp"
#include "store/llm_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::campaign {

namespace {

constexpr std::size_t k_dsl_summary_chars = 6000;

/// The checked summaries of the current version's doc sections (the docs' own text where a
/// section has none), in doc order, cut at a size a prompt can hold.
std::string dsl_summary_text(store::KnowledgeStore& store, const std::string& target, const std::string& version) {
    std::string text;
    for (const auto& section : store.list_sections(target, version, false)) {
        auto summary = store.summary_of_section(section.id);
        const std::string body = summary && !summary->text.empty() ? summary->text : section.text.substr(0, 400);
        std::string entry = fmt::format("### {}\n{}\n", section.heading_path, body);
        if (text.size() + entry.size() > k_dsl_summary_chars) break;
        text += entry;
    }
    return text;
}

std::string hardware_facts_text(const std::optional<knowledge::HardwareModel>& model) {
    if (!model) return "";
    std::string text;
    for (const auto& param : model->params) {
        text += fmt::format("- {} = {:.4g} {}", param.name, param.value, param.unit);
        if (param.ci95_lower != param.ci95_upper) text += fmt::format(" (95% {:.4g}–{:.4g})", param.ci95_lower, param.ci95_upper);
        text += fmt::format(" [{}]\n", param.source);
    }
    for (const auto& finding : model->findings) text += "- " + finding + "\n";
    return text;
}

std::vector<std::filesystem::path> prompt_dirs(const Workspace& workspace) {
    return {workspace.target.dir / "prompts", workspace.target.dir.parent_path() / "prompts"};
}

}  // namespace

std::string kernel_spec_text(const config::KernelSpec& spec) {
    std::string text = fmt::format("{}: {}\nshape {} ({})\n", spec.name, spec.description, spec.shape_name,
                                   target::format_shape(spec.shape));
    for (const auto& tensor : spec.tensors) {
        text += fmt::format("- {} {} {} [{}]\n", tensor.role, tensor.name, tensor.dtype, fmt::join(tensor.shape, ", "));
    }
    text += fmt::format("tolerance: atol {} rtol {}\n", spec.atol, spec.rtol);
    return text;
}

std::optional<LlmRuntime> make_llm_runtime(Workspace& workspace, const std::optional<knowledge::HardwareModel>& model,
                                           const std::string& toolchain_version, llm::ClientDeps deps) {
    const config::LlmConfig& config = workspace.campaign.llm;
    if (!config.enabled) return std::nullopt;
    LlmRuntime runtime;
    store::LlmStore calls(workspace.store->database());
    runtime.spent_before = calls.total_tokens();
    runtime.budget = std::make_shared<llm::TokenBudget>(
        std::max<std::int64_t>(0, workspace.campaign.budgets.llm_tokens - runtime.spent_before));
    deps.budget = runtime.budget;
    if (deps.seed == 1) deps.seed = workspace.campaign.seed;
    runtime.client = std::make_shared<llm::Client>(config, std::move(deps));
    runtime.prompts = std::make_shared<const search::LlmPrompts>(search::load_llm_prompts(prompt_dirs(workspace)));
    runtime.strategy = search::parse_llm_strategy(config.strategy).value_or(search::LlmStrategy::multi_agent);
    store::KnowledgeStore knowledge(workspace.store->database());
    runtime.dsl_summary = dsl_summary_text(knowledge, workspace.target.name, toolchain_version);
    runtime.hardware_facts = hardware_facts_text(model);
    log::info("llm: {} at {} ({}; roles {}; {} of {} tokens left)", config.model, config.base_url, config.strategy,
              fmt::join(config.roles, ", "), runtime.budget->remaining_tokens(), workspace.campaign.budgets.llm_tokens);
    return runtime;
}

namespace {

/// What every LLM role of `kernel` shares: client, prompts, what the prompts may say of the
/// kernel and the chip, retrieval, the audit and events; nullopt for a kernel not in kernels.yaml.
std::optional<search::LlmRoleDeps> role_deps(Workspace* space, const std::shared_ptr<LlmRuntime>& runtime,
                                             const std::string& kernel) {
    const auto spec = std::find_if(space->kernels.kernels.begin(), space->kernels.kernels.end(),
                                   [&](const config::KernelSpec& candidate) { return candidate.name == kernel; });
    if (spec == space->kernels.kernels.end()) return std::nullopt;

    auto knowledge = std::make_shared<search::LlmKnowledge>();
    knowledge->target = space->target.name;
    knowledge->kernel = kernel;
    knowledge->shape_text = target::format_shape(spec->shape);
    knowledge->kernel_spec = kernel_spec_text(*spec);
    knowledge->dsl_summary = runtime->dsl_summary;
    knowledge->hardware_facts = runtime->hardware_facts;
    knowledge->source_extension = spec->baseline.has_extension() ? spec->baseline.extension().string() : ".rs";
    try {
        knowledge->reference_source = search::Template::baseline(*spec, space->target.name)->instantiate({}).source;
    } catch (const Error& error) {
        log::warn("llm: kernel {} has no baseline source for its prompts: {}", kernel, error.what());
    }
    store::Database* database = &space->store->database();
    const std::string target_name = space->target.name;
    knowledge->retrieve = [database, target_name](const std::string& query, std::int64_t budget) {
        store::KnowledgeStore store(*database);
        std::vector<search::ContextPassage> passages;
        for (const auto& hit : knowledge::retrieve_within(store, target_name, query, budget)) {
            passages.push_back({fmt::format("{}:{}", hit.kind, hit.id), hit.title, hit.body});
        }
        return passages;
    };

    search::LlmRoleDeps deps;
    deps.client = runtime->client;
    deps.prompts = runtime->prompts;
    deps.knowledge = knowledge;
    deps.audit = [database](const store::LlmCallRecord& call) {
        store::Transaction transaction = database->transaction();
        const std::int64_t id = store::LlmStore(*database).record_call(call);
        transaction.commit();
        return id;
    };
    store::CampaignStore* campaign_store = space->store.get();
    deps.event = [campaign_store](const std::string& kind, const std::string& json) {
        campaign_store->record_event(kind, json);
    };
    return deps;
}

search::LlmRoleOptions role_options(const config::LlmConfig& config, const LlmRuntime& runtime,
                                    std::function<std::int64_t()> step) {
    search::LlmRoleOptions options;
    options.strategy = runtime.strategy;
    options.n = config.n;
    options.repair_turns = config.repair_turns;
    options.context_tokens = config.context_tokens;
    options.step = std::move(step);
    return options;
}

}  // namespace

RoleFactory make_role_factory(Workspace& workspace, std::shared_ptr<LlmRuntime> runtime, std::function<std::int64_t()> step) {
    if (!runtime) return {};
    Workspace* space = &workspace;
    return [space, runtime, step](const std::string& kernel) {
        std::vector<std::unique_ptr<search::Role>> roles = search::make_heuristic_roles();
        const config::LlmConfig& config = space->campaign.llm;
        roles.erase(std::remove_if(roles.begin(), roles.end(),
                                   [&](const auto& role) {
                                       return std::find(config.heuristic_roles.begin(), config.heuristic_roles.end(),
                                                        role->name()) == config.heuristic_roles.end();
                                   }),
                    roles.end());
        const auto deps = role_deps(space, runtime, kernel);
        if (!deps) return roles;
        const search::LlmRoleOptions options = role_options(config, *runtime, step);
        for (const std::string& name : config.roles) {
            if (name == "porter") continue;  // acts in ports (make_porter_factory), not in the search
            if (config.replace_heuristic) {
                roles.erase(std::remove_if(roles.begin(), roles.end(),
                                           [&](const auto& role) { return role->name() == name; }),
                            roles.end());
            }
            if (name == "architect") roles.push_back(search::make_llm_architect(*deps, options));
            if (name == "tuner") roles.push_back(search::make_llm_tuner(*deps, options));
        }
        return roles;
    };
}

std::unique_ptr<search::LlmLibrarian> make_librarian(Workspace& workspace, const LlmRuntime& runtime) {
    store::Database* database = &workspace.store->database();
    search::LlmAudit audit = [database](const store::LlmCallRecord& call) {
        store::Transaction transaction = database->transaction();
        const std::int64_t id = store::LlmStore(*database).record_call(call);
        transaction.commit();
        return id;
    };
    return std::make_unique<search::LlmLibrarian>(runtime.client, search::load_librarian_prompts(prompt_dirs(workspace)),
                                                  workspace.target.name, std::move(audit));
}

PorterFactory make_porter_factory(Workspace& workspace, std::shared_ptr<LlmRuntime> runtime,
                                  std::function<std::int64_t()> step) {
    if (!runtime) return {};
    const auto& roles = workspace.campaign.llm.roles;
    if (std::find(roles.begin(), roles.end(), "porter") == roles.end()) return {};
    Workspace* space = &workspace;
    return [space, runtime, step](const std::string& kernel) -> std::unique_ptr<search::LlmPorter> {
        const auto deps = role_deps(space, runtime, kernel);
        if (!deps) return nullptr;
        return search::make_llm_porter(*deps, role_options(space->campaign.llm, *runtime, step));
    };
}

}  // namespace npuopt::campaign
