#!/bin/sh
# Tests of cudac (tools/cuda-h200/CMakeLists.txt registers them with ctest).
#   test_cudac.sh protocol CUDAC            no nvcc compile, no GPU: version, paths, schedule, usage, device
#   test_cudac.sh diagnostics CUDAC         nvcc's errors and ptxas's report as protocol lines
#   test_cudac.sh templates CUDAC ROOT      every template (defaults), baseline and probe passes `cudac check`
#   test_cudac.sh gpu CUDAC ROOT            on a GPU: every baseline and template passes `cudac run --check`
#                                           at batch 1 and 8; exit 77 (skipped) without a GPU
set -u
mode=$1; cudac=$2; root=${3:-}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {  # expect NAME PATTERN TEXT
  printf '%s\n' "$3" | grep -q -- "$2" || fail "$1: no line matching $2 in: $(printf '%s' "$3" | head -c 600)"
}
case $mode in
  protocol)
    out=$("$cudac" --version --message-format json); expect version '"type":"version","name":"cudac","version":"0.1.0+nvcc' "$out"
    out=$("$cudac" paths); expect paths '"type":"paths","read_only":\["/' "$out"
    out=$("$cudac" schedule x.cu --kernel feedforward); rc=$?
    [ $rc -eq 2 ] || fail "schedule: exit $rc, want 2"; expect schedule '"kind":"usage","message":"schedule is unsupported' "$out"
    out=$("$cudac" run); rc=$?; [ $rc -eq 2 ] || fail "run without FILE: exit $rc, want 2"; expect usage '"kind":"usage"' "$out"
    out=$("$cudac" run x.cu --kernel k --bogus); rc=$?; [ $rc -eq 2 ] || fail "unknown option: exit $rc"; expect bogus 'unknown option --bogus' "$out"
    out=$("$cudac" device); rc=$?
    if [ $rc -eq 77 ]; then expect device '"kind":"device","message":"no CUDA device' "$out"
    elif [ $rc -eq 0 ]; then expect device '"type":"device","name":' "$out"
    else fail "device: exit $rc"; fi
    ;;
  diagnostics)
    printf '#include "npuopt_cuda.h"\n\nNPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) {\n    return undefined_name;\n}\n' > "$scratch/bad.cu"
    out=$("$cudac" check "$scratch/bad.cu"); rc=$?
    [ $rc -eq 1 ] || fail "bad.cu: exit $rc, want 1"
    expect E0001 '"level":"error","code":"E0001","message":"identifier \\"undefined_name\\" is undefined","span":{"file":"bad.cu","line":4' "$out"
    expect check-summary '"type":"check","ok":false,"errors":1' "$out"
    cat > "$scratch/smem.cu" <<'CU'
#include "npuopt_cuda.h"
__global__ void big(float* p) { __shared__ float s[16384]; s[threadIdx.x] = 1; __syncthreads(); p[threadIdx.x] = s[threadIdx.x ^ 1]; }
NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) { big<<<1, 32, 0, c->stream>>>(nullptr); return 0; }
CU
    out=$("$cudac" check "$scratch/smem.cu")
    expect E0201 '"code":"E0201".*"quantity":"smem_bytes","value":65536,"limit":49152' "$out"
    cat > "$scratch/spill.cu" <<'CU'
