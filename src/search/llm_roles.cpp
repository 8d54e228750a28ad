#include "search/llm_roles.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "llm/extract.hpp"
#include "search/source_edit.hpp"

namespace npuopt::search {

namespace {

constexpr std::size_t k_recent_failures = 4;
constexpr std::size_t k_failure_chars = 600;
constexpr std::int64_t k_empty_calls_before_pause = 4;

bool uses_profile(LlmStrategy strategy) {
    return strategy == LlmStrategy::profiling_guided || strategy == LlmStrategy::multi_agent;
}
bool uses_repair(LlmStrategy strategy) {
    return strategy == LlmStrategy::iterative_refinement || strategy == LlmStrategy::multi_agent;
}

std::string clip(const std::string& text, std::size_t chars) {
    if (text.size() <= chars) return text;
    return text.substr(0, chars) + " …";
}

/// The reply's prose outside code fences, first line, for the tree's reason.
std::string prose_of(const std::string& content) {
    std::string prose;
    bool in_fence = false;
    std::size_t start = 0;
    while (start <= content.size()) {
        const auto end = content.find('\n', start);
        std::string line = content.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (line.rfind("```", 0) == 0 || line.rfind("~~~", 0) == 0) {
            in_fence = !in_fence;
        } else if (!in_fence && line.find_first_not_of(" \t\r") != std::string::npos && prose.empty()) {
            prose = line;
        }
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return clip(prose, 160);
}

nlohmann::json messages_json(const std::vector<llm::Message>& messages) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& message : messages) out.push_back({{"role", message.role}, {"content", message.content}});
    return out;
}

/// What went into one conversation, to continue it with diagnostics.
struct Conversation {
    std::vector<llm::Message> messages;
    std::string reply;
    std::int64_t turn = 0;
};

struct RepairItem {
    std::string hash;
    std::string stage;
    std::string reason;
};

class LlmRoleImpl final : public LlmRole, public LlmPorter {
public:
    LlmRoleImpl(std::string kind, LlmRoleDeps deps, LlmRoleOptions options)
        : m_kind(std::move(kind)), m_name("llm-" + m_kind), m_deps(std::move(deps)), m_options(std::move(options)) {
        if (!m_deps.client || !m_deps.prompts || !m_deps.knowledge) {
            throw Error(ErrorKind::internal, fmt::format("{}: an LLM role needs a client, prompts and knowledge", m_name));
        }
    }

    std::string name() const override { return m_name; }
    const LlmRoleStats& stats() const override { return m_stats; }
    bool may_propose_more() const override { return !m_paused && !m_budget_short && !budget_spent(); }

    std::vector<Proposal> propose(const SearchContext& context) override {
        while (!m_pending.empty()) {
            Proposal next = std::move(m_pending.front());
            m_pending.pop_front();
            if (!known(context, next.design.content_hash)) return {std::move(next)};
        }
        while (!m_repairs.empty()) {
            RepairItem item = std::move(m_repairs.front());
            m_repairs.pop_front();
            if (auto first = take_first(context, repair(context, item))) return {std::move(*first)};
        }
        if (m_paused || budget_spent() || m_budget_short || m_kind == "porter") return {};
        if (m_kind == "tuner" && (!context.champion || context.champion->source.empty())) return {};
        auto first = take_first(context, ask(context));
        if (!first && m_budget_short) return {};
        if (!first) {
            if (++m_empty_calls >= k_empty_calls_before_pause) {
                pause(fmt::format("{} calls in a row gave no usable design", m_empty_calls));
            }
            return {};
        }
        m_empty_calls = 0;
        return {std::move(*first)};
    }

