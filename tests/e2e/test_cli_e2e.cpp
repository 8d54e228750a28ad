// End-to-end: run the built `npuopt` binary on scratch campaigns and check output and exit code.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Outcome {
    int exit_code = -1;
    std::string output;  ///< stdout and stderr together
    bool has(const std::string& text) const { return output.find(text) != std::string::npos; }
};

/// Run `npuopt <args>` through the shell (arguments are trusted test text).
Outcome npuopt(const std::string& args, const std::string& env = "") {
    std::string command = env + (env.empty() ? "" : " ") + "'" + NPUOPT_BINARY + "' " + args + " 2>&1";
    Outcome outcome;
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) outcome.output.append(buffer.data(), count);
    int status = pclose(pipe);
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return outcome;
}

struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::random_device random;
        path = fs::temp_directory_path() / ("npuopt-e2e-" + std::to_string(random()));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const fs::path& file) {
    std::ifstream stream(file);
    std::stringstream text;
    text << stream.rdbuf();
    return text.str();
}

void replace_in_file(const fs::path& file, const std::string& from, const std::string& to) {
    std::string text = read_file(file);
    auto pos = text.find(from);
    REQUIRE(pos != std::string::npos);
    text.replace(pos, from.size(), to);
    std::ofstream(file) << text;
}

}  // namespace

TEST_CASE("--version prints the version and exits 0") {
    auto outcome = npuopt("--version");
    CHECK(outcome.exit_code == 0);
    CHECK(outcome.has(std::string("npuopt ") + NPUOPT_VERSION));
}

TEST_CASE("--help lists every subcommand and the exit codes, each subcommand has --help") {
    auto outcome = npuopt("--help");
    CHECK(outcome.exit_code == 0);
    CHECK(outcome.has("Exit codes"));
    CHECK(outcome.has("3  interrupted"));
    for (const char* subcommand : {"init", "doctor", "kb", "bench", "run", "status", "tree", "report", "submit", "demo"}) {
        CAPTURE(subcommand);
        CHECK(outcome.has(subcommand));
        auto help = npuopt(std::string(subcommand) + " --help");
        CHECK(help.exit_code == 0);
        CHECK(help.has("Usage: npuopt " + std::string(subcommand)));
    }
}

TEST_CASE("wrong usage exits 2 with a message") {
    for (const char* args : {"", "--frobnicate", "init", "init somewhere", "--log-level loud status x",
                             "doctor --target a --campaign b", "tree x --format png"}) {
        CAPTURE(args);
        auto outcome = npuopt(args);
        CHECK(outcome.exit_code == 2);
        CHECK(outcome.has("npuopt: error:"));
    }
}

TEST_CASE("wired subcommands reject wrong usage with exit 2") {
    for (const char* args : {"kb", "kb build", "kb frobnicate --campaign x", "kb show --campaign x --format yaml",
                             "bench", "bench nope", "run", "run x --budget-minutes abc", "tree", "tree show",
                             "tree grow --campaign x", "submit", "report", "demo --minutes 0", "demo --minutes -1",
                             "submit x --runs 0"}) {
        CAPTURE(args);
        auto outcome = npuopt(args);
        CHECK(outcome.exit_code == 2);
        CHECK(outcome.has("npuopt: error:"));
    }
}

TEST_CASE("wired subcommands on a directory that is not a campaign exit 2 and name it") {
    ScratchDir scratch;
    std::string missing = scratch / "no-campaign";
    for (const std::string& args : {"run '" + missing + "'", "kb show --campaign '" + missing + "'",
                                    "tree show k --campaign '" + missing + "'", "tree export --campaign '" + missing + "'",
                                    "submit '" + missing + "'", "report '" + missing + "'"}) {
        CAPTURE(args);
        auto outcome = npuopt(args);
        CHECK(outcome.exit_code == 2);
        CHECK(outcome.has("is not a campaign directory"));
        CHECK(outcome.has(missing));
    }
    CHECK(!fs::exists(missing));
}

