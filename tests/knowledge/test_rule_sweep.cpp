// Rule precision bookkeeping: the audit of a rule book against accepted designs, demotion that
// does not depend on the order in which designs are met, runtime rules kept on compile success.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "knowledge/knowledge_base.hpp"
#include "knowledge/rule_sweep.hpp"
#include "store/database.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "rule-sweep-XXXXXX").string();
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
    Fixture() { kb.set_current_version("npuc", "1.0.0"); }
};

npuopt::target::Diagnostic diagnostic(const std::string& code, const std::string& message, const std::string& quantity,
                                      double value, std::optional<double> limit) {
    npuopt::target::Diagnostic result;
    result.level = "error";
    result.code = code;
    result.message = message;
    result.quantities.push_back({quantity, value, limit});
    return result;
}

npuopt::store::KbRuleRecord bound(const std::string& code, const std::string& quantity, double limit,
                                  const std::string& status = "confirmed") {
    npuopt::store::KbRuleRecord rule;
    rule.code = code;
    rule.kind = std::string(k_rule_upper_bound);
    rule.quantity = quantity;
    rule.limit = limit;
    rule.status = status;
    return rule;
}

}  // namespace

TEST_CASE("audit_rules counts an enforced rule that rejects an accepted design as imprecise") {
    const std::vector<AcceptedDesign> accepted = {{"small", {{"dm_bytes", 4096.0}}},
                                                  {"large", {{"dm_bytes", 400000.0}, {"packet_bytes", 4096.0}}}};
    auto statement = bound("E0303", "", 0.0);
    statement.kind = std::string(k_rule_statement);
    statement.limit.reset();
    // Right limit: precise; a limit read off one design (262144): rejects "large".
    RuleAudit good = audit_rules({bound("E0201", "dm_bytes", 524288.0), bound("E0101", "packet_bytes", 4096.0), statement},
                                 accepted);
    CHECK(good.precision == doctest::Approx(1.0));
    CHECK(good.active_imprecise == 0);
    CHECK(good.active_checkable == 2);
    CHECK(good.active_exercised == 2);
    CHECK(good.codes == std::set<std::string>{"E0101", "E0201", "E0303"});

    RuleAudit bad = audit_rules({bound("E0201", "dm_bytes", 262144.0), bound("E0101", "packet_bytes", 4096.0)}, accepted);
    CHECK(bad.active_imprecise == 1);
    CHECK(bad.precision == doctest::Approx(0.5));
    REQUIRE(bad.rows.size() == 2);
    CHECK(bad.rows[0].rejects == std::vector<std::string>{"large"});

    // Demoted, the same rule is no longer enforced: precision is about enforced rules, the
    // mined count still shows it.
    RuleAudit demoted = audit_rules({bound("E0201", "dm_bytes", 262144.0, "demoted")}, accepted);
    CHECK(demoted.active == 0);
    CHECK(demoted.precision == doctest::Approx(1.0));
    CHECK(demoted.mined_imprecise == 1);
    CHECK(demoted.demoted == 1);
    CHECK(demoted.codes_active.empty());
}

TEST_CASE("a rule mined after an accepted design it rejects is born demoted") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    // The toolchain accepts a tile with a 64-byte pitch first ...
    const Quantities accepted{{"pitch", 64.0}, {"cols", 64.0}};
    CHECK(rules.record_acceptance(accepted, DesignRef{"accepted-first", "", accepted}).empty());
    // ... then rejects another design, whose diagnostic reads as "pitch >= 128".
    auto ids = rules.mine_diagnostics({diagnostic("E0303", "tile pitch smaller than a row", "pitch", 64.0, 128.0)},
                                      DesignRef{"rejected", "", {{"pitch", 64.0}, {"cols", 128.0}}});
    REQUIRE(ids.size() == 1);
    auto rule = fixture.kb.store().find_rule(ids[0]);
    REQUIRE(rule);
    CHECK(rule->kind == k_rule_lower_bound);
    CHECK(rule->status == "demoted");
    CHECK(rule->counter_count == 1);
    CHECK(rules.check_quantities(accepted).empty());
    auto evidence = fixture.kb.store().list_rule_evidence(rule->id);
    REQUIRE_FALSE(evidence.empty());
    CHECK(evidence.back().outcome == "accepted");
    CHECK(evidence.back().design_hash == "accepted-first");

    // A rule the accepted designs agree with stays enforced.
    auto dm = rules.mine_diagnostics({diagnostic("E0201", "DM allocation exceeds slice capacity on slice 0", "dm_bytes",
                                                 600000.0, 524288.0)},
                                     DesignRef{"too-big", "", {}});
    REQUIRE(dm.size() == 1);
    CHECK(fixture.kb.store().find_rule(dm[0])->status == "proposed");
    CHECK(rules.check_quantities({{"dm_bytes", 600000.0}}).size() == 1);
}

TEST_CASE("a compiled design does not demote a runtime rule with its features") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    npuopt::target::RunResult hung;
    hung.call.status = npuopt::target::CallStatus::timed_out;
    auto ids = rules.record_run_result(hung, DesignRef{"hanging", "", {}}, {{"dm_row_pitch_bytes", 4096.0}});
    REQUIRE(ids.size() == 1);
    const Quantities same_features{{"dm_row_pitch_bytes", 4096.0}};
    CHECK(rules.record_acceptance(same_features, DesignRef{"compiles", "", same_features}).empty());
    CHECK(fixture.kb.store().find_rule(ids[0])->status == "proposed");
    CHECK(rules.check_quantities(same_features).size() == 1);
}