    void notify(const StepFeedback& feedback) override {
        const Proposal& proposal = feedback.proposal;
        const bool failed = !feedback.measured() && (feedback.verdict == eval::StepVerdict::failed ||
                                                     feedback.verdict == eval::StepVerdict::error);
        if (failed) {
            m_failures.push_back(fmt::format("{} ({}): {} at {}: {}", proposal.design.label(), proposal.role,
                                             eval::step_verdict_name(feedback.verdict),
                                             feedback.last_stage.empty() ? "?" : feedback.last_stage,
                                             clip(feedback.final_reason, k_failure_chars)));
            if (m_failures.size() > k_recent_failures) m_failures.pop_front();
        }
        if (proposal.role != m_name || !proposal.llm) return;
        m_stats.designs += 1;
        const bool stopped_early = failed && (feedback.last_stage == "rules" || feedback.last_stage == "estimate" ||
                                              feedback.last_stage == "compile" || feedback.last_stage.empty());
        if (!stopped_early) m_stats.compiled += 1;
        if (feedback.measured() || feedback.became_champion) m_stats.correct += 1;
        if (feedback.became_champion) m_stats.accepted += 1;
        auto conversation = m_conversations.find(proposal.design.content_hash);
        if (failed && uses_repair(m_options.strategy) && conversation != m_conversations.end() &&
            conversation->second.turn < m_options.repair_turns) {
            m_repairs.push_back({proposal.design.content_hash, feedback.last_stage, feedback.final_reason});
        }
        judge_ambition();
    }

private:
    bool known(const SearchContext& context, const std::string& hash) const {
        return context.is_known && context.is_known(hash);
    }

    bool budget_spent() const {
        const auto& budget = m_deps.client->budget();
        return budget && budget->exhausted();
    }

    /// Completion tokens per choice that the budget still affords for `messages` with `n`
    /// choices (llm.max_tokens at most); nullopt when not even a short answer fits, so that a
    /// call never overshoots the budget by more than the server's own miscount.
    std::optional<std::int64_t> affordable_completion(const std::vector<llm::Message>& messages, std::int64_t n) const {
        constexpr std::int64_t k_shortest_useful_answer = 256;
        const std::int64_t cap = m_deps.client->config().max_tokens;
        const auto& budget = m_deps.client->budget();
        if (!budget) return cap;
        std::int64_t prompt = 0;
        for (const auto& message : messages) prompt += llm::estimate_tokens(message.content) + 4;
        const std::int64_t per_choice = (budget->remaining_tokens() - prompt) / std::max<std::int64_t>(n, 1);
        if (per_choice < k_shortest_useful_answer) return std::nullopt;
        return std::min(cap, per_choice);
    }

    void pause(const std::string& why) {
        m_paused = true;
        log::info("{}: stops proposing ({})", m_name, why);
        if (m_deps.event) {
            m_deps.event("llm_role_paused", nlohmann::json{{"kernel", m_deps.knowledge->kernel},
                                                           {"role", m_name},
                                                           {"model", m_deps.client->config().model},
                                                           {"reason", why}}
                                                .dump());
        }
    }

    /// An architect whose whole kernels are rarely correct hands its turns to smaller edits.
    void judge_ambition() {
        if (m_kind != "architect" || m_paused || m_stats.designs < m_options.demote_after) return;
        const double correct_rate = static_cast<double>(m_stats.correct) / static_cast<double>(m_stats.designs);
        if (correct_rate >= m_options.demote_below) return;
        pause(fmt::format("{} of its {} whole kernels were correct ({:.0f}% < {:.0f}%): the tuner's small edits suit "
                          "this model better",
                          m_stats.correct, m_stats.designs, 100.0 * correct_rate, 100.0 * m_options.demote_below));
    }

    std::optional<Proposal> take_first(const SearchContext& context, std::vector<Proposal> proposals) {
        std::optional<Proposal> first;
        for (auto& proposal : proposals) {
            if (known(context, proposal.design.content_hash)) continue;
            if (!first) {
                first = std::move(proposal);
            } else {
                m_pending.push_back(std::move(proposal));
            }
        }
        return first;
    }

