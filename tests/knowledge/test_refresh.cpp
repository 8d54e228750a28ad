// Refresh after a toolchain update (1.0.0 → 1.1.0 of the fake toolchain
// tests/data/knowledge/fake-npuc-kb) and the diff between the two versions' knowledge.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/refresh.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "kb-refresh-XXXXXX").string();
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

npuopt::target::Toolchain fake_toolchain(const std::string& version) {
    npuopt::config::TargetConfig target;
    target.name = "testchip";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.docs_dir = fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "docs";
    target.toolchain.bin = "fake-npuc-kb";
    target.toolchain.search_paths = {"knowledge"};
    target.toolchain.env = {{"FAKE_VERSION", version}};
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10.0};
    npuopt::proc::SandboxPolicy sandbox;
    sandbox.enabled = true;
    sandbox.required = false;
    return npuopt::target::Toolchain(target, sandbox);
}

/// A knowledge base at 1.0.0 whose rules come from compiling real (fake) designs.
struct Fixture {
    TempDir dir;
    npuopt::store::Database database = npuopt::store::Database::open(dir.path() / "kb.db");
    npuopt::target::Toolchain v10 = fake_toolchain("1.0.0");
    npuopt::target::Toolchain v11 = fake_toolchain("1.1.0");
    KnowledgeBase kb = KnowledgeBase::for_target(database, v10.target());

    fs::path write_design(const std::string& name, const std::string& text) {
        fs::path file = dir.path() / (name + ".rs");
        std::ofstream(file) << text;
        return file;
    }
    /// Compile with 1.0 and mine what it reports, as the evaluation cascade does.
    void compile_and_mine(const fs::path& file, const std::string& hash) {
        auto result = v10.check(file);
        REQUIRE_MESSAGE(result.call.status != npuopt::target::CallStatus::not_started, result.call.message);
        kb.rules().mine_diagnostics(result.diagnostics, DesignRef{hash, file, {}}, "check");
    }
    void add_fact(const std::string& version, double value) {
        database.execute(
            "INSERT INTO knowledge_entries (target, kind, key, text, value, evidence, toolchain_version_id, created_at) "
            "VALUES ('testchip', 'hw_param', 'pass_issue_cycles', 'tensor-unit pass cost, fitted', ?, '{}', "
            "(SELECT id FROM toolchain_versions WHERE version = ?), ?)",
            {value, version, npuopt::log::utc_timestamp()});
    }
};

const npuopt::store::KbRuleRecord* find_rule(const std::vector<npuopt::store::KbRuleRecord>& rules,
                                             const std::string& code) {
    auto found = std::find_if(rules.begin(), rules.end(), [&](const auto& rule) { return rule.code == code; });
    return found == rules.end() ? nullptr : &*found;
}

bool has_code(const std::vector<RuleChange>& changes, const std::string& code) {
    return std::any_of(changes.begin(), changes.end(), [&](const RuleChange& change) { return change.code == code; });
}

bool contains(const std::vector<std::string>& items, const std::string& wanted) {
    return std::find(items.begin(), items.end(), wanted) != items.end();
}

}  // namespace

TEST_CASE("first refresh builds from nothing - a second at the same version does nothing") {
    Fixture fixture;
    RefreshReport first = refresh(fixture.kb, fixture.v10);
    CHECK(first.changed);
    CHECK(first.old_version.empty());
    CHECK(first.new_version == "1.0.0");
    CHECK(first.ingest.doc_set == "1.0");
    CHECK(first.ingest.sections > 0);
    CHECK(fixture.kb.current_version() == "1.0.0");
    CHECK(fixture.kb.toolchain_name() == "npuc");
    RefreshReport again = refresh(fixture.kb, fixture.v10);
    CHECK_FALSE(again.changed);
}

