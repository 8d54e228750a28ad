#pragma once
// The token budget of a campaign's LLM calls (budgets.llm_tokens), shared by every client and
// thread: calls are refused once it is spent. Calls already in flight may overshoot it by what
// they use; no call starts after that.

#include <cstdint>
#include <mutex>

namespace npuopt::llm {

/// Tokens (and their cost) spent against a limit. Thread-safe.
class TokenBudget {
public:
    /// `limit_tokens` <= 0: nothing may be spent (every call is refused).
    explicit TokenBudget(std::int64_t limit_tokens);

    /// Whether no further call may start.
    bool exhausted() const;
    /// No further call may start: what is left affords no useful call (a role found so).
    void close();
    /// Record what a finished call used.
    void charge(std::int64_t tokens, double cost);

    std::int64_t limit_tokens() const { return m_limit_tokens; }
    std::int64_t spent_tokens() const;
    std::int64_t remaining_tokens() const;  ///< 0 when overspent
    double spent_cost() const;

private:
    const std::int64_t m_limit_tokens;
    mutable std::mutex m_mutex;
    std::int64_t m_spent_tokens = 0;
    double m_spent_cost = 0.0;
    bool m_closed = false;
};

}  // namespace npuopt::llm
