#include "llm/concurrency.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::llm {
namespace {

std::int64_t checked_slots(std::int64_t max_in_flight, std::ptrdiff_t most_slots) {
    if (max_in_flight < 1 || max_in_flight > most_slots) {
        throw Error(ErrorKind::internal,
                    fmt::format("llm concurrency limit must be in [1, {}], got {}", most_slots, max_in_flight));
    }
    return max_in_flight;
}

}  // namespace

ConcurrencyLimit::ConcurrencyLimit(std::int64_t max_in_flight)
    : m_max_in_flight(checked_slots(max_in_flight, k_most_slots)),
      m_slots(static_cast<std::ptrdiff_t>(m_max_in_flight)) {}

ConcurrencyLimit::Slot::Slot(ConcurrencyLimit& limit) : m_limit(limit) {
    m_limit.m_slots.acquire();
    ++m_limit.m_in_flight;
}

ConcurrencyLimit::Slot::~Slot() {
    --m_limit.m_in_flight;
    m_limit.m_slots.release();
}

}  // namespace npuopt::llm
