#!/usr/bin/env bash
# The simulator's launch rate before and after the device boundary, side by side, in one run.
#   tools/bench/launch_rate.sh [BEFORE_REV] [LAUNCHES]
# BEFORE_REV (default 04c9f56, the last commit before the boundary) is built from git into a
# temporary directory next to this tree's npu-sim; both run `npuc run --check` of each baseline
# LAUNCHES times (default 10), interleaved (before, after, before, ...), from a warm cache.
# Prints launches per second for each and the ratio after/before (goal: >= 0.8).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REV=${1:-04c9f56}
N=${2:-10}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/launch-rate.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}

echo "building npu-sim at $REV (before) and the working tree (after) ..." >&2
mkdir -p "$WORK/src-before"
git -C "$ROOT" archive "$REV" tools/npu-sim dsl_templates | tar -x -C "$WORK/src-before"
sh "$WORK/src-before/tools/npu-sim/build.sh" "$WORK/before" >/dev/null 2>&1
sh "$ROOT/tools/npu-sim/build.sh" "$WORK/after" >/dev/null 2>&1
BEFORE=$WORK/before/1.0/bin/npuc
AFTER=$WORK/after/1.0/bin/npuc
export TMPDIR=$WORK NPU_SIM_NOISE_SEED=1

now() { date +%s.%N; }
printf '%-18s %10s %10s %8s\n' kernel before/s after/s ratio
for pair in project_qkv:baseline_project_qkv.rs attention_output:baseline_attention_output.rs feedforward:baseline_feedforward.rs; do
  k=${pair%%:*}
  f=$ROOT/dsl_templates/npu-sim/${pair#*:}
  # warm both caches (the old npuc compiles on first use; the new one through `compile`)
  "$BEFORE" run "$f" --kernel "$k" --seed 1 --check --cache-dir "$WORK/cb" --message-format json >/dev/null
  "$AFTER" compile "$f" --cache-dir "$WORK/ca" --message-format json >/dev/null
  tb=0 ta=0
  for i in $(seq 1 "$N"); do
    t0=$(now); "$BEFORE" run "$f" --kernel "$k" --seed "$i" --check --cache-dir "$WORK/cb" --message-format json >/dev/null; t1=$(now)
    "$AFTER" run "$f" --kernel "$k" --seed "$i" --check --cache-dir "$WORK/ca" --message-format json >/dev/null; t2=$(now)
    tb=$(echo "$tb + $t1 - $t0" | bc -l); ta=$(echo "$ta + $t2 - $t1" | bc -l)
  done
  printf '%-18s %10.2f %10.2f %8.3f\n' "$k" "$(echo "$N / $tb" | bc -l)" "$(echo "$N / $ta" | bc -l)" "$(echo "$tb / $ta" | bc -l)"
done
