// Text that reaches campaign.db through the rule book is capped, whatever built the diagnostic.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "knowledge/knowledge_base.hpp"
#include "knowledge/rules.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

TEST_CASE("rule book: a long diagnostic or runtime message is stored capped") {
    fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
    fs::create_directories(base);
    std::string pattern = (base / "kb-caps-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    const fs::path dir = pattern;
    {
        auto database = npuopt::store::Database::open(dir / "kb.db");
        KnowledgeBase kb{database, "testchip", fs::path(NPUOPT_TEST_DATA_DIR) / "knowledge" / "docs"};
        kb.set_current_version("npuc", "1.0.0");
        RuleBook rules = kb.rules();
        const std::string file_contents(50000, 's');  // what a compile_error!(include_str!(...)) would carry

        npuopt::target::Diagnostic diagnostic;
        diagnostic.level = "error";
        diagnostic.code = "E0001";
        diagnostic.message = "error: " + file_contents;  // built by hand: not through the parser's cap
        auto ids = rules.mine_diagnostics({diagnostic}, DesignRef{"d", "", {}});
        REQUIRE_FALSE(ids.empty());
        auto rule = kb.store().find_rule(ids[0]);
        REQUIRE(rule);
        CHECK(rule->statement.size() <= npuopt::target::k_diagnostic_message_max_chars);
        for (const auto& evidence : kb.store().list_rule_evidence(rule->id)) {
            CHECK(evidence.message.size() <= npuopt::target::k_diagnostic_message_max_chars);
        }

        auto runtime = rules.record_runtime_failure(RuntimeFailure{"device", file_contents, {}}, DesignRef{"e", "", {}});
        auto runtime_rule = kb.store().find_rule(runtime);
        REQUIRE(runtime_rule);
        CHECK(runtime_rule->statement.size() <= npuopt::target::k_diagnostic_message_max_chars);
        for (const auto& evidence : kb.store().list_rule_evidence(runtime)) {
            CHECK(evidence.message.size() <= npuopt::target::k_diagnostic_message_max_chars);
        }
    }
    std::error_code ignored;
    fs::remove_all(dir, ignored);
}
