// The LLM-backed roles against the scripted server: replies become proposals (best-of-n queued),
// bad replies are recorded as what they are, repairs carry the diagnostics back in the same
// conversation, the tuner's diffs apply to the champion, the budget and the ambition rule stop
// a role, and the key stays out of everything recorded.

#include <doctest/doctest.h>

#if NPUOPT_HAVE_LLM_STUB

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "llm/client.hpp"
#include "llm/prompt.hpp"
#include "scripted_server.hpp"
#include "search/kernel_search.hpp"
#include "search/llm_roles.hpp"
#include "search/source_edit.hpp"

using namespace npuopt;
using llm::stub::ScriptedReply;
using llm::stub::ScriptedServer;

namespace {

constexpr const char* k_key_env = "NPUOPT_TEST_ROLE_KEY";
constexpr const char* k_secret = "sk-role-test-0f8e7d6c5b4a39281706f5e4d3c2b1a0";

const char* k_good = "fn kernel() { good(); }\n";

std::string fenced(const std::string& code, const std::string& language = "rust") {
    return "Idea: stream the weights once.\n```" + language + "\n" + code + "```\n";
}

struct Harness {
    ScriptedServer server;
    std::vector<store::LlmCallRecord> calls;
    std::vector<std::pair<std::string, std::string>> events;
    std::shared_ptr<llm::TokenBudget> budget = std::make_shared<llm::TokenBudget>(100000);
    search::LlmRoleOptions options;

    search::LlmRoleDeps deps() {
        config::LlmConfig config;
        config.enabled = true;
        config.base_url = server.base_url();
        config.model = "scripted-model";
        config.api_key_env = k_key_env;
        config.max_retries = 0;
        config.request_timeout_secs = 10;
        llm::ClientDeps client_deps;
        client_deps.budget = budget;
        client_deps.read_env = [](const std::string& name) -> std::optional<std::string> {
            if (name == k_key_env) return std::string(k_secret);
            return std::nullopt;
        };
        client_deps.sleep = [](std::chrono::milliseconds) {};
        search::LlmRoleDeps deps;
        deps.client = std::make_shared<llm::Client>(config, client_deps);
        auto prompts = std::make_shared<search::LlmPrompts>(search::LlmPrompts{
            llm::PromptTemplate::parse("---system---\nsys {{target}}\n---user---\nWRITE {{kernel}}\n{{#profile}}PROFILE {{profile}}{{/profile}}"
                                       "{{#diagnosis}}DIAGNOSIS {{diagnosis}}{{/diagnosis}}{{#failures}}FAILURES {{failures}}{{/failures}}",
                                       "architect"),
            llm::PromptTemplate::parse("---user---\nEDIT {{kernel}}\n{{champion_source}}", "tuner"),
            llm::PromptTemplate::parse("---user---\nANALYSE {{kernel}}\n{{context}}", "analyst"),
            llm::PromptTemplate::parse("---user---\nREPAIR {{stage}}: {{diagnostics}}", "repair"),
            llm::PromptTemplate::parse("---user---\nPORT {{design}} from {{from}} to {{to}}\nDIAG {{diagnostics}}\n"
                                       "NOTES {{release_notes}}\nSOURCE {{source}}",
                                       "porter")});
        deps.prompts = prompts;
        auto knowledge = std::make_shared<search::LlmKnowledge>();
        knowledge->target = "lanechip";
        knowledge->kernel = "gemv";
        knowledge->shape_text = "n=8";
        knowledge->retrieve = [](const std::string&, std::int64_t token_budget) {
            std::vector<search::ContextPassage> passages;
            if (token_budget > 0) passages.push_back({"rule:7", "E0201 dm_bytes", "dm_bytes must stay below 65536"});
            return passages;
        };
        deps.knowledge = knowledge;
        deps.audit = [this](const store::LlmCallRecord& call) {
            calls.push_back(call);
            return static_cast<std::int64_t>(calls.size());
        };
        deps.event = [this](const std::string& kind, const std::string& json) { events.emplace_back(kind, json); };
        return deps;
    }
};

search::SearchContext context_with_champion(const std::string& source) {
    search::SearchContext context;
    context.kernel = "gemv";
    search::Design champion = search::design_from_source("lanechip", "gemv", "n=8", source, "baseline");
    champion.from_source = false;
    champion.is_baseline = true;
    champion.template_name = "baseline";
    context.champion = champion;
    context.champion_cycles = 1000;
    context.speed_of_light_cycles = 500;
    context.is_known = [](const std::string&) { return false; };
    return context;
}

search::StepFeedback failed_at(const search::Proposal& proposal, const std::string& stage, const std::string& why) {
    search::StepFeedback feedback;
    feedback.kernel = "gemv";
    feedback.proposal = proposal;
    feedback.verdict = eval::StepVerdict::failed;
    feedback.last_stage = stage;
    feedback.final_reason = why;
    return feedback;
}

}  // namespace

