// `kb show`'s Markdown says each thing once: a rule's code once, a stale mark once, and the same
// evidence from many designs as one line naming them.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/log.hpp"
#include "knowledge/knowledge_base.hpp"
#include "store/database.hpp"
#include "../support/temp_dir.hpp"

using namespace npuopt;

namespace {

std::size_t occurrences(const std::string& text, const std::string& needle) {
    std::size_t count = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
    return count;
}

target::Diagnostic dm_overflow(double dm_bytes) {
    target::Diagnostic diagnostic;
    diagnostic.level = "error";
    diagnostic.code = "E0201";
    diagnostic.message = "DM allocation exceeds slice capacity";
    diagnostic.quantities.push_back({"dm_bytes", dm_bytes, 524288.0});
    return diagnostic;
}

}  // namespace

TEST_CASE("kb show names a rule's code once and groups the same evidence of many designs") {
    fakes::TempDir dir("npuopt-kb-markdown");
    auto database = store::Database::open(dir.path() / "kb.db");
    knowledge::KnowledgeBase kb(database, "testchip", dir.path() / "docs");
    kb.set_current_version("fakec", "1.0.0");
    for (int design = 0; design < 5; ++design) {
        kb.rules().mine_diagnostics({dm_overflow(786432.0)},
                                    knowledge::DesignRef{std::to_string(design) + "abcdef0123456789", {}, {}}, "check");
    }
    const std::string markdown = kb.export_markdown();
    INFO(markdown);
    CHECK(occurrences(markdown, "E0201") == 1);
    CHECK(markdown.find("- **E0201** DM allocation exceeds slice capacity") != std::string::npos);
    // five designs, one line: the first three named, then how many in all
    CHECK(markdown.find("5 designs (`0abcdef01234`, `1abcdef01234`, `2abcdef01234`, …) on 1.0.0") != std::string::npos);
    CHECK(occurrences(markdown, "  - ") == 1);
}

TEST_CASE("kb show prints a fact's key and value once, by kind, naming only another toolchain") {
    fakes::TempDir dir("npuopt-kb-markdown");
    auto database = store::Database::open(dir.path() / "kb.db");
    knowledge::KnowledgeBase kb(database, "testchip", dir.path() / "docs");
    kb.set_current_version("fakec", "1.0.0");
    auto add_fact = [&](const std::string& kind, const std::string& key, const std::string& text, double value) {
        database.execute("INSERT INTO knowledge_entries (target, kind, key, text, value, evidence, "
                         "toolchain_version_id, created_at) VALUES ('testchip', ?, ?, ?, ?, '{}', "
                         "(SELECT id FROM toolchain_versions WHERE version = '1.0.0'), ?)",
                         {kind, key, text, value, log::utc_timestamp()});
    };
    add_fact("hardware_param", "clusters", "clusters = 2 count (95% CI 2 .. 2); public fact of target.yaml", 2.0);
    add_fact("measurement", "dma_engine:{\"bytes\":256}", "dma_engine {\"bytes\":256} ok: median 2077 cycles", 2077.0);
    add_fact("measurement", "plain", "a text that does not restate its key", 7.0);
    const std::string markdown = kb.export_markdown();
    INFO(markdown);
    CHECK(markdown.find("### hardware_param\n\n- **clusters** = 2 count (95% CI 2 .. 2); public fact of target.yaml\n") !=
          std::string::npos);
    CHECK(markdown.find("### measurement\n\n- **dma_engine:{\"bytes\":256}** ok: median 2077 cycles\n") !=
          std::string::npos);
    CHECK(markdown.find("- **plain** = 7 a text that does not restate its key\n") != std::string::npos);
    CHECK(occurrences(markdown, "### measurement") == 1);
    CHECK(occurrences(markdown, "(toolchain 1.0.0)") == 0);  // the header names the current toolchain
}
