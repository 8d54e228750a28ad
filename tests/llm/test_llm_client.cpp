// The chat client against the scripted OpenAI-compatible server on loopback: replies of every
// kind, retries and their waits, timeouts, the API key's path, the concurrency limit, the budget.

#include <doctest/doctest.h>

#if NPUOPT_HAVE_LLM_STUB

#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "llm/client.hpp"
#include "llm/extract.hpp"
#include "scripted_server.hpp"

using namespace npuopt;
using namespace std::chrono_literals;
using llm::CallStatus;
using llm::stub::ScriptedReply;
using llm::stub::ScriptedServer;

namespace {

constexpr const char* k_key_env = "NPUOPT_TEST_LLM_KEY";
constexpr const char* k_secret_key = "sk-test-5d41402abc4b2a76b9719d911017c592";

config::LlmConfig test_config(const std::string& base_url) {
    config::LlmConfig config;
    config.enabled = true;
    config.base_url = base_url;
    config.model = "scripted-model";
    config.api_key_env = k_key_env;
    config.connect_timeout_secs = 2.0;
    config.request_timeout_secs = 10.0;
    config.stall_timeout_secs = 10.0;
    config.max_retries = 2;
    config.retry_cap_secs = 30.0;
    config.price_prompt_per_1k = 1.0;
    config.price_completion_per_1k = 2.0;
    return config;
}

/// Client dependencies whose sleeper records instead of sleeping, with a fixed clock and the test key.
struct FakeSurroundings {
    std::mutex mutex;
    std::vector<std::chrono::milliseconds> sleeps;
    std::chrono::system_clock::time_point now = std::chrono::system_clock::from_time_t(1'800'000'000);
    std::optional<std::string> key = std::string(k_secret_key);

    llm::ClientDeps deps(std::shared_ptr<llm::TokenBudget> budget = nullptr) {
        llm::ClientDeps deps;
        deps.budget = std::move(budget);
        deps.sleep = [this](std::chrono::milliseconds delay) {
            std::lock_guard lock(mutex);
            sleeps.push_back(delay);
        };
        deps.now = [this] { return now; };
        deps.read_env = [this](const std::string& name) {
            return name == k_key_env ? key : std::optional<std::string>();
        };
        deps.seed = 42;
        return deps;
    }
};

llm::ChatRequest ask(const std::string& text) {
    llm::ChatRequest request;
    request.messages = {{"system", "You write kernels."}, {"user", text}};
    return request;
}

/// A 200 reply with a hand-written message object (for null content, refusals).
ScriptedReply message_reply(const nlohmann::json& message, const std::string& finish_reason = "stop") {
    ScriptedReply reply;
    reply.body = nlohmann::json{{"model", "scripted-model"},
                                {"choices", {{{"index", 0}, {"message", message}, {"finish_reason", finish_reason}}}},
                                {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 0}}}}
                     .dump();
    return reply;
}

/// spdlog's default logger sent to a string for the scope's duration, at trace level.
class CapturedLog {
public:
    CapturedLog() : m_previous(spdlog::default_logger()) {
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(m_stream);
        auto logger = std::make_shared<spdlog::logger>("captured", sink);
        logger->set_level(spdlog::level::trace);
        spdlog::set_default_logger(logger);
    }
    ~CapturedLog() { spdlog::set_default_logger(m_previous); }
    std::string text() const { return m_stream.str(); }

private:
    std::shared_ptr<spdlog::logger> m_previous;
    std::ostringstream m_stream;
};

}  // namespace