TEST_CASE("refresh 1.0.0 → 1.1.0 marks stale / retires / keeps / carries and adds rules - diff lists it") {
    Fixture fixture;
    refresh(fixture.kb, fixture.v10);
    fixture.add_fact("1.0.0", 600.0);

    // E0101 (packet 8192 > 4096): 1.1 accepts it → retired.
    fixture.compile_and_mine(fixture.write_design("big_packet", "packet = 8192\n"), "hash-big-packet");
    // E0201 (DM 786432 > 524288), known only through the designs table: still rejected → kept.
    const std::string big_dm_source = "dm_bytes = 786432\n";
    const std::string big_dm_hash = npuopt::content_hash(big_dm_source);
    fixture.database.execute(
        "INSERT INTO designs (content_hash, target, kernel, shape, template, params, source, created_at) "
        "VALUES (?, 'testchip', 'feedforward', 'hidden=64', 'raw', '{}', ?, ?)",
        {big_dm_hash, big_dm_source, npuopt::log::utc_timestamp()});
    {
        auto file = fixture.write_design("big_dm_copy", big_dm_source);
        auto result = fixture.v10.check(file);
        fixture.kb.rules().mine_diagnostics(result.diagnostics, DesignRef{big_dm_hash, "", {}}, "check");
    }
    // E0301 (rows 12) in a kernel that calls vtrf: 1.1 stops at the rename (E0401) → carried, unverified.
    fixture.compile_and_mine(fixture.write_design("vtrf_rows", "uses vtrf\nrows = 12\n"), "hash-vtrf-rows");

    auto rules10 = fixture.kb.rules().list();
    REQUIRE(rules10.size() == 3);
    CHECK(fixture.kb.rules().check_quantities({{"packet_bytes", 8192.0}}).size() == 1);

    std::string remeasured_for;
    RefreshOptions options;
    options.remeasure = [&](const std::string& version) {
        remeasured_for = version;
        fixture.add_fact(version, 450.0);
    };
    RefreshReport report = refresh(fixture.kb, fixture.v11, options);
    CHECK(report.changed);
    CHECK(report.old_version == "1.0.0");
    CHECK(report.new_version == "1.1.0");
    CHECK(report.marked_stale > 0);
    CHECK(report.ingest.doc_set == "1.1");
    CHECK(report.rules_revalidated == 3);
    CHECK(report.rules_retired == 1);
    CHECK(report.rules_kept == 1);
    CHECK(report.rules_unverified == 1);
    CHECK(report.designs_compiled == 3);
    CHECK(report.remeasured);
    CHECK(remeasured_for == "1.1.0");
    CHECK(fixture.kb.current_version() == "1.1.0");

    // Old entries: stale, kept, queryable.
    auto all_old = fixture.kb.store().list_rules("testchip", "1.0.0");
    REQUIRE(all_old.size() == 3);
    for (const auto& rule : all_old) CHECK(rule.stale);
    const auto* retired = find_rule(all_old, "E0101");
    REQUIRE(retired != nullptr);
    CHECK(retired->status == "retired");
    CHECK(retired->retired_in == "1.1.0");
    for (const auto& section : fixture.kb.store().list_sections("testchip", "1.0.0")) CHECK(section.stale);

    // New version's rules: E0201 kept, E0301 carried unverified, E0401 (the rename) new, E0101 gone.
    auto rules11 = fixture.kb.rules().list();
    CHECK(find_rule(rules11, "E0101") == nullptr);
    REQUIRE(find_rule(rules11, "E0201") != nullptr);
    REQUIRE(find_rule(rules11, "E0301") != nullptr);
    CHECK(find_rule(rules11, "E0301")->status == "unverified");
    const auto* renamed = find_rule(rules11, "E0401");
    REQUIRE(renamed != nullptr);
    CHECK(renamed->statement.find("`vtrf` was renamed to `to_trf`") != std::string::npos);
    CHECK(fixture.kb.rules().check_quantities({{"packet_bytes", 8192.0}}).empty());
    CHECK(fixture.kb.rules().check_quantities({{"dm_bytes", 600000.0}}).size() == 1);

    // Stale docs stay searchable, marked, and rank below the current ones.
    auto hits = fixture.kb.search("largest DMA packet bytes", 10);
    REQUIRE_FALSE(hits.empty());
    CHECK_FALSE(hits[0].stale);
    CHECK(hits[0].toolchain_version == "1.1.0");
    bool stale_seen = std::any_of(hits.begin(), hits.end(), [](const SearchHit& hit) { return hit.stale; });
    CHECK(stale_seen);

    const KbDiff& changes = report.diff;
    CHECK(contains(changes.sections_added, "release-notes.md § Release notes 1.1"));
    CHECK(contains(changes.sections_changed, "dma.md § DMA > Packets"));
    CHECK(contains(changes.sections_changed, "memory.md § Memory > Register files"));
    CHECK_FALSE(contains(changes.sections_changed, "tensor.md § Tensor unit"));
    CHECK(changes.sections_removed.empty());
    CHECK(has_code(changes.rules_added, "E0401"));
    CHECK(has_code(changes.rules_retired, "E0101"));
    CHECK(has_code(changes.rules_kept, "E0201"));
    REQUIRE(changes.facts_remeasured.size() == 1);
    CHECK(changes.facts_remeasured[0].old_value == 600.0);
    CHECK(changes.facts_remeasured[0].new_value == 450.0);
    std::string markdown = changes.to_markdown();
    CHECK(markdown.find("1.0.0 → 1.1.0") != std::string::npos);
    CHECK(markdown.find("E0101") != std::string::npos);
    CHECK(changes.to_json()["rules_retired"].size() == 1);

    // Unchanged sections reuse their checked summary; the export shows both versions.
    CHECK(report.ingest.summaries_reused > 0);
    auto json = fixture.kb.export_json();
    CHECK(json["toolchain_version"] == "1.1.0");
    bool stale_rule_exported = false;
    for (const auto& rule : json["rules"]) {
        if (rule["code"] == "E0101") stale_rule_exported = rule["stale"].get<bool>() && !rule["evidence"].empty();
    }
    CHECK(stale_rule_exported);
    CHECK(fixture.kb.export_markdown().find("*(stale)*") != std::string::npos);

    // diff is also callable on its own, later.
    CHECK(diff(fixture.kb, "1.0.0", "1.1.0").rules_added.size() == changes.rules_added.size());
    CHECK_FALSE(refresh(fixture.kb, fixture.v11).changed);
}