    std::string profile_text(const SearchContext& context) const {
        if (!context.champion) return "";
        const Attribution attribution = attribute(context);
        std::string text = fmt::format("The champion ({}) measures {:.0f} cycles on the device", context.champion->label(),
                                       context.champion_cycles);
        if (context.speed_of_light_cycles > 0) {
            text += fmt::format("; the weight-movement minimum is {:.0f} cycles ({:.2f}x away)", context.speed_of_light_cycles,
                                context.champion_cycles / context.speed_of_light_cycles);
        }
        return text + ".\n" + attribution.text;
    }

    std::string failures_text() const {
        std::string text;
        for (const auto& failure : m_failures) text += "- " + failure + "\n";
        return text;
    }

    /// The knowledge-base passages for `query` within `budget` tokens, as prompt text, and their ids.
    std::pair<std::string, nlohmann::json> passages(const std::string& query, std::int64_t budget) const {
        nlohmann::json ids = nlohmann::json::array();
        std::string text;
        if (!m_deps.knowledge->retrieve || budget <= 0) return {text, ids};
        for (const auto& passage : m_deps.knowledge->retrieve(query, budget)) {
            text += fmt::format("[{}] {}\n{}\n\n", passage.id, passage.title, passage.text);
            ids.push_back(passage.id);
        }
        return {text, ids};
    }

    std::map<std::string, std::string> base_values(const SearchContext& context) const {
        const LlmKnowledge& knowledge = *m_deps.knowledge;
        std::map<std::string, std::string> values = {
            {"target", knowledge.target},
            {"kernel", knowledge.kernel},
            {"shape", knowledge.shape_text},
            {"kernel_spec", knowledge.kernel_spec},
            {"dsl_summary", knowledge.dsl_summary},
            {"language", knowledge.source_language},
            {"reference_source", knowledge.reference_source},
            {"strategy", std::string(llm_strategy_name(m_options.strategy))},
        };
        if (context.champion) {
            values["champion_source"] = context.champion->source;
            values["champion"] = context.champion->label();
            values["champion_cycles"] = fmt::format("{:.0f}", context.champion_cycles);
        }
        if (uses_profile(m_options.strategy)) {
            values["hardware_facts"] = knowledge.hardware_facts;
            values["profile"] = profile_text(context);
        }
        if (m_options.strategy != LlmStrategy::zero_shot) values["failures"] = failures_text();
        return values;
    }

    /// The multi-agent loop's analyst: a diagnosis of the champion citing knowledge-base ids.
    std::string diagnose(const SearchContext& context, nlohmann::json& context_ids) {
        const std::string key = context.champion ? context.champion->content_hash : std::string("none");
        if (auto cached = m_diagnoses.find(key); cached != m_diagnoses.end()) return cached->second;
        std::map<std::string, std::string> values = base_values(context);
        const std::string query = fmt::format("{} {} {}", m_deps.knowledge->kernel, values["profile"], failures_text());
        auto [text, ids] = passages(query, m_options.context_tokens / 2);
        values["context"] = text;
        const llm::PromptParts parts = m_deps.prompts->analyst.render(values);
        std::vector<llm::Message> messages;
        if (!parts.system.empty()) messages.push_back({"system", parts.system});
        messages.push_back({"user", parts.user});
        llm::ChatRequest request;
        request.messages = messages;
        request.n = 1;
        const auto allowance = affordable_completion(messages, 1);
        if (!allowance) {
            m_budget_short = true;
            if (m_deps.client->budget()) m_deps.client->budget()->close();
            return "";
        }
        request.max_tokens = std::min<std::int64_t>(*allowance, 1024);
        const llm::Reply reply = m_deps.client->complete(request);
        record(reply, messages, "llm-analyst", "diagnose", ids, nlohmann::json::array());
        std::string diagnosis;
        if (const llm::Choice* choice = reply.first_ok()) diagnosis = clip(choice->content, 2000);
        for (const auto& id : ids) context_ids.push_back(id);
        m_diagnoses[key] = diagnosis;
        return diagnosis;
    }

