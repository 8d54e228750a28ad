#include "llm/budget.hpp"

#include <algorithm>

namespace npuopt::llm {

TokenBudget::TokenBudget(std::int64_t limit_tokens) : m_limit_tokens(std::max<std::int64_t>(limit_tokens, 0)) {}

bool TokenBudget::exhausted() const {
    std::lock_guard lock(m_mutex);
    return m_closed || m_spent_tokens >= m_limit_tokens;
}

void TokenBudget::close() {
    std::lock_guard lock(m_mutex);
    m_closed = true;
}

void TokenBudget::charge(std::int64_t tokens, double cost) {
    std::lock_guard lock(m_mutex);
    m_spent_tokens += std::max<std::int64_t>(tokens, 0);
    m_spent_cost += std::max(cost, 0.0);
}

std::int64_t TokenBudget::spent_tokens() const {
    std::lock_guard lock(m_mutex);
    return m_spent_tokens;
}

std::int64_t TokenBudget::remaining_tokens() const {
    std::lock_guard lock(m_mutex);
    return std::max<std::int64_t>(m_limit_tokens - m_spent_tokens, 0);
}

double TokenBudget::spent_cost() const {
    std::lock_guard lock(m_mutex);
    return m_spent_cost;
}

}  // namespace npuopt::llm