TEST_CASE("refresh re-reads a relaxed limit when the evidence still fails") {
    Fixture fixture;
    refresh(fixture.kb, fixture.v10);
    fixture.compile_and_mine(fixture.write_design("huge_packet", "packet = 16384\n"), "hash-huge-packet");
    REQUIRE(fixture.kb.rules().list().at(0).limit == 4096.0);
    RefreshReport report = refresh(fixture.kb, fixture.v11);
    CHECK(report.rules_kept == 1);
    REQUIRE(report.diff.rules_limit_changed.size() == 1);
    CHECK(report.diff.rules_limit_changed[0].old_limit == 4096.0);
    CHECK(report.diff.rules_limit_changed[0].new_limit == 8192.0);
    CHECK(fixture.kb.rules().check_quantities({{"packet_bytes", 8192.0}}).empty());
    CHECK(fixture.kb.rules().check_quantities({{"packet_bytes", 8193.0}}).size() == 1);
}

TEST_CASE("refresh fails clearly when the toolchain cannot report its version / and changes nothing") {
    Fixture fixture;
    refresh(fixture.kb, fixture.v10);
    auto broken_target = fixture.v10.target();
    broken_target.toolchain.bin = "no-such-npuc";
    npuopt::proc::SandboxPolicy sandbox;
    sandbox.required = false;
    npuopt::target::Toolchain broken(broken_target, sandbox);
    CHECK_THROWS_AS(refresh(fixture.kb, broken), npuopt::Error);
    CHECK(fixture.kb.current_version() == "1.0.0");
}
