#pragma once
// The librarian: summaries of doc sections and the check every summary must pass.
//
//   section ─► Summarizer (extractive, or search/llm_librarian) ─► claims ─► check_summary(claims, section)
//                                                                        │ every identifier and number
//                                                  kept claims ◄─────────┤ of a claim occurs in the
//                                         failed checks (kept) ◄─────────┘ section, else it is dropped

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace npuopt::knowledge {

/// The verdict on one claim.
struct ClaimCheck {
    std::string claim;
    bool passed = true;
    std::vector<std::string> failures;  ///< e.g. "number 8192 does not occur in the source"
};

/// What a summariser says about one section: one claim per sentence.
struct Summary {
    std::string summarizer;  ///< name and version, e.g. "extractive/1" (empty: the summariser's name())
    std::vector<std::string> claims;
    std::vector<ClaimCheck> rejected = {};  ///< claims the summariser's own check dropped, with why
};

/// Writes summaries of doc sections. The checker applies to any implementation's output.
class Summarizer {
public:
    virtual ~Summarizer() = default;
    virtual std::string name() const = 0;
    /// Summarise `section_text` (Markdown) titled `heading_path`.
    virtual Summary summarize(std::string_view heading_path, std::string_view section_text) = 0;
};

/// Offline librarian: keeps the sentences that carry API names, numbers and rule words
/// (must, at most, ≤, error …), best first, up to `max_claims`, in document order.
class ExtractiveSummarizer : public Summarizer {
public:
    explicit ExtractiveSummarizer(std::size_t max_claims = 6) : m_max_claims(max_claims) {}
    std::string name() const override { return "extractive/1"; }
    Summary summarize(std::string_view heading_path, std::string_view section_text) override;

private:
    std::size_t m_max_claims;
};

/// The sentences of a Markdown section outside code blocks (list items and table rows count
/// as sentences), with list markers stripped.
std::vector<std::string> split_sentences(std::string_view markdown);

/// Identifiers a text states: `code spans`' names, snake_case words, calls (`name(`), codes like E0201.
std::set<std::string> stated_identifiers(std::string_view text);
/// Every identifier-like token of a text (what a source offers to check against).
std::set<std::string> identifier_tokens(std::string_view text);
/// Numbers a text states, normalised ("65,536" → "65536"); digits inside identifiers do not count.
std::set<std::string> stated_numbers(std::string_view text);

/// A summary after its check: claims that passed, and those dropped with the reasons.
struct CheckedSummary {
    std::string summarizer;
    std::vector<std::string> kept;
    std::vector<ClaimCheck> failed;
};

/// Check one claim against its source section text.
ClaimCheck check_claim(std::string_view claim, std::string_view source_text);
/// Check every claim of a summary; failing claims are dropped and recorded.
CheckedSummary check_summary(const Summary& summary, std::string_view source_text);

}  // namespace npuopt::knowledge