#include "npuopt_cuda.h"
__global__ void __launch_bounds__(1024, 2) spill(const float4* p, float* q, int n) {
    float4 v[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = p[threadIdx.x + i * n];
    float s = 0;
#pragma unroll
    for (int i = 63; i >= 0; --i) s += v[i].x * v[(i * 7) & 63].y + v[i].z * v[i].w;
    q[threadIdx.x] = s;
}
NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx* c) { spill<<<1, 1024, 0, c->stream>>>(nullptr, nullptr, 1); return 0; }
CU
    out=$("$cudac" check "$scratch/spill.cu")
    expect resources '"type":"resources","function":"_Z5spillPK6float4Pfi","registers":32' "$out"
    expect W0301 '"level":"warning","code":"W0301".*"quantity":"spill_bytes"' "$out"
    expect ok '"type":"check","ok":true' "$out"
    mkdir -p "$scratch/cache"
    out=$("$cudac" compile "$scratch/spill.cu" --cache-dir "$scratch/cache")
    expect compile '"type":"compile","ok":true.*"artifact":".*\.so","sha256":"[0-9a-f]\{64\}"' "$out"
    so=$(ls "$scratch"/cache/*.so); printf 'x' >> "$so"
    out=$(CUDAC_CACHE_DIR="$scratch/cache" "$cudac" run "$scratch/spill.cu" --kernel probe --seed 1 --shape batch=1); rc=$?
    [ $rc -eq 1 ] || fail "tampered cache entry: exit $rc, want 1"
    expect cache '"kind":"cache","message":"sha256 mismatch","entry":"' "$out"
    ;;
  templates)
    t=$root/dsl_templates/cuda-h200; m=$root/microbench/cuda-h200
    for yaml in "$t"/*.template.yaml; do
      f=$("$t/instantiate.sh" "$yaml" -o "$scratch/$(basename "$yaml" .template.yaml).cu") || { fail "instantiate $yaml"; continue; }
      out=$("$cudac" check "$f") || fail "$(basename "$yaml"): $(printf '%s' "$out" | grep '"level":"error"' | head -c 600)"
    done
    # code paths the defaults leave out: the tensor-core tile of ao_stream (MMA 1 and 2)
    for mma in 1 2; do
      f=$("$t/instantiate.sh" "$t/ao_stream.template.yaml" -o "$scratch/ao_stream_mma$mma.cu" MMA=$mma LOADER=0 SROWS=8 WARPS=16 BPS=1 STAGES=2) \
        || fail "instantiate ao_stream MMA=$mma"
      out=$("$cudac" check "$f") || fail "ao_stream MMA=$mma: $(printf '%s' "$out" | grep '"level":"error"' | head -c 600)"
    done
    for f in "$t"/baseline_*.cu; do
      out=$("$cudac" check "$f") || fail "$(basename "$f"): $(printf '%s' "$out" | grep '"level":"error"' | head -c 600)"
    done
    for f in "$m"/*.cu; do
      sed -e 's/\${bytes}/1048576/g; s/\${warps}/8/g; s/\${launches}/4/g; s/\${passes}/2/g' "$f" > "$scratch/probe_$(basename "$f")"
      out=$("$cudac" check "$scratch/probe_$(basename "$f")") || fail "probe $(basename "$f"): $(printf '%s' "$out" | head -c 600)"
    done
    ;;
  gpu)
    out=$("$cudac" device); rc=$?
    if [ $rc -eq 77 ]; then echo "SKIP: no CUDA device here ($out); the GPU checks need the H200 (tools/cuda-h200/README.md)"; exit 77; fi
    python3 "$root/tools/cuda-h200/bench_chains.py" --cudac "$cudac" --root "$root" --batches 1,8 --repeat 3 \
      --variant ao_stream:LOADER=0,STAGES=2,SROWS=8,BPS=1,WARPS=16,MMA=1 \
      --variant ao_stream:LOADER=0,STAGES=2,SROWS=8,BPS=1,WARPS=16,MMA=2 --out "$scratch/chains.json" || fail "bench_chains"
    python3 - "$scratch/chains.json" <<'PY' || fail "a design failed its check on the GPU"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
bad = [r for r in rows if not (r.get("verify") or {}).get("passed")]
for r in bad: print("FAILED:", r["kernel"], r["batch"], r["design"], r["mode"], (r.get("error") or "")[-300:])
sys.exit(1 if bad or not rows else 0)
PY
    ;;
  *) echo "usage: $0 protocol|diagnostics|templates|gpu CUDAC [ROOT]"; exit 2 ;;
esac
[ $fails -eq 0 ] && echo "ok ($mode)"
exit $fails
