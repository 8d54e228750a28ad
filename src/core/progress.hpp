#pragma once
// Progress of a long phase with a known number of items (microbenchmark points, submission
// measurements): elapsed time and an ETA from the items done so far, as one short text.

#include <chrono>
#include <cstddef>
#include <string>

namespace npuopt {

/// "42s", "3m05s", "1h02m": a duration for people (negative counts as 0).
std::string duration_text(double secs);

/// Times one phase from construction.
class PhaseClock {
public:
    PhaseClock() : m_start(std::chrono::steady_clock::now()) {}
    double elapsed_secs() const;
    /// Seconds left at the mean pace so far; negative when nothing is done yet (unknown).
    double eta_secs(std::size_t done, std::size_t total) const;
    /// "12/40, 8s elapsed, ETA 19s" ("ETA ?" before the first item).
    std::string text(std::size_t done, std::size_t total) const;

private:
    std::chrono::steady_clock::time_point m_start;
};

}  // namespace npuopt