TEST_CASE("a good reply is parsed with its usage and cost, the request carries the config") {
    ScriptedServer server;
    server.push(llm::stub::chat_reply("```rust\nfn kernel() {}\n```\n", "stop", 1200, 300));
    FakeSurroundings surroundings;
    auto budget = std::make_shared<llm::TokenBudget>(100000);
    llm::Client client(test_config(server.base_url()), surroundings.deps(budget));
    llm::Reply reply = client.complete(ask("write a gemv"));

    CHECK(reply.status == CallStatus::ok);
    CHECK(reply.message.empty());
    REQUIRE(reply.choices.size() == 1);
    CHECK(llm::extract_code(reply.choices[0].content, "rust") == "fn kernel() {}\n");
    CHECK(reply.choices[0].finish_reason == "stop");
    CHECK(reply.usage.prompt_tokens == 1200);
    CHECK(reply.usage.completion_tokens == 300);
    CHECK(reply.usage.reported);
    CHECK(reply.cost == doctest::Approx(1.2 * 1.0 + 0.3 * 2.0));
    CHECK(reply.model == "scripted-model");
    CHECK(reply.http_status == 200);
    CHECK(reply.attempts == 1);
    CHECK(budget->spent_tokens() == 1500);
    CHECK(budget->spent_cost() == doctest::Approx(1.8));

    auto requests = server.requests();
    REQUIRE(requests.size() == 1);
    CHECK(requests[0].method == "POST");
    CHECK(requests[0].path == "/v1/chat/completions");
    CHECK(requests[0].header("content-type") == "application/json");
    auto body = nlohmann::json::parse(requests[0].body);
    CHECK(body["model"] == "scripted-model");
    CHECK(body["messages"][0]["role"] == "system");
    CHECK(body["messages"][1]["content"] == "write a gemv");
    CHECK(body["n"] == 1);
    CHECK(body["max_tokens"] == 16384);
    CHECK_FALSE(body.contains("response_format"));
}

TEST_CASE("n > 1 returns every choice") {
    ScriptedServer server;
    ScriptedReply three;
    three.body = llm::stub::chat_completion_body({"one", "two", "three"}, "stop", 10, 90);
    server.push(three);
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    auto request = ask("three tries");
    request.n = 3;
    llm::Reply reply = client.complete(request);
    CHECK(reply.status == CallStatus::ok);
    REQUIRE(reply.choices.size() == 3);
    CHECK(reply.choices[2].content == "three");
    CHECK(nlohmann::json::parse(server.requests().at(0).body)["n"] == 3);
}

TEST_CASE("a malformed body is recorded as malformed and not retried") {
    ScriptedServer server;
    ScriptedReply broken;
    broken.body = "{\"choices\": [ this is not json";
    server.push(broken);
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    llm::Reply reply = client.complete(ask("x"));
    CHECK(reply.status == CallStatus::malformed);
    CHECK(reply.message.find("not JSON") != std::string::npos);
    CHECK(reply.http_status == 200);
    CHECK(server.request_count() == 1);
    CHECK(surroundings.sleeps.empty());
}

TEST_CASE("finish_reason length is truncated, and its tokens are charged") {
    ScriptedServer server;
    server.push(llm::stub::chat_reply("```rust\nfn half(", "length", 40, 4096));
    FakeSurroundings surroundings;
    auto budget = std::make_shared<llm::TokenBudget>(100000);
    llm::Client client(test_config(server.base_url()), surroundings.deps(budget));
    llm::Reply reply = client.complete(ask("x"));
    CHECK(reply.status == CallStatus::truncated);
    CHECK(reply.message.find("max_tokens") != std::string::npos);
    CHECK(budget->spent_tokens() == 4136);
    CHECK_FALSE(llm::extract_code(reply.choices.at(0).content, "rust"));
}

TEST_CASE("an empty or null content is empty") {
    ScriptedServer server;
    server.push(llm::stub::chat_reply("", "stop"));
    server.push(message_reply({{"role", "assistant"}, {"content", nullptr}}));
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    CHECK(client.complete(ask("x")).status == CallStatus::empty);
    CHECK(client.complete(ask("x")).status == CallStatus::empty);
}

TEST_CASE("the message's refusal field is a refusal") {
    ScriptedServer server;
    server.push(message_reply({{"role", "assistant"}, {"content", nullptr}, {"refusal", "I can't help with that."}}));
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    llm::Reply reply = client.complete(ask("x"));
    CHECK(reply.status == CallStatus::refusal);
    REQUIRE(reply.choices.size() == 1);
    CHECK(reply.choices[0].refusal == "I can't help with that.");
    CHECK(reply.message == "the model refused: I can't help with that.");
}

