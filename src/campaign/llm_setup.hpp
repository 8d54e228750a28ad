#pragma once
// The LLM side of a campaign, composed from campaign.yaml's llm section: one client and one
// token budget shared by every kernel (what earlier runs spent is counted), the prompt templates
// (knowledge/<target>/prompts/ first, then knowledge/prompts/), what the prompts may say about
// the chip (checked doc summaries, the fitted hardware model, BM25 retrieval over the knowledge
// base) and the audit that writes every call to llm_calls in its own transaction. Nothing here
// when llm.enabled is false: every role keeps its deterministic policy.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "campaign/driver.hpp"
#include "campaign/workspace.hpp"
#include "knowledge/hardware_model.hpp"
#include "llm/client.hpp"
#include "search/llm_librarian.hpp"
#include "search/llm_roles.hpp"

namespace npuopt::campaign {

struct LlmRuntime {
    std::shared_ptr<llm::TokenBudget> budget;
    std::shared_ptr<llm::Client> client;
    std::shared_ptr<const search::LlmPrompts> prompts;
    search::LlmStrategy strategy = search::LlmStrategy::multi_agent;
    std::string dsl_summary;
    std::string hardware_facts;
    std::int64_t spent_before = 0;   ///< tokens earlier runs of the campaign used
};

/// The campaign's LLM runtime, or nullopt when llm.enabled is false. `deps` lets tests replace
/// the client's clock, sleeper and environment. Error(invalid_config) for missing prompt files.
std::optional<LlmRuntime> make_llm_runtime(Workspace& workspace, const std::optional<knowledge::HardwareModel>& model,
                                           const std::string& toolchain_version, llm::ClientDeps deps = {});

/// Roles per kernel: the heuristic ones and, with `runtime`, the LLM-backed ones of llm.roles
/// (joining them, or replacing those of the same name when llm.replace_heuristic).
/// `step` reads the campaign's step counter for the audit.
RoleFactory make_role_factory(Workspace& workspace, std::shared_ptr<LlmRuntime> runtime,
                              std::function<std::int64_t()> step);

using PorterFactory = std::function<std::unique_ptr<search::LlmPorter>(const std::string& kernel)>;

/// The LLM porter per kernel (CampaignOptions::porter_factory) when `runtime` exists and
/// llm.roles names the porter; empty otherwise (ports use the toolchain's fix-its alone).
PorterFactory make_porter_factory(Workspace& workspace, std::shared_ptr<LlmRuntime> runtime,
                                  std::function<std::int64_t()> step);

/// The LLM librarian of the campaign's docs (librarian.md, librarian_check.md), with the audit.
std::unique_ptr<search::LlmLibrarian> make_librarian(Workspace& workspace, const LlmRuntime& runtime);

/// The kernels.yaml entry of `spec` as prompt text.
std::string kernel_spec_text(const config::KernelSpec& spec);

}  // namespace npuopt::campaign
