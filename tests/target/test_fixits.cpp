// Fix-its: rustc-style suggestions parsed from npuopt-jsonl and from rustc's / cargo's own JSON,
// and applied to a source (target/fixits.hpp).

#include <doctest/doctest.h>

#include <string>

#include "target/fixits.hpp"
#include "target/protocol.hpp"

using namespace npuopt::target;

namespace {

// What npuc 1.1 prints for a renamed DSL function (docs/1.1/toolchain.md).
const char* k_npuc_line =
    R"({"type":"diagnostic","level":"error","code":"E0401","message":"`vtrf` was renamed to `to_trf` in npuc 1.1.0; update the kernel",)"
    R"("span":{"file":"k.rs","line":2,"column":9},"quantities":[],"notes":["rustc E0599"],"children":[{"level":"help",)"
    R"("message":"use `to_trf`","spans":[{"file_name":"/work/k.rs","byte_start":20,"byte_end":24,"line_start":2,"line_end":2,)"
    R"("column_start":9,"column_end":13,"suggested_replacement":"to_trf","suggestion_applicability":"MachineApplicable"}]}]})";

const std::string k_source = "fn main() {\n    x = vtrf(a);\n}\n";

}  // namespace

TEST_CASE("fix-its: npuopt-jsonl children carry suggestions with their applicability") {
    auto parsed = detail::parse_output(std::string(k_npuc_line) + "\n" + R"({"type":"check","ok":false,"errors":1})" + "\n");
    CHECK_FALSE(parsed.bad_line);
    REQUIRE(parsed.diagnostics.size() == 1);
    const Diagnostic& diagnostic = parsed.diagnostics[0];
    CHECK(diagnostic.notes == std::vector<std::string>{"rustc E0599"});  // children are not notes here
    REQUIRE(diagnostic.suggestions.size() == 1);
    CHECK(diagnostic.suggestions[0].replacement == "to_trf");
    CHECK(diagnostic.suggestions[0].byte_start == 20);
    CHECK(diagnostic.suggestions[0].applicability == Applicability::machine_applicable);
    CHECK(diagnostic.suggestions[0].message == "use `to_trf`");
    CHECK(applicability_name(diagnostic.suggestions[0].applicability) == "MachineApplicable");
}

TEST_CASE("fix-its: rustc's JSON diagnostics and cargo's messages are understood") {
    const std::string rustc =
        R"({"$message_type":"diagnostic","message":"cannot find function `vtrf` in this scope","code":{"code":"E0425","explanation":"…"},)"
        R"("level":"error","spans":[{"file_name":"src/k.rs","byte_start":20,"byte_end":24,"line_start":2,"line_end":2,"column_start":9,)"
        R"("column_end":13,"is_primary":true,"text":[],"label":"not found","suggested_replacement":null,"suggestion_applicability":null}],)"
        R"("children":[{"message":"a function with a similar name exists","code":null,"level":"help","spans":[{"file_name":"src/k.rs",)"
        R"("byte_start":20,"byte_end":24,"line_start":2,"line_end":2,"column_start":9,"column_end":13,"is_primary":true,"text":[],)"
        R"("label":null,"suggested_replacement":"to_trf","suggestion_applicability":"MaybeIncorrect"}],"children":[],"rendered":null},)"
        R"({"message":"for more information, see rustc --explain","code":null,"level":"note","spans":[],"children":[],"rendered":null}],)"
        R"("rendered":"error[E0425]: …"})";
    const std::string cargo = R"({"reason":"compiler-message","package_id":"k 0.1.0","target":{},"message":)" + rustc + "}";
    const std::string summary =
        R"({"$message_type":"diagnostic","message":"aborting due to 1 previous error","code":null,"level":"error","spans":[],"children":[],"rendered":""})";
    const std::string finished = R"({"reason":"build-finished","success":false})";

    auto parsed = detail::parse_output(rustc + "\n" + summary + "\n" + cargo + "\n" + finished + "\n");
    CHECK_FALSE(parsed.bad_line);
    CHECK(parsed.rustc_messages);
    REQUIRE(parsed.diagnostics.size() == 2);  // the summary is not a diagnostic of the kernel
    for (const auto& diagnostic : parsed.diagnostics) {
        CHECK(diagnostic.code == "E0425");
        CHECK(diagnostic.level == "error");
        REQUIRE(diagnostic.span);
        CHECK(diagnostic.span->file == "src/k.rs");
        CHECK(diagnostic.span->line == 2);
        REQUIRE(diagnostic.suggestions.size() == 1);
        CHECK(diagnostic.suggestions[0].applicability == Applicability::maybe_incorrect);
        REQUIRE(diagnostic.notes.size() == 1);
        CHECK(diagnostic.notes[0].starts_with("note: for more information"));
    }
    REQUIRE(parsed.build_finished);
    CHECK_FALSE(*parsed.build_finished);
    // MaybeIncorrect is never applied unseen.
    CHECK_FALSE(has_machine_applicable(parsed.diagnostics));
    CHECK(apply_fixits(k_source, "src/k.rs", parsed.diagnostics).edits.empty());
}

