// Legality rules: mining from protocol-format diagnostics, check_quantities, demotion, runtime rules.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "knowledge/knowledge_base.hpp"
#include "knowledge/rules.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;
using npuopt::target::Diagnostic;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "kb-rules-XXXXXX").string();
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

/// The fixture diagnostics (tests/data/knowledge/diagnostics-1.0.jsonl), parsed as the adapter does.
std::vector<Diagnostic> fixture_diagnostics() {
    std::ifstream stream(fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "diagnostics-1.0.jsonl");
    REQUIRE(stream);
    std::vector<Diagnostic> diagnostics;
    std::string line;
    while (std::getline(stream, line)) {
        if (line.empty()) continue;
        std::string error;
        auto diagnostic = npuopt::target::parse_diagnostic_line(line, &error);
        REQUIRE_MESSAGE(diagnostic, error);
        diagnostics.push_back(*diagnostic);
    }
    return diagnostics;
}

const Diagnostic& by_code(const std::vector<Diagnostic>& diagnostics, const std::string& code) {
    auto found = std::find_if(diagnostics.begin(), diagnostics.end(), [&](const auto& d) { return d.code == code; });
    REQUIRE(found != diagnostics.end());
    return *found;
}

/// A fresh knowledge base at toolchain 1.0.0 in its own database.
struct Fixture {
    TempDir dir;
    npuopt::store::Database database = npuopt::store::Database::open(dir.path() / "kb.db");
    KnowledgeBase kb{database, "testchip", fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "docs"};
    Fixture() { kb.set_current_version("npuc", "1.0.0"); }
};

const npuopt::store::KbRuleRecord* rule_with(const std::vector<npuopt::store::KbRuleRecord>& rules,
                                              const std::string& code) {
    auto found = std::find_if(rules.begin(), rules.end(), [&](const auto& rule) { return rule.code == code; });
    return found == rules.end() ? nullptr : &*found;
}

}  // namespace

TEST_CASE("generalise_message replaces numbers / keeps names") {
    CHECK(generalise_message("DM allocation exceeds slice capacity on slice 3") ==
          "DM allocation exceeds slice capacity on slice N");
    CHECK(generalise_message("no DMA engine (0, 9)") == "no DMA engine (N, N)");
    CHECK(generalise_message("`vtrf` was renamed to `to_trf` in npuc 1.1.0; update the kernel") ==
          "`vtrf` was renamed to `to_trf` in npuc N; update the kernel");
    CHECK(generalise_message("DMA fault at 0x40 after 65,536 packets") == "DMA fault at N after N packets");
}

TEST_CASE("draft_rules: bounds / multiples / directions / and statements from fixture diagnostics") {
    auto diagnostics = fixture_diagnostics();
    auto dm = draft_rules(by_code(diagnostics, "E0201"));
    REQUIRE(dm.size() == 1);
    CHECK(dm[0].kind == k_rule_upper_bound);
    CHECK(dm[0].quantity == "dm_bytes");
    CHECK(dm[0].limit == 524288.0);
    CHECK(dm[0].statement == "DM allocation exceeds slice capacity on slice N");

    auto rows = draft_rules(by_code(diagnostics, "E0301"));
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].kind == k_rule_multiple_of);
    CHECK(rows[0].quantity == "rows");
    CHECK(rows[0].limit == 8.0);

    auto aligned = draft_rules(by_code(diagnostics, "E0104"));
    REQUIRE(aligned.size() == 1);
    CHECK(aligned[0].kind == k_rule_multiple_of);
    CHECK(aligned[0].quantity == "hbm_address");
    CHECK(aligned[0].limit == 256.0);

    auto engine = draft_rules(by_code(diagnostics, "E0106"));  // only the violated quantity becomes a bound
    REQUIRE(engine.size() == 1);
    CHECK(engine[0].quantity == "engine_index");
    CHECK(engine[0].limit == 7.0);

    auto pitch = draft_rules(by_code(diagnostics, "E0303"));  // "smaller than": a lower bound
    REQUIRE(pitch.size() == 1);
    CHECK(pitch[0].kind == k_rule_lower_bound);

    auto length = draft_rules(by_code(diagnostics, "E0304"));  // "must equal": not a constant limit
    REQUIRE(length.size() == 1);
    CHECK(length[0].kind == k_rule_statement);
    CHECK_FALSE(length[0].limit);

    auto hazard = draft_rules(by_code(diagnostics, "E0108"));
    REQUIRE(hazard.size() == 1);
    CHECK(hazard[0].kind == k_rule_statement);

    Diagnostic zero_packet{"error", "E0101", "DMA packet size out of range", std::nullopt,
                           {{"packet_bytes", 0.0, 4096.0}}, {}, {}};
    auto zero = draft_rules(zero_packet);  // value below the limit without "at least": no lower bound invented
    REQUIRE(zero.size() == 1);
    CHECK(zero[0].kind == k_rule_statement);
}

