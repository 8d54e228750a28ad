#pragma once
// A scripted OpenAI-compatible chat-completions server on loopback, for tests and for
// `npuopt bench llm`: binds 127.0.0.1 on an ephemeral port, answers POST .../chat/completions
// from a queue of scripted replies (status, headers, body, delay) or from a responder function,
// and records every request it received, headers included. Built as npuopt_llm_stub when
// cpp-httplib is found.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace npuopt::llm::stub {

/// One scripted answer.
struct ScriptedReply {
    int status = 200;
    std::map<std::string, std::string> headers;
    std::string body;
    std::chrono::milliseconds delay{0};  ///< wait before answering (a hang: longer than the client's timeout)
};

/// One request as the server received it.
struct ReceivedRequest {
    std::string method;
    std::string path;
    std::multimap<std::string, std::string> headers;  ///< names as sent
    std::string body;
    /// The first value of header `name` (case-insensitive); "" when absent.
    std::string header(const std::string& name) const;
};

/// The usual 200 body of a chat completion: one choice per entry of `contents`.
std::string chat_completion_body(const std::vector<std::string>& contents, const std::string& finish_reason = "stop",
                                 std::int64_t prompt_tokens = 10, std::int64_t completion_tokens = 20,
                                 const std::string& model = "scripted-model");

/// A 200 reply with one choice of `content`.
ScriptedReply chat_reply(const std::string& content, const std::string& finish_reason = "stop",
                         std::int64_t prompt_tokens = 10, std::int64_t completion_tokens = 20);

/// An error reply with an OpenAI-style {"error": {"message": ...}} body.
ScriptedReply error_reply(int status, const std::string& message, std::map<std::string, std::string> headers = {});

/// The server. Starts listening in the constructor, stops in the destructor (a delayed reply
/// still waiting is cut short).
class ScriptedServer {
public:
    ScriptedServer();
    ~ScriptedServer();
    ScriptedServer(const ScriptedServer&) = delete;
    ScriptedServer& operator=(const ScriptedServer&) = delete;

    /// Queue a reply; requests take them in order.
    void push(ScriptedReply reply);
    /// Answer from `responder` once the queue is empty (default: 500 "script exhausted").
    void set_responder(std::function<ScriptedReply(const ReceivedRequest&)> responder);

    int port() const { return m_port; }
    /// http://127.0.0.1:PORT/v1
    std::string base_url() const;

    std::vector<ReceivedRequest> requests() const;
    std::size_t request_count() const;
    /// Most requests being handled at the same moment, delays included.
    int max_in_flight() const { return m_max_in_flight.load(); }

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    int m_port = 0;
    std::atomic<int> m_in_flight{0};
    std::atomic<int> m_max_in_flight{0};
};

}  // namespace npuopt::llm::stub
