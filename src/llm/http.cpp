#include "llm/http.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <mutex>

#include <curl/curl.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::llm {
namespace {

void init_curl_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            throw Error(ErrorKind::internal, "curl_global_init failed");
        }
    });
}

long millis_of(double secs) { return static_cast<long>(std::max(1.0, std::ceil(secs * 1000.0))); }

struct Transfer {
    HttpResult* result = nullptr;
    bool too_large = false;
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
    auto* transfer = static_cast<Transfer*>(user);
    std::size_t bytes = size * count;
    if (transfer->result->body.size() + bytes > k_max_reply_bytes) {
        transfer->too_large = true;
        return 0;  // curl aborts with CURLE_WRITE_ERROR
    }
    transfer->result->body.append(data, bytes);
    return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
    auto* transfer = static_cast<Transfer*>(user);
    std::size_t bytes = size * count;
    std::string_view line(data, bytes);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.rfind("HTTP/", 0) == 0) {
        transfer->result->headers.clear();  // a new response (after a 100 Continue, say)
        return bytes;
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return bytes;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.remove_prefix(1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.remove_suffix(1);
    transfer->result->headers.emplace_back(std::move(name), std::string(value));
    return bytes;
}

struct CurlDeleter {
    void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};
struct SlistDeleter {
    void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::optional<std::string_view> HttpResult::header(std::string_view name) const {
    for (auto it = headers.rbegin(); it != headers.rend(); ++it) {
        if (it->first == name) return std::string_view(it->second);
    }
    return std::nullopt;
}

HttpResult post_json(const std::string& url, std::string_view body, const std::vector<std::string>& header_lines,
                     const HttpTimeouts& timeouts) {
    init_curl_once();
    HttpResult result;
    std::unique_ptr<CURL, CurlDeleter> handle(curl_easy_init());
    if (!handle) {
        result.error = "curl_easy_init failed";
        return result;
    }
    curl_slist* raw_headers = nullptr;
    auto add_header = [&](const std::string& line) {
        curl_slist* extended = curl_slist_append(raw_headers, line.c_str());
        if (extended) raw_headers = extended;
    };
    add_header("Content-Type: application/json");
    add_header("Accept: application/json");
    add_header("Expect:");  // no 100-continue round trip for large prompts
    for (const auto& line : header_lines) add_header(line);
    std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);

    Transfer transfer{&result};
    char error_buffer[CURL_ERROR_SIZE] = {};
    CURL* curl = handle.get();
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, millis_of(timeouts.connect_secs));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, millis_of(timeouts.request_secs));
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(std::ceil(timeouts.stall_secs))));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");  // whatever this curl can decode
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");

    CURLcode code = curl_easy_perform(curl);
    if (code == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
        result.transport = HttpTransport::ok;
        return result;
    }
    result.transport = code == CURLE_OPERATION_TIMEDOUT ? HttpTransport::timeout : HttpTransport::error;
    if (transfer.too_large) {
        result.error = fmt::format("the reply is larger than {} MiB", k_max_reply_bytes >> 20);
    } else {
        result.error = error_buffer[0] != '\0' ? std::string(error_buffer) : std::string(curl_easy_strerror(code));
    }
    result.body.clear();
    return result;
}

}  // namespace npuopt::llm