    std::int64_t record(const llm::Reply& reply, const std::vector<llm::Message>& messages, const std::string& role,
                        const std::string& purpose, const nlohmann::json& context_ids, const nlohmann::json& choices) {
        m_stats.calls += 1;
        m_stats.tokens += reply.usage.total_tokens();
        if (!reply.ok()) m_stats.failures[std::string(llm::call_status_name(reply.status))] += 1;
        if (!m_deps.audit) return 0;
        store::LlmCallRecord call = call_record(reply, messages, m_deps.client->config().model);
        call.kernel = m_deps.knowledge->kernel;
        call.role = role;
        call.purpose = purpose;
        call.strategy = std::string(llm_strategy_name(m_options.strategy));
        call.step = m_options.step ? m_options.step() : 0;
        call.choices_json = choices.dump();
        call.context_json = context_ids.dump();
        m_last_prompt_hash = call.prompt_hash;
        m_last_reply_hash = call.reply_hash;
        return m_deps.audit(call);
    }

    /// The source a choice carries, or why it carries none.
    /// A tuner's or porter's diff applies to `base` (the champion, the design being ported).
    std::optional<std::string> source_of(const std::string& content, const std::string* base, std::string& why) const {
        const bool edits = m_kind == "tuner" || m_kind == "porter";
        const std::string& language = m_deps.knowledge->source_language;
        const bool json = m_deps.client->config().response_format == config::LlmResponseFormat::json_schema;
        std::optional<std::string> source;
        std::optional<std::string> diff;
        if (json) {
            if (auto object = llm::extract_json_object(content)) {
                if (object->contains("source") && (*object)["source"].is_string()) source = (*object)["source"].get<std::string>();
                if (object->contains("diff") && (*object)["diff"].is_string()) diff = (*object)["diff"].get<std::string>();
            }
        }
        if (!source && !diff && edits) diff = llm::extract_code(content, "diff");
        if (!source && !diff) source = llm::extract_code(content, language);
        if (source && edits && looks_like_unified_diff(*source)) {
            diff = source;
            source.reset();
        }
        if (diff) {
            if (base == nullptr) {
                why = "a diff, but there is no champion to apply it to";
                return std::nullopt;
            }
            EditResult edit = apply_unified_diff(*base, *diff);
            if (!edit.source) why = "diff_failed: " + edit.error;
            return edit.source;
        }
        if (!source || source->find_first_not_of(" \t\r\n") == std::string::npos) {
            why = json ? "malformed: no \"source\" in the JSON reply" : fmt::format("malformed: no ```{} block", language);
            return std::nullopt;
        }
        return source;
    }

    std::optional<llm::JsonSchema> schema() const {
        if (m_deps.client->config().response_format != config::LlmResponseFormat::json_schema) return std::nullopt;
        llm::JsonSchema schema;
        const bool edits = m_kind == "tuner" || m_kind == "porter";
        schema.name = edits ? "kernel_edit" : "kernel_source";
        nlohmann::json properties = {{"explanation", {{"type", "string"}}}, {"source", {{"type", "string"}}}};
        if (edits) properties["diff"] = {{"type", "string"}};
        schema.schema = {{"type", "object"},
                         {"properties", properties},
                         {"required", edits ? nlohmann::json::array({"explanation"})
                                            : nlohmann::json::array({"explanation", "source"})},
                         {"additionalProperties", false}};
        schema.strict = !edits;
        return schema;
    }

