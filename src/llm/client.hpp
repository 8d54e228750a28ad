#pragma once
// The chat-completions client: POST {base_url}/chat/completions with retries (408, 429, 5xx,
// transport errors; the server's Retry-After honoured up to a cap, else jittered backoff), the
// shared concurrency limit and token budget, per-call usage and cost. Every outcome is a Reply;
// the API key is read from its environment variable at call time, sent only in the
// Authorization header, and redacted from everything the client returns or logs.
//
//   complete(request)
//     budget spent? ──yes──► Reply{budget_exhausted}
//     loop: take a slot ─► POST ─► release ─► 2xx? ─► parse, charge the budget ─► Reply
//                                      │ 408/429/5xx or transport error, retries left
//                                      └─► wait (Retry-After capped, else backoff) ─► loop
//           timeout, other status, retries exhausted ─► Reply{timeout | http_error | transport_error}

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "config/campaign_config.hpp"
#include "llm/budget.hpp"
#include "llm/chat.hpp"
#include "llm/concurrency.hpp"

namespace npuopt::llm {

/// What the client uses from its surroundings; tests replace the clock, the sleeper and the environment.
struct ClientDeps {
    std::shared_ptr<TokenBudget> budget;            ///< shared by a campaign's clients; null: no limit
    std::shared_ptr<ConcurrencyLimit> concurrency;  ///< shared limit; null: the client's own, of llm.concurrency
    /// Waits before a retry; default: sleeps, waking early when SIGINT/SIGTERM arrives.
    std::function<void(std::chrono::milliseconds)> sleep;
    /// Wall clock for Retry-After dates; default: system_clock::now.
    std::function<std::chrono::system_clock::time_point()> now;
    /// Reads an environment variable; default: getenv. nullopt when unset.
    std::function<std::optional<std::string>(const std::string&)> read_env;
    std::uint64_t seed = 1;                         ///< of the backoff jitter (the campaign's seed)
};

/// An OpenAI-compatible chat-completions client. Thread-safe: one client serves every thread.
class Client {
public:
    /// `config.base_url` and `config.model` must be set (Error(internal) otherwise: config validates them).
    explicit Client(config::LlmConfig config, ClientDeps deps = {});

    /// One chat call with its retries; failures are in Reply.status and Reply.message.
    Reply complete(const ChatRequest& request);

    const config::LlmConfig& config() const { return m_config; }
    /// The budget this client charges; null when it has none.
    const std::shared_ptr<TokenBudget>& budget() const { return m_deps.budget; }

private:
    std::chrono::milliseconds next_retry_delay(std::optional<std::chrono::milliseconds> server_delay,
                                               std::int64_t retry_idx);

    config::LlmConfig m_config;
    ClientDeps m_deps;
    std::string m_url;
    std::mutex m_rng_mutex;
    std::mt19937_64 m_rng;
};

}  // namespace npuopt::llm
