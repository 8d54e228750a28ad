#!/usr/bin/env bash
# Quick start: install what is missing (Debian), build into build/, then run the main job:
# `npuopt doctor --target npu-sim`, then `npuopt demo` (init, kb build, a budgeted campaign on
# npu-sim and a submission; ends with the results table). DEMO_MINUTES sets the campaign budget.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

npuopt_setup "$@"
npuopt="$NPUOPT_BUILD_DIR/npuopt"

npuopt_say "npuopt doctor --target npu-sim"
doctor_status=0
"$npuopt" doctor --target npu-sim || doctor_status=$?
if [ "$doctor_status" -ne 0 ]; then
  npuopt_say "doctor found problems (exit $doctor_status): see its 'fix:' lines above"
  exit "$doctor_status"
fi

demo_dir="$(mktemp -d "${TMPDIR:-/tmp}/npuopt-demo.XXXXXX")"
npuopt_say "npuopt demo $demo_dir --minutes ${DEMO_MINUTES:-10}"
"$npuopt" demo "$demo_dir" --minutes "${DEMO_MINUTES:-10}"
npuopt_say "the campaign, its submission and report are in $demo_dir"