    /// One call and its choices as proposals.
    std::vector<Proposal> call(const std::string* base, const std::vector<llm::Message>& messages,
                               const std::string& purpose, std::int64_t turn, std::int64_t n,
                               const nlohmann::json& context_ids) {
        llm::ChatRequest request;
        request.messages = messages;
        request.n = n;
        request.json_schema = schema();
        const auto allowance = affordable_completion(messages, n);
        if (!allowance) {
            m_budget_short = true;
            if (m_deps.client->budget()) m_deps.client->budget()->close();  // the rest buys no useful call
            return {};
        }
        request.max_tokens = *allowance;
        const llm::Reply reply = m_deps.client->complete(request);
        nlohmann::json choices = nlohmann::json::array();
        std::vector<std::pair<std::size_t, std::string>> sources;
        std::set<std::string> seen;
        for (std::size_t idx = 0; idx < reply.choices.size(); ++idx) {
            const llm::Choice& choice = reply.choices[idx];
            m_stats.choices += 1;
            std::string status(llm::call_status_name(choice.status));
            if (choice.status == llm::CallStatus::ok) {
                std::string why;
                if (auto source = source_of(choice.content, base, why)) {
                    if (seen.insert(*source).second) {
                        sources.emplace_back(idx, std::move(*source));
                    } else {
                        status = "duplicate";
                    }
                } else {
                    status = why.substr(0, why.find(':'));
                    choices.push_back({{"choice", idx}, {"status", status}, {"why", why}});
                    m_stats.failures[status] += 1;
                    continue;
                }
            } else {
                m_stats.failures[status] += 1;
            }
            choices.push_back({{"choice", idx}, {"status", status}, {"finish_reason", choice.finish_reason}});
        }
        m_stats.parsed += static_cast<std::int64_t>(sources.size());
        const std::int64_t call_id = record(reply, messages, m_name, purpose, context_ids, choices);
        std::vector<Proposal> proposals;
        for (auto& [idx, source] : sources) {
            Proposal proposal;
            proposal.design = design_from_source(m_deps.knowledge->target, m_deps.knowledge->kernel,
                                                 m_deps.knowledge->shape_text, std::move(source), m_name,
                                                 m_deps.knowledge->source_extension);
            proposal.role = m_name;
            const std::string& content = reply.choices[idx].content;
            proposal.move = turn > 0            ? fmt::format("repair turn {}", turn)
                            : m_kind == "tuner"  ? "edit of the champion"
                            : m_kind == "porter" ? fmt::format("port to {}", m_port_to)
                                                 : "new kernel";
            const std::string prose = prose_of(content);
            proposal.reason = fmt::format("{} ({}, choice {} of {}){}{}", m_deps.client->config().model,
                                          llm_strategy_name(m_options.strategy), idx + 1, reply.choices.size(),
                                          prose.empty() ? "" : ": ", prose);
            LlmProvenance provenance;
            provenance.call_id = call_id;
            provenance.prompt_hash = m_last_prompt_hash;
            provenance.reply_hash = m_last_reply_hash;
            provenance.tokens = reply.usage.total_tokens();
            provenance.charged_tokens = proposals.empty() ? provenance.tokens : 0;
            provenance.choice = static_cast<std::int64_t>(idx);
            provenance.turn = turn;
            provenance.model = reply.model;
            proposal.llm = provenance;
            m_conversations[proposal.design.content_hash] = {messages, content, turn};
            proposals.push_back(std::move(proposal));
        }
        return proposals;
    }

    std::vector<Proposal> ask(const SearchContext& context) {
        std::map<std::string, std::string> values = base_values(context);
        nlohmann::json context_ids = nlohmann::json::array();
        if (m_options.strategy == LlmStrategy::multi_agent) {
            values["diagnosis"] = diagnose(context, context_ids);
            if (budget_spent()) return {};
            std::int64_t used = 0;
            for (const auto& [name, value] : values) used += llm::estimate_tokens(value);
            const std::string query = fmt::format("{} {} {}", m_deps.knowledge->kernel, values["diagnosis"], values["failures"]);
            auto [text, ids] = passages(query, m_options.context_tokens - used);
            values["context"] = text;
            for (const auto& id : ids) context_ids.push_back(id);
        }
        const llm::PromptTemplate& tmpl = m_kind == "tuner" ? m_deps.prompts->tuner : m_deps.prompts->architect;
        const llm::PromptParts parts = tmpl.render(values);
        std::vector<llm::Message> messages;
        if (!parts.system.empty()) messages.push_back({"system", parts.system});
        messages.push_back({"user", parts.user});
        return call(champion_source(context), messages, "propose", 0, m_options.n, context_ids);
    }

