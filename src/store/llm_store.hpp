#pragma once
// The LLM's audit: one row per chat call (llm_calls) with the prompt and the reply compressed
// (zlib), their SHA-256 hashes, the per-choice statuses, what retrieval put into the prompt, the
// tokens and the cost. Written when the call returns, in its own transaction, so that a kill
// during the evaluation that follows loses no paid call. The only owner of llm_calls.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/database.hpp"

namespace npuopt::store {

/// One chat call as recorded (prompt and reply as plain text here; compressed in the table).
struct LlmCallRecord {
    std::int64_t id = 0;
    std::string kernel;
    std::string role;            ///< architect | tuner | analyst | porter | librarian
    std::string purpose = "propose";  ///< propose | repair | diagnose | port | check
    std::string strategy;        ///< zero_shot | profiling_guided | iterative_refinement | multi_agent
    std::string model;
    std::int64_t step = 0;       ///< the campaign step it was made for
    std::string status;          ///< llm::CallStatus name
    std::string message;
    std::string prompt;          ///< the messages as JSON
    std::string reply;           ///< every choice's content as JSON ("" when none came)
    std::string prompt_hash;     ///< SHA-256 of `prompt`
    std::string reply_hash;      ///< SHA-256 of `reply` ("" when none came)
    std::string choices_json = "[]";  ///< per choice: status, finish_reason, what became of it
    std::string context_json = "[]";  ///< knowledge-base entries the prompt was given
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    bool tokens_reported = true;
    double cost = 0.0;
    std::int64_t n = 1;
    std::int64_t attempts = 0;
    std::optional<std::int64_t> http_status;
    double wall_secs = 0.0;
    std::string created_at;
};

/// Tokens, cost and calls of one role.
struct LlmRoleTotals {
    std::string role;
    std::int64_t calls = 0;
    std::int64_t ok_calls = 0;
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    double cost = 0.0;
};

class LlmStore {
public:
    explicit LlmStore(Database& database) : m_database(&database) {}

    /// Insert a call (prompt and reply compressed); returns its id. The caller owns the transaction.
    std::int64_t record_call(const LlmCallRecord& record);
    /// Set what became of the call's choices (after they were evaluated).
    void set_choices(std::int64_t id, const std::string& choices_json);
    /// A call with its prompt and reply decompressed.
    std::optional<LlmCallRecord> find_call(std::int64_t id);
    /// Every call, oldest first (prompt and reply decompressed); `kernel` "" = all kernels.
    std::vector<LlmCallRecord> list_calls(const std::string& kernel = "");
    /// Totals per role over every kernel.
    std::vector<LlmRoleTotals> totals_by_role();
    /// Tokens used by every call so far (what a resumed campaign has already spent).
    std::int64_t total_tokens();

private:
    Database* m_database;
};

/// zlib-compressed `text` (level 6) and back; Error(store) on a damaged blob.
std::string compress_text(const std::string& text);
std::string decompress_text(const std::string& bytes);

}  // namespace npuopt::store
