// Doc ingestion and the librarian: section splitting, doc-set selection, extractive summaries,
// and the check that catches a planted wrong number or a non-existent API name.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "knowledge/docs.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/summary.hpp"
#include "store/database.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

namespace {

const fs::path k_docs = fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "docs";

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "kb-docs-XXXXXX").string();
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

const DocSection* find_section(const std::vector<DocSection>& sections, const std::string& heading_path) {
    auto found = std::find_if(sections.begin(), sections.end(),
                              [&](const DocSection& section) { return section.heading_path == heading_path; });
    return found == sections.end() ? nullptr : &*found;
}

}  // namespace

TEST_CASE("split_markdown: heading paths / code blocks kept / text before the first heading titled by the page") {
    const std::string page = "Intro text with `dm_alloc`.\n\n# DMA\n\nEngines move data.\n\n## Packets\n\n"
                             "At most 4096 bytes.\n\n```rust\nlet t = k.copy(e, a, b, 8192, 4096);\n```\n\n"
                             "## Empty\n\n### Deep\n\nDeep text.\n\n# Other\n\nOther text.\n";
    auto sections = split_markdown(page, "dma.md");
    REQUIRE(sections.size() == 5);
    CHECK(sections[0].heading_path == "dma");
    CHECK(sections[0].text.find("`dm_alloc`") != std::string::npos);
    CHECK(sections[1].heading_path == "DMA");
    CHECK(sections[2].heading_path == "DMA > Packets");
    CHECK(sections[2].text.find("k.copy(e, a, b, 8192, 4096)") != std::string::npos);
    CHECK(sections[2].text.find("```") != std::string::npos);
    CHECK(sections[3].heading_path == "DMA > Empty > Deep");  // the empty "Empty" section is skipped
    CHECK(sections[4].heading_path == "Other");
    CHECK(sections[4].ordinal == 4);
    CHECK(sections[2].content_hash.size() == 64);
    CHECK(sections[2].content_hash != sections[1].content_hash);
}

TEST_CASE("select_doc_set: major.minor subdirectory / newest not newer / or the dir itself") {
    auto set10 = select_doc_set(k_docs, "1.0.0");
    REQUIRE(set10);
    CHECK(set10->name == "1.0");
    auto set11 = select_doc_set(k_docs, "1.1.3");
    REQUIRE(set11);
    CHECK(set11->name == "1.1");
    auto newer = select_doc_set(k_docs, "2.4.0");
    REQUIRE(newer);
    CHECK(newer->name == "1.1");
    CHECK_FALSE(select_doc_set(k_docs, "0.9.0"));
    auto flat = select_doc_set(k_docs / "1.0", "7.0.0");  // no release subdirectories
    REQUIRE(flat);
    CHECK(flat->name.empty());
    CHECK(flat->dir == k_docs / "1.0");
    CHECK_FALSE(select_doc_set(k_docs / "missing", "1.0.0"));
}

TEST_CASE("read_doc_set: every page / sorted / relative paths") {
    auto sections = read_doc_set(k_docs / "1.0");
    REQUIRE(sections.size() >= 6);
    CHECK(sections.front().source_path == "dma.md");
    const DocSection* packets = find_section(sections, "DMA > Packets");
    REQUIRE(packets != nullptr);
    CHECK(packets->text.find("4096") != std::string::npos);
}

TEST_CASE("extractive summary keeps sentences with API names / numbers and rules - drops filler") {
    auto sections = read_doc_set(k_docs / "1.0");
    const DocSection* packets = find_section(sections, "DMA > Packets");
    REQUIRE(packets != nullptr);
    ExtractiveSummarizer summarizer;
    Summary summary = summarizer.summarize(packets->heading_path, packets->text);
    REQUIRE_FALSE(summary.claims.empty());
    bool has_limit = std::any_of(summary.claims.begin(), summary.claims.end(),
                                 [](const std::string& claim) { return claim.find("at most 4096") != std::string::npos; });
    CHECK(has_limit);
    for (const auto& claim : summary.claims) CHECK(claim.find("let t =") == std::string::npos);  // code is not prose
    CheckedSummary checked = check_summary(summary, packets->text);
    CHECK(checked.failed.empty());
    CHECK(checked.kept.size() == summary.claims.size());

    const DocSection* dma = find_section(sections, "DMA");
    REQUIRE(dma != nullptr);
    // "Each command has a startup cost, so prefer few, large commands." carries no name, number or rule word.
    for (const auto& claim : summarizer.summarize(dma->heading_path, dma->text).claims) {
        CHECK(claim.find("prefer few") == std::string::npos);
    }
}

