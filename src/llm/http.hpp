#pragma once
// One HTTP POST of a JSON body over libcurl, with connect, whole-request and stall timeouts.
// A failure to get an answer is data (HttpResult.transport), never an exception. The only file
// of npuopt that includes curl.

#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <optional>

namespace npuopt::llm {

/// Time limits of one request.
struct HttpTimeouts {
    double connect_secs = 10.0;
    double request_secs = 300.0;  ///< the whole transfer
    double stall_secs = 60.0;     ///< give up when under 1 byte/s arrives for this long
};

/// Whether an HTTP answer came back.
enum class HttpTransport { ok, timeout, error };

/// What one POST produced.
struct HttpResult {
    HttpTransport transport = HttpTransport::error;
    long status = 0;                                           ///< HTTP status when transport is ok
    std::vector<std::pair<std::string, std::string>> headers;  ///< names lower-cased, in arrival order
    std::string body;
    std::string error;                                         ///< curl's description when transport is not ok
    /// The last value of header `name` (lower-case), nullopt when absent.
    std::optional<std::string_view> header(std::string_view name) const;
};

/// Largest reply body kept; a larger one is a transport error.
inline constexpr std::size_t k_max_reply_bytes = 32u << 20;

/// POST `body` (Content-Type: application/json) to `url` with extra `header_lines` ("Name: value").
/// Thread-safe; each call uses its own connection.
HttpResult post_json(const std::string& url, std::string_view body, const std::vector<std::string>& header_lines,
                     const HttpTimeouts& timeouts);

}  // namespace npuopt::llm