TEST_CASE("llm architect: best-of-n choices become proposals, one call, the others queued, the call audited") {
    ScriptedReply three;
    three.body = llm::stub::chat_completion_body({fenced(k_good), fenced("fn kernel() { other(); }\n"), "no code here"});
    Harness h;
    h.server.push(three);
    h.options.n = 3;
    h.options.strategy = search::LlmStrategy::zero_shot;
    auto role = search::make_llm_architect(h.deps(), h.options);
    CHECK(role->name() == "llm-architect");
    auto context = context_with_champion("fn kernel() { slow(); }\n");
    auto first = role->propose(context);
    REQUIRE(first.size() == 1);
    CHECK(first[0].design.source == k_good);
    CHECK(first[0].design.from_source);
    CHECK(first[0].design.template_name == "llm-architect");
    CHECK(first[0].role == "llm-architect");
    REQUIRE(first[0].llm.has_value());
    CHECK(first[0].llm->call_id == 1);
    CHECK(first[0].llm->prompt_hash.size() == 64);
    CHECK(first[0].llm->reply_hash.size() == 64);
    CHECK(first[0].llm->tokens == 30);
    CHECK(first[0].llm->charged_tokens == 30);  // the call's tokens are charged once, to its first design
    auto second = role->propose(context);
    REQUIRE(second.size() == 1);
    CHECK(second[0].design.source == "fn kernel() { other(); }\n");
    CHECK(second[0].llm->charged_tokens == 0);
    CHECK(h.server.request_count() == 1);  // the second came from the queue, not a new call
    REQUIRE(h.calls.size() == 1);
    const auto choices = nlohmann::json::parse(h.calls[0].choices_json);
    REQUIRE(choices.size() == 3);
    CHECK(choices[2]["status"] == "malformed");
    CHECK(h.calls[0].status == "ok");
    CHECK(h.calls[0].prompt.find("WRITE gemv") != std::string::npos);
    CHECK(h.calls[0].prompt.find("PROFILE") == std::string::npos);  // zero-shot: no profile
    CHECK(role->stats().failures.at("malformed") == 1);
    // the request asked for three choices
    const auto body = nlohmann::json::parse(h.server.requests().at(0).body);
    CHECK(body["n"] == 3);
}

TEST_CASE("llm architect: truncated, empty and refusal replies are recorded as such and give no design") {
    Harness h;
    h.server.push(llm::stub::chat_reply(fenced(k_good), "length"));
    h.server.push(llm::stub::chat_reply("", "stop"));
    ScriptedReply refusal;
    refusal.body = R"({"id":"x","object":"chat.completion","model":"scripted-model","choices":[{"index":0,"finish_reason":"stop",)"
                   R"("message":{"role":"assistant","content":null,"refusal":"I cannot help with that."}}],)"
                   R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}})";
    h.server.push(refusal);
    h.server.push(llm::stub::error_reply(400, "bad request"));
    h.options.strategy = search::LlmStrategy::zero_shot;
    auto role = search::make_llm_architect(h.deps(), h.options);
    auto context = context_with_champion("fn kernel() {}\n");
    for (int call = 0; call < 4; ++call) CHECK(role->propose(context).empty());
    REQUIRE(h.calls.size() == 4);
    CHECK(h.calls[0].status == "truncated");
    CHECK(h.calls[1].status == "empty");
    CHECK(h.calls[2].status == "refusal");
    CHECK(h.calls[3].status == "http_error");
    CHECK(h.calls[3].reply.empty());
    // four calls in a row with nothing usable: the role pauses, and says so
    REQUIRE(h.events.size() == 1);
    CHECK(h.events[0].first == "llm_role_paused");
    CHECK(role->propose(context).empty());
    CHECK(h.server.request_count() == 4);
}