    static const std::string* champion_source(const SearchContext& context) {
        return context.champion ? &context.champion->source : nullptr;
    }

public:
    std::vector<Proposal> port(const PortRequest& request) override {
        if (m_kind != "porter" || m_paused || budget_spent() || m_budget_short) return {};
        m_port_to = request.to;
        if (!request.repair_of.empty()) {
            auto found = m_conversations.find(request.repair_of);
            if (found == m_conversations.end() || found->second.turn >= m_options.repair_turns) return {};
            m_port_base = request.source;
            return repair_with({request.repair_of, "compile", request.diagnostics}, &m_port_base);
        }
        const LlmKnowledge& knowledge = *m_deps.knowledge;
        std::map<std::string, std::string> values = {
            {"target", knowledge.target},
            {"kernel", knowledge.kernel},
            {"shape", knowledge.shape_text},
            {"kernel_spec", knowledge.kernel_spec},
            {"dsl_summary", knowledge.dsl_summary},
            {"language", knowledge.source_language},
            {"design", request.design_label},
            {"from", request.from.empty() ? std::string("the old toolchain") : request.from},
            {"to", request.to},
            {"source", request.source},
            {"diagnostics", clip(request.diagnostics, 4000)},
        };
        // The new version's release notes and whatever else the knowledge base says about the
        // names in the diagnostics: retrieval, not a file name the porter would have to know.
        std::int64_t used = 0;
        for (const auto& [name, value] : values) used += llm::estimate_tokens(value);
        const std::string query = fmt::format("release notes {} changes renamed removed {}", request.to, request.diagnostics);
        auto [text, ids] = passages(query, std::max<std::int64_t>(0, m_options.context_tokens - used));
        values["release_notes"] = text;
        const llm::PromptParts parts = m_deps.prompts->porter.render(values);
        std::vector<llm::Message> messages;
        if (!parts.system.empty()) messages.push_back({"system", parts.system});
        messages.push_back({"user", parts.user});
        m_port_base = request.source;
        return call(&m_port_base, messages, "port", 0, m_options.n, ids);
    }

private:

    std::vector<Proposal> repair(const SearchContext& context, const RepairItem& item) {
        return repair_with(item, champion_source(context));
    }

    /// A repair turn of the conversation that produced `item.hash`; a diff applies to `base`.
    std::vector<Proposal> repair_with(const RepairItem& item, const std::string* base) {
        auto found = m_conversations.find(item.hash);
        if (found == m_conversations.end() || budget_spent()) return {};
        const Conversation conversation = found->second;
        std::map<std::string, std::string> values = {{"stage", item.stage},
                                                     {"diagnostics", clip(item.reason, 4000)},
                                                     {"language", m_deps.knowledge->source_language},
                                                     {"kernel", m_deps.knowledge->kernel}};
        const llm::PromptParts parts = m_deps.prompts->repair.render(values);
        std::vector<llm::Message> messages = conversation.messages;
        messages.push_back({"assistant", conversation.reply});
        messages.push_back({"user", parts.user});
        m_stats.repairs += 1;
        return call(base, messages, "repair", conversation.turn + 1, 1, nlohmann::json::array());
    }

    std::string m_kind;
    std::string m_name;
    LlmRoleDeps m_deps;
    LlmRoleOptions m_options;
    LlmRoleStats m_stats;
    std::deque<Proposal> m_pending;                      ///< the other choices of a best-of-n call
    std::deque<RepairItem> m_repairs;
    std::map<std::string, Conversation> m_conversations; ///< by design hash
    std::map<std::string, std::string> m_diagnoses;      ///< by champion hash
    std::deque<std::string> m_failures;                  ///< recent failed steps of any role, with diagnostics
    std::int64_t m_empty_calls = 0;
    bool m_paused = false;
    bool m_budget_short = false;   ///< what is left of the token budget no longer affords a call
    std::string m_last_prompt_hash;
    std::string m_last_reply_hash;
    std::string m_port_to;    ///< the porter: the version it ports to
    std::string m_port_base;  ///< the porter: the source its diffs apply to
};

}  // namespace

