#pragma once
// The evaluation step as the campaign sees it: an interface the real cascade adapts to
// (CascadeEvaluator) and tests replace with a fake, so the driver never runs a toolchain itself.
// An evaluation keeps its records until the driver commits the step (commit_step), so that the
// stage rows, the knowledge base's updates and the driver's tree edge land in one transaction.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "eval/cascade.hpp"
#include "search/screen.hpp"

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
    /// The toolchain's static estimate of `candidate` (its `schedule`: a compile, no device run),
    /// for the search's screen. None when there is no such estimate (the default).
    virtual search::ScreenEstimate static_estimate(const eval::Candidate& candidate, const eval::KernelContext& kernel) {
        (void)candidate;
        (void)kernel;
        search::ScreenEstimate none;
        none.why = "the evaluator has no static estimate";
        return none;
    }
    /// The speed-of-light bound in cycles (0 when unknown).
    virtual double speed_of_light_cycles(const eval::KernelContext& kernel) = 0;
    /// The toolchain's version ("" when it is missing; `why` says why).
    virtual std::string toolchain_version(std::string* why = nullptr) = 0;
    /// The toolchain's name as it reports it ("npuc"; "" when unknown).
    virtual std::string toolchain_name() { return ""; }
    /// What identifies the installed toolchain cheaply, without running it (its resolved path,
    /// size and modification time): polled before every step, and the version is asked again
    /// only when it changes. "" when the toolchain cannot be found; a constant when unknown.
    virtual std::string toolchain_identity() { return "unknown"; }
    /// Late in a campaign the driver asks for stricter acceptance (smaller alpha, more runs per
    /// race and per screen, small gains raced too); false returns to the configured settings.
    virtual void set_strict(bool strict) { (void)strict; }
    /// Device runs the next evaluation may spend (the budget left; none = unbounded): a race
    /// ends inconclusive rather than overrun the campaign's device-run budget.
    virtual void set_device_run_allowance(std::optional<std::int64_t> allowance) { (void)allowance; }
    /// When the wall-time budget ends (none = no limit): no launch starts after it, and the
    /// evaluation under way ends inconclusive with budget_exhausted at its next launch boundary.
    virtual void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) { (void)deadline; }
    /// Commit what the last evaluate/revalidate kept and `step_writes` (the driver's), in one
    /// transaction. An evaluator that keeps nothing runs `step_writes` alone.
    virtual void commit_step(const std::function<void()>& step_writes) { step_writes(); }
};

/// The real cascade behind the Evaluator interface.
class CascadeEvaluator final : public Evaluator {
public:
    /// Defers the cascade's commits to commit_step().
    CascadeEvaluator(eval::Cascade& cascade, const target::Device& device)
        : m_cascade(&cascade), m_device(&device), m_configured(cascade.config()) {
        m_cascade->set_deferred_commit(true);
    }
    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext& kernel) override;
    eval::Outcome revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                             const eval::KernelContext& kernel) override;
    search::ScreenEstimate static_estimate(const eval::Candidate& candidate, const eval::KernelContext& kernel) override;
    double speed_of_light_cycles(const eval::KernelContext& kernel) override;
    std::string toolchain_version(std::string* why = nullptr) override;
    std::string toolchain_name() override;
    std::string toolchain_identity() override;
    void set_strict(bool strict) override;
    void set_device_run_allowance(std::optional<std::int64_t> allowance) override {
        m_cascade->set_device_run_allowance(allowance);
    }
    void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) override {
        m_cascade->set_deadline(deadline);
    }
    void commit_step(const std::function<void()>& step_writes) override { m_cascade->commit(step_writes); }

private:
    eval::Cascade* m_cascade;
    const target::Device* m_device;
    eval::CascadeConfig m_configured;  ///< the campaign's settings; strict() is derived from them
};

}  // namespace npuopt::campaign
