#!/usr/bin/env bash
# Quick test: install what is missing (Debian), build into build/ with warnings as errors,
# and run every test through ctest. Extra arguments go to cmake's configure step
# (e.g. -DNPUOPT_SANITIZE=ON).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

npuopt_setup -DNPUOPT_WERROR=ON "$@"
npuopt_say "ctest"
ctest --test-dir "$NPUOPT_BUILD_DIR" --output-on-failure -j "$(nproc)"