TEST_CASE("429 with Retry-After in seconds: the sleeper is asked for that wait, capped") {
    ScriptedServer server;
    server.push(llm::stub::error_reply(429, "rate limited", {{"Retry-After", "7"}}));
    server.push(llm::stub::error_reply(429, "rate limited", {{"Retry-After", "120"}}));
    server.push(llm::stub::chat_reply("ok"));
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    llm::Reply reply = client.complete(ask("x"));
    CHECK(reply.status == CallStatus::ok);
    CHECK(reply.attempts == 3);
    CHECK(surroundings.sleeps == std::vector<std::chrono::milliseconds>{7000ms, 30000ms});  // 120 s capped at 30
}

TEST_CASE("429 with retry-after-ms: it wins over Retry-After, an HTTP date counts from now") {
    ScriptedServer server;
    FakeSurroundings surroundings;
    server.push(llm::stub::error_reply(429, "rate limited", {{"retry-after-ms", "1500"}, {"Retry-After", "9"}}));
    // 1'800'000'000 is Fri, 15 Jan 2027 08:00:00 GMT; the server asks for 12 s later.
    server.push(llm::stub::error_reply(429, "rate limited", {{"Retry-After", "Fri, 15 Jan 2027 08:00:12 GMT"}}));
    server.push(llm::stub::chat_reply("ok"));
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    CHECK(client.complete(ask("x")).ok());
    CHECK(surroundings.sleeps == std::vector<std::chrono::milliseconds>{1500ms, 12000ms});
}

TEST_CASE("500 and 503 are retried with jittered backoff, then the call succeeds") {
    auto run = [](std::vector<std::chrono::milliseconds>& sleeps) {
        ScriptedServer server;
        server.push(llm::stub::error_reply(500, "boom"));
        server.push(llm::stub::error_reply(503, "overloaded"));
        server.push(llm::stub::chat_reply("ok"));
        FakeSurroundings surroundings;
        llm::Client client(test_config(server.base_url()), surroundings.deps());
        llm::Reply reply = client.complete(ask("x"));
        CHECK(reply.status == CallStatus::ok);
        CHECK(reply.attempts == 3);
        CHECK(server.request_count() == 3);
        sleeps = surroundings.sleeps;
    };
    std::vector<std::chrono::milliseconds> first;
    std::vector<std::chrono::milliseconds> second;
    run(first);
    run(second);
    REQUIRE(first.size() == 2);
    CHECK(first[0] <= 500ms);   // full jitter under 0.5 s, then 1 s
    CHECK(first[1] <= 1000ms);
    CHECK(first == second);     // the same seed waits the same
}

TEST_CASE("retries exhausted: the last failure is returned, a 400 is not retried") {
    ScriptedServer server;
    FakeSurroundings surroundings;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    SUBCASE("502 three times") {
        for (int attempt_idx = 0; attempt_idx < 3; ++attempt_idx) {
            server.push(llm::stub::error_reply(502, "bad gateway"));
        }
        llm::Reply reply = client.complete(ask("x"));
        CHECK(reply.status == CallStatus::http_error);
        CHECK(reply.http_status == 502);
        CHECK(reply.attempts == 3);
        CHECK(reply.message.find("bad gateway") != std::string::npos);
        CHECK(reply.message.find("after 3 attempts") != std::string::npos);
        CHECK(server.request_count() == 3);
        CHECK(surroundings.sleeps.size() == 2);
    }
    SUBCASE("400 once") {
        server.push(llm::stub::error_reply(400, "unknown model"));
        llm::Reply reply = client.complete(ask("x"));
        CHECK(reply.status == CallStatus::http_error);
        CHECK(reply.http_status == 400);
        CHECK(reply.attempts == 1);
        CHECK(reply.message.find("unknown model") != std::string::npos);
        CHECK(surroundings.sleeps.empty());
    }
}

