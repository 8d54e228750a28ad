// `kb show`'s Markdown says each thing once: a rule's code once, a stale mark once, and the same
// evidence from many designs as one line naming them.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

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
