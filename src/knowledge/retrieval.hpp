#pragma once
// Retrieval: one query ranks doc sections, checked summaries, legality rules and measured facts
// together by BM25 (FTS5 bm25() over one index, so the scores are comparable).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/knowledge_store.hpp"

namespace npuopt::knowledge {

/// One ranked entry of the knowledge base.
struct SearchHit {
    std::string kind;     ///< section | summary | rule | fact
    std::int64_t id = 0;  ///< row id in the kind's table
    std::string title;    ///< heading path, "code quantity", or "kind key"
    std::string snippet;  ///< matching text, terms in [brackets]
    double score = 0.0;   ///< −bm25, halved for stale entries; higher is better
    bool stale = false;
    std::string toolchain_version;
    std::string body;     ///< the whole entry
};

/// Free text → an FTS5 query: each word quoted (no operators pass through), joined with OR.
std::string to_fts_query(std::string_view query);

/// The `limit` best entries of `target` for `query`; stale entries rank lower but stay.
std::vector<SearchHit> search(store::KnowledgeStore& store, const std::string& target, std::string_view query,
                              int limit = 10);

/// Entries for a prompt: the best for `query`, fresh ones first, whole (a long one cut), until
/// about `token_budget` tokens (4 characters a token) are filled.
std::vector<SearchHit> retrieve_within(store::KnowledgeStore& store, const std::string& target, std::string_view query,
                                       std::int64_t token_budget);

}  // namespace npuopt::knowledge
