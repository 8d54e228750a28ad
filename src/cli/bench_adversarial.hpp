#pragma once
// `npuopt bench adversarial`: the adversarial corpus and the honest controls through the cascade.

#include "cli/commands.hpp"

namespace npuopt::cli {

/// Runs report::run_adversarial_bench with the options after `--`; exit 0 only when every goal is met.
int run_bench_adversarial(const GlobalOptions& global, const BenchOptions& options);

}  // namespace npuopt::cli