TEST_CASE("llm architect: a failed design is repaired in the same conversation with its diagnostics") {
    Harness h;
    h.server.push(llm::stub::chat_reply(fenced("fn kernel() { brokn(); }\n")));
    h.server.push(llm::stub::chat_reply(fenced(k_good)));
    h.options.strategy = search::LlmStrategy::iterative_refinement;
    h.options.repair_turns = 1;
    auto role = search::make_llm_architect(h.deps(), h.options);
    auto context = context_with_champion("fn kernel() {}\n");
    auto first = role->propose(context);
    REQUIRE(first.size() == 1);
    role->notify(failed_at(first[0], "compile", "error[E0425]: cannot find function `brokn`"));
    auto repaired = role->propose(context);
    REQUIRE(repaired.size() == 1);
    CHECK(repaired[0].design.source == k_good);
    CHECK(repaired[0].move == "repair turn 1");
    REQUIRE(repaired[0].llm.has_value());
    CHECK(repaired[0].llm->turn == 1);
    const auto body = nlohmann::json::parse(h.server.requests().at(1).body);
    const auto& messages = body["messages"];
    REQUIRE(messages.size() == 4);  // system, user, the failed answer, the diagnostics
    CHECK(messages[2]["role"] == "assistant");
    CHECK(messages[2]["content"].get<std::string>().find("brokn") != std::string::npos);
    CHECK(messages[3]["content"].get<std::string>().find("REPAIR compile: error[E0425]") != std::string::npos);
    CHECK(h.calls.at(1).purpose == "repair");
    // the turn limit holds: a second failure is not repaired again
    role->notify(failed_at(repaired[0], "correctness", "wrong output"));
    h.server.push(llm::stub::chat_reply(fenced("fn kernel() { third(); }\n")));
    auto next = role->propose(context);
    REQUIRE(next.size() == 1);
    CHECK(next[0].move == "new kernel");
}

TEST_CASE("llm architect: zero-shot does not repair, multi-agent asks the analyst first and cites retrieval") {
    Harness h;
    h.server.push(llm::stub::chat_reply("The DM tile dominates [rule:7]."));  // analyst
    h.server.push(llm::stub::chat_reply(fenced(k_good)));                     // architect
    h.options.strategy = search::LlmStrategy::multi_agent;
    auto role = search::make_llm_architect(h.deps(), h.options);
    auto context = context_with_champion("fn kernel() {}\n");
    auto proposals = role->propose(context);
    REQUIRE(proposals.size() == 1);
    REQUIRE(h.calls.size() == 2);
    CHECK(h.calls[0].role == "llm-analyst");
    CHECK(h.calls[0].purpose == "diagnose");
    CHECK(h.calls[0].prompt.find("dm_bytes must stay below 65536") != std::string::npos);
    CHECK(h.calls[1].prompt.find("DIAGNOSIS The DM tile dominates [rule:7].") != std::string::npos);
    CHECK(h.calls[1].prompt.find("PROFILE") != std::string::npos);
    CHECK(nlohmann::json::parse(h.calls[1].context_json).dump().find("rule:7") != std::string::npos);

    Harness z;
    z.server.push(llm::stub::chat_reply(fenced("fn kernel() { brokn(); }\n")));
    z.server.push(llm::stub::chat_reply(fenced(k_good)));
    z.options.strategy = search::LlmStrategy::zero_shot;
    auto zero = search::make_llm_architect(z.deps(), z.options);
    auto first = zero->propose(context);
    REQUIRE(first.size() == 1);
    zero->notify(failed_at(first[0], "compile", "error"));
    auto next = zero->propose(context);
    REQUIRE(next.size() == 1);
    CHECK(next[0].move == "new kernel");  // a fresh answer, not a repair
    CHECK(nlohmann::json::parse(z.server.requests().at(1).body)["messages"].size() == 2);
}

TEST_CASE("llm tuner: a unified diff is applied to the champion, one that does not apply is recorded") {
    const std::string champion = "fn kernel() {\n    let rows = 4;\n    run(rows);\n}\n";
    const std::string diff =
        "--- a/kernel.rs\n+++ b/kernel.rs\n@@ -1,4 +1,4 @@\n fn kernel() {\n-    let rows = 4;\n+    let rows = 8;\n     run(rows);\n }\n";
    auto direct = search::apply_unified_diff(champion, diff);
    REQUIRE(direct.source.has_value());
    CHECK(*direct.source == "fn kernel() {\n    let rows = 8;\n    run(rows);\n}\n");

    Harness h;
    h.server.push(llm::stub::chat_reply("Double the rows.\n```diff\n" + diff + "```\n"));
    h.server.push(llm::stub::chat_reply("```diff\n--- a/k\n+++ b/k\n@@ -1,2 +1,2 @@\n-nothing like it\n+x\n```\n"));
    h.options.strategy = search::LlmStrategy::zero_shot;
    auto tuner = search::make_llm_tuner(h.deps(), h.options);
    auto context = context_with_champion(champion);
    auto proposals = tuner->propose(context);
    REQUIRE(proposals.size() == 1);
    CHECK(proposals[0].design.source.find("let rows = 8;") != std::string::npos);
    CHECK(proposals[0].move == "edit of the champion");
    CHECK(tuner->propose(context).empty());
    REQUIRE(h.calls.size() == 2);
    CHECK(nlohmann::json::parse(h.calls[1].choices_json)[0]["status"] == "diff_failed");
    // without a champion source the tuner has nothing to edit and calls nobody
    search::SearchContext empty;
    empty.is_known = [](const std::string&) { return false; };
    CHECK(tuner->propose(empty).empty());
    CHECK(h.server.request_count() == 2);
}

