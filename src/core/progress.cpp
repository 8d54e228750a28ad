#include "core/progress.hpp"

#include <fmt/format.h>

namespace npuopt {

std::string duration_text(double secs) {
    if (secs < 0) secs = 0;
    const auto total = static_cast<long long>(secs + 0.5);
    if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
    if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
    return fmt::format("{}s", total);
}

double PhaseClock::elapsed_secs() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
}

double PhaseClock::eta_secs(std::size_t done, std::size_t total) const {
    if (done == 0) return -1.0;
    if (done >= total) return 0.0;
    return elapsed_secs() / static_cast<double>(done) * static_cast<double>(total - done);
}

std::string PhaseClock::text(std::size_t done, std::size_t total) const {
    const double eta = eta_secs(done, total);
    return fmt::format("{}/{}, {} elapsed, ETA {}", done, total, duration_text(elapsed_secs()),
                       eta < 0 ? std::string("?") : duration_text(eta));
}

}  // namespace npuopt
