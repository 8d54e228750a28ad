// Rewrites learnt from fix-its and known failures of families (knowledge/rewrites.hpp).

#include <doctest/doctest.h>

#include <filesystem>

#include "knowledge/rewrites.hpp"
#include "store/database.hpp"
#include "store/knowledge_store.hpp"
#include "../support/temp_dir.hpp"

using namespace npuopt;
using knowledge::SourceRewrite;

namespace {

target::SourceEdit rename_edit() {
    target::SourceEdit edit;
    edit.code = "E0401";
    edit.message = "`vtrf` was renamed to `to_trf` in npuc 1.1.0; update the kernel";
    edit.help = "use `to_trf`";
    edit.from = "vtrf";
    edit.to = "to_trf";
    edit.line = 3;
    edit.column = 9;
    return edit;
}

}  // namespace

TEST_CASE("apply_rewrites: whole identifiers only, literal text anywhere, counted per rule") {
    std::vector<SourceRewrite> rewrites = {{1, "E0401", "vtrf", "to_trf", "1.1.0", ""},
                                           {2, "E0999", "::old::", "::new::", "1.1.0", ""}};
    auto result = knowledge::apply_rewrites("vtrf(a); my_vtrf(b); vtrf2(c); x.vtrf(d); use a::old::b;", rewrites);
    CHECK(result.source == "to_trf(a); my_vtrf(b); vtrf2(c); x.to_trf(d); use a::new::b;");
    REQUIRE(result.applied.size() == 2);
    CHECK(result.applied[0] == std::pair<std::int64_t, int>{1, 2});
    CHECK(result.applied[1] == std::pair<std::int64_t, int>{2, 1});
    CHECK(knowledge::apply_rewrites("nothing here", rewrites).applied.empty());
}

TEST_CASE("compare_versions: numeric fields, then text") {
    CHECK(knowledge::compare_versions("1.10.0", "1.9.2") > 0);
    CHECK(knowledge::compare_versions("1.1.0", "1.1.0") == 0);
    CHECK(knowledge::compare_versions("1.1", "1.1.0") < 0);
    CHECK(knowledge::compare_versions("1.0.0", "1.1.0") < 0);
    CHECK(knowledge::compare_versions("2.0.0-rc1", "2.0.0-rc2") < 0);
}

TEST_CASE("SourceRules: a kept fix-it is a rewrite on its version and later ones, a failing one is demoted") {
    fakes::TempDir dir("rewrites");
    auto database = store::Database::open(dir.path() / "kb.db");
    store::KnowledgeStore store(database);
    knowledge::SourceRules v11(store, "npu-sim", "1.1.0", "npuc");
    const auto rule = v11.record_rewrite(rename_edit(), {"design-a", "", {}});
    CHECK(v11.record_rewrite(rename_edit(), {"design-b", "", {}}) == rule);
    auto rewrites = v11.rewrites();
    REQUIRE(rewrites.size() == 1);
    CHECK(rewrites[0].from == "vtrf");
    CHECK(rewrites[0].to == "to_trf");
    CHECK(rewrites[0].since == "1.1.0");
    CHECK(rewrites[0].statement.find("since npuc 1.1.0: `vtrf` → `to_trf`") == 0);
    auto record = store.find_rule(rule);
    REQUIRE(record);
    CHECK(record->evidence_count == 2);
    CHECK(store.list_rule_evidence(rule).size() == 2);

    CHECK(knowledge::SourceRules(store, "npu-sim", "1.2.0", "npuc").rewrites().size() == 1);  // later: applies
    CHECK(knowledge::SourceRules(store, "npu-sim", "1.0.0", "npuc").rewrites().empty());      // earlier: not
    CHECK(knowledge::SourceRules(store, "other", "1.1.0", "npuc").rewrites().empty());

    v11.reject_rewrite(rename_edit(), {"design-c", "", {}}, "the fixed source still fails: E0201");
    CHECK(v11.rewrites().empty());
    CHECK(store.find_rule(rule)->status == "demoted");
}

TEST_CASE("SourceRules: a known failure needs two designs and is retired by a pass") {
    fakes::TempDir dir("failures");
    auto database = store::Database::open(dir.path() / "kb.db");
    store::KnowledgeStore store(database);
    knowledge::SourceRules rules(store, "npu-sim", "1.1.0", "npuc");
    target::Diagnostic renamed{"error", "E0401", "`vtrf` was renamed", std::nullopt, {}, {}, {}};
    rules.record_failure("streamed", renamed, {"a", "", {}});
    rules.record_failure("streamed", renamed, {"a", "", {}});  // the same design again counts once
    CHECK(rules.known_failures(2).empty());
    rules.record_failure("streamed", renamed, {"b", "", {}});
    auto known = rules.known_failures(2);
    REQUIRE(known.size() == 1);
    CHECK(known[0].family == "streamed");
    CHECK(known[0].code == "E0401");
    CHECK(known[0].designs == 2);
    CHECK(knowledge::SourceRules(store, "npu-sim", "1.2.0", "npuc").known_failures(2).empty());  // per version
    rules.record_pass("other_family", {"c", "", {}});
    CHECK(rules.known_failures(2).size() == 1);
    rules.record_pass("streamed", {"d", "", {}});
    CHECK(rules.known_failures(2).empty());
    rules.record_failure("streamed", renamed, {"e", "", {}});  // fails again after the pass
    CHECK(rules.known_failures(2).size() == 1);
}