TEST_CASE("fix-its: a suggestion with a bad byte range is a protocol error naming it") {
    std::string line = k_npuc_line;
    line.replace(line.find("\"byte_end\":24"), 13, "\"byte_end\":3");
    auto parsed = detail::parse_output(line + "\n");
    REQUIRE(parsed.bad_line);
    CHECK(parsed.parse_error.find("byte range") != std::string::npos);
}

TEST_CASE("fix-its: machine-applicable suggestions are applied to the file they name") {
    auto parsed = detail::parse_output(std::string(k_npuc_line) + "\n");
    REQUIRE(parsed.diagnostics.size() == 1);
    SUBCASE("same file name, another directory") {
        FixedSource fixed = apply_fixits(k_source, "/campaign/designs/k.rs", parsed.diagnostics);
        CHECK(fixed.source == "fn main() {\n    x = to_trf(a);\n}\n");
        REQUIRE(fixed.edits.size() == 1);
        CHECK(fixed.edits[0].from == "vtrf");
        CHECK(fixed.edits[0].to == "to_trf");
        CHECK(fixed.edits[0].code == "E0401");
        CHECK(fixed.skipped.empty());
    }
    SUBCASE("another file is left alone") {
        FixedSource fixed = apply_fixits(k_source, "other.rs", parsed.diagnostics);
        CHECK(fixed.source == k_source);
        CHECK(fixed.edits.empty());
        REQUIRE(fixed.skipped.size() == 1);
        CHECK(fixed.skipped[0].find("another file") != std::string::npos);
    }
    SUBCASE("a range past the end of a shorter source is skipped") {
        FixedSource fixed = apply_fixits("fn x() {}", "k.rs", parsed.diagnostics);
        CHECK(fixed.edits.empty());
        REQUIRE(fixed.skipped.size() == 1);
        CHECK(fixed.skipped[0].find("outside") != std::string::npos);
    }
    SUBCASE("several edits apply from the end; duplicates once, overlaps skipped") {
        Diagnostic diagnostic = parsed.diagnostics[0];
        Suggestion second = diagnostic.suggestions[0];
        second.byte_start = 0;
        second.byte_end = 2;
        second.replacement = "pub fn";
        Suggestion overlapping = diagnostic.suggestions[0];
        overlapping.byte_start = 22;
        overlapping.byte_end = 26;
        overlapping.replacement = "zz";
        diagnostic.suggestions.push_back(second);
        diagnostic.suggestions.push_back(diagnostic.suggestions[0]);  // the same fix twice
        diagnostic.suggestions.push_back(overlapping);
        FixedSource fixed = apply_fixits(k_source, "k.rs", {diagnostic});
        CHECK(fixed.source == "pub fn main() {\n    x = to_trf(a);\n}\n");
        CHECK(fixed.edits.size() == 2);
        REQUIRE(fixed.skipped.size() == 1);
        CHECK(fixed.skipped[0].find("overlaps") != std::string::npos);
    }
}