TEST_CASE("llm porter: a failing design is ported with its diagnostics and retrieved notes, then repaired in the same conversation") {
    const std::string failing = "fn kernel() {\n    vtrf(x);\n}\n";
    const std::string diff = "--- a/kernel.rs\n+++ b/kernel.rs\n@@ -1,3 +1,3 @@\n fn kernel() {\n-    vtrf(x);\n+    to_trf(x);\n }\n";
    Harness h;
    h.server.push(llm::stub::chat_reply("Renamed vtrf as the release notes say.\n```diff\n" + diff + "```\n"));
    h.server.push(llm::stub::chat_reply(fenced("fn kernel() {\n    to_trf(x, 0);\n}\n")));
    h.options.repair_turns = 1;
    auto porter = search::make_llm_porter(h.deps(), h.options);
    search::PortRequest request;
    request.design_label = "ao_streamed@12345678";
    request.source = failing;
    request.diagnostics = "E0401 `vtrf` was renamed to `to_trf` in npuc 1.1";
    request.from = "npuc 1.0.0";
    request.to = "npuc 1.1.0";
    auto ports = porter->port(request);
    REQUIRE(ports.size() == 1);
    CHECK(ports[0].design.source == "fn kernel() {\n    to_trf(x);\n}\n");  // the diff applies to the failing source
    CHECK(ports[0].role == "llm-porter");
    CHECK(ports[0].design.template_name == "llm-porter");
    CHECK(ports[0].move == "port to npuc 1.1.0");
    REQUIRE(h.calls.size() == 1);
    CHECK(h.calls[0].role == "llm-porter");
    CHECK(h.calls[0].purpose == "port");
    CHECK(h.calls[0].context_json.find("rule:7") != std::string::npos);  // what retrieval gave is recorded
    const auto first = nlohmann::json::parse(h.server.requests().at(0).body)["messages"];
    const std::string prompt = first.back()["content"].get<std::string>();
    CHECK(prompt.find("PORT ao_streamed@12345678 from npuc 1.0.0 to npuc 1.1.0") != std::string::npos);
    CHECK(prompt.find("DIAG E0401") != std::string::npos);
    CHECK(prompt.find("dm_bytes must stay below 65536") != std::string::npos);
    CHECK(prompt.find("vtrf(x);") != std::string::npos);

    // its port failed in turn: the same conversation continues with the new diagnostics
    search::StepFeedback failed = failed_at(ports[0], "compile", "E0061 to_trf takes 2 arguments");
    porter->notify(failed);
    request.repair_of = ports[0].design.content_hash;
    request.source = ports[0].design.source;
    request.diagnostics = "E0061 to_trf takes 2 arguments";
    auto repaired = porter->port(request);
    REQUIRE(repaired.size() == 1);
    CHECK(repaired[0].design.source == "fn kernel() {\n    to_trf(x, 0);\n}\n");
    CHECK(repaired[0].move == "repair turn 1");
    CHECK(h.calls.at(1).purpose == "repair");
    const auto second = nlohmann::json::parse(h.server.requests().at(1).body)["messages"];
    REQUIRE(second.size() == 3);
    CHECK(second[1]["role"] == "assistant");
    CHECK(second[1]["content"].get<std::string>().find("Renamed vtrf") != std::string::npos);
    CHECK(second[2]["content"].get<std::string>().find("E0061") != std::string::npos);
    CHECK(porter->stats().designs == 1);

    // past its repair turns it asks nobody; and it never proposes through the search
    request.repair_of = repaired[0].design.content_hash;
    CHECK(porter->port(request).empty());
    CHECK(h.server.request_count() == 2);
}

