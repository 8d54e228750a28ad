#pragma once
// The static-schedule screen: before a device run is spent, the first few proposals of a role
// (ranked by the cost model) are also estimated by the toolchain's static schedule, which costs
// a compile and no device run. The schedule is biased (it ignores contention and penalties it
// cannot see), so its bias is learnt per family from the designs that were then measured, and
// its word is weighed against the cost model's by how well each predicted what was measured:
// a predictor whose log error spread is smaller counts for more (inverse-variance weights).

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/roles.hpp"

namespace npuopt::search {

/// The toolchain's static estimate of one proposal.
struct ScreenEstimate {
    std::optional<double> cycles;  ///< none: no estimate (illegal, or the toolchain has no schedule)
    bool illegal = false;          ///< the schedule rejected the design
    std::string why;               ///< why there is no estimate
    /// The campaign did not ask the toolchain (the screen's share of the device time is spent):
    /// not cached, not counted as a call, and the rest of the window goes unasked too.
    bool unasked = false;
};

/// Estimates a proposal statically (the campaign's toolchain `schedule`).
using ScreenFn = std::function<ScreenEstimate(const Proposal&)>;

/// What the screen has learnt of one family (or of all of them, pooled).
struct ScreenFit {
    std::size_t schedule_points = 0;
    double schedule_bias = 0.0;    ///< median log(measured / schedule)
    double schedule_spread = 0.0;  ///< standard deviation of log(measured / schedule) about the bias
    std::size_t model_points = 0;
    double model_spread = 0.0;     ///< root mean square of log(measured / model's prediction)
    double schedule_weight = 0.5;  ///< the schedule's share of the combined log estimate
};

class ScheduleScreen {
public:
    /// Reorder the first `width` template proposals by their combined estimate, best first
    /// (illegal ones last); the rest keep their order after them. Each screened proposal's
    /// reason says what the screen saw. Estimates are cached by content hash. Where no proposal
    /// in the window got a schedule or an illegal verdict (a toolchain without a schedule), the
    /// role's order stands.
    void rank(std::vector<Proposal>& proposals, std::size_t width, const ScreenFn& estimate);
    /// Learn from a measured design: the schedule's and the model's log errors for its family.
    void observe(const Proposal& proposal, double measured_cycles);
    /// The fit the screen uses for `family` (the pooled one where the family has too few points).
    ScreenFit fit(const std::string& family) const;
    /// Schedule calls made so far (cache hits not counted).
    std::size_t calls() const { return m_calls; }
    /// True once `k_blind_after` schedule calls in a row, from the first, brought neither cycles
    /// nor an illegal verdict: the toolchain has no schedule (or none that works here). The screen
    /// then calls it no more and the roles propose as they do without a screen.
    bool blind() const;
    static constexpr std::size_t k_blind_after = 8;
    /// Rankings that left the role's order because no estimate in the window said anything.
    std::size_t uninformed_rankings() const { return m_uninformed; }
    /// Proposals of a window left unasked because the campaign's screen budget was spent.
    std::size_t unasked() const { return m_unasked; }

private:
    struct Errors {
        std::vector<double> schedule;  ///< log(measured / schedule)
        std::vector<double> model;     ///< log(measured / model's prediction)
    };
    std::map<std::string, ScreenEstimate> m_estimates;  ///< by content hash
    std::map<std::string, Errors> m_errors;             ///< by family
    std::size_t m_calls = 0;
    std::size_t m_uninformed = 0;
    std::size_t m_unasked = 0;
    std::size_t m_answers = 0;  ///< calls that brought cycles or an illegal verdict
};

}  // namespace npuopt::search