TEST_CASE("no server listening is a transport error, retried") {
    int closed_port = 0;
    {
        ScriptedServer gone;
        closed_port = gone.port();
    }
    FakeSurroundings surroundings;
    llm::Client client(test_config("http://127.0.0.1:" + std::to_string(closed_port) + "/v1"), surroundings.deps());
    llm::Reply reply = client.complete(ask("x"));
    CHECK(reply.status == CallStatus::transport_error);
    CHECK_FALSE(reply.http_status);
    CHECK(reply.attempts == 3);
    CHECK(surroundings.sleeps.size() == 2);
}

TEST_CASE("a hang past the request timeout is a timeout, quickly, and not retried") {
    ScriptedServer server;
    ScriptedReply hang = llm::stub::chat_reply("too late");
    hang.delay = 20s;
    server.push(hang);
    FakeSurroundings surroundings;
    auto config = test_config(server.base_url());
    config.request_timeout_secs = 0.3;
    llm::Client client(config, surroundings.deps());
    auto started = std::chrono::steady_clock::now();
    llm::Reply reply = client.complete(ask("x"));
    double elapsed_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CHECK(reply.status == CallStatus::timeout);
    CHECK(reply.message.find("timeout") != std::string::npos);
    CHECK(reply.attempts == 1);
    CHECK(elapsed_secs < 3.0);
    CHECK(server.request_count() == 1);
}

TEST_CASE("response_format with the JSON schema is sent when configured") {
    ScriptedServer server;
    server.push(llm::stub::chat_reply(R"({"diff": "--- a\n+++ b\n"})"));
    FakeSurroundings surroundings;
    auto config = test_config(server.base_url());
    config.response_format = config::LlmResponseFormat::json_schema;
    llm::Client client(config, surroundings.deps());
    auto request = ask("an edit");
    request.json_schema = llm::JsonSchema{
        "kernel_edit",
        {{"type", "object"}, {"properties", {{"diff", {{"type", "string"}}}}}, {"required", {"diff"}}}};
    llm::Reply reply = client.complete(request);
    REQUIRE(reply.ok());
    auto edit = llm::extract_json_object(reply.choices[0].content);
    REQUIRE(edit);
    CHECK((*edit)["diff"] == "--- a\n+++ b\n");
    auto body = nlohmann::json::parse(server.requests().at(0).body);
    CHECK(body["response_format"]["type"] == "json_schema");
    CHECK(body["response_format"]["json_schema"]["name"] == "kernel_edit");
    CHECK(body["response_format"]["json_schema"]["schema"]["required"][0] == "diff");
    CHECK(body["response_format"]["json_schema"]["strict"] == true);
}

TEST_CASE("the API key goes only into the Authorization header: never into replies, errors or the log") {
    ScriptedServer server;
    // A server that echoes the key back, in an error and in a reply.
    server.push(llm::stub::error_reply(503, std::string("overloaded; your key ") + k_secret_key + " is fine"));
    server.push(llm::stub::error_reply(401, std::string("Incorrect API key provided: ") + k_secret_key));
    server.push(llm::stub::chat_reply(std::string("echo: Bearer ") + k_secret_key));
    FakeSurroundings surroundings;
    CapturedLog log;
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    llm::Reply refused = client.complete(ask("x"));
    llm::Reply echoed = client.complete(ask("y"));

    auto requests = server.requests();
    REQUIRE(requests.size() == 3);
    for (const auto& request : requests) {
        CHECK(request.header("Authorization") == std::string("Bearer ") + k_secret_key);
        CHECK(request.body.find(k_secret_key) == std::string::npos);
    }
    CHECK(refused.status == CallStatus::http_error);
    CHECK(refused.http_status == 401);
    CHECK(refused.message.find("Incorrect API key provided: [redacted]") != std::string::npos);
    CHECK(refused.message.find(k_secret_key) == std::string::npos);
    REQUIRE(echoed.ok());
    CHECK(echoed.choices[0].content == "echo: Bearer [redacted]");
    std::string logged = log.text();
    CHECK(logged.find("401") != std::string::npos);  // the failures were logged ...
    CHECK(logged.find("503") != std::string::npos);
    CHECK(logged.find(k_secret_key) == std::string::npos);  // ... without the key
}

