#pragma once
// Which device launches are checked for correctness. Every launch is checked by default; a
// target whose check is expensive declares
// `run_check: {fraction: F}` in target.yaml, and then each launch is checked with probability F,
// drawn from a SeedStream of the campaign seed: reproducible from the database, unannounced (no
// pattern a kernel could learn, and the toolchain's argv is the only place the choice shows).

#include <cstdint>
#include <string_view>

#include "eval/seed_stream.hpp"

namespace npuopt::eval {

/// Draws, launch by launch, whether the launch is checked.
class CheckPlan {
public:
    /// `fraction` is clamped to [0, 1]; 1 checks every launch without drawing.
    CheckPlan(double fraction, std::uint64_t campaign_seed, std::string_view content_hash, std::string_view purpose);
    /// Whether the next launch is checked.
    bool next();
    double fraction() const { return m_fraction; }

private:
    double m_fraction;
    SeedStream m_stream;
};

}  // namespace npuopt::eval