TEST_CASE("summary check catches a planted wrong number and a non-existent API name") {
    auto sections = read_doc_set(k_docs / "1.0");
    const DocSection* packets = find_section(sections, "DMA > Packets");
    const DocSection* allocation = find_section(sections, "Memory > Allocation");
    REQUIRE(packets != nullptr);
    REQUIRE(allocation != nullptr);

    Summary planted;
    planted.summarizer = "planted";
    planted.claims = {"Packets are at most 4096 bytes.",               // true
                      "Packets are at most 8192 bytes.",               // wrong number
                      "Release DM with `k.dm_free(slice)` when done.", // no such API
                      "A larger packet is error E0109.",               // wrong code
                      "Use `k.copy(eng, src, dst, bytes, packet)` for a contiguous copy."};
    CheckedSummary checked = check_summary(planted, packets->text);
    REQUIRE(checked.kept.size() == 2);
    CHECK(checked.kept[0] == "Packets are at most 4096 bytes.");
    REQUIRE(checked.failed.size() == 3);
    CHECK(checked.failed[0].claim == "Packets are at most 8192 bytes.");
    CHECK(checked.failed[0].failures.at(0).find("8192") != std::string::npos);
    CHECK(checked.failed[1].failures.at(0).find("dm_free") != std::string::npos);
    CHECK(checked.failed[2].failures.at(0).find("E0109") != std::string::npos);

    // The same claim is fine against the section that states it.
    CHECK(check_claim("Allocate DM with `k.dm_alloc(slice, bytes)`.", allocation->text).passed);
    CHECK_FALSE(check_claim("Allocate DM with `k.dm_alloc(slice, bytes)`.", packets->text).passed);
    CHECK(check_claim("Each entry has at most 65,536 iterations.", "at most 65536 iterations").passed);
}

TEST_CASE("stated numbers and identifiers: digits inside names are not numbers - prose words are not names") {
    auto numbers = stated_numbers("fp8_e4m3 weights, E0201, 65,536 iterations, 1.5 TB/s");
    CHECK(numbers == std::set<std::string>{"65536", "1.5"});
    auto names = stated_identifiers("Use `k.dma(eng, src)` and dm_alloc(); E0201 is an error in the DMA engine.");
    CHECK(names.contains("dma"));
    CHECK(names.contains("dm_alloc"));
    CHECK(names.contains("E0201"));
    CHECK_FALSE(names.contains("Use"));
    CHECK_FALSE(names.contains("DMA"));
}

/// A summariser that lies, standing in for a careless LLM librarian.
class LyingSummarizer : public Summarizer {
public:
    std::string name() const override { return "lying/1"; }
    Summary summarize(std::string_view, std::string_view text) override {
        Summary summary{name(), {"This section mentions `no_such_api`."}};
        if (text.find("4096") != std::string_view::npos) summary.claims.push_back("Packets are at most 4096 bytes.");
        return summary;
    }
};

TEST_CASE("ingest_docs stores sections and checked summaries - any summariser's bad claims are recorded") {
    TempDir dir;
    auto database = npuopt::store::Database::open(dir.path() / "kb.db");
    KnowledgeBase kb(database, "testchip", k_docs);
    CHECK_THROWS_AS(kb.ingest_docs(), npuopt::Error);  // no version yet
    kb.set_current_version("npuc", "1.0.0");
    LyingSummarizer liar;
    IngestReport report = kb.ingest_docs(&liar);
    CHECK(report.doc_set == "1.0");
    CHECK(report.sections == report.sections_added);
    CHECK(report.summaries_written == report.sections);
    CHECK(report.claims_dropped == report.sections);  // every section got one fake API claim
    CHECK(report.claims_kept >= 1);

    auto json = kb.export_json();
    bool found_failure = false;
    for (const auto& section : json["sections"]) {
        for (const auto& dropped : section["summary"]["dropped_claims"]) {
            if (dropped["claim"].get<std::string>().find("no_such_api") != std::string::npos) found_failure = true;
        }
    }
    CHECK(found_failure);

    IngestReport again = kb.ingest_docs(&liar);  // unchanged docs: nothing new
    CHECK(again.sections_added == 0);
    CHECK(again.sections_removed == 0);
    CHECK(kb.export_markdown().find("~~This section mentions `no_such_api`.~~") != std::string::npos);
}

/// A summariser with a check of its own (as the LLM librarian's second call) and a fallback name.
class SelfCheckingSummarizer : public Summarizer {
public:
    std::string name() const override { return "checking/1"; }
    Summary summarize(std::string_view, std::string_view text) override {
        Summary summary;
        summary.summarizer = text.find("4096") != std::string_view::npos ? "extractive/1" : name();
        summary.claims = {};
        ClaimCheck rejected;
        rejected.claim = "The section promises 99 engines.";
        rejected.passed = false;
        rejected.failures = {"the checking call found no support in the section"};
        summary.rejected.push_back(rejected);
        return summary;
    }
};

TEST_CASE("ingest_docs records a summariser's own rejections and names a fallback summary by what wrote it") {
    TempDir dir;
    auto database = npuopt::store::Database::open(dir.path() / "kb.db");
    KnowledgeBase kb(database, "testchip", k_docs);
    kb.set_current_version("npuc", "1.0.0");
    SelfCheckingSummarizer librarian;
    IngestReport report = kb.ingest_docs(&librarian);
    CHECK(report.claims_dropped == report.sections);  // one rejection per section, recorded
    auto json = kb.export_json();
    int rejected = 0;
    std::set<std::string> names;
    for (const auto& section : json["sections"]) {
        if (section["summary"].contains("summarizer")) names.insert(section["summary"]["summarizer"].get<std::string>());
        for (const auto& dropped : section["summary"]["dropped_claims"]) {
            if (dropped["claim"].get<std::string>().find("99 engines") != std::string::npos) ++rejected;
        }
    }
    CHECK(rejected == report.sections);
    CHECK(names.count("checking/1") == 1);
    CHECK(names.count("extractive/1") == 1);  // the section with 4096 "fell back"
}
