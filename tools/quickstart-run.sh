#!/usr/bin/env bash
# Quick start: install what is missing (Debian), build into build/, then run the main job.
# Until the campaign loop exists, the main job is `npuopt doctor --target npu-sim` and a short tour.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

npuopt_setup "$@"
npuopt="$NPUOPT_BUILD_DIR/npuopt"

npuopt_say "npuopt doctor --target npu-sim"
doctor_status=0
"$npuopt" doctor --target npu-sim || doctor_status=$?

tour_dir="$(mktemp -d "${TMPDIR:-/tmp}/npuopt-tour.XXXXXX")"
trap 'rm -rf "$tour_dir"' EXIT
npuopt_say "tour: npuopt init $tour_dir/campaign --target npu-sim"
"$npuopt" init "$tour_dir/campaign" --target npu-sim
npuopt_say "tour: npuopt status $tour_dir/campaign"
"$npuopt" status "$tour_dir/campaign"
npuopt_say "tour: the campaign.yaml it wrote (first lines)"
head -n 20 "$tour_dir/campaign/campaign.yaml"

if [ "$doctor_status" -ne 0 ]; then
  npuopt_say "doctor found problems (exit $doctor_status): see its 'fix:' lines above"
fi
exit "$doctor_status"