TEST_CASE("mine_diagnostics: one rule per signature / evidence and confidence grow with designs") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    auto diagnostics = fixture_diagnostics();
    auto touched = rules.mine_diagnostics(diagnostics, DesignRef{"design-a", "", {}}, "check");
    CHECK(touched.size() == diagnostics.size());
    auto listed = rules.list();
    CHECK(listed.size() == diagnostics.size());
    const auto* dm = rule_with(listed, "E0201");
    REQUIRE(dm != nullptr);
    CHECK(dm->evidence_count == 1);
    CHECK(dm->status == "proposed");
    CHECK(dm->toolchain_version == "1.0.0");
    const double first_confidence = dm->confidence;

    rules.mine_diagnostics({by_code(diagnostics, "E0201")}, DesignRef{"design-a", "", {}});  // same design again
    CHECK(rule_with(rules.list(), "E0201")->evidence_count == 1);
    rules.mine_diagnostics({by_code(diagnostics, "E0201")}, DesignRef{"design-b", "", {}});
    auto after = rules.list();
    const auto* confirmed = rule_with(after, "E0201");
    CHECK(confirmed->evidence_count == 2);
    CHECK(confirmed->status == "confirmed");
    CHECK(confirmed->confidence > first_confidence);
    CHECK(after.size() == listed.size());
    CHECK(fixture.kb.store().list_rule_evidence(confirmed->id).size() == 3);

    const auto* warning = rule_with(after, "E0002");
    REQUIRE(warning != nullptr);
    CHECK(warning->kind == k_rule_statement);  // a warning never rejects a design
}

TEST_CASE("a limit that differs between designs is design-dependent: the rule becomes a statement") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    Diagnostic first{"error", "E0303", "tile pitch smaller than a row", std::nullopt, {{"pitch", 1024.0, 2048.0}}, {}, {}};
    Diagnostic second{"error", "E0303", "tile pitch smaller than a row", std::nullopt, {{"pitch", 512.0, 4096.0}}, {}, {}};
    rules.mine_diagnostics({first}, DesignRef{"a", "", {}});
    CHECK(rules.check_quantities({{"pitch", 1500.0}}).size() == 1);
    rules.mine_diagnostics({second}, DesignRef{"b", "", {}});
    auto listed = rules.list();
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].kind == k_rule_statement);
    CHECK(rules.check_quantities({{"pitch", 1500.0}}).empty());
}

