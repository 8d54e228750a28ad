#include "eval/anti_gaming.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

namespace npuopt::eval {

std::string_view gaming_check_name(GamingCheck check) {
    switch (check) {
        case GamingCheck::none: return "none";
        case GamingCheck::nonfinite: return "nonfinite";
        case GamingCheck::all_zero: return "all_zero";
        case GamingCheck::implausible_magnitude: return "implausible_magnitude";
        case GamingCheck::leftovers: return "leftovers";
        case GamingCheck::input_independent: return "input_independent";
        case GamingCheck::order_dependent: return "order_dependent";
        case GamingCheck::wrong_result: return "wrong_result";
    }
    return "none";
}

namespace {

AntiGamingVerdict fail(GamingCheck check, std::string reason) {
    AntiGamingVerdict verdict;
    verdict.check = check;
    verdict.reason = fmt::format("{}: {}", gaming_check_name(check), reason);
    return verdict;
}

const target::OutputInfo* find_output(const target::Verify& verify, const std::string& name) {
    for (const auto& output : verify.outputs) {
        if (output.name == name) return &output;
    }
    return nullptr;
}

}  // namespace

AntiGamingVerdict check_magnitude(const target::Verify& verify, std::uint64_t seed, const AntiGamingConfig& config) {
    for (const auto& output : verify.outputs) {
        if (output.ref_mean_abs <= 0.0) continue;  // a zero reference: nothing to compare with
        if (output.mean_abs == 0.0) {
            return fail(GamingCheck::all_zero,
                        fmt::format("output '{}' is all zeros for seed {} while the reference's mean |value| is {:.4g}; "
                                    "an all-zero output never passes, however loose the tolerance",
                                    output.name, seed, output.ref_mean_abs));
        }
        const double ratio = output.mean_abs / output.ref_mean_abs;
        if (ratio > config.magnitude_factor || ratio < 1.0 / config.magnitude_factor) {
            return fail(GamingCheck::implausible_magnitude,
                        fmt::format("output '{}' for seed {} has mean |value| {:.4g}, {:.3g}x the reference's {:.4g} "
                                    "(plausible: within {:g}x)",
                                    output.name, seed, output.mean_abs, ratio, output.ref_mean_abs,
                                    config.magnitude_factor));
        }
    }
    return {};
}

AntiGamingVerdict check_correctness_runs(std::span<const CorrectnessRun> runs, const AntiGamingConfig& config) {
    AntiGamingVerdict passed;
    if (runs.empty()) {
        // nothing was verified: never a pass (every launch failed, or none ran)
        return fail(GamingCheck::wrong_result, "no launch produced a verified output");
    }
    // 1. Non-finite values: the poison left in place, or arithmetic gone wrong.
    for (const auto& run : runs) {
        if (run.verify.nonfinite > 0) {
            return fail(GamingCheck::nonfinite,
                        fmt::format("{} of {} output elements are non-finite for seed {} (an output the kernel does not "
                                    "write keeps the NaN poison)",
                                    run.verify.nonfinite, run.verify.elements, run.seed));
        }
    }
    // 2. Magnitude of every output.
    for (const auto& run : runs) {
        if (auto verdict = check_magnitude(run.verify, run.seed, config); !verdict.passed()) return verdict;
    }
    // 3. Leftovers: an output equal to an earlier run's correct output for other inputs.
    for (std::size_t run_idx = 0; run_idx < runs.size(); ++run_idx) {
        const auto& run = runs[run_idx];
        for (std::size_t earlier_idx = 0; earlier_idx < run_idx; ++earlier_idx) {
            const auto& earlier = runs[earlier_idx];
            if (earlier.seed == run.seed || !earlier.verify.passed) continue;
            for (const auto& output : run.verify.outputs) {
                const auto* other = find_output(earlier.verify, output.name);
                if (other && !output.fingerprint.empty() && other->fingerprint == output.fingerprint) {
                    return fail(GamingCheck::leftovers,
                                fmt::format("output '{}' for seed {} (launch {}) is byte-identical to the correct output "
                                            "of launch {} for seed {}: the kernel returns a previous run's output",
                                            output.name, run.seed, run.position, earlier.position, earlier.seed));
                }
            }
        }
    }
    // 4. Outputs must change when inputs change.
    std::set<std::uint64_t> seeds;
    bool have_fingerprints = false;
    for (const auto& run : runs) {
        seeds.insert(run.seed);
        have_fingerprints = have_fingerprints || !run.verify.outputs.empty();
    }
    if (!have_fingerprints) {
        passed.notes.push_back("the toolchain reported no per-output fingerprints: leftover, input and order checks "
                               "not applied");
    } else if (seeds.size() < 2) {
        passed.notes.push_back("a single input seed: the input-dependence check needs two");
    }
    for (std::size_t run_idx = 0; run_idx < runs.size(); ++run_idx) {
        for (std::size_t other_idx = run_idx + 1; other_idx < runs.size(); ++other_idx) {
            const auto& first = runs[run_idx];
            const auto& second = runs[other_idx];
            if (first.seed == second.seed) continue;
            for (const auto& output : second.verify.outputs) {
                const auto* other = find_output(first.verify, output.name);
                if (other && !output.fingerprint.empty() && other->fingerprint == output.fingerprint) {
                    return fail(GamingCheck::input_independent,
                                fmt::format("output '{}' is byte-identical for seeds {} and {}: it does not change when "
                                            "the inputs do",
                                            output.name, first.seed, second.seed));
                }
            }
        }
    }
    // 5. The same inputs must give the same output whatever ran before.
    std::map<std::uint64_t, std::size_t> first_run_of_seed;
    bool seed_repeated = false;
    for (std::size_t run_idx = 0; run_idx < runs.size(); ++run_idx) {
        const auto& run = runs[run_idx];
        auto [found, inserted] = first_run_of_seed.emplace(run.seed, run_idx);
        if (inserted) continue;
        seed_repeated = true;
        const auto& first = runs[found->second];
        for (const auto& output : run.verify.outputs) {
            const auto* other = find_output(first.verify, output.name);
            if (other && other->fingerprint != output.fingerprint) {
                return fail(GamingCheck::order_dependent,
                            fmt::format("output '{}' for seed {} differs between launch {} and launch {} (fingerprints "
                                        "{} and {}): the result depends on what ran before",
                                        output.name, run.seed, first.position, run.position, other->fingerprint,
                                        output.fingerprint));
            }
        }
    }
    if (have_fingerprints && !seed_repeated) passed.notes.push_back("no seed ran twice: the run-order check needs one");
    // 6. The toolchain's own comparison with the reference.
    for (const auto& run : runs) {
        if (!run.verify.passed) {
            return fail(GamingCheck::wrong_result,
                        fmt::format("seed {}: {} of {} output elements outside the tolerance (max abs err {:.4g}, max rel "
                                    "err {:.4g})",
                                    run.seed, run.verify.mismatches, run.verify.elements, run.verify.max_abs_err,
                                    run.verify.max_rel_err));
        }
    }
    return passed;
}

}  // namespace npuopt::eval
