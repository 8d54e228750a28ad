#pragma once
// Typed verdicts. A stage of the cascade ends with a `Verdict`; a campaign step (a tree edge)
// with a `StepVerdict`. The store keeps their names as text; these are the only places where
// the names are spelt, so a typo is a compile error rather than a silent mismatch.

#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace npuopt::eval {

/// How one stage of the cascade ended (store: evaluations.verdict).
enum class Verdict {
    pass,          ///< the design goes on to the next stage
    fail,          ///< the design is wrong (diagnostics, wrong result, a hang)
    skip,          ///< not evaluated further on purpose (a stage without inputs, the estimate's screen)
    accept,        ///< the design becomes champion
    reject,        ///< correct but not shown faster
    inconclusive,  ///< the evidence did not decide (or the budget ended the stage)
    suspect,       ///< faster than physically possible: measurement or gaming
    error,         ///< the toolchain or the device failed, not the design
    running,       ///< store only: a race in progress
    interrupted,   ///< store only: its process ended mid-stage
    champion,      ///< store only: the champion's side of a race
};

std::string_view verdict_name(Verdict verdict);
/// The verdict named `name`; nullopt for an unknown name.
std::optional<Verdict> parse_verdict(std::string_view name);
std::ostream& operator<<(std::ostream& out, Verdict verdict);

/// How one campaign step ended (store: tree_edges.verdict).
enum class StepVerdict { accepted, rejected, failed, skipped, error, inconclusive, suspect };

std::string_view step_verdict_name(StepVerdict verdict);
std::optional<StepVerdict> parse_step_verdict(std::string_view name);
std::ostream& operator<<(std::ostream& out, StepVerdict verdict);
/// The step verdict of a cascade that ended with `last` (pass: the cascade stopped without a
/// decision, which counts as rejected).
StepVerdict step_verdict_of(Verdict last);
/// Whether a step with this verdict measured its design (its cycles teach the cost model).
bool step_measured(StepVerdict verdict);

}  // namespace npuopt::eval

/// Verdicts print by name in fmt::format.
template <>
struct fmt::formatter<npuopt::eval::Verdict> : fmt::formatter<std::string_view> {
    template <typename Context>
    auto format(npuopt::eval::Verdict verdict, Context& context) const {
        return fmt::formatter<std::string_view>::format(npuopt::eval::verdict_name(verdict), context);
    }
};
template <>
struct fmt::formatter<npuopt::eval::StepVerdict> : fmt::formatter<std::string_view> {
    template <typename Context>
    auto format(npuopt::eval::StepVerdict verdict, Context& context) const {
        return fmt::formatter<std::string_view>::format(npuopt::eval::step_verdict_name(verdict), context);
    }
};
