// The agent loop end to end on the real simulator, with a scripted OpenAI-compatible server on
// loopback as the model: the LLM architect's best-of-n reply holds a kernel that does not
// compile, a gamed kernel, a malformed answer and a correct fast kernel; the cascade is the
// oracle. The broken one is repaired from its diagnostics, the gamed one rejected, the fast one
// accepted into the tree with its provenance; the token budget ends the run cleanly; the API key
// appears nowhere the campaign wrote; a kill -9 during an LLM call loses nothing recorded.
// Skipped (with a message) when npuc is not built or cpp-httplib is missing.

#include <doctest/doctest.h>

#if NPUOPT_HAVE_LLM_STUB

#include <fcntl.h>

#include <atomic>
#include <csignal>
#include <map>
#include <set>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "campaign/workspace.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "scripted_server.hpp"
#include "search/design.hpp"
#include "store/campaign_store.hpp"
#include "store/llm_store.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;
using llm::stub::ScriptedReply;
using llm::stub::ScriptedServer;

namespace {

constexpr const char* k_key_env = "NPUOPT_E2E_LLM_KEY";
constexpr const char* k_secret = "sk-e2e-7c4a8d09ca3762af61e59520943dc26494f8941b";

std::filesystem::path find_npuc() {
    if (const char* explicit_path = std::getenv("NPUOPT_NPUC")) return explicit_path;
    return std::filesystem::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
}

std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// attention_output's template `name` at its defaults: a correct kernel faster than the baseline.
std::string template_source(const std::string& name) {
    const auto root = config::locate_knowledge_dir(std::nullopt);
    const auto target = config::load_target(root, "npu-sim");
    const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    for (const auto& spec : kernels.kernels) {
        if (spec.name != "attention_output") continue;
        std::vector<std::string> errors;
        for (const auto& tmpl : search::load_kernel_templates(config::load_template_dir(target.templates_dir), spec,
                                                              "npu-sim", errors)) {
            if (tmpl->name() == name) return tmpl->instantiate(tmpl->default_assignment()).source;
        }
    }
    FAIL("template " << name << " not found");
    return "";
}

std::string fenced(const std::string& code) { return "Here is the kernel.\n```rust\n" + code + "```\n"; }

/// A reply whose usage counts what a real server would (4 characters a token), so the token
/// budget and the roles' affordability check see realistic sizes.
/// A reply the way an OpenAI-compatible server gives it: usage counted at about 4 characters a
/// token, and every choice cut off at the request's max_tokens (finish_reason "length"), so that
/// a client which sized its call to the budget it had left is never charged more than that.
ScriptedReply sized_reply(const llm::stub::ReceivedRequest& request, const std::vector<std::string>& contents) {
    const auto sent = nlohmann::json::parse(request.body, nullptr, false);
    const std::int64_t max_tokens =
        sent.is_object() && sent.contains("max_tokens") ? sent["max_tokens"].get<std::int64_t>() : -1;
    std::vector<std::string> cut;
    std::vector<bool> truncated;
    std::int64_t completion = 0;
    for (const auto& content : contents) {
        const bool over = max_tokens >= 0 && static_cast<std::int64_t>(content.size()) > 4 * max_tokens;
        cut.push_back(over ? content.substr(0, static_cast<std::size_t>(4 * max_tokens)) : content);
        truncated.push_back(over);
        completion += (static_cast<std::int64_t>(cut.back().size()) + 3) / 4;
    }
    auto body = nlohmann::json::parse(llm::stub::chat_completion_body(
        cut, "stop", static_cast<std::int64_t>(request.body.size()) / 4, completion));
    for (std::size_t idx = 0; idx < truncated.size(); ++idx) {
        if (truncated[idx]) body["choices"][idx]["finish_reason"] = "length";
    }
    ScriptedReply reply;
    reply.body = body.dump();
    return reply;
}

std::string last_user_message(const llm::stub::ReceivedRequest& request) {
    const auto body = nlohmann::json::parse(request.body, nullptr, false);
    if (!body.is_object() || !body.contains("messages")) return "";
    std::string last;
    for (const auto& message : body["messages"]) {
        if (message.value("role", "") == "user") last = message.value("content", "");
    }
    return last;
}

std::filesystem::path make_campaign(const std::filesystem::path& npuc, const std::string& base_url, std::int64_t tokens,
                                    const std::string& strategy) {
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / ("npuopt-llm-campaign-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    std::ofstream yaml(dir / "campaign.yaml");
    yaml << fmt::format(
        "target: npu-sim\nkernels: [attention_output]\nseed: 3\n"
        "budgets: {{wall_time: 20m, device_runs: 1500, llm_tokens: {}}}\nsandbox: {{required: false}}\n"
        "toolchain: {{bin: {}}}\n"
        "llm:\n  enabled: true\n  base_url: {}\n  model: scripted-model\n  api_key_env: {}\n  n: 4\n"
        "  max_retries: 1\n  retry_cap_secs: 1\n  request_timeout_secs: 60\n  strategy: {}\n"
        "  roles: [architect, tuner]\n  replace_heuristic: true\n  repair_turns: 1\n",
        tokens, std::filesystem::absolute(npuc).string(), base_url, k_key_env, strategy);
    yaml.close();
    store::CampaignStore::open(dir / "campaign.db");
    return dir;
}

/// Whether `needle` occurs in any file under `dir`.
bool found_under(const std::filesystem::path& dir, const std::string& needle, std::string* where) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
        if (!entry.is_regular_file()) continue;
        if (read_file(entry.path()).find(needle) != std::string::npos) {
            *where = entry.path().string();
            return true;
        }
    }
    return false;
}

}  // namespace

