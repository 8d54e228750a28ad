#include "search/llm_librarian.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "llm/extract.hpp"

namespace npuopt::search {

namespace {

std::string trimmed(std::string_view text) {
    const auto start = text.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos) return {};
    const auto end = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(start, end - start + 1));
}

/// The claims of a summarising reply: its "- " (or "* ", "1. ") lines, markers stripped.
std::vector<std::string> claims_of(const std::string& reply, std::size_t max_claims) {
    std::vector<std::string> claims;
    std::size_t start = 0;
    while (start <= reply.size() && claims.size() < max_claims) {
        const auto end = reply.find('\n', start);
        std::string line = trimmed(std::string_view(reply).substr(start, end == std::string::npos ? std::string::npos : end - start));
        std::size_t skip = 0;
        if (line.size() >= 2 && (line[0] == '-' || line[0] == '*') && line[1] == ' ') {
            skip = 2;
        } else {
            std::size_t digits = 0;
            while (digits < line.size() && std::isdigit(static_cast<unsigned char>(line[digits]))) ++digits;
            if (digits > 0 && digits + 1 < line.size() && (line[digits] == '.' || line[digits] == ')') && line[digits + 1] == ' ')
                skip = digits + 2;
        }
        if (skip > 0) {
            std::string claim = trimmed(std::string_view(line).substr(skip));
            if (!claim.empty()) claims.push_back(claim);
        }
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return claims;
}

}  // namespace

LibrarianPrompts load_librarian_prompts(const std::vector<std::filesystem::path>& dirs) {
    return {load_prompt(dirs, "librarian.md"), load_prompt(dirs, "librarian_check.md")};
}

LlmLibrarian::LlmLibrarian(std::shared_ptr<llm::Client> client, LibrarianPrompts prompts, std::string target,
                           LlmAudit audit, std::size_t max_claims)
    : m_client(std::move(client)),
      m_prompts(std::move(prompts)),
      m_target(std::move(target)),
      m_audit(std::move(audit)),
      m_max_claims(max_claims),
      m_fallback(max_claims) {
    if (!m_client) throw Error(ErrorKind::internal, "the LLM librarian needs a client");
}

std::string LlmLibrarian::name() const { return fmt::format("llm/{}/1", m_client->config().model); }

std::optional<std::string> LlmLibrarian::ask(const std::string& purpose, const llm::PromptParts& parts,
                                             std::int64_t max_tokens) {
    const auto& budget = m_client->budget();
    if (budget && budget->exhausted()) return std::nullopt;
    std::vector<llm::Message> messages;
    if (!parts.system.empty()) messages.push_back({"system", parts.system});
    messages.push_back({"user", parts.user});
    llm::ChatRequest request;
    request.messages = messages;
    request.n = 1;
    request.max_tokens = std::min<std::int64_t>(max_tokens, m_client->config().max_tokens);
    const llm::Reply reply = m_client->complete(request);
    m_stats.calls += 1;
    m_stats.tokens += reply.usage.total_tokens();
    if (m_audit) {
        store::LlmCallRecord call = call_record(reply, messages, m_client->config().model);
        call.role = "llm-librarian";
        call.purpose = purpose;
        m_audit(call);
    }
    const llm::Choice* choice = reply.first_ok();
    if (!choice) return std::nullopt;
    return choice->content;
}

knowledge::Summary LlmLibrarian::summarize(std::string_view heading_path, std::string_view section_text) {
    m_stats.sections += 1;
    const std::map<std::string, std::string> values = {{"target", m_target},
                                                       {"heading", std::string(heading_path)},
                                                       {"section", std::string(section_text)},
                                                       {"max_claims", std::to_string(m_max_claims)}};
    const auto fall_back = [&](const std::string& why) {
        m_stats.fallbacks += 1;
        log::info("librarian: {}: {}; the extractive summary stands in", heading_path, why);
        return m_fallback.summarize(heading_path, section_text);
    };
    const auto written = ask("summarize", m_prompts.summarize.render(values), 1024);
    if (!written) return fall_back("the summarising call gave no reply");
    knowledge::Summary summary;
    summary.summarizer = name();
    summary.claims = claims_of(*written, m_max_claims);
    if (summary.claims.empty()) return fall_back("the reply held no claim lines");
    m_stats.claims_written += static_cast<std::int64_t>(summary.claims.size());

    // The second call: which claims does the section support?
    std::string numbered;
    for (std::size_t idx = 0; idx < summary.claims.size(); ++idx) numbered += fmt::format("{}. {}\n", idx + 1, summary.claims[idx]);
    std::map<std::string, std::string> check_values = values;
    check_values["claims"] = numbered;
    const auto verdict_text = ask("check", m_prompts.check.render(check_values), 1024);
    const auto verdicts = verdict_text ? llm::extract_json_object(*verdict_text) : std::nullopt;
    if (!verdicts || !verdicts->contains("verdicts") || !(*verdicts)["verdicts"].is_array()) {
        // No usable check: the claims face the extractive check alone.
        m_stats.unchecked += 1;
        log::info("librarian: {}: {}; its claims face the extractive check alone", heading_path,
                  verdict_text ? "the checking call's reply did not parse" : "the checking call gave no reply");
        return summary;
    }
    std::map<std::size_t, std::pair<bool, std::string>> by_claim;
    for (const auto& verdict : (*verdicts)["verdicts"]) {
        if (!verdict.is_object() || !verdict.contains("claim") || !verdict["claim"].is_number_integer()) continue;
        const auto index = verdict["claim"].get<std::int64_t>();
        if (index < 1 || index > static_cast<std::int64_t>(summary.claims.size())) continue;
        const bool supported = verdict.value("supported", false);
        by_claim[static_cast<std::size_t>(index - 1)] = {supported, verdict.value("evidence", std::string())};
    }
    std::vector<std::string> kept;
    for (std::size_t idx = 0; idx < summary.claims.size(); ++idx) {
        auto found = by_claim.find(idx);
        if (found != by_claim.end() && found->second.first) {
            kept.push_back(summary.claims[idx]);
            continue;
        }
        knowledge::ClaimCheck rejected;
        rejected.claim = summary.claims[idx];
        rejected.passed = false;
        rejected.failures.push_back(found == by_claim.end() ? "the checking call gave no verdict on it"
                                                            : "the checking call found no support in the section");
        summary.rejected.push_back(std::move(rejected));
        m_stats.claims_unsupported += 1;
    }
    summary.claims = std::move(kept);
    return summary;
}

}  // namespace npuopt::search
