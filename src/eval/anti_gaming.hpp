#pragma once
// Anti-gaming checks of the correctness stage: a kernel must not pass by returning a previous
// run's output, ignoring its inputs, writing non-finite values or zeros that a loose tolerance
// lets through. Pure functions over the verify lines of the stage's runs; the toolchain poisons
// outputs before each run, these checks are the second line.
//
//   runs (seed, verify) ─► non-finite ─► magnitude ─► leftovers ─► input-independent ─►
//                          order-dependent ─► wrong result ─► pass          (first failure wins)

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "target/toolchain.hpp"

namespace npuopt::eval {

/// One correctness launch: its input seed, its place in the stage's sequence and what the
/// toolchain's verification said.
struct CorrectnessRun {
    std::uint64_t seed = 0;
    std::size_t position = 0;  ///< 0 = first launch of the stage
    target::Verify verify;
};

/// Which check a correctness verdict comes from (stable names: they are stored in reasons).
enum class GamingCheck {
    none,                   ///< every check passed
    nonfinite,              ///< NaN or Inf in an output
    all_zero,               ///< an output is all zeros while the reference is not
    implausible_magnitude,  ///< mean |output| outside a factor of the reference's
    leftovers,              ///< an output is byte-identical to a previous run's correct output for other inputs
    input_independent,      ///< an output is byte-identical for different inputs
    order_dependent,        ///< the same inputs gave different outputs depending on what ran before
    wrong_result,           ///< mismatches beyond the kernel's tolerance
};

/// Printable, stable name: "nonfinite", "all_zero", ... ("none" for a pass).
std::string_view gaming_check_name(GamingCheck check);

/// Settings of the checks.
struct AntiGamingConfig {
    double magnitude_factor = 4.0;  ///< mean |out| must lie within [ref / factor, ref x factor]
};

/// The verdict: the first failed check with a reason a person can act on.
struct AntiGamingVerdict {
    GamingCheck check = GamingCheck::none;
    std::string reason;
    std::vector<std::string> notes;  ///< checks that could not be applied, and why
    bool passed() const { return check == GamingCheck::none; }
};

/// Magnitude of each output of one verify line (non-finite is checked separately).
AntiGamingVerdict check_magnitude(const target::Verify& verify, std::uint64_t seed, const AntiGamingConfig& config);

/// All checks over the runs of one correctness stage, in launch order; no runs at all fail
/// (wrong_result): a stage whose every launch failed has verified nothing. Needs at least two
/// distinct seeds for the fingerprint checks and a seed run twice (not back to back) for the
/// order check; a check without its data adds a note instead of failing.
AntiGamingVerdict check_correctness_runs(std::span<const CorrectnessRun> runs, const AntiGamingConfig& config);

}  // namespace npuopt::eval
