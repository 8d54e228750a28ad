#include "eval/check_plan.hpp"

#include <algorithm>

namespace npuopt::eval {

CheckPlan::CheckPlan(double fraction, std::uint64_t campaign_seed, std::string_view content_hash,
                     std::string_view purpose)
    : m_fraction(std::clamp(fraction, 0.0, 1.0)), m_stream(campaign_seed, content_hash, purpose) {}

bool CheckPlan::next() {
    if (m_fraction >= 1.0) return true;
    return m_stream.uniform() < m_fraction;
}

}  // namespace npuopt::eval
