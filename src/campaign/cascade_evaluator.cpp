#include "campaign/evaluator.hpp"

namespace npuopt::campaign {

eval::Outcome CascadeEvaluator::evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                                         const eval::KernelContext& kernel) {
    return m_cascade->evaluate(candidate, champion, kernel);
}

eval::Outcome CascadeEvaluator::revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                                           const eval::KernelContext& kernel) {
    return m_cascade->revalidate(champion, predecessor, kernel);
}

search::ScreenEstimate CascadeEvaluator::static_estimate(const eval::Candidate& candidate,
                                                         const eval::KernelContext& kernel) {
    const eval::Estimate estimate = m_cascade->static_estimate(candidate, kernel);
    return {estimate.cycles, estimate.illegal, estimate.why};
}

double CascadeEvaluator::speed_of_light_cycles(const eval::KernelContext& kernel) {
    return m_cascade->speed_of_light_cycles(kernel);
}

void CascadeEvaluator::set_strict(bool strict) {
    m_cascade->set_config(strict ? eval::CascadeConfig::strict(m_configured) : m_configured);
}

std::string CascadeEvaluator::toolchain_version(std::string* why) {
    target::VersionResult version = m_device->version();
    if (version.call.status != target::CallStatus::ok || version.version.empty()) {
        if (why) *why = version.call.message.empty() ? "the toolchain did not report a version" : version.call.message;
        return "";
    }
    return version.version;
}

std::string CascadeEvaluator::toolchain_name() { return m_device->version().name; }

std::string CascadeEvaluator::toolchain_identity() { return m_device->identity(); }

}  // namespace npuopt::campaign
