#include "knowledge/summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace npuopt::knowledge {

namespace {

bool is_word_char(char character) {
    return std::isalnum(static_cast<unsigned char>(character)) != 0 || character == '_';
}

bool is_identifier_start(char character) {
    return std::isalpha(static_cast<unsigned char>(character)) != 0 || character == '_';
}

std::string trim(std::string_view text) {
    std::size_t start = text.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos) return {};
    std::size_t end = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(start, end - start + 1));
}

/// "- x", "* x", "+ x", "12. x" → "x"
std::string strip_list_marker(const std::string& line) {
    std::string text = trim(line);
    if (text.size() >= 2 && (text[0] == '-' || text[0] == '*' || text[0] == '+') && text[1] == ' ') {
        return trim(std::string_view(text).substr(2));
    }
    std::size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])) != 0) ++digits;
    if (digits > 0 && digits + 1 < text.size() && (text[digits] == '.' || text[digits] == ')') &&
        text[digits + 1] == ' ') {
        return trim(std::string_view(text).substr(digits + 2));
    }
    return text;
}

bool is_list_item(const std::string& line) {
    std::string text = trim(line);
    return strip_list_marker(text) != text;
}

/// Split a paragraph into sentences at ". " / "! " / "? " followed by an upper-case letter or `.
void split_paragraph(const std::string& paragraph, std::vector<std::string>& out) {
    std::size_t start = 0;
    for (std::size_t pos = 0; pos + 2 < paragraph.size(); ++pos) {
        char character = paragraph[pos];
        if ((character == '.' || character == '!' || character == '?') && paragraph[pos + 1] == ' ') {
            char next = paragraph[pos + 2];
            bool after_digit = pos > 0 && std::isdigit(static_cast<unsigned char>(paragraph[pos - 1])) != 0 &&
                               std::isdigit(static_cast<unsigned char>(next)) != 0;
            if (!after_digit && (std::isupper(static_cast<unsigned char>(next)) != 0 || next == '`')) {
                std::string sentence = trim(std::string_view(paragraph).substr(start, pos + 1 - start));
                if (!sentence.empty()) out.push_back(sentence);
                start = pos + 2;
            }
        }
    }
    std::string rest = trim(std::string_view(paragraph).substr(start));
    if (!rest.empty()) out.push_back(rest);
}

/// The scanner behind the identifier and number sets. `stated` = only the tokens a claim states
/// as names (code spans, snake_case, calls, codes); otherwise every identifier-like token.
void scan(std::string_view text, bool stated, std::set<std::string>* identifiers, std::set<std::string>* numbers) {
    bool in_code = false;
    std::size_t pos = 0;
    while (pos < text.size()) {
        char character = text[pos];
        if (character == '`') {
            in_code = !in_code;
            ++pos;
            continue;
        }
        if (is_identifier_start(character)) {
            std::size_t end = pos;
            while (end < text.size() && is_word_char(text[end])) ++end;
            std::string word(text.substr(pos, end - pos));
            bool has_underscore = word.find('_') != std::string::npos;
            bool is_call = end < text.size() && text[end] == '(';
            bool is_code = word.size() >= 3 && std::isupper(static_cast<unsigned char>(word[0])) != 0 &&
                           std::all_of(word.begin() + 1, word.end(),
                                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
            bool is_method = pos > 0 && text[pos - 1] == '.' && in_code;
            if (identifiers && (!stated || (in_code && word.size() >= 2) || has_underscore || is_call || is_code ||
                                is_method)) {
                identifiers->insert(word);
            }
            pos = end;
            continue;
        }
        if (std::isdigit(static_cast<unsigned char>(character)) != 0) {
            std::size_t end = pos;
            while (end < text.size() &&
                   (std::isdigit(static_cast<unsigned char>(text[end])) != 0 ||
                    ((text[end] == ',' || text[end] == '.') && end + 1 < text.size() &&
                     std::isdigit(static_cast<unsigned char>(text[end + 1])) != 0))) {
                ++end;
            }
            std::string number;
            for (std::size_t idx = pos; idx < end; ++idx) {
                if (text[idx] != ',') number += text[idx];
            }
            if (numbers) numbers->insert(number);
            pos = end;
            continue;
        }
        ++pos;
    }
}

std::size_t count_rule_words(const std::string& sentence) {
    static const std::vector<std::string> k_rule_words = {
        "must", "at most", "at least", "≤", "≥", "<=", ">=", "error", "never", "only", "cannot", "multiple of",
        "aligned", "maximum", "minimum", "exceed", "limit", "required", "not allowed", "renamed", "deprecated"};
    std::string lower = sentence;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::size_t count = 0;
    for (const std::string& word : k_rule_words) {
        if (lower.find(word) != std::string::npos) ++count;
    }
    return count;
}

}  // namespace