TEST_CASE("report and tree export of a fresh campaign write their files") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    auto report = npuopt("report '" + dir + "' --out '" + (scratch / "report") + "'");
    CHECK(report.exit_code == 0);
    CHECK(fs::exists(scratch.path / "report" / "report.md"));
    CHECK(fs::exists(scratch.path / "report" / "report.html"));
    CHECK(read_file(scratch.path / "report" / "report.html").find("<html>") != std::string::npos);

    auto exported = npuopt("tree export --campaign '" + dir + "' --out '" + (scratch / "trees") + "'");
    CHECK(exported.exit_code == 0);
    CHECK(exported.has("no design trees yet"));

    auto show = npuopt("tree show no_such_kernel --campaign '" + dir + "'");
    CHECK(show.exit_code == 2);
    CHECK(show.has("kernel 'no_such_kernel' has no design tree"));

    // kb export writes into the campaign directory by default and follows --json
    auto kb_export = npuopt("--json kb export '" + dir + "'");
    CHECK(kb_export.exit_code == 0);
    CHECK(kb_export.has("knowledge.json"));
    REQUIRE(fs::exists(fs::path(dir) / "knowledge.json"));
    CHECK(nlohmann::json::parse(read_file(fs::path(dir) / "knowledge.json"), nullptr, false).is_object());
    auto kb_md = npuopt("kb export --campaign '" + dir + "'");
    CHECK(kb_md.exit_code == 0);
    CHECK(fs::exists(fs::path(dir) / "knowledge.md"));
}

TEST_CASE("every command's help shows examples beside the exit codes") {
    for (const std::string command : {"init", "status", "kb", "run", "tree", "report", "submit", "eval", "add", "demo",
                                      "bench", "doctor", "export", "import", "serve"}) {
        auto help = npuopt(command + " --help");
        INFO(command << ": " << help.output);
        CHECK(help.exit_code == 0);
        CHECK(help.has("Examples:"));
        CHECK(help.has("npuopt " + command));
    }
    CHECK(npuopt("run --help").has("--message-format json"));
}

TEST_CASE("kb and submit with a missing toolchain explain it") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    replace_in_file(fs::path(dir) / "campaign.yaml", "  bin: \"\"", "  bin: /nonexistent/npuopt-test/npuc");

    auto build = npuopt("kb build --campaign '" + dir + "'");
    CHECK(build.exit_code == 1);
    CHECK(build.has("npuopt: error:"));

    auto search = npuopt("kb search DMA packet --campaign '" + dir + "'");
    CHECK(search.exit_code == 0);
    CHECK(search.has("knowledge base not refreshed"));

    auto diff_usage = npuopt("kb diff 1.0.0 --campaign '" + dir + "'");
    CHECK(diff_usage.exit_code == 2);

    auto submit = npuopt("submit '" + dir + "' --out '" + (scratch / "submission") + "'");
    CHECK(submit.exit_code == 1);
    CHECK(submit.has("toolchain"));
}

TEST_CASE("submit of a campaign without champions exits 2 and says why") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    std::string fake = std::string(NPUOPT_TEST_DATA_DIR) + "/fake-toolchain/fake-npuc";
    replace_in_file(fs::path(dir) / "campaign.yaml", "  bin: \"\"", "  bin: " + fake);
    auto submit = npuopt("submit '" + dir + "' --out '" + (scratch / "submission") + "'");
    CHECK(submit.exit_code == 2);
    CHECK(submit.has("no kernel has a champion"));
}

TEST_CASE("bench names the benchmark it cannot find or runs it") {
    auto outcome = npuopt("bench search --device-runs 0");
    CHECK(outcome.exit_code == 2);
    auto misplaced = npuopt("bench kb --device-runs 5");
    CHECK(misplaced.exit_code == 2);
    CHECK(misplaced.has("--device-runs is for `bench search`"));
}

TEST_CASE("run on the fake toolchain stops cleanly with exit 3 on SIGINT") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    std::string fake = std::string(NPUOPT_TEST_DATA_DIR) + "/fake-toolchain/fake-npuc";
    replace_in_file(fs::path(dir) / "campaign.yaml", "  bin: \"\"", "  bin: " + fake);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        std::string log = scratch / "run.log";
        FILE* out = freopen(log.c_str(), "w", stdout);
        FILE* err = freopen(log.c_str(), "a", stderr);
        (void)out;
        (void)err;
        ::setenv("FAKE_MODE", "ok", 1);
        execl(NPUOPT_BINARY, "npuopt", "run", dir.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    ::usleep(1500 * 1000);
    int status = 0;
    pid_t early = waitpid(child, &status, WNOHANG);
    if (early == 0) {
        ::kill(child, SIGINT);
        REQUIRE(waitpid(child, &status, 0) == child);
        REQUIRE(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 3);
    } else {
        MESSAGE("the run ended before the signal: " << read_file(scratch.path / "run.log"));
        CHECK(WIFEXITED(status));
    }
}

