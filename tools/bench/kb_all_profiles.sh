#!/usr/bin/env bash
# Run `bench kb` for npu-sim's default, alt_a and alt_b profiles and summarise the goal
# parameters (fitted vs true, relative error) and the build time of each. The rules sweep is
# left out to save time (`npuopt_bench_kb --rules-only [--profile FILE]` runs it).
#   tools/bench/kb_all_profiles.sh BENCH_BINARY [NPUC] [OUT_DIR]
set -euo pipefail
bench=${1:?usage: kb_all_profiles.sh BENCH_BINARY [NPUC] [OUT_DIR]}
npuc=${2:-}
out=${3:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
status=0
for profile in default alt_a alt_b; do
    args=(--profile "$root/tools/npu-sim/profiles/$profile.profile" --json --require-goal --no-rules)
    [ -n "$npuc" ] && args+=(--npuc "$npuc")
    "$bench" "${args[@]}" > "$out/$profile.json" || status=1
    python3 - "$out/$profile.json" "$profile" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: build {data['build_secs']:.1f} s, points {data['points']}, goal {'met' if data['goal_met'] else 'MISSED'}")
for row in data["params"]:
    if row["relative_error"] is None: continue
    mark = "" if row["goal"] is None else ("  ok" if row["within_goal"] else "  MISSED")
    print(f"  {row['name']:<30} {row['fitted']:>10.2f}  true {row['true']:>9.2f}  {100*row['relative_error']:+6.2f}%{mark}")
PY
done
echo "JSON in $out"
exit $status