TEST_CASE("the LLM architect on the simulator: broken repaired, gamed rejected, fast accepted, budget stops the run") {
    const auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    const std::string fast = template_source("ao_streamed");
    const std::string repaired = template_source("ao_rows_pipelined");
    const std::string broken = fast + "\nfn broken( {\n";
    const std::string gamed = read_file(std::filesystem::path(NPUOPT_TEST_DATA_DIR) / "adversarial" / "all_zeros.rs");
    REQUIRE(!gamed.empty());
    ScriptedServer server;
    int tuner_edits = 0;
    server.set_responder([&](const llm::stub::ReceivedRequest& request) {
        const std::string user = last_user_message(request);
        if (user.find("did not pass") != std::string::npos) return sized_reply(request, {fenced(repaired)});
        if (user.find("Diagnose the champion") != std::string::npos) {
            return sized_reply(request, {"The weight stream dominates; overlap it with compute [rule:1]."});
        }
        if (user.find("Improve the champion") != std::string::npos) {
            // a correct edit each time (the champion plus a comment): new designs, never faster
            const std::string edit = fast + fmt::format("\n// tuned variant {}\n", ++tuner_edits);
            return sized_reply(request, {fenced(edit)});
        }
        return sized_reply(request, {fenced(broken), fenced(gamed), "I would rather describe it in words.", fenced(fast)});
    });
    ::setenv(k_key_env, k_secret, 1);
    const auto dir = make_campaign(npuc, server.base_url(), 150000, "multi_agent");
    auto result = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, {});
    }();
    INFO(result.message);
    CHECK(result.stop == campaign::StopReason::token_budget);

    auto store = store::CampaignStore::open(dir / "campaign.db");
    store::TreeStore tree(store.database());
    std::map<std::string, store::TreeEdgeRecord> by_source;
    int llm_edges = 0;
    for (const auto& edge : tree.list_edges("attention_output")) {
        const auto design = store.find_design(edge.design_id);
        REQUIRE(design.has_value());
        MESSAGE(fmt::format("step {} {} {} {} {} {} — {}", edge.step, edge.role, edge.move, edge.verdict, edge.last_stage,
                            edge.cycles.value_or(0), edge.final_reason.substr(0, 160)));
        if (edge.role.rfind("llm-", 0) != 0) continue;
        ++llm_edges;
        CHECK(edge.llm_call_id.has_value());
        CHECK(edge.prompt_hash.size() == 64);
        CHECK(edge.reply_hash.size() == 64);
        CHECK(edge.llm_tokens > 0);
        by_source.emplace(design->source.value_or(""), edge);
    }
    CHECK(llm_edges >= 4);
    // the fast kernel, or the tuner's edit of it (whichever the scheduler had evaluated first), won
    // over the baseline; the other was then judged against it: the same kernel, not faster, so
    // rejected, or inconclusive where the race's share of the budget ran out first (a tie of two
    // identical kernels need not be resolved) — never accepted a second time (below)
    REQUIRE(by_source.count(fast) == 1);
    const std::string fast_verdict = by_source.at(fast).verdict;
    CHECK((fast_verdict == "accepted" || fast_verdict == "rejected" || fast_verdict == "inconclusive"));
    int fast_accepted = 0;
    for (const auto& [source, edge] : by_source) {
        if (source.rfind(fast, 0) == 0 && edge.verdict == "accepted") ++fast_accepted;
    }
    CHECK(fast_accepted == 1);
    REQUIRE(by_source.count(broken) == 1);
    CHECK(by_source.at(broken).verdict == "failed");
    // the cheap checks stop it (the static schedule, else the compiler), with the diagnostics
    CHECK((by_source.at(broken).last_stage == "estimate" || by_source.at(broken).last_stage == "compile"));
    REQUIRE(by_source.count(gamed) == 1);
    CHECK(by_source.at(gamed).verdict != "accepted");
    CHECK(by_source.at(gamed).last_stage == "correctness");
    REQUIRE(by_source.count(repaired) == 1);
    CHECK(by_source.at(repaired).move == "repair turn 1");
    const auto path = tree.champion_path("attention_output");
    REQUIRE(path.size() >= 2);

    store::LlmStore calls(store.database());
    const auto recorded = calls.list_calls();
    REQUIRE(recorded.size() >= 3);
    std::set<std::string> roles;
    bool malformed_recorded = false;
    for (const auto& call : recorded) {
        roles.insert(call.role);
        CHECK(call.prompt_hash.size() == 64);
        if (call.choices_json.find("malformed") != std::string::npos) malformed_recorded = true;
    }
    CHECK(roles.count("llm-analyst") == 1);
    CHECK(roles.count("llm-architect") == 1);
    CHECK(malformed_recorded);
    CHECK(calls.total_tokens() <= 150000);  // every call was sized to what the budget had left

    // the key went to the server in the header and nowhere else
    REQUIRE(server.request_count() >= 3);
    CHECK(server.requests().front().header("Authorization") == std::string("Bearer ") + k_secret);
    std::string where;
    CHECK_MESSAGE(!found_under(dir, k_secret, &where), "the API key was written to " << where);

    // a resumed run has no tokens left: it stops at once, cleanly
    auto again = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, {});
    }();
    CHECK(again.stop == campaign::StopReason::token_budget);
    CHECK(again.steps_this_run == 0);
    ::unsetenv(k_key_env);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

