#include "knowledge/retrieval.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace npuopt::knowledge {

namespace {

constexpr double k_stale_score_factor = 0.5;

const std::set<std::string>& stop_words() {
    static const std::set<std::string> k_words = {"a",  "an", "and", "are", "as",  "at",  "be",   "by", "for",
                                                  "how", "in", "is",  "it",  "of",  "on",  "or",   "the", "to",
                                                  "what", "with", "do", "does", "i", "can", "which"};
    return k_words;
}

}  // namespace

std::string to_fts_query(std::string_view query) {
    std::vector<std::string> terms;
    std::string word;
    auto flush = [&] {
        std::string lower = word;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (!word.empty() && !stop_words().contains(lower) &&
            std::find(terms.begin(), terms.end(), word) == terms.end()) {
            terms.push_back(word);
        }
        word.clear();
    };
    for (char character : query) {
        if (std::isalnum(static_cast<unsigned char>(character)) != 0 || character == '_' ||
            static_cast<unsigned char>(character) >= 0x80) {
            word += character;
        } else {
            flush();
        }
    }
    flush();
    std::string fts;
    for (const std::string& term : terms) {
        if (!fts.empty()) fts += " OR ";
        fts += '"' + term + '"';
    }
    return fts;
}

std::vector<SearchHit> search(store::KnowledgeStore& store, const std::string& target, std::string_view query,
                              int limit) {
    std::vector<SearchHit> hits;
    std::string fts = to_fts_query(query);
    if (fts.empty() || limit <= 0) return hits;
    for (auto& row : store.search(target, fts, limit * 2 + 10)) {
        double score = -row.bm25 * (row.stale ? k_stale_score_factor : 1.0);
        hits.push_back({row.kind, row.ref_id, row.title, row.snippet, score, row.stale, row.toolchain_version, row.body});
    }
    std::stable_sort(hits.begin(), hits.end(), [](const SearchHit& a, const SearchHit& b) { return a.score > b.score; });
    if (hits.size() > static_cast<std::size_t>(limit)) hits.resize(static_cast<std::size_t>(limit));
    return hits;
}

std::vector<SearchHit> retrieve_within(store::KnowledgeStore& store, const std::string& target, std::string_view query,
                                       std::int64_t token_budget) {
    constexpr std::size_t k_longest_entry_chars = 1600;
    std::vector<SearchHit> chosen;
    std::int64_t left_chars = token_budget * 4;
    if (left_chars <= 0) return chosen;
    for (SearchHit& hit : search(store, target, query, 24)) {
        if (hit.stale) continue;  // what a superseded toolchain said is not what the prompt needs
        if (hit.body.size() > k_longest_entry_chars) hit.body = hit.body.substr(0, k_longest_entry_chars) + " …";
        const auto cost = static_cast<std::int64_t>(hit.body.size() + hit.title.size() + 16);
        if (cost > left_chars) continue;
        left_chars -= cost;
        chosen.push_back(std::move(hit));
    }
    return chosen;
}

}  // namespace npuopt::knowledge
