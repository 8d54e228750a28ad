#include "llm/chat.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace npuopt::llm {
namespace {

bool is_blank(std::string_view text) {
    return std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

/// A non-negative integer field of `object`, or nullopt when missing or of another type.
std::optional<std::int64_t> token_count(const nlohmann::json& object, const char* key) {
    auto found = object.find(key);
    if (found == object.end() || !found->is_number_integer()) return std::nullopt;
    std::int64_t count = found->get<std::int64_t>();
    if (count < 0) return std::nullopt;
    return count;
}

Reply malformed(std::string what) {
    Reply reply;
    reply.status = CallStatus::malformed;
    reply.message = std::move(what);
    return reply;
}

/// What is wrong with a choice that is not ok, in words.
std::string choice_problem(const Choice& choice) {
    switch (choice.status) {
        case CallStatus::truncated: return "the reply was cut off at max_tokens (finish_reason 'length')";
        case CallStatus::empty:
            return fmt::format("the reply has no content (finish_reason '{}')", choice.finish_reason);
        case CallStatus::refusal:
            return choice.refusal ? fmt::format("the model refused: {}", *choice.refusal)
                                  : std::string("the model refused (finish_reason 'content_filter')");
        default: return fmt::format("the reply is {}", call_status_name(choice.status));
    }
}

}  // namespace

std::string_view call_status_name(CallStatus status) {
    switch (status) {
        case CallStatus::ok: return "ok";
        case CallStatus::truncated: return "truncated";
        case CallStatus::empty: return "empty";
        case CallStatus::refusal: return "refusal";
        case CallStatus::malformed: return "malformed";
        case CallStatus::http_error: return "http_error";
        case CallStatus::timeout: return "timeout";
        case CallStatus::transport_error: return "transport_error";
        case CallStatus::budget_exhausted: return "budget_exhausted";
    }
    return "unknown";
}

const Choice* Reply::first_ok() const {
    for (const auto& choice : choices) {
        if (choice.status == CallStatus::ok) return &choice;
    }
    return nullptr;
}

nlohmann::json chat_request_body(const config::LlmConfig& config, const ChatRequest& request) {
    nlohmann::json messages = nlohmann::json::array();
    for (const auto& message : request.messages) {
        messages.push_back({{"role", message.role}, {"content", message.content}});
    }
    nlohmann::json body = {
        {"model", config.model},
        {"messages", std::move(messages)},
        {"temperature", request.temperature.value_or(config.temperature)},
        {"n", request.n.value_or(config.n)},
        {"max_tokens", request.max_tokens.value_or(config.max_tokens)},
    };
    if (request.json_schema && config.response_format == config::LlmResponseFormat::json_schema) {
        body["response_format"] = {
            {"type", "json_schema"},
            {"json_schema",
             {{"name", request.json_schema->name},
              {"schema", request.json_schema->schema},
              {"strict", request.json_schema->strict}}},
        };
    }
    return body;
}

CallStatus classify_choice(const Choice& choice) {
    if (choice.refusal && !is_blank(*choice.refusal)) return CallStatus::refusal;
    if (choice.finish_reason == "content_filter") return CallStatus::refusal;
    if (choice.finish_reason == "length") return CallStatus::truncated;
    if (is_blank(choice.content)) return CallStatus::empty;
    return CallStatus::ok;
}

Reply parse_chat_response(std::string_view body) {
    nlohmann::json root = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return malformed("the reply body is not JSON");
    if (!root.is_object()) return malformed("the reply body is not a JSON object");
    auto choices = root.find("choices");
    if (choices == root.end() || !choices->is_array()) return malformed("the reply has no 'choices' array");
    if (choices->empty()) return malformed("the reply's 'choices' array is empty");

    Reply reply;
    for (std::size_t choice_idx = 0; choice_idx < choices->size(); ++choice_idx) {
        const nlohmann::json& entry = (*choices)[choice_idx];
        if (!entry.is_object()) return malformed(fmt::format("choices[{}] is not an object", choice_idx));
        auto message = entry.find("message");
        if (message == entry.end() || !message->is_object()) {
            return malformed(fmt::format("choices[{}] has no 'message' object", choice_idx));
        }
        Choice choice;
        auto content = message->find("content");
        if (content != message->end() && content->is_string()) {
            choice.content = content->get<std::string>();
        } else if (content != message->end() && !content->is_null()) {
            return malformed(fmt::format("choices[{}].message.content is neither text nor null", choice_idx));
        }
        auto refusal = message->find("refusal");
        if (refusal != message->end() && refusal->is_string()) choice.refusal = refusal->get<std::string>();
        auto finish_reason = entry.find("finish_reason");
        if (finish_reason != entry.end() && finish_reason->is_string()) {
            choice.finish_reason = finish_reason->get<std::string>();
        }
        choice.status = classify_choice(choice);
        reply.choices.push_back(std::move(choice));
    }

    auto usage = root.find("usage");
    std::optional<std::int64_t> prompt_tokens;
    std::optional<std::int64_t> completion_tokens;
    if (usage != root.end() && usage->is_object()) {
        prompt_tokens = token_count(*usage, "prompt_tokens");
        completion_tokens = token_count(*usage, "completion_tokens");
    }
    reply.usage.reported = prompt_tokens.has_value() && completion_tokens.has_value();
    reply.usage.prompt_tokens = prompt_tokens.value_or(0);
    reply.usage.completion_tokens = completion_tokens.value_or(0);
    auto model = root.find("model");
    if (model != root.end() && model->is_string()) reply.model = model->get<std::string>();

    reply.status = reply.first_ok() ? CallStatus::ok : reply.choices.front().status;
    if (!reply.ok()) {
        std::string first = choice_problem(reply.choices.front());
        reply.message = reply.choices.size() == 1 ? first
                                                  : fmt::format("none of the {} choices is usable; the first: {}",
                                                                reply.choices.size(), first);
    }
    return reply;
}

double usage_cost(const config::LlmConfig& config, const Usage& usage) {
    return static_cast<double>(usage.prompt_tokens) / 1000.0 * config.price_prompt_per_1k +
           static_cast<double>(usage.completion_tokens) / 1000.0 * config.price_completion_per_1k;
}

}  // namespace npuopt::llm
