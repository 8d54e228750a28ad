#include "llm/client.hpp"

#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"
#include "llm/extract.hpp"
#include "llm/http.hpp"
#include "llm/retry.hpp"

namespace npuopt::llm {
namespace {

/// What the server said was wrong: its error.message when the body is an OpenAI error object,
/// else the start of the body on one line.
std::string error_excerpt(std::string_view body) {
    static constexpr std::size_t k_excerpt_chars = 300;
    nlohmann::json root = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (root.is_object()) {
        auto error = root.find("error");
        if (error != root.end() && error->is_string()) return error->get<std::string>();
        if (error != root.end() && error->is_object()) {
            auto message = error->find("message");
            if (message != error->end() && message->is_string()) return message->get<std::string>();
        }
    }
    std::string excerpt(body.substr(0, k_excerpt_chars));
    for (char& c : excerpt) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    if (body.size() > k_excerpt_chars) excerpt += "...";
    return excerpt.empty() ? std::string("(empty body)") : excerpt;
}

/// 4 characters a token: what a server that reports no usage is charged.
std::int64_t estimated_tokens(std::size_t chars) { return static_cast<std::int64_t>((chars + 3) / 4); }

void sleep_unless_interrupted(std::chrono::milliseconds delay) {
    static constexpr std::chrono::milliseconds k_slice{50};
    auto until = std::chrono::steady_clock::now() + delay;
    while (!interrupted()) {
        auto left = until - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) return;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, k_slice));
    }
}

std::optional<std::string> read_process_env(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
}

/// `reply` with `secret` taken out of every text it carries.
void redact_reply(Reply& reply, std::string_view secret) {
    if (secret.empty()) return;
    reply.message = redact(reply.message, secret);
    reply.model = redact(reply.model, secret);
    for (auto& choice : reply.choices) {
        choice.content = redact(choice.content, secret);
        choice.finish_reason = redact(choice.finish_reason, secret);
        if (choice.refusal) choice.refusal = redact(*choice.refusal, secret);
    }
}

}  // namespace

Client::Client(config::LlmConfig config, ClientDeps deps)
    : m_config(std::move(config)), m_deps(std::move(deps)), m_rng(m_deps.seed) {
    if (m_config.base_url.empty() || m_config.model.empty()) {
        throw Error(ErrorKind::internal, "llm::Client needs llm.base_url and llm.model (config validates them)");
    }
    while (!m_config.base_url.empty() && m_config.base_url.back() == '/') m_config.base_url.pop_back();
    m_url = m_config.base_url + "/chat/completions";
    if (!m_deps.concurrency) m_deps.concurrency = std::make_shared<ConcurrencyLimit>(m_config.concurrency);
    if (!m_deps.sleep) m_deps.sleep = sleep_unless_interrupted;
    if (!m_deps.now) m_deps.now = [] { return std::chrono::system_clock::now(); };
    if (!m_deps.read_env) m_deps.read_env = read_process_env;
}

std::chrono::milliseconds Client::next_retry_delay(std::optional<std::chrono::milliseconds> server_delay,
                                                   std::int64_t retry_idx) {
    RetryPolicy policy{m_config.max_retries, m_config.retry_cap_secs};
    std::lock_guard lock(m_rng_mutex);
    return retry_delay(policy, server_delay, retry_idx, m_rng);
}