TEST_CASE("without the key's variable no Authorization header is sent (local servers need none)") {
    ScriptedServer server;
    server.push(llm::stub::chat_reply("ok"));
    FakeSurroundings surroundings;
    surroundings.key.reset();
    llm::Client client(test_config(server.base_url()), surroundings.deps());
    CHECK(client.complete(ask("x")).ok());
    CHECK(server.requests().at(0).header("Authorization").empty());
}

TEST_CASE("the concurrency limit holds across threads and clients sharing it") {
    ScriptedServer server;
    server.set_responder([](const llm::stub::ReceivedRequest&) {
        ScriptedReply reply = llm::stub::chat_reply("ok");
        reply.delay = 150ms;
        return reply;
    });
    FakeSurroundings surroundings;
    auto config = test_config(server.base_url());
    config.concurrency = 2;
    auto shared_limit = std::make_shared<llm::ConcurrencyLimit>(config.concurrency);
    auto deps = surroundings.deps();
    deps.concurrency = shared_limit;
    llm::Client architect(config, deps);
    llm::Client tuner(config, deps);
    std::atomic<int> ok_count{0};
    std::vector<std::thread> threads;
    for (int thread_idx = 0; thread_idx < 6; ++thread_idx) {
        threads.emplace_back([&, thread_idx] {
            llm::Client& client = thread_idx % 2 == 0 ? architect : tuner;
            if (client.complete(ask("x")).ok()) ++ok_count;
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(ok_count.load() == 6);
    CHECK(server.request_count() == 6);
    CHECK(server.max_in_flight() == 2);
}

TEST_CASE("the token budget stops calls once spent") {
    ScriptedServer server;
    server.set_responder(
        [](const llm::stub::ReceivedRequest&) { return llm::stub::chat_reply("ok", "stop", 100, 50); });
    FakeSurroundings surroundings;
    auto budget = std::make_shared<llm::TokenBudget>(250);
    llm::Client client(test_config(server.base_url()), surroundings.deps(budget));
    CHECK(client.complete(ask("x")).ok());  // 150 spent
    CHECK(client.complete(ask("x")).ok());  // 300 spent: in flight when the budget ran out
    llm::Reply refused = client.complete(ask("x"));
    CHECK(refused.status == CallStatus::budget_exhausted);
    CHECK(refused.attempts == 0);
    CHECK(refused.message.find("250") != std::string::npos);
    CHECK(server.request_count() == 2);

    llm::Client never(test_config(server.base_url()), surroundings.deps(std::make_shared<llm::TokenBudget>(0)));
    CHECK(never.complete(ask("x")).status == CallStatus::budget_exhausted);
    CHECK(server.request_count() == 2);
}

TEST_CASE("a server that reports no usage is charged an estimate") {
    ScriptedServer server;
    ScriptedReply no_usage;
    no_usage.body = R"({"choices": [{"message": {"content": "12345678"}, "finish_reason": "stop"}]})";
    server.push(no_usage);
    FakeSurroundings surroundings;
    auto budget = std::make_shared<llm::TokenBudget>(1000);
    llm::Client client(test_config(server.base_url()), surroundings.deps(budget));
    llm::Reply reply = client.complete(ask("abcd"));  // "You write kernels." (18) + "abcd" (4) = 22 chars
    REQUIRE(reply.ok());
    CHECK_FALSE(reply.usage.reported);
    CHECK(reply.usage.prompt_tokens == 6);
    CHECK(reply.usage.completion_tokens == 2);
    CHECK(budget->spent_tokens() == 8);
}

#else

TEST_CASE("llm client tests against the scripted server" * doctest::skip()) {
    MESSAGE("cpp-httplib was not found at configure time (apt-get install libcpp-httplib-dev): skipped");
}

#endif
