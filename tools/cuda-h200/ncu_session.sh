#!/bin/bash
# ncu (hardware counters; Firecracker machines only) on the O-projection template at its defaults,
# the O baseline and the QKV champion, batch 1:  tools/cuda-h200/ncu_session.sh BUNDLE_DIR
B=${1:-bundle}; bash $B/src/tools/cuda-h200/build.sh $B/build/cuda-h200 >/dev/null || exit 1
C=$B/build/cuda-h200/bin/cudac; T=$B/dsl_templates/cuda-h200
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1)
echo "ncu: $NCU"
$T/instantiate.sh $T/ao_gemv.template.yaml -o /tmp/ao.cu >/dev/null
$T/instantiate.sh $T/qkv_gemv.template.yaml -o /tmp/qkv.cu BPS=4 LOADHINT=0 >/dev/null
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
run() {  # name file kernel shape regex
  echo "=== $1"
  timeout 50 "$NCU" --clock-control none --kernel-name "regex:$5" --launch-count 4 --metrics $M --csv \
    "$C" run "$2" --kernel "$3" --seed 1 --repeat 1 --shape "$4" 2>&1 | grep -v '^==PROF==' | tail -n 40
}
run ao_gemv_defaults /tmp/ao.cu attention_output batch=1,hidden=3840,q_heads=16,head_dim=256 'ao_kernel'
run ao_baseline $T/baseline_attention_output.cu attention_output batch=1,hidden=3840,q_heads=16,head_dim=256 'gemv|gemm|Kernel|rmsnorm'
run qkv_champion /tmp/qkv.cu project_qkv batch=1,hidden=3840,q_heads=16,kv_heads=8,head_dim=256 'qkv_kernel'