Reply Client::complete(const ChatRequest& request) {
    auto started = std::chrono::steady_clock::now();
    std::string key;  // read below; redacted from whatever leaves this function
    auto finish = [&](Reply reply) {
        reply.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        redact_reply(reply, key);
        if (reply.ok()) {
            log::debug("llm: {} answered in {:.2f} s ({} attempt(s)): {} prompt + {} completion tokens{}, "
                          "cost {:.4f}",
                          m_config.model, reply.wall_secs, reply.attempts, reply.usage.prompt_tokens,
                          reply.usage.completion_tokens, reply.usage.reported ? "" : " (estimated)", reply.cost);
        } else if (reply.status == CallStatus::budget_exhausted) {
            log::info("llm: {} call refused: {}", m_config.model, reply.message);
        } else {
            log::warn("llm: {} call {}: {}", m_config.model, call_status_name(reply.status), reply.message);
        }
        return reply;
    };

    if (m_deps.budget && m_deps.budget->exhausted()) {
        Reply reply;
        reply.status = CallStatus::budget_exhausted;
        reply.message = fmt::format("the token budget of {} tokens is spent ({} used); the call was not made",
                                    m_deps.budget->limit_tokens(), m_deps.budget->spent_tokens());
        return finish(std::move(reply));
    }

    key = m_deps.read_env(m_config.api_key_env).value_or("");
    std::vector<std::string> header_lines;
    if (!key.empty()) header_lines.push_back("Authorization: Bearer " + key);
    std::size_t prompt_chars = 0;
    for (const auto& message : request.messages) prompt_chars += message.content.size();
    const std::string body = chat_request_body(m_config, request).dump();
    const HttpTimeouts timeouts{m_config.connect_timeout_secs, m_config.request_timeout_secs,
                                m_config.stall_timeout_secs};

    for (std::int64_t attempt_idx = 0;; ++attempt_idx) {
        HttpResult http;
        {
            auto slot = m_deps.concurrency->acquire();
            http = post_json(m_url, body, header_lines, timeouts);
        }
        Reply reply;
        reply.attempts = static_cast<int>(attempt_idx + 1);
        bool retryable = false;
        if (http.transport == HttpTransport::timeout) {
            // Not retried: the attempt already spent a whole timeout; another would double the wait.
            reply.status = CallStatus::timeout;
            reply.message = fmt::format("no complete reply from {} within the timeouts (connect {} s, request {} s, "
                                        "stall {} s): {}",
                                        m_url, m_config.connect_timeout_secs, m_config.request_timeout_secs,
                                        m_config.stall_timeout_secs, http.error);
        } else if (http.transport == HttpTransport::error) {
            reply.status = CallStatus::transport_error;
            reply.message = fmt::format("no reply from {}: {}", m_url, http.error);
            retryable = true;
        } else if (http.status >= 200 && http.status <= 299) {
            Reply parsed = parse_chat_response(http.body);
            parsed.attempts = reply.attempts;
            parsed.http_status = static_cast<int>(http.status);
            if (!parsed.usage.reported) {
                std::size_t completion_chars = 0;
                for (const auto& choice : parsed.choices) completion_chars += choice.content.size();
                parsed.usage.prompt_tokens = estimated_tokens(prompt_chars);
                parsed.usage.completion_tokens = estimated_tokens(completion_chars);
            }
            parsed.cost = usage_cost(m_config, parsed.usage);
            if (m_deps.budget) m_deps.budget->charge(parsed.usage.total_tokens(), parsed.cost);
            return finish(std::move(parsed));
        } else {
            reply.status = CallStatus::http_error;
            reply.http_status = static_cast<int>(http.status);
            reply.message = fmt::format("HTTP {} from {}: {}", http.status, m_url, error_excerpt(http.body));
            retryable = is_retryable_http_status(http.status);
        }
        if (!retryable || attempt_idx >= m_config.max_retries || interrupted()) {
            if (retryable && attempt_idx > 0) reply.message += fmt::format(" (after {} attempts)", reply.attempts);
            return finish(std::move(reply));
        }
        auto server_delay = server_retry_delay(http.header("retry-after-ms"), http.header("retry-after"), m_deps.now());
        auto delay = next_retry_delay(server_delay, attempt_idx);
        log::warn("llm: {} (attempt {} of {}); retrying in {} ms{}", redact(reply.message, key), reply.attempts,
                     m_config.max_retries + 1, delay.count(), server_delay ? " as the server asked" : "");
        m_deps.sleep(delay);
    }
}

}  // namespace npuopt::llm