TEST_CASE("check_quantities: upper bounds / multiples / absent quantities / boundary values") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    rules.mine_diagnostics(fixture_diagnostics(), DesignRef{"design-a", "", {}});

    CHECK(rules.check_quantities({}).empty());
    CHECK(rules.check_quantities({{"dm_bytes", 524288.0}, {"rows", 16.0}, {"packet_bytes", 4096.0}}).empty());
    auto violations = rules.check_quantities({{"dm_bytes", 600000.0}, {"rows", 12.0}, {"hbm_address", 512.0}});
    REQUIRE(violations.size() == 2);
    std::sort(violations.begin(), violations.end(), [](const auto& a, const auto& b) { return a.code < b.code; });
    CHECK(violations[0].code == "E0201");
    CHECK(violations[0].value == 600000.0);
    CHECK(violations[0].limit == 524288.0);
    CHECK(violations[0].text.find("dm_bytes ≤ 524288") != std::string::npos);
    CHECK(violations[1].code == "E0301");
    CHECK(violations[1].text.find("rows is a multiple of 8") != std::string::npos);
    CHECK(rules.check_quantities({{"hbm_address", 4100.0}}).size() == 1);

    std::string text = rules.render_text();
    CHECK(text.find("E0201 DM allocation exceeds slice capacity on slice N — dm_bytes ≤ 524288") !=
          std::string::npos);
    CHECK(text.find("toolchain 1.0.0") != std::string::npos);
}

TEST_CASE("record_acceptance demotes a rule that rejects a design the toolchain accepts") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    auto diagnostics = fixture_diagnostics();
    // A pitch limit read off one design (pitch ≥ 2048) is wrong for designs with shorter rows.
    rules.mine_diagnostics({by_code(diagnostics, "E0303"), by_code(diagnostics, "E0201")}, DesignRef{"a", "", {}});
    const npuopt::knowledge::Quantities accepted{{"pitch", 1024.0}, {"dm_bytes", 4096.0}};
    REQUIRE(rules.check_quantities(accepted).size() == 1);
    auto demoted = rules.record_acceptance(accepted, DesignRef{"accepted-design", "", accepted});
    REQUIRE(demoted.size() == 1);
    auto rule = fixture.kb.store().find_rule(demoted[0]);
    REQUIRE(rule);
    CHECK(rule->code == "E0303");
    CHECK(rule->status == "demoted");
    CHECK(rule->counter_count == 1);
    CHECK(rule->confidence < 0.2);
    CHECK(rules.check_quantities(accepted).empty());  // precision restored
    CHECK(rules.check_quantities({{"dm_bytes", 600000.0}}).size() == 1);  // the other rule still holds
    auto evidence = fixture.kb.store().list_rule_evidence(rule->id);
    CHECK(evidence.back().outcome == "accepted");
    CHECK(evidence.back().design_hash == "accepted-design");
}

TEST_CASE("runtime failures become runtime rules tied to design features") {
    Fixture fixture;
    RuleBook rules = fixture.kb.rules();
    npuopt::target::RunResult hung;
    hung.call.status = npuopt::target::CallStatus::timed_out;
    auto ids = rules.record_run_result(hung, DesignRef{"hanging", "", {}}, {{"dm_row_pitch_bytes", 4096.0}});
    REQUIRE(ids.size() == 1);
    auto rule = fixture.kb.store().find_rule(ids[0]);
    REQUIRE(rule);
    CHECK(rule->kind == k_rule_runtime);
    CHECK(rule->code == "runtime:hang");
    CHECK(rule->origin == "run");
    CHECK(rules.check_quantities({{"dm_row_pitch_bytes", 4096.0}, {"dm_bytes", 1.0}}).size() == 1);
    CHECK(rules.check_quantities({{"dm_row_pitch_bytes", 4160.0}}).empty());
    CHECK(rules.check_quantities({}).empty());

    npuopt::target::RunResult device;
    device.call.status = npuopt::target::CallStatus::failed;
    device.call.message = "device error: DMA fault at 0x40";
    device.error_kind = "device";
    auto device_ids = rules.record_run_result(device, DesignRef{"faulting", "", {}}, {{"switch_bytes", 3.0}});
    REQUIRE(device_ids.size() == 1);
    CHECK(fixture.kb.store().find_rule(device_ids[0])->code == "runtime:device");

    npuopt::target::RunResult fine;
    fine.call.status = npuopt::target::CallStatus::ok;
    CHECK(rules.record_run_result(fine, DesignRef{"fine", "", {}}, {{"dm_row_pitch_bytes", 4096.0}}).empty());
    CHECK(rules.render_text().find("fails at run time when dm_row_pitch_bytes = 4096") != std::string::npos);
}
