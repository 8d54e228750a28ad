#include "scripted_server.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace npuopt::llm::stub {
namespace {

bool same_name(const std::string& a, const std::string& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
               return std::tolower(x) == std::tolower(y);
           });
}

}  // namespace

std::string ReceivedRequest::header(const std::string& name) const {
    for (const auto& [key, value] : headers) {
        if (same_name(key, name)) return value;
    }
    return {};
}

std::string chat_completion_body(const std::vector<std::string>& contents, const std::string& finish_reason,
                                 std::int64_t prompt_tokens, std::int64_t completion_tokens, const std::string& model) {
    nlohmann::json choices = nlohmann::json::array();
    for (std::size_t choice_idx = 0; choice_idx < contents.size(); ++choice_idx) {
        choices.push_back({{"index", choice_idx},
                           {"message", {{"role", "assistant"}, {"content", contents[choice_idx]}}},
                           {"finish_reason", finish_reason}});
    }
    nlohmann::json body = {
        {"id", "chatcmpl-scripted"},
        {"object", "chat.completion"},
        {"created", 0},
        {"model", model},
        {"choices", std::move(choices)},
        {"usage",
         {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}}},
    };
    return body.dump();
}

ScriptedReply chat_reply(const std::string& content, const std::string& finish_reason, std::int64_t prompt_tokens,
                         std::int64_t completion_tokens) {
    ScriptedReply reply;
    reply.body = chat_completion_body({content}, finish_reason, prompt_tokens, completion_tokens);
    return reply;
}

ScriptedReply error_reply(int status, const std::string& message, std::map<std::string, std::string> headers) {
    ScriptedReply reply;
    reply.status = status;
    reply.headers = std::move(headers);
    reply.body = nlohmann::json{{"error", {{"message", message}, {"type", "scripted"}}}}.dump();
    return reply;
}

struct ScriptedServer::Impl {
    httplib::Server server;
    std::thread listener;
    std::atomic<bool> stopping{false};
    mutable std::mutex mutex;
    std::deque<ScriptedReply> script;
    std::function<ScriptedReply(const ReceivedRequest&)> responder;
    std::vector<ReceivedRequest> received;

    /// Sleep `delay`, cut short when the server stops.
    void wait(std::chrono::milliseconds delay) const {
        auto until = std::chrono::steady_clock::now() + delay;
        while (!stopping.load() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
};

ScriptedServer::ScriptedServer() : m_impl(std::make_unique<Impl>()) {
    static constexpr std::size_t k_handler_threads = 32;
    m_impl->server.new_task_queue = [] { return new httplib::ThreadPool(k_handler_threads); };
    m_impl->server.set_keep_alive_timeout(1);
    m_impl->server.Post(R"(/.*)", [this](const httplib::Request& request, httplib::Response& response) {
        int now_in_flight = ++m_in_flight;
        int seen_max = m_max_in_flight.load();
        while (now_in_flight > seen_max && !m_max_in_flight.compare_exchange_weak(seen_max, now_in_flight)) {
        }
        ReceivedRequest received{request.method, request.path, {}, request.body};
        for (const auto& [name, value] : request.headers) received.headers.emplace(name, value);
        ScriptedReply reply;
        {
            std::lock_guard lock(m_impl->mutex);
            m_impl->received.push_back(received);
            if (!m_impl->script.empty()) {
                reply = std::move(m_impl->script.front());
                m_impl->script.pop_front();
            } else if (m_impl->responder) {
                reply = m_impl->responder(received);
            } else {
                reply = error_reply(500, "script exhausted: no reply queued for this request");
            }
        }
        m_impl->wait(reply.delay);
        response.status = reply.status;
        for (const auto& [name, value] : reply.headers) response.set_header(name, value);
        response.set_content(reply.body, "application/json");
        --m_in_flight;
    });
    m_port = m_impl->server.bind_to_any_port("127.0.0.1");
    if (m_port <= 0) throw std::runtime_error("scripted LLM server: cannot bind 127.0.0.1 on an ephemeral port");
    m_impl->listener = std::thread([this] { m_impl->server.listen_after_bind(); });
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!m_impl->server.is_running()) {
        if (std::chrono::steady_clock::now() > give_up) {
            m_impl->server.stop();
            m_impl->listener.join();
            throw std::runtime_error("scripted LLM server: did not start listening within 10 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

ScriptedServer::~ScriptedServer() {
    m_impl->stopping = true;
    m_impl->server.stop();
    if (m_impl->listener.joinable()) m_impl->listener.join();
}

void ScriptedServer::push(ScriptedReply reply) {
    std::lock_guard lock(m_impl->mutex);
    m_impl->script.push_back(std::move(reply));
}

void ScriptedServer::set_responder(std::function<ScriptedReply(const ReceivedRequest&)> responder) {
    std::lock_guard lock(m_impl->mutex);
    m_impl->responder = std::move(responder);
}

std::string ScriptedServer::base_url() const { return "http://127.0.0.1:" + std::to_string(m_port) + "/v1"; }

std::vector<ReceivedRequest> ScriptedServer::requests() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->received;
}

std::size_t ScriptedServer::request_count() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->received.size();
}

}  // namespace npuopt::llm::stub
