#pragma once
// When to retry a chat call and how long to wait first: the server's retry-after-ms or
// Retry-After (seconds or an HTTP date) up to a cap, otherwise exponential backoff with full
// jitter from a seeded generator.

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

namespace npuopt::llm {

/// How often and how long to wait between attempts.
struct RetryPolicy {
    std::int64_t max_retries = 4;   ///< attempts after the first
    double cap_secs = 60.0;         ///< longest wait, the server's own request included
    double base_secs = 0.5;         ///< backoff ceiling of the first retry; doubles each retry
};

/// 408, 429 and every 5xx are worth another attempt; other statuses are final.
bool is_retryable_http_status(long status);

/// An HTTP date (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT"); nullopt when it is not one.
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

/// The wait the server asked for: `retry-after-ms` (milliseconds) first, else `Retry-After`
/// (seconds, or an HTTP date measured from `now`; a date in the past asks for 0). nullopt when
/// neither is present or parses.
std::optional<std::chrono::milliseconds> server_retry_delay(std::optional<std::string_view> retry_after_ms,
                                                            std::optional<std::string_view> retry_after,
                                                            std::chrono::system_clock::time_point now);

/// Full jitter: uniform in [0, min(cap, base * 2^retry_idx)] (retry_idx 0 is the first retry).
std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, std::int64_t retry_idx, std::mt19937_64& rng);

/// The wait before retry `retry_idx`: the server's request capped at policy.cap_secs, else backoff.
std::chrono::milliseconds retry_delay(const RetryPolicy& policy, std::optional<std::chrono::milliseconds> server_delay,
                                      std::int64_t retry_idx, std::mt19937_64& rng);

}  // namespace npuopt::llm