TEST_CASE("kill -9 during an LLM call loses nothing already recorded, and the campaign resumes") {
    const auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc) || !std::filesystem::exists(NPUOPT_BINARY)) {
        MESSAGE("SKIPPED: npuc or the npuopt binary is not built");
        return;
    }
    const std::string fast = template_source("ao_streamed");
    ScriptedServer server;
    std::atomic<bool> hang{true};
    std::atomic<int> served{0};
    server.set_responder([&](const llm::stub::ReceivedRequest&) {
        ScriptedReply reply = llm::stub::chat_reply(fenced(fast + fmt::format("\n// variant {}\n", ++served)));
        if (hang.load()) reply.delay = std::chrono::milliseconds(60000);
        return reply;
    });
    const auto dir = make_campaign(npuc, server.base_url(), 100000, "zero_shot");
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::setenv(k_key_env, k_secret, 1);
        const int null_fd = ::open("/dev/null", O_WRONLY);
        if (null_fd >= 0) {
            ::dup2(null_fd, 1);
            ::dup2(null_fd, 2);
        }
        execl(NPUOPT_BINARY, "npuopt", "run", dir.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    // wait until the baseline is recorded and an LLM call is in flight
    bool in_flight = false;
    for (int tick = 0; tick < 1200 && !in_flight; ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        in_flight = server.request_count() > 0;
    }
    REQUIRE(in_flight);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status));
    std::size_t edges_before = 0;
    {
        auto store = store::CampaignStore::open(dir / "campaign.db");
        store::TreeStore tree(store.database());
        edges_before = tree.list_edges("attention_output").size();
        CHECK(edges_before >= 1);  // the baseline's step
        CHECK(tree.champion_path("attention_output").size() >= 1);
        CHECK(store::LlmStore(store.database()).list_calls().empty());  // the call in flight was never answered
    }
    hang = false;
    ::setenv(k_key_env, k_secret, 1);
    campaign::RunOverrides overrides;
    overrides.max_steps = 2;
    auto resumed = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, overrides);
    }();
    ::unsetenv(k_key_env);
    INFO(resumed.message);
    CHECK(resumed.steps_this_run == 2);
    auto store = store::CampaignStore::open(dir / "campaign.db");
    store::TreeStore tree(store.database());
    CHECK(tree.list_edges("attention_output").size() == edges_before + 2);
    CHECK(!store::LlmStore(store.database()).list_calls().empty());
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

#else
TEST_CASE("llm campaign tests need cpp-httplib") { MESSAGE("SKIPPED: cpp-httplib not found (libcpp-httplib-dev)"); }
#endif
