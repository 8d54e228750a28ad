#!/usr/bin/env bash
# Quick test: install what is missing (Debian), build into build/ with warnings as errors,
# build the simulator a second time with Debian's own Rust (rustc 1.63; NPUOPT_SKIP_DEBIAN_RUST=1
# skips it), install the test-only packages (Chromium, Slurm), and run every test through ctest. Extra arguments go to cmake's configure step
# (e.g. -DNPUOPT_SANITIZE=ON).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

npuopt_setup -DNPUOPT_WERROR=ON "$@"
npuopt_check_debian_rust
# Test-only packages: the dashboard's browser test runs the page in headless Chromium, and must
# not skip here for want of it.
npuopt_apt_install "${NPUOPT_TEST_APT_PACKAGES[@]}"
export NPUOPT_REQUIRE_CHROMIUM=1
if npuopt_probe_slurm; then export NPUOPT_REQUIRE_SLURM=1; fi
npuopt_say "ctest"
ctest --test-dir "$NPUOPT_BUILD_DIR" --output-on-failure -j "$(nproc)"
