#pragma once
// The evaluation step as the campaign sees it: an interface the real cascade adapts to
// (CascadeEvaluator) and tests replace with a fake, so the driver never runs a toolchain itself.

#include <optional>
#include <string>

#include "eval/cascade.hpp"

namespace npuopt::campaign {

/// Evaluates candidates of one campaign.
class Evaluator {
public:
    virtual ~Evaluator() = default;
    /// Run the cascade for `candidate` against `champion` (none: the baseline, which becomes the
    /// first champion when it is correct). Expected failures are in the Outcome.
    virtual eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                                   const eval::KernelContext& kernel) = 0;
    /// Re-race the champion against its predecessor; accepted = the champion still wins.
    virtual eval::Outcome revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                                     const eval::KernelContext& kernel) = 0;
    /// The speed-of-light bound in cycles (0 when unknown).
    virtual double speed_of_light_cycles(const eval::KernelContext& kernel) = 0;
    /// The toolchain's version ("" when it is missing; `why` says why).
    virtual std::string toolchain_version(std::string* why = nullptr) = 0;
    /// Late in a campaign the driver asks for stricter acceptance (smaller alpha, more runs per
    /// race and per screen, small gains raced too); false returns to the configured settings.
    virtual void set_strict(bool strict) { (void)strict; }
    /// Device runs the next evaluation may spend (the budget left; none = unbounded): a race
    /// ends inconclusive rather than overrun the campaign's device-run budget.
    virtual void set_device_run_allowance(std::optional<std::int64_t> allowance) { (void)allowance; }
};

/// The real cascade behind the Evaluator interface.
class CascadeEvaluator final : public Evaluator {
public:
    CascadeEvaluator(eval::Cascade& cascade, const target::Toolchain& toolchain)
        : m_cascade(&cascade), m_toolchain(&toolchain), m_configured(cascade.config()) {}
    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext& kernel) override;
    eval::Outcome revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                             const eval::KernelContext& kernel) override;
    double speed_of_light_cycles(const eval::KernelContext& kernel) override;
    std::string toolchain_version(std::string* why = nullptr) override;
    void set_strict(bool strict) override;
    void set_device_run_allowance(std::optional<std::int64_t> allowance) override {
        m_cascade->set_device_run_allowance(allowance);
    }

private:
    eval::Cascade* m_cascade;
    const target::Toolchain* m_toolchain;
    eval::CascadeConfig m_configured;  ///< the campaign's settings; strict() is derived from them
};

}  // namespace npuopt::campaign
