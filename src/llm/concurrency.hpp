#pragma once
// How many chat calls may be in flight at once (llm.concurrency), across every thread that
// shares the limit: a counting semaphore with scoped slots.

#include <atomic>
#include <cstdint>
#include <semaphore>

namespace npuopt::llm {

/// A counting semaphore of `max_in_flight` slots. Thread-safe.
class ConcurrencyLimit {
public:
    /// `max_in_flight` must be >= 1 (Error(internal) otherwise: config validates it).
    explicit ConcurrencyLimit(std::int64_t max_in_flight);

    /// A held slot, released when it goes out of scope.
    class Slot {
    public:
        explicit Slot(ConcurrencyLimit& limit);
        ~Slot();
        Slot(const Slot&) = delete;
        Slot& operator=(const Slot&) = delete;

    private:
        ConcurrencyLimit& m_limit;
    };

    /// Block until a slot is free and take it.
    Slot acquire() { return Slot(*this); }

    std::int64_t max_in_flight() const { return m_max_in_flight; }
    std::int64_t in_flight() const { return m_in_flight.load(); }

private:
    static constexpr std::ptrdiff_t k_most_slots = 1 << 20;
    const std::int64_t m_max_in_flight;
    std::counting_semaphore<k_most_slots> m_slots;
    std::atomic<std::int64_t> m_in_flight{0};
};

}  // namespace npuopt::llm
