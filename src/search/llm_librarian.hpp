#pragma once
// The LLM librarian: summaries of the vendor's doc sections written by a model, each claim then
// checked against its section by a second call, which drops what the section does not support.
// Whatever survives still goes through the extractive check (every identifier and number of a
// claim must occur in the section, knowledge/summary.hpp), so a model can only ever lose claims,
// never add one the docs do not carry. When a call fails or its reply does not parse, the section
// gets the extractive librarian's summary instead, named as such, and the next refresh asks the
// model again. Every call is handed to the audit.
//
//   section ─► summarize call ─► claims ─► check call ─► supported claims ─► check_summary
//                    │ fails                    │ fails: claims kept for check_summary alone
//                    └─► ExtractiveSummarizer

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <filesystem>
#include <optional>

#include "knowledge/summary.hpp"
#include "llm/client.hpp"
#include "llm/prompt.hpp"
#include "search/llm_roles.hpp"

namespace npuopt::search {

struct LibrarianPrompts {
    llm::PromptTemplate summarize;  ///< librarian.md: {{heading}}, {{section}}, {{target}}
    llm::PromptTemplate check;      ///< librarian_check.md: {{heading}}, {{section}}, {{claims}} (numbered)
};

/// librarian.md and librarian_check.md from the first of `dirs` that has each.
LibrarianPrompts load_librarian_prompts(const std::vector<std::filesystem::path>& dirs);

/// Counters of the librarian (what kb build prints).
struct LibrarianStats {
    std::int64_t sections = 0;
    std::int64_t calls = 0;
    std::int64_t claims_written = 0;    ///< by the model
    std::int64_t claims_unsupported = 0;///< dropped by the checking call
    std::int64_t fallbacks = 0;         ///< sections that got the extractive summary
    std::int64_t unchecked = 0;         ///< sections whose checking call failed (extractive check only)
    std::int64_t tokens = 0;
};

class LlmLibrarian final : public knowledge::Summarizer {
public:
    LlmLibrarian(std::shared_ptr<llm::Client> client, LibrarianPrompts prompts, std::string target, LlmAudit audit,
                 std::size_t max_claims = 8);
    /// "llm/<model>/1": summaries are reused per section content and this name.
    std::string name() const override;
    knowledge::Summary summarize(std::string_view heading_path, std::string_view section_text) override;
    const LibrarianStats& stats() const { return m_stats; }

private:
    std::optional<std::string> ask(const std::string& purpose, const llm::PromptParts& parts, std::int64_t max_tokens);

    std::shared_ptr<llm::Client> m_client;
    LibrarianPrompts m_prompts;
    std::string m_target;
    LlmAudit m_audit;
    std::size_t m_max_claims;
    knowledge::ExtractiveSummarizer m_fallback;
    LibrarianStats m_stats;
};

}  // namespace npuopt::search