TEST_CASE("llm roles: a spent budget stops them before any request, the key is never recorded") {
    Harness h;
    h.budget = std::make_shared<llm::TokenBudget>(1000);
    h.server.push(llm::stub::chat_reply(fenced(k_good), "stop", 400, 500));  // leaves 100: no useful call fits
    h.options.strategy = search::LlmStrategy::zero_shot;
    auto role = search::make_llm_architect(h.deps(), h.options);
    auto context = context_with_champion("fn kernel() {}\n");
    CHECK(role->propose(context).size() == 1);
    // the completion asked for fits what the budget had left
    const auto first_body = nlohmann::json::parse(h.server.requests().at(0).body);
    CHECK(first_body["max_tokens"].get<std::int64_t>() <= 1000);
    CHECK(first_body["max_tokens"].get<std::int64_t>() >= 256);
    CHECK(!h.budget->exhausted());
    CHECK(role->propose(context).empty());  // 100 tokens left: not asked, and the budget is closed
    CHECK(h.budget->exhausted());
    CHECK(h.server.request_count() == 1);
    CHECK(h.server.requests().at(0).header("Authorization") == std::string("Bearer ") + k_secret);
    for (const auto& call : h.calls) {
        CHECK(call.prompt.find(k_secret) == std::string::npos);
        CHECK(call.reply.find(k_secret) == std::string::npos);
        CHECK(call.message.find(k_secret) == std::string::npos);
    }
}

TEST_CASE("llm architect: a model whose whole kernels are rarely correct hands over to the tuner") {
    Harness h;
    h.options.strategy = search::LlmStrategy::zero_shot;
    h.options.demote_after = 3;
    h.options.demote_below = 0.5;
    for (int idx = 0; idx < 3; ++idx) h.server.push(llm::stub::chat_reply(fenced("fn kernel() { v" + std::to_string(idx) + "(); }\n")));
    auto role = search::make_llm_architect(h.deps(), h.options);
    auto context = context_with_champion("fn kernel() {}\n");
    for (int idx = 0; idx < 3; ++idx) {
        auto proposals = role->propose(context);
        REQUIRE(proposals.size() == 1);
        role->notify(failed_at(proposals[0], "correctness", "wrong output"));
    }
    CHECK(role->stats().designs == 3);
    CHECK(role->stats().compiled == 3);
    CHECK(role->stats().correct == 0);
    REQUIRE(h.events.size() == 1);
    CHECK(h.events[0].first == "llm_role_paused");
    CHECK(h.events[0].second.find("tuner") != std::string::npos);
    CHECK(role->propose(context).empty());
    CHECK(h.server.request_count() == 3);
}

namespace {
class SilentRole final : public search::Role {
public:
    std::string name() const override { return "llm-architect"; }
    std::vector<search::Proposal> propose(const search::SearchContext&) override { return {}; }
};
}  // namespace

TEST_CASE("the scheduler pays an LLM role per device-second and per token") {
    std::vector<std::unique_ptr<search::Role>> roles;
    roles.push_back(std::make_unique<SilentRole>());
    search::KernelSearch kernel_search("gemv", std::move(roles), search::CostModel());
    kernel_search.set_token_price(1.5);
    search::StepFeedback feedback;
    feedback.kernel = "gemv";
    feedback.proposal.role = "llm-architect";
    feedback.proposal.design = search::design_from_source("lanechip", "gemv", "n=8", "fn a() {}\n", "llm-architect");
    feedback.proposal.llm = search::LlmProvenance{};
    feedback.proposal.llm->charged_tokens = 2000;
    feedback.verdict = eval::StepVerdict::rejected;
    feedback.device_secs = 3.0;
    feedback.champion_cycles_before = 100.0;
    kernel_search.notify(feedback);
    CHECK(kernel_search.scheduler().stats().at("llm-architect").device_secs == doctest::Approx(3.0 + 1.5 * 2.0));
}

TEST_CASE("prompt templates: parts, sections that close on empty values, no HTML escaping, clear errors") {
    auto tmpl = llm::PromptTemplate::parse("---system---\nS {{a}}\n---user---\nU {{a}} {{#b}}[{{b}}]{{/b}}", "t.md");
    auto parts = tmpl.render({{"a", "<x & y>"}, {"b", ""}});
    CHECK(parts.system == "S <x & y>");
    CHECK(parts.user == "U <x & y> ");
    CHECK(tmpl.render({{"a", "1"}, {"b", "2"}}).user == "U 1 [2]");
    CHECK_THROWS_WITH_AS(llm::PromptTemplate::parse("no parts", "x.md"), doctest::Contains("x.md"), Error);
    CHECK_THROWS_WITH_AS(llm::PromptTemplate::parse("---user---\n{{#open}} never closed", "y.md"),
                         doctest::Contains("y.md"), Error);
}

#endif
