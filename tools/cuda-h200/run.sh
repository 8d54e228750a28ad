#!/usr/bin/env bash
# On the GPU machine, inside a bundle made by `tools/cuda-h200/bundle.sh pack DIR`:
#   DIR/run.sh CAMPAIGN [--shape S] [--minutes M] [--out TGZ] [--kernels k1,k2] [--seed N] [--kb-only | --no-kb]
# builds cudac with this machine's nvcc, runs a cuda-h200 campaign and packs it into TGZ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,4p' "$0" >&2; exit 2; }
campaign=$1; shift
shape=gemma4-12b-b1; minutes=10; out=$campaign.tgz; kernels=""; seed=1; kb=1; run=1
while [ $# -gt 0 ]; do
  case $1 in
    --shape) shape=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --kb-only) run=0; shift ;;      # init + kb build + pack
    --no-kb) kb=0; shift ;;         # the campaign already has its hardware model
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
npuopt=$here/npuopt
[ -x "$here/build/cuda-h200/bin/cudac" ] || "$here/src/tools/cuda-h200/build.sh" "$here/build/cuda-h200" >/dev/null
"$here/build/cuda-h200/bin/cudac" device
[ -f "$campaign/campaign.yaml" ] || "$npuopt" init "$campaign" --target cuda-h200 --shape "$shape" --seed "$seed"
# the GPU is a device node bubblewrap's /dev does not have; CUDA maps far more address space
# than an RLIMIT_AS of 8 GB allows
sed -i -e 's/^  required: true/  required: false/' -e 's/^  memory_mb: [0-9]*/  memory_mb: 1048576/' "$campaign/campaign.yaml"
if [ -n "$kernels" ]; then
  sed -i "s/^kernels: .*/kernels: [${kernels}]/" "$campaign/campaign.yaml"
fi
if [ "$kb" = 1 ]; then "$npuopt" kb build --campaign "$campaign" || echo "run.sh: kb build exited $?"; fi
if [ "$run" = 1 ]; then
"$npuopt" run "$campaign" --budget-minutes "$minutes" || echo "run.sh: npuopt run exited $?"
"$npuopt" report "$campaign" || true
rm -rf "$campaign/submission" "$campaign/submission.tar.gz"   # a resumed campaign submits afresh
"$npuopt" submit "$campaign" || echo "run.sh: npuopt submit exited $?"
fi
"$npuopt" --json status "$campaign" > "$campaign/status.json" || true
tar -C "$(dirname "$campaign")" --exclude=toolchain-cache -czf "$out" "$(basename "$campaign")"
echo "run.sh: campaign packed into $out"
