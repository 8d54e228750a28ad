// Retrieval: one BM25 ranking over sections, summaries, rules and facts.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/log.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/retrieval.hpp"
#include "store/database.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "kb-search-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        m_path = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

struct Fixture {
    TempDir dir;
    npuopt::store::Database database = npuopt::store::Database::open(dir.path() / "kb.db");
    KnowledgeBase kb{database, "testchip", fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "docs"};
    Fixture() {
        kb.set_current_version("npuc", "1.0.0");
        kb.ingest_docs();
        npuopt::target::Diagnostic dm{"error", "E0201", "DM allocation exceeds slice capacity on slice 3",
                                      std::nullopt, {{"dm_bytes", 786432.0, 524288.0}}, {}, {}};
        kb.rules().mine_diagnostics({dm}, DesignRef{"d1", "", {}});
        // A measured fact, written as the microbenchmark code writes knowledge_entries.
        database.execute(
            "INSERT INTO knowledge_entries (target, kind, key, text, value, evidence, toolchain_version_id, created_at) "
            "VALUES ('testchip', 'hw_param', 'hbm_sustained_bytes_per_cycle', 'sustained HBM bandwidth, fitted', "
            "1398.5, '{}', (SELECT id FROM toolchain_versions WHERE version = '1.0.0'), ?)",
            {npuopt::log::utc_timestamp()});
    }
};

}  // namespace

TEST_CASE("to_fts_query quotes words and drops operators and stop words") {
    CHECK(to_fts_query("What is the DMA packet limit?") == "\"DMA\" OR \"packet\" OR \"limit\"");
    CHECK(to_fts_query("dm_alloc") == "\"dm_alloc\"");
    CHECK(to_fts_query("NEAR( \"a\" AND -b*") == "\"NEAR\" OR \"b\"");  // "and" is a stop word
    CHECK(to_fts_query("  ?! ").empty());
}

TEST_CASE("search ranks the relevant section first") {
    Fixture fixture;
    auto hits = fixture.kb.search("largest DMA packet bytes", 5);
    REQUIRE_FALSE(hits.empty());
    CHECK(hits[0].title == "DMA > Packets");
    CHECK((hits[0].kind == "section" || hits[0].kind == "summary"));
    CHECK(hits[0].snippet.find('[') != std::string::npos);
    CHECK(hits[0].toolchain_version == "1.0.0");
    CHECK_FALSE(hits[0].stale);
    for (std::size_t hit_idx = 1; hit_idx < hits.size(); ++hit_idx) CHECK(hits[hit_idx - 1].score >= hits[hit_idx].score);

    auto alloc = fixture.kb.search("dm_alloc", 3);
    REQUIRE_FALSE(alloc.empty());
    CHECK(alloc[0].title == "Memory > Allocation");
}

TEST_CASE("search ranks rules and measured facts alongside the docs") {
    Fixture fixture;
    auto rule_hits = fixture.kb.search("allocation exceeds slice capacity", 10);
    bool rule_found = false;
    for (const auto& hit : rule_hits) rule_found = rule_found || (hit.kind == "rule" && hit.title == "E0201 dm_bytes");
    CHECK(rule_found);
    auto fact_hits = fixture.kb.search("sustained HBM bandwidth", 3);
    REQUIRE_FALSE(fact_hits.empty());
    CHECK(fact_hits[0].kind == "fact");
    CHECK(fact_hits[0].title == "hw_param hbm_sustained_bytes_per_cycle");
    CHECK(fixture.kb.search("zebra quokka", 5).empty());
    CHECK(fixture.kb.search("", 5).empty());
}
