#include "llm/retry.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <locale>
#include <sstream>
#include <string>

namespace npuopt::llm {
namespace {

std::string_view trim(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
    return text;
}

/// A finite, non-negative decimal number (no sign, no exponent); nullopt otherwise.
std::optional<double> parse_non_negative(std::string_view text) {
    text = trim(text);
    if (text.empty()) return std::nullopt;
    bool seen_digit = false;
    bool seen_point = false;
    for (char c : text) {
        if (std::isdigit(static_cast<unsigned char>(c))) {
            seen_digit = true;
        } else if (c == '.' && !seen_point) {
            seen_point = true;
        } else {
            return std::nullopt;
        }
    }
    if (!seen_digit) return std::nullopt;
    double value = std::stod(std::string(text));
    if (!std::isfinite(value)) return std::nullopt;
    return value;
}

std::chrono::milliseconds millis_of_secs(double secs) {
    // Clamped to a day: a server asking for more is not worth overflow arithmetic.
    double clamped_secs = std::clamp(secs, 0.0, 86400.0);
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(clamped_secs * 1000.0)));
}

}  // namespace

bool is_retryable_http_status(long status) {
    return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
    std::istringstream stream{std::string(trim(text))};
    stream.imbue(std::locale::classic());
    std::tm parts{};
    stream >> std::get_time(&parts, "%a, %d %b %Y %H:%M:%S");
    if (stream.fail()) return std::nullopt;
    std::string zone;
    stream >> zone;
    if (zone != "GMT" && zone != "UTC") return std::nullopt;
    std::time_t epoch_secs = timegm(&parts);
    if (epoch_secs == static_cast<std::time_t>(-1)) return std::nullopt;
    return std::chrono::system_clock::from_time_t(epoch_secs);
}

std::optional<std::chrono::milliseconds> server_retry_delay(std::optional<std::string_view> retry_after_ms,
                                                            std::optional<std::string_view> retry_after,
                                                            std::chrono::system_clock::time_point now) {
    if (retry_after_ms) {
        if (auto millis = parse_non_negative(*retry_after_ms)) return millis_of_secs(*millis / 1000.0);
    }
    if (retry_after) {
        if (auto secs = parse_non_negative(*retry_after)) return millis_of_secs(*secs);
        if (auto date = parse_http_date(*retry_after)) {
            return millis_of_secs(std::chrono::duration<double>(*date - now).count());
        }
    }
    return std::nullopt;
}

std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, std::int64_t retry_idx, std::mt19937_64& rng) {
    double doublings = static_cast<double>(std::clamp<std::int64_t>(retry_idx, 0, 62));
    double ceiling_secs = std::min(policy.base_secs * std::pow(2.0, doublings), policy.cap_secs);
    std::uniform_real_distribution<double> jitter(0.0, std::max(ceiling_secs, 0.0));
    return millis_of_secs(jitter(rng));
}

std::chrono::milliseconds retry_delay(const RetryPolicy& policy, std::optional<std::chrono::milliseconds> server_delay,
                                      std::int64_t retry_idx, std::mt19937_64& rng) {
    if (server_delay) return std::min(*server_delay, millis_of_secs(policy.cap_secs));
    return backoff_delay(policy, retry_idx, rng);
}

}  // namespace npuopt::llm