TEST_CASE("init creates a campaign that status reads, and refuses a second init") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    auto created = npuopt("init '" + dir + "' --target npu-sim --seed 7");
    CHECK(created.exit_code == 0);
    CHECK(created.has("Created campaign"));
    CHECK(fs::is_regular_file(fs::path(dir) / "campaign.yaml"));
    CHECK(fs::is_regular_file(fs::path(dir) / "campaign.db"));
    CHECK(read_file(fs::path(dir) / "campaign.yaml").find("seed: 7") != std::string::npos);
    CHECK(read_file(fs::path(dir) / "events.jsonl").find("\"event\":\"campaign_created\"") != std::string::npos);

    auto status = npuopt("status '" + dir + "'");
    CHECK(status.exit_code == 0);
    CHECK(status.has("npu-sim"));
    CHECK(status.has("campaign_created"));

    auto status_json = npuopt("--json status '" + dir + "'");
    REQUIRE(status_json.exit_code == 0);
    auto parsed = nlohmann::json::parse(status_json.output);
    CHECK(parsed["meta"]["target"] == "npu-sim");
    CHECK(parsed["events"] == 1);

    std::string before = read_file(fs::path(dir) / "campaign.yaml");
    auto again = npuopt("init '" + dir + "' --target npu-sim --seed 8");
    CHECK(again.exit_code == 2);
    CHECK(again.has("already holds a campaign"));
    CHECK(read_file(fs::path(dir) / "campaign.yaml") == before);

    std::ofstream(scratch / "notempty.txt") << "x";
    auto non_empty = npuopt("init '" + scratch.path.string() + "' --target npu-sim");
    CHECK(non_empty.exit_code == 2);
    CHECK(non_empty.has("not empty"));
}

TEST_CASE("an unknown target exits 2, lists the known targets and creates nothing") {
    ScratchDir scratch;
    auto outcome = npuopt("init '" + scratch / "c" + "' --target no-such-chip");
    CHECK(outcome.exit_code == 2);
    CHECK(outcome.has("unknown target 'no-such-chip'"));
    CHECK(outcome.has("npu-sim"));
    CHECK_FALSE(fs::exists(scratch / "c"));
}

TEST_CASE("status of a directory that is not a campaign exits 2") {
    ScratchDir scratch;
    auto outcome = npuopt("status '" + scratch.path.string() + "'");
    CHECK(outcome.exit_code == 2);
    CHECK(outcome.has("not a campaign directory"));
}

TEST_CASE("a broken campaign.yaml makes doctor exit 2 naming file:line and the key") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    fs::path file = fs::path(dir) / "campaign.yaml";
    replace_in_file(file, "  device_runs:", "  device_rnus:");
    std::string text = read_file(file);
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(text.find("device_rnus")), '\n'));
    auto outcome = npuopt("doctor --campaign '" + dir + "'");
    CHECK(outcome.exit_code == 2);
    CHECK(outcome.has(file.string() + ":" + std::to_string(line) + ":"));
    CHECK(outcome.has("unknown key 'budgets.device_rnus'"));
}

TEST_CASE("doctor with a missing toolchain exits 1 and says how to fix it") {
    ScratchDir scratch;
    std::string dir = scratch / "campaign";
    REQUIRE(npuopt("init '" + dir + "' --target npu-sim").exit_code == 0);
    replace_in_file(fs::path(dir) / "campaign.yaml", "  bin: \"\"", "  bin: /nonexistent/npuopt-test/npuc");
    auto outcome = npuopt("doctor --campaign '" + dir + "'");
    CHECK(outcome.exit_code == 1);
    CHECK(outcome.has("FAIL  toolchain"));
    CHECK(outcome.has("/nonexistent/npuopt-test/npuc"));
    CHECK(outcome.has("fix: build or install the toolchain"));
    CHECK(outcome.has("OK    database"));

    auto json = npuopt("--json doctor --campaign '" + dir + "'", "");
    CHECK(json.exit_code == 1);
    auto begin = json.output.find('{');
    REQUIRE(begin != std::string::npos);
    auto parsed = nlohmann::json::parse(json.output.substr(begin));
    CHECK(parsed["ok"] == false);
    bool toolchain_failed = false;
    for (const auto& check : parsed["checks"]) {
        if (check["name"] == "toolchain") toolchain_failed = check["status"] == "FAIL" && !check["fix"].get<std::string>().empty();
    }
    CHECK(toolchain_failed);
}

TEST_CASE("--knowledge-dir and NPUOPT_KNOWLEDGE_DIR choose where targets come from") {
    std::string test_knowledge = std::string(NPUOPT_TEST_DATA_DIR) + "/config/knowledge";
    auto by_flag = npuopt("--knowledge-dir '" + test_knowledge + "' init /nonexistent-dir-x --target npu-sim");
    CHECK(by_flag.exit_code == 2);
    CHECK(by_flag.has("known targets in " + test_knowledge + ": testchip"));
    auto by_env = npuopt("init /nonexistent-dir-x --target npu-sim", "NPUOPT_KNOWLEDGE_DIR='" + test_knowledge + "'");
    CHECK(by_env.exit_code == 2);
    CHECK(by_env.has("testchip"));
}
