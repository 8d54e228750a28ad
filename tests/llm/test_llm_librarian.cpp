// The LLM librarian against the scripted server: the model's claims, the second call that checks
// each against its section, the extractive check behind both, and the extractive librarian
// standing in when a call fails; every call audited.

#include <doctest/doctest.h>

#if NPUOPT_HAVE_LLM_STUB

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/summary.hpp"
#include "llm/client.hpp"
#include "scripted_server.hpp"
#include "search/llm_librarian.hpp"

using namespace npuopt;
using llm::stub::ScriptedServer;

namespace {

const char* k_section =
    "Use `vload` to move a vector from DM into the VRF. A vector register holds at most 1536 elements.\n\n"
    "DMA packets must be a multiple of 256 bytes; `copy` rejects others with E0203.\n";

struct LibrarianHarness {
    ScriptedServer server;
    std::vector<store::LlmCallRecord> calls;

    std::unique_ptr<search::LlmLibrarian> librarian() {
        config::LlmConfig config;
        config.enabled = true;
        config.base_url = server.base_url();
        config.model = "scripted-model";
        config.api_key_env = "NPUOPT_TEST_LIBRARIAN_KEY";
        config.max_retries = 0;
        config.request_timeout_secs = 10;
        llm::ClientDeps deps;
        deps.budget = std::make_shared<llm::TokenBudget>(100000);
        deps.read_env = [](const std::string&) -> std::optional<std::string> { return std::string("sk-test"); };
        deps.sleep = [](std::chrono::milliseconds) {};
        search::LibrarianPrompts prompts{
            llm::PromptTemplate::parse("---user---\nSUMMARISE {{heading}} ({{max_claims}})\n{{section}}", "librarian"),
            llm::PromptTemplate::parse("---user---\nCHECK {{heading}}\n{{section}}\nCLAIMS\n{{claims}}", "check")};
        return std::make_unique<search::LlmLibrarian>(
            std::make_shared<llm::Client>(config, deps), prompts, "npu-sim", [this](const store::LlmCallRecord& call) {
                calls.push_back(call);
                return static_cast<std::int64_t>(calls.size());
            });
    }
};

const std::string k_claims =
    "Here is the summary.\n"
    "- `vload` moves a vector from DM into the VRF.\n"
    "- A vector register holds at most 1536 elements.\n"
    "- DMA startup costs 9999 cycles per command.\n";

}  // namespace

TEST_CASE("llm librarian: the checking call drops what the section does not support, the extractive check stays behind it") {
    LibrarianHarness h;
    h.server.push(llm::stub::chat_reply(k_claims));
    h.server.push(llm::stub::chat_reply(
        R"({"verdicts": [{"claim": 1, "supported": true, "evidence": "Use vload to move a vector"},)"
        R"( {"claim": 2, "supported": true, "evidence": "holds at most 1536 elements"},)"
        R"( {"claim": 3, "supported": false, "evidence": ""}]})"));
    auto librarian = h.librarian();
    CHECK(librarian->name() == "llm/scripted-model/1");
    const knowledge::Summary summary = librarian->summarize("Vector unit", k_section);
    CHECK(summary.summarizer == "llm/scripted-model/1");
    REQUIRE(summary.claims.size() == 2);
    CHECK(summary.claims[1] == "A vector register holds at most 1536 elements.");
    REQUIRE(summary.rejected.size() == 1);
    CHECK(summary.rejected[0].claim.find("9999") != std::string::npos);
    CHECK(summary.rejected[0].failures.at(0).find("no support in the section") != std::string::npos);
    const auto checked = knowledge::check_summary(summary, k_section);
    CHECK(checked.kept.size() == 2);
    CHECK(checked.failed.size() == 1);  // the rejected claim is recorded as a failure
    // both calls audited, the second one holding the numbered claims
    REQUIRE(h.calls.size() == 2);
    CHECK(h.calls[0].role == "llm-librarian");
    CHECK(h.calls[0].purpose == "summarize");
    CHECK(h.calls[1].purpose == "check");
    CHECK(h.calls[1].prompt.find("3. DMA startup costs 9999 cycles") != std::string::npos);
    CHECK(librarian->stats().claims_written == 3);
    CHECK(librarian->stats().claims_unsupported == 1);
}

TEST_CASE("llm librarian: a check reply that does not parse leaves the extractive check, a failed call the extractive librarian") {
    LibrarianHarness h;
    h.server.push(llm::stub::chat_reply(k_claims));
    h.server.push(llm::stub::chat_reply("They all look right to me."));
    h.server.push(llm::stub::error_reply(500, "overloaded"));
    auto librarian = h.librarian();
    const knowledge::Summary unchecked = librarian->summarize("Vector unit", k_section);
    CHECK(unchecked.claims.size() == 3);
    CHECK(unchecked.rejected.empty());
    const auto checked = knowledge::check_summary(unchecked, k_section);
    REQUIRE(checked.failed.size() == 1);  // 9999 is not in the section: the extractive check drops it
    CHECK(checked.failed[0].claim.find("9999") != std::string::npos);
    CHECK(librarian->stats().unchecked == 1);

    const knowledge::Summary fallback = librarian->summarize("Vector unit", k_section);
    CHECK(fallback.summarizer == "extractive/1");  // named as what wrote it: the next refresh asks the model again
    CHECK_FALSE(fallback.claims.empty());
    CHECK(librarian->stats().fallbacks == 1);
    REQUIRE(h.calls.size() == 3);
    CHECK(h.calls[2].status != "ok");
}

#endif  // NPUOPT_HAVE_LLM_STUB
