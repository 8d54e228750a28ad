// The command line follows git and cargo: "did you mean" on a mistyped subcommand, the campaign
// named positionally or with --campaign on every command, --json errors as an object, and a
// submission that would overwrite one says to use --out. In-process (cli::run_main).

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/suggest.hpp"
#include "cli_capture.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;
using npuopt::testing::run_cli;

namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

/// A fresh npu-sim campaign in `dir` (init reads the target's files only; no toolchain runs).
void init_campaign(const fs::path& dir) {
    auto init = run_cli({"init", dir.string(), "--target", "npu-sim"});
    REQUIRE_MESSAGE(init.exit_code == 0, init.err);
}

/// Runs `args` with the current directory set to `dir`, restored after.
npuopt::testing::Captured run_cli_in(const fs::path& dir, std::vector<std::string> args) {
    const fs::path before = fs::current_path();
    fs::current_path(dir);
    auto captured = run_cli(std::move(args));
    fs::current_path(before);
    return captured;
}

}  // namespace

TEST_CASE("edit distance counts a swap of neighbours as one edit") {
    CHECK(npuopt::cli::edit_distance("status", "status") == 0);
    CHECK(npuopt::cli::edit_distance("stauts", "status") == 1);
    CHECK(npuopt::cli::edit_distance("sumbit", "submit") == 1);
    CHECK(npuopt::cli::edit_distance("rn", "run") == 1);
    CHECK(npuopt::cli::edit_distance("", "kb") == 2);
    CHECK(npuopt::cli::edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("closest_name suggests a near name only") {
    const std::vector<std::string> names = {"init", "doctor", "status", "kb", "run", "submit", "report", "demo"};
    CHECK(npuopt::cli::closest_name("stauts", names) == "status");
    CHECK(npuopt::cli::closest_name("docter", names) == "doctor");
    CHECK(npuopt::cli::closest_name("kbb", names) == "kb");
    CHECK_FALSE(npuopt::cli::closest_name("xyzzy", names).has_value());
    CHECK_FALSE(npuopt::cli::closest_name("status", names).has_value());  // not a typo
    CHECK_FALSE(npuopt::cli::closest_name("q", names).has_value());       // "kb" is 2 edits away
}

TEST_CASE("a mistyped subcommand gets 'did you mean' and exit 2") {
    auto typo = run_cli({"stauts", "campaigns/first"});
    CHECK(typo.exit_code == 2);
    CHECK(has(typo.err, "npuopt: error: no such command 'stauts'; did you mean 'status'?"));
    CHECK(has(typo.err, "npuopt --help"));
    CHECK(typo.out.empty());

    auto after_global = run_cli({"--log-level", "error", "sumbit"});
    CHECK(after_global.exit_code == 2);
    CHECK(has(after_global.err, "did you mean 'submit'?"));

    auto unknown = run_cli({"xyzzy"});
    CHECK(unknown.exit_code == 2);
    CHECK(has(unknown.err, "no such command 'xyzzy'"));
    CHECK_FALSE(has(unknown.err, "did you mean"));
}

TEST_CASE("--json errors are an object with kind, message and exit code on stdout") {
    auto typo = run_cli({"--json", "stauts"});
    CHECK(typo.exit_code == 2);
    auto typo_json = nlohmann::json::parse(typo.out);
    CHECK(typo_json["kind"] == "invalid_input");
    CHECK(typo_json["exit_code"] == 2);
    CHECK(has(typo_json["message"].get<std::string>(), "did you mean 'status'?"));

    npuopt::fakes::TempDir scratch("npuopt-cli-usage");
    auto not_campaign = run_cli({"--json", "status", scratch.path().string()});
    CHECK(not_campaign.exit_code == 2);
    auto error = nlohmann::json::parse(not_campaign.out);
    CHECK(error == nlohmann::json{{"kind", "invalid_input"},
                                  {"message", error["message"]},
                                  {"exit_code", 2}});
    CHECK(has(error["message"].get<std::string>(), "is not a campaign directory"));
    CHECK(has(not_campaign.err, "npuopt: error: "));  // people still read stderr

    auto bad_usage = run_cli({"--json", "init", (scratch.path() / "x").string()});  // --target missing
    CHECK(bad_usage.exit_code == 2);
    CHECK(nlohmann::json::parse(bad_usage.out)["kind"] == "invalid_input");

    auto without_json = run_cli({"status", scratch.path().string()});
    CHECK(without_json.exit_code == 2);
    CHECK(without_json.out.empty());
}

TEST_CASE("the campaign is named positionally or with --campaign, on every command") {
    npuopt::fakes::TempDir scratch("npuopt-cli-usage");
    const fs::path campaign = scratch.path() / "campaign";
    init_campaign(campaign);

    auto positional = run_cli({"--json", "status", campaign.string()});
    auto flag = run_cli({"--json", "status", "--campaign", campaign.string()});
    REQUIRE(positional.exit_code == 0);
    CHECK(flag.exit_code == 0);
    CHECK(flag.out == positional.out);
    auto inside = run_cli_in(campaign, {"--json", "status"});  // as git finds its repository
    CHECK(inside.exit_code == 0);
    CHECK(inside.out == positional.out);

    auto both = run_cli({"status", campaign.string(), "--campaign", scratch.path().string()});
    CHECK(both.exit_code == 2);
    CHECK(has(both.err, "two campaign directories"));
    auto same_twice = run_cli({"status", campaign.string(), "--campaign", campaign.string()});
    CHECK(same_twice.exit_code == 0);
    auto neither = run_cli_in(scratch.path(), {"status"});
    CHECK(neither.exit_code == 2);
    CHECK(has(neither.err, "status: which campaign? name its directory: `npuopt status DIR` or `--campaign DIR`"));

    // tree: KERNEL and DIR in any order, or --campaign
    for (const auto& args : std::vector<std::vector<std::string>>{{"tree", "show", "nokernel", campaign.string()},
                                                                  {"tree", "show", campaign.string(), "nokernel"},
                                                                  {"tree", "show", "nokernel", "--campaign", campaign.string()}}) {
        auto tree = run_cli(args);
        CHECK(tree.exit_code == 2);
        CHECK(has(tree.err, "kernel 'nokernel' has no design tree in " + campaign.string()));
    }
    // kb: a word that is a campaign directory names it (here without a toolchain: nothing is refreshed)
    {
        std::ifstream in(campaign / "campaign.yaml");
        std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto at = yaml.find("  bin: \"\"");
        REQUIRE(at != std::string::npos);
        yaml.replace(at, std::string("  bin: \"\"").size(), "  bin: /nonexistent/npuopt-test/npuc");
        std::ofstream(campaign / "campaign.yaml") << yaml;
    }
    auto kb_positional = run_cli({"kb", "show", campaign.string()});
    auto kb_flag = run_cli({"kb", "show", "--campaign", campaign.string()});
    CHECK(kb_positional.exit_code == 0);
    CHECK(has(kb_positional.out, "# Knowledge base: npu-sim"));
    CHECK(kb_flag.out == kb_positional.out);
    auto kb_search = run_cli({"--json", "kb", "search", "DMA", campaign.string(), "packet"});
    CHECK(kb_search.exit_code == 0);
    CHECK(kb_search.out == run_cli({"--json", "kb", "search", "DMA", "packet", "--campaign", campaign.string()}).out);
    auto kb_none = run_cli_in(scratch.path(), {"kb", "show"});
    CHECK(kb_none.exit_code == 2);
    CHECK(has(kb_none.err, "kb show: which campaign?"));

    // run, report, submit and doctor accept --campaign as well as DIR
    auto report = run_cli({"report", "--campaign", campaign.string(), "--out", (scratch.path() / "r").string()});
    CHECK(report.exit_code == 0);
    CHECK(fs::is_regular_file(scratch.path() / "r" / "report.md"));
    auto doctor_both = run_cli({"doctor", campaign.string(), "--target", "npu-sim"});
    CHECK(doctor_both.exit_code == 2);  // DIR excludes --target, as --campaign does
}

TEST_CASE("submit into a directory that holds something says to use --out and changes nothing") {
    npuopt::fakes::TempDir scratch("npuopt-cli-usage");
    const fs::path campaign = scratch.path() / "campaign";
    init_campaign(campaign);
    fs::create_directories(campaign / "submission");
    std::ofstream(campaign / "submission" / "manifest.json") << "{\"earlier\": true}\n";

    auto again = run_cli({"submit", campaign.string()});
    CHECK(again.exit_code == 2);
    CHECK(has(again.err, (campaign / "submission").string() + " exists and is not empty"));
    CHECK(has(again.err, "name a new directory with `--out DIR`"));
    std::ifstream kept(campaign / "submission" / "manifest.json");
    std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
    CHECK(text == "{\"earlier\": true}\n");
}