std::vector<std::string> split_sentences(std::string_view markdown) {
    std::vector<std::string> sentences;
    std::string paragraph;
    bool in_fence = false;
    auto flush = [&] {
        if (!paragraph.empty()) split_paragraph(paragraph, sentences);
        paragraph.clear();
    };
    std::size_t start = 0;
    while (start <= markdown.size()) {
        std::size_t end = markdown.find('\n', start);
        if (end == std::string_view::npos) end = markdown.size();
        std::string line(markdown.substr(start, end - start));
        start = end + 1;
        std::string trimmed = trim(line);
        if (trimmed.rfind("```", 0) == 0 || trimmed.rfind("~~~", 0) == 0) {
            flush();
            in_fence = !in_fence;
            continue;
        }
        if (in_fence) continue;
        if (trimmed.empty()) {
            flush();
        } else if (trimmed[0] == '|') {  // a table row is one sentence; the separator row is none
            flush();
            if (trimmed.find_first_not_of("|-: ") != std::string::npos) sentences.push_back(trimmed);
        } else if (is_list_item(trimmed) || trimmed[0] == '#') {
            flush();
            paragraph = trimmed[0] == '#' ? std::string() : strip_list_marker(trimmed);
        } else {
            if (!paragraph.empty()) paragraph += ' ';
            paragraph += trimmed;
        }
        if (end == markdown.size()) break;
    }
    flush();
    return sentences;
}

std::set<std::string> stated_identifiers(std::string_view text) {
    std::set<std::string> identifiers;
    scan(text, true, &identifiers, nullptr);
    return identifiers;
}

std::set<std::string> identifier_tokens(std::string_view text) {
    std::set<std::string> identifiers;
    scan(text, false, &identifiers, nullptr);
    return identifiers;
}

std::set<std::string> stated_numbers(std::string_view text) {
    std::set<std::string> numbers;
    scan(text, false, nullptr, &numbers);
    return numbers;
}

Summary ExtractiveSummarizer::summarize(std::string_view /*heading_path*/, std::string_view section_text) {
    std::vector<std::string> sentences = split_sentences(section_text);
    struct Scored {
        std::size_t order;
        std::size_t score;
    };
    std::vector<Scored> scored;
    for (std::size_t sentence_idx = 0; sentence_idx < sentences.size(); ++sentence_idx) {
        const std::string& sentence = sentences[sentence_idx];
        std::size_t score = 0;
        if (!stated_identifiers(sentence).empty()) score += 2;
        if (!stated_numbers(sentence).empty()) score += 2;
        score += 2 * std::min<std::size_t>(count_rule_words(sentence), 2);
        if (score >= 2) scored.push_back({sentence_idx, score});
    }
    std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
    if (scored.size() > m_max_claims) scored.resize(m_max_claims);
    std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) { return a.order < b.order; });
    Summary summary;
    summary.summarizer = name();
    for (const Scored& item : scored) summary.claims.push_back(sentences[item.order]);
    return summary;
}

ClaimCheck check_claim(std::string_view claim, std::string_view source_text) {
    ClaimCheck check;
    check.claim = std::string(claim);
    std::set<std::string> source_identifiers = identifier_tokens(source_text);
    std::set<std::string> source_numbers = stated_numbers(source_text);
    for (const std::string& identifier : stated_identifiers(claim)) {
        if (!source_identifiers.contains(identifier)) {
            check.failures.push_back(fmt::format("identifier `{}` does not occur in the source section", identifier));
        }
    }
    for (const std::string& number : stated_numbers(claim)) {
        if (!source_numbers.contains(number)) {
            check.failures.push_back(fmt::format("number {} does not occur in the source section", number));
        }
    }
    if (trim(claim).empty()) check.failures.push_back("empty claim");
    check.passed = check.failures.empty();
    return check;
}

CheckedSummary check_summary(const Summary& summary, std::string_view source_text) {
    CheckedSummary checked;
    checked.summarizer = summary.summarizer;
    for (const std::string& claim : summary.claims) {
        ClaimCheck check = check_claim(claim, source_text);
        if (check.passed) {
            checked.kept.push_back(claim);
        } else {
            checked.failed.push_back(std::move(check));
        }
    }
    for (const ClaimCheck& rejected : summary.rejected) checked.failed.push_back(rejected);
    return checked;
}

}  // namespace npuopt::knowledge
