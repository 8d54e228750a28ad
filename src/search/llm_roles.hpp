#pragma once
// LLM-backed roles: the architect writes a whole kernel, the tuner edits the champion (a unified
// diff or a whole file), each through the Role lifecycle, so that they replace or join the
// heuristic roles without the driver knowing. One call asks for n choices (best-of-n): every
// choice that parses becomes a proposal, and the cascade is the oracle that sorts them. A choice
// that fails the cascade gets bounded repair turns: its diagnostics go back as the next turn of
// the same conversation. Every call is handed to the audit (prompt, reply, hashes, tokens) before
// any of its designs is evaluated.
//
//   strategy             prompt holds                                           repair turns
//   zero_shot            spec, DSL summary, champion source                     no
//   profiling_guided     + measured profile and the roofline attribution        no
//   iterative_refinement zero-shot prompt                                       yes
//   multi_agent          analyst's diagnosis (an LLM call citing KB ids) →      yes
//                        retrieval within llm.context_tokens → architect/tuner
//
// Ambition matched to the model: an architect whose whole kernels are rarely correct (fewer
// than `demote_below` of its first `demote_after` designs) stops proposing, and the scheduler's
// turns go to the tuner's small edits; the event says so.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llm/client.hpp"
#include "llm/prompt.hpp"
#include "search/roles.hpp"
#include "store/llm_store.hpp"

namespace npuopt::search {

enum class LlmStrategy { zero_shot, profiling_guided, iterative_refinement, multi_agent };
std::string_view llm_strategy_name(LlmStrategy strategy);
std::optional<LlmStrategy> parse_llm_strategy(std::string_view name);
/// The four, in the order above.
const std::vector<LlmStrategy>& all_llm_strategies();

/// A knowledge-base entry given to a prompt; `id` ("rule:12") is what a diagnosis cites.
struct ContextPassage {
    std::string id;
    std::string title;
    std::string text;
};

/// What the composition root knows of the kernel and the chip, for prompts.
struct LlmKnowledge {
    std::string target;
    std::string kernel;
    std::string shape_text;
    std::string kernel_spec;      ///< the kernels.yaml entry: shape, inputs, outputs, semantics, tolerance
    std::string dsl_summary;      ///< the DSL in brief (checked summaries, else the docs' openings)
    std::string hardware_facts;   ///< fitted hardware model and microbenchmark results, one per line
    std::string reference_source; ///< a correct kernel (the baseline) for the architect to start from
    std::string source_language = "rust";  ///< fence tag of kernel sources
    std::string source_extension = ".rs";
    /// Knowledge-base entries for a query within a token budget (BM25); may be empty.
    std::function<std::vector<ContextPassage>(const std::string& query, std::int64_t token_budget)> retrieve;
};

/// The prompt templates (files under knowledge/prompts/, or a target's own).
struct LlmPrompts {
    llm::PromptTemplate architect;
    llm::PromptTemplate tuner;
    llm::PromptTemplate analyst;
    llm::PromptTemplate repair;
    llm::PromptTemplate porter = {};  ///< porter.md: a design the new toolchain rejects, ported
};

/// Records one call; returns its id (written in its own transaction by the caller).
using LlmAudit = std::function<std::int64_t(const store::LlmCallRecord&)>;
/// Tells the campaign something worth an event (e.g. "llm_role_demoted").
using LlmEvent = std::function<void(const std::string& kind, const std::string& json)>;

struct LlmRoleOptions {
    LlmStrategy strategy = LlmStrategy::multi_agent;
    std::int64_t n = 1;               ///< choices per call
    std::int64_t repair_turns = 2;    ///< per conversation (strategies with repair only)
    std::int64_t context_tokens = 8192;
    std::int64_t demote_after = 8;    ///< architect designs before its correct rate is judged
    double demote_below = 0.125;
    std::function<std::int64_t()> step;  ///< the campaign step, for the audit (default 0)
};

/// Counters of one LLM role (what `bench llm` and the report show).
struct LlmRoleStats {
    std::int64_t calls = 0;
    std::int64_t choices = 0;
    std::int64_t parsed = 0;      ///< choices that gave a source
    std::int64_t designs = 0;     ///< evaluated
    std::int64_t compiled = 0;    ///< passed the compile stage
    std::int64_t correct = 0;     ///< measured (passed correctness)
    std::int64_t accepted = 0;
    std::int64_t repairs = 0;     ///< repair calls
    std::int64_t tokens = 0;
    std::map<std::string, std::int64_t> failures;  ///< call/choice status → count (malformed, truncated, …)
};

/// An LLM role with its counters.
class LlmRole : public Role {
public:
    virtual const LlmRoleStats& stats() const = 0;
};

struct LlmRoleDeps {
    std::shared_ptr<llm::Client> client;
    std::shared_ptr<const LlmPrompts> prompts;
    std::shared_ptr<const LlmKnowledge> knowledge;
    LlmAudit audit;
    LlmEvent event;
};

std::unique_ptr<LlmRole> make_llm_architect(LlmRoleDeps deps, LlmRoleOptions options);
std::unique_ptr<LlmRole> make_llm_tuner(LlmRoleDeps deps, LlmRoleOptions options);

/// A design that the campaign's new toolchain rejects and that no fix-it mended.
struct PortRequest {
    std::string design_label;   ///< what it was (for the prompt and the reason)
    std::string source;         ///< its source as it fails now (rewrites already applied)
    std::string diagnostics;    ///< the failing step's final reason (the toolchain's diagnostics)
    std::string from;           ///< the toolchain version it was measured under
    std::string to;             ///< the version it must compile under
    std::string repair_of;      ///< content hash of an earlier port of this design that failed: a repair turn
};

/// The porter: after a toolchain update, asks the model to port a design with the diagnostics
/// and the new version's release notes (retrieved from the knowledge base). It is not scheduled
/// like the other roles: the campaign's port calls it where the toolchain's own fix-its end.
class LlmPorter {
public:
    virtual ~LlmPorter() = default;
    /// Proposals (role "llm-porter"; best-of-n) for `request`, none when the budget or the model
    /// gives none. A `repair_of` continues that port's conversation with the new diagnostics.
    virtual std::vector<Proposal> port(const PortRequest& request) = 0;
    /// What became of one of its proposals (counts it; a failed one may be repaired).
    virtual void notify(const StepFeedback& feedback) = 0;
    virtual const LlmRoleStats& stats() const = 0;
};
std::unique_ptr<LlmPorter> make_llm_porter(LlmRoleDeps deps, LlmRoleOptions options);

/// The prompt template `name` from the first of `dirs` that has it; Error(invalid_config) naming
/// every place looked in otherwise.
llm::PromptTemplate load_prompt(const std::vector<std::filesystem::path>& dirs, const std::string& name);

/// A call's audit record as far as the reply says (model, status, prompt and reply with their
/// hashes, tokens, cost, attempts); the caller adds role, purpose, kernel and what it gave.
store::LlmCallRecord call_record(const llm::Reply& reply, const std::vector<llm::Message>& messages,
                                 const std::string& configured_model);

/// Load architect.md, tuner.md, analyst.md, repair.md and porter.md from the first of `dirs` that
/// has each.
LlmPrompts load_llm_prompts(const std::vector<std::filesystem::path>& dirs);

}  // namespace npuopt::search