std::string_view llm_strategy_name(LlmStrategy strategy) {
    switch (strategy) {
        case LlmStrategy::zero_shot: return "zero_shot";
        case LlmStrategy::profiling_guided: return "profiling_guided";
        case LlmStrategy::iterative_refinement: return "iterative_refinement";
        case LlmStrategy::multi_agent: return "multi_agent";
    }
    return "multi_agent";
}

std::optional<LlmStrategy> parse_llm_strategy(std::string_view name) {
    for (LlmStrategy strategy : all_llm_strategies()) {
        if (llm_strategy_name(strategy) == name) return strategy;
    }
    return std::nullopt;
}

const std::vector<LlmStrategy>& all_llm_strategies() {
    static const std::vector<LlmStrategy> k_all = {LlmStrategy::zero_shot, LlmStrategy::profiling_guided,
                                                   LlmStrategy::iterative_refinement, LlmStrategy::multi_agent};
    return k_all;
}

std::unique_ptr<LlmRole> make_llm_architect(LlmRoleDeps deps, LlmRoleOptions options) {
    return std::make_unique<LlmRoleImpl>("architect", std::move(deps), std::move(options));
}

std::unique_ptr<LlmRole> make_llm_tuner(LlmRoleDeps deps, LlmRoleOptions options) {
    return std::make_unique<LlmRoleImpl>("tuner", std::move(deps), std::move(options));
}

std::unique_ptr<LlmPorter> make_llm_porter(LlmRoleDeps deps, LlmRoleOptions options) {
    return std::make_unique<LlmRoleImpl>("porter", std::move(deps), std::move(options));
}

llm::PromptTemplate load_prompt(const std::vector<std::filesystem::path>& dirs, const std::string& name) {
    std::vector<std::string> tried;
    for (const auto& dir : dirs) {
        const auto file = dir / name;
        if (std::filesystem::is_regular_file(file)) return llm::PromptTemplate::load(file);
        tried.push_back(file.string());
    }
    throw Error(ErrorKind::invalid_config,
                fmt::format("prompt template {} not found (looked for {})", name, fmt::join(tried, ", ")));
}

LlmPrompts load_llm_prompts(const std::vector<std::filesystem::path>& dirs) {
    return {load_prompt(dirs, "architect.md"), load_prompt(dirs, "tuner.md"), load_prompt(dirs, "analyst.md"),
            load_prompt(dirs, "repair.md"), load_prompt(dirs, "porter.md")};
}

store::LlmCallRecord call_record(const llm::Reply& reply, const std::vector<llm::Message>& messages,
                                 const std::string& configured_model) {
    store::LlmCallRecord call;
    call.model = reply.model.empty() ? configured_model : reply.model;
    call.status = std::string(llm::call_status_name(reply.status));
    call.message = reply.message;
    call.prompt = messages_json(messages).dump();
    if (!reply.choices.empty()) {
        nlohmann::json contents = nlohmann::json::array();
        for (const auto& choice : reply.choices) contents.push_back(choice.content);
        call.reply = contents.dump();
    }
    call.prompt_hash = content_hash(call.prompt);
    call.reply_hash = call.reply.empty() ? std::string() : content_hash(call.reply);
    call.prompt_tokens = reply.usage.prompt_tokens;
    call.completion_tokens = reply.usage.completion_tokens;
    call.tokens_reported = reply.usage.reported;
    call.cost = reply.cost;
    call.n = static_cast<std::int64_t>(std::max<std::size_t>(reply.choices.size(), 1));
    call.attempts = reply.attempts;
    if (reply.http_status) call.http_status = *reply.http_status;
    call.wall_secs = reply.wall_secs;
    return call;
}

}  // namespace npuopt::search
