#pragma once
// The chat-completions wire format as values: what a call asks (ChatRequest), what comes back
// (Reply with its Choices, Usage and a CallStatus), the request body and the parser of a reply.
// No I/O here; client.hpp does the calling.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/campaign_config.hpp"

namespace npuopt::llm {

/// One turn of a conversation.
struct Message {
    std::string role;     ///< "system", "user" or "assistant"
    std::string content;
};

/// A JSON schema the reply must follow; sent as response_format when llm.response_format is json_schema.
struct JsonSchema {
    std::string name;     ///< [a-zA-Z0-9_-]{1,64}, e.g. "kernel_edit"
    nlohmann::json schema;
    bool strict = true;
};

/// What one call asks; unset overrides take the config's values.
struct ChatRequest {
    std::vector<Message> messages;
    std::optional<JsonSchema> json_schema;
    std::optional<std::int64_t> n;
    std::optional<double> temperature;
    std::optional<std::int64_t> max_tokens;
};

/// How a call (or one of its choices) ended. Everything but `ok` is an expected failure, recorded as data.
enum class CallStatus {
    ok,
    truncated,         ///< finish_reason "length": the reply hit max_tokens
    empty,             ///< no content
    refusal,           ///< the message's refusal field, or finish_reason "content_filter"
    malformed,         ///< a 2xx whose body is not a chat completion
    http_error,        ///< a non-retryable status, or retries exhausted on 408/429/5xx
    timeout,           ///< connect, request or stall timeout
    transport_error,   ///< no HTTP answer (refused connection, reset, DNS), retries exhausted
    budget_exhausted,  ///< the token budget was spent before the call; nothing was sent
};

/// Printable name of a status, e.g. "budget_exhausted".
std::string_view call_status_name(CallStatus status);

/// One of the n answers of a call.
struct Choice {
    std::string content;
    std::string finish_reason;            ///< "stop", "length", ... ("" when the server gave none)
    std::optional<std::string> refusal;   ///< the message's refusal text, when the server sent one
    CallStatus status = CallStatus::ok;
};

/// Tokens a call used, as the server reported them (or estimated when it did not).
struct Usage {
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    bool reported = true;                 ///< false: the server sent no usage; estimated at 4 characters a token
    std::int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

/// The result of a call: failures included. Never holds the API key.
struct Reply {
    CallStatus status = CallStatus::transport_error;  ///< ok when at least one choice is ok, else the first choice's
    std::string message;                  ///< what went wrong; empty when ok
    std::vector<Choice> choices;
    Usage usage;
    double cost = 0.0;                    ///< from usage and the config's prices per 1k tokens
    std::string model;                    ///< as the server named it
    std::optional<int> http_status;       ///< of the last attempt, when one answered
    int attempts = 0;                     ///< HTTP attempts made (0: refused before sending)
    double wall_secs = 0.0;               ///< retries and their waits included
    bool ok() const { return status == CallStatus::ok; }
    /// The first choice whose status is ok; nullptr when none.
    const Choice* first_ok() const;
};

/// The JSON body of POST {base_url}/chat/completions.
nlohmann::json chat_request_body(const config::LlmConfig& config, const ChatRequest& request);

/// The status of one choice from its content, finish_reason and refusal.
CallStatus classify_choice(const Choice& choice);

/// Parse a 2xx body: choices (each classified), usage, model, the overall status. A body that is
/// not a chat completion gives status malformed and a message saying what is missing.
Reply parse_chat_response(std::string_view body);

/// Cost of `usage` at the config's prices per 1k tokens.
double usage_cost(const config::LlmConfig& config, const Usage& usage);

}  // namespace npuopt::llm
