// The llm layer's pure parts: reply parsing, extraction, redaction, retry delays, budget, limit.

#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "llm/budget.hpp"
#include "llm/chat.hpp"
#include "llm/concurrency.hpp"
#include "llm/extract.hpp"
#include "llm/retry.hpp"

using namespace npuopt;
using namespace std::chrono_literals;

TEST_CASE("fenced blocks: tagged, plain, tildes, longer fences, an unclosed block is not a block") {
    std::string text =
        "Here is the kernel:\n```rust\nfn main() {}\n```\nand a note\n```\nplain\n```\n"
        "~~~Python\nprint(1)\n~~~\n````md\n```rust\ninner\n```\n````\n```rust\nunclosed\n";
    auto blocks = llm::fenced_blocks(text);
    REQUIRE(blocks.size() == 4);
    CHECK(blocks[0].language == "rust");
    CHECK(blocks[0].code == "fn main() {}\n");
    CHECK(blocks[1].language.empty());
    CHECK(blocks[1].code == "plain\n");
    CHECK(blocks[2].language == "python");
    CHECK(blocks[3].language == "md");
    CHECK(blocks[3].code == "```rust\ninner\n```\n");
}

TEST_CASE("extract_code takes the block in the language, else a plain one, never another language's") {
    CHECK(llm::extract_code("```\nplain\n```\n```Rust\nfn a() {}\n```\n", "rust") == "fn a() {}\n");
    CHECK(llm::extract_code("```rust,ignore\nfn b() {}\n```", "rust") == "fn b() {}\n");
    CHECK(llm::extract_code("text\n```\nfn c() {}\n```\n", "rust") == "fn c() {}\n");
    CHECK(llm::extract_code("```\r\nfn d() {}\r\n```\r\n", "rust") == "fn d() {}\n");
    CHECK_FALSE(llm::extract_code("```python\nprint(1)\n```\n", "rust"));
    CHECK_FALSE(llm::extract_code("no code at all", "rust"));
    CHECK_FALSE(llm::extract_code("```rust\nfn cut_off_by_max_tokens(", "rust"));
}

TEST_CASE("extract_json_object: the whole text, a json block, or the first balanced object in prose") {
    auto whole = llm::extract_json_object(R"({"edit": "x"})");
    REQUIRE(whole);
    CHECK((*whole)["edit"] == "x");
    auto fenced = llm::extract_json_object("Sure:\n```json\n{\"a\": [1, 2]}\n```\n");
    REQUIRE(fenced);
    CHECK((*fenced)["a"].size() == 2);
    auto prose = llm::extract_json_object(R"(I think {not json} but {"why": "a } in a string", "n": {"k": 1}} ok)");
    REQUIRE(prose);
    CHECK((*prose)["why"] == "a } in a string");
    CHECK((*prose)["n"]["k"] == 1);
    CHECK_FALSE(llm::extract_json_object("[1, 2, 3]"));
    CHECK_FALSE(llm::extract_json_object("nothing here {"));
}

TEST_CASE("redact replaces every occurrence of the secret") {
    CHECK(llm::redact("key sk-1 and sk-1 again", "sk-1") == "key [redacted] and [redacted] again");
    CHECK(llm::redact("unchanged", "") == "unchanged");
    CHECK(llm::redact("aaaa", "aa") == "[redacted][redacted]");
}

