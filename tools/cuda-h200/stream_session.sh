#!/usr/bin/env bash
# A device session for the block-tile (gemv_stream) templates, from a plain checkout (no npuopt bundle):
#   tools/cuda-h200/stream_session.sh TAG VARIANTS_FILE REPEAT [bench_chains.py options...]
# builds cudac with the machine's nvcc, records nvidia-smi, then bench_chains.py at batch 1 over the
# QKV and O chains: cuBLAS baselines (eager, host timed, CUDA graph), every template at its defaults
# and the variants of VARIANTS_FILE (tools/cuda-h200/, one TEMPLATE:P=V,... a line, # comments),
# with the copy bandwidth of the same session. Results under $OUT (default /tmp/h200-out).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/h200-out}; mkdir -p "$out"
tag=$1; variants=$2; repeat=$3; shift 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv > "$out/$tag-nvidia-smi.csv" 2>&1; cat "$out/$tag-nvidia-smi.csv"
"$root/tools/cuda-h200/build.sh" /tmp/cudac-build > "$out/$tag-build.log" 2>&1 || { cat "$out/$tag-build.log"; exit 1; }
args=()
while read -r v; do [[ -n $v && $v != \#* ]] && args+=(--variant "$v"); done < "$root/tools/cuda-h200/$variants"
PYTHONUNBUFFERED=1 python3 "$root/tools/cuda-h200/bench_chains.py" --cudac /tmp/cudac-build/bin/cudac --root "$root" \
  --kernels project_qkv,attention_output --batches 1 --repeat "$repeat" --timeout 60 "${args[@]}" "$@" \
  --out "$out/$tag-stream.json" 2>&1 | tee "$out/$tag-session.log"