TEST_CASE("parse_chat_response: choices, usage, model, malformed bodies say what is missing") {
    auto reply = llm::parse_chat_response(R"({"model": "m1", "choices": [
        {"message": {"content": ""}, "finish_reason": "stop"},
        {"message": {"content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4}})");
    CHECK(reply.status == llm::CallStatus::ok);
    REQUIRE(reply.choices.size() == 2);
    CHECK(reply.choices[0].status == llm::CallStatus::empty);
    REQUIRE(reply.first_ok() != nullptr);
    CHECK(reply.first_ok()->content == "fine");
    CHECK(reply.usage.total_tokens() == 7);
    CHECK(reply.usage.reported);
    CHECK(reply.model == "m1");

    CHECK(llm::parse_chat_response("<html>").status == llm::CallStatus::malformed);
    CHECK(llm::parse_chat_response("[]").status == llm::CallStatus::malformed);
    CHECK(llm::parse_chat_response(R"({"choices": []})").message.find("empty") != std::string::npos);
    CHECK(llm::parse_chat_response(R"({"choices": [{"text": "legacy"}]})").message.find("'message'") !=
          std::string::npos);
    CHECK(llm::parse_chat_response(R"({"choices": [{"message": {"content": 5}}]})").status ==
          llm::CallStatus::malformed);
    auto no_usage = llm::parse_chat_response(R"({"choices": [{"message": {"content": "x"}}]})");
    CHECK(no_usage.status == llm::CallStatus::ok);
    CHECK_FALSE(no_usage.usage.reported);
}

TEST_CASE("classify_choice: refusal field, content filter, length, blank content") {
    llm::Choice choice;
    choice.content = "code";
    choice.finish_reason = "stop";
    CHECK(llm::classify_choice(choice) == llm::CallStatus::ok);
    choice.finish_reason = "length";
    CHECK(llm::classify_choice(choice) == llm::CallStatus::truncated);
    choice.finish_reason = "content_filter";
    CHECK(llm::classify_choice(choice) == llm::CallStatus::refusal);
    choice.finish_reason = "stop";
    choice.content = " \n\t";
    CHECK(llm::classify_choice(choice) == llm::CallStatus::empty);
    choice.refusal = "I can't help with that.";
    CHECK(llm::classify_choice(choice) == llm::CallStatus::refusal);
}

TEST_CASE("chat_request_body carries the config's sampling, and the request's overrides") {
    config::LlmConfig config;
    config.model = "m";
    config.temperature = 0.3;
    config.n = 2;
    config.max_tokens = 77;
    llm::ChatRequest request;
    request.messages = {{"system", "be brief"}, {"user", "write a kernel"}};
    request.json_schema = llm::JsonSchema{"kernel", {{"type", "object"}}};
    auto body = llm::chat_request_body(config, request);
    CHECK(body["model"] == "m");
    CHECK(body["messages"].size() == 2);
    CHECK(body["messages"][1]["content"] == "write a kernel");
    CHECK(body["temperature"] == doctest::Approx(0.3));
    CHECK(body["n"] == 2);
    CHECK(body["max_tokens"] == 77);
    CHECK_FALSE(body.contains("response_format"));  // fenced_code: the schema is not sent
    request.n = 5;
    config.response_format = config::LlmResponseFormat::json_schema;
    body = llm::chat_request_body(config, request);
    CHECK(body["n"] == 5);
    CHECK(body["response_format"]["type"] == "json_schema");
    CHECK(body["response_format"]["json_schema"]["name"] == "kernel");
}

TEST_CASE("usage_cost uses the prices per 1k tokens") {
    config::LlmConfig config;
    config.price_prompt_per_1k = 0.5;
    config.price_completion_per_1k = 1.5;
    CHECK(llm::usage_cost(config, {2000, 1000, true}) == doctest::Approx(2.5));
}

TEST_CASE("retryable statuses are 408, 429 and 5xx") {
    for (long status : {408L, 429L, 500L, 502L, 503L, 599L}) CHECK(llm::is_retryable_http_status(status));
    for (long status : {200L, 400L, 401L, 403L, 404L, 422L}) CHECK_FALSE(llm::is_retryable_http_status(status));
}

TEST_CASE("server_retry_delay: retry-after-ms first, then Retry-After seconds or HTTP date") {
    auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
    CHECK(llm::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == now);
    CHECK_FALSE(llm::parse_http_date("yesterday"));
    CHECK(llm::server_retry_delay("250", "9", now) == 250ms);
    CHECK(llm::server_retry_delay(std::nullopt, "9", now) == 9000ms);
    CHECK(llm::server_retry_delay(std::nullopt, " 1.5 ", now) == 1500ms);
    CHECK(llm::server_retry_delay("soon", "2", now) == 2000ms);
    CHECK(llm::server_retry_delay(std::nullopt, "Sun, 06 Nov 1994 08:49:49 GMT", now) == 12000ms);
    CHECK(llm::server_retry_delay(std::nullopt, "Sun, 06 Nov 1994 08:00:00 GMT", now) == 0ms);
    CHECK_FALSE(llm::server_retry_delay(std::nullopt, "-3", now));
    CHECK_FALSE(llm::server_retry_delay(std::nullopt, std::nullopt, now));
}

TEST_CASE("backoff has full jitter under a doubling ceiling and the cap, reproducibly from the seed") {
    llm::RetryPolicy policy{8, 3.0, 0.5};
    std::mt19937_64 rng(7);
    std::mt19937_64 same_seed(7);
    for (std::int64_t retry_idx = 0; retry_idx < 8; ++retry_idx) {
        auto delay = llm::backoff_delay(policy, retry_idx, rng);
        double ceiling_ms = std::min(500.0 * static_cast<double>(1 << retry_idx), 3000.0);
        CHECK(delay.count() >= 0);
        CHECK(static_cast<double>(delay.count()) <= ceiling_ms);
        CHECK(delay == llm::backoff_delay(policy, retry_idx, same_seed));
    }
    CHECK(llm::retry_delay(policy, 120000ms, 0, rng) == 3000ms);
    CHECK(llm::retry_delay(policy, 1200ms, 0, rng) == 1200ms);
}

TEST_CASE("TokenBudget refuses once spent, and counts cost") {
    llm::TokenBudget budget(100);
    CHECK_FALSE(budget.exhausted());
    budget.charge(60, 0.25);
    CHECK(budget.remaining_tokens() == 40);
    budget.charge(60, 0.25);
    CHECK(budget.exhausted());
    CHECK(budget.remaining_tokens() == 0);
    CHECK(budget.spent_tokens() == 120);
    CHECK(budget.spent_cost() == doctest::Approx(0.5));
    CHECK(llm::TokenBudget(0).exhausted());
}

TEST_CASE("ConcurrencyLimit holds at most its slots across threads") {
    llm::ConcurrencyLimit limit(2);
    std::atomic<std::int64_t> most_seen{0};
    std::vector<std::thread> threads;
    for (int thread_idx = 0; thread_idx < 6; ++thread_idx) {
        threads.emplace_back([&] {
            auto slot = limit.acquire();
            std::int64_t now_in_flight = limit.in_flight();
            std::int64_t seen = most_seen.load();
            while (now_in_flight > seen && !most_seen.compare_exchange_weak(seen, now_in_flight)) {
            }
            std::this_thread::sleep_for(20ms);
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(most_seen.load() <= 2);
    CHECK(limit.in_flight() == 0);
    CHECK_THROWS_AS(llm::ConcurrencyLimit(0), Error);
}
