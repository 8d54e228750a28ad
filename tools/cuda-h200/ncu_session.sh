#!/bin/bash
# ncu (hardware counters; Firecracker machines only) on the run-8 champions (run 9) and their EPI 0
# counterparts, batch 1:  tools/cuda-h200/ncu_session.sh BUNDLE_DIR
B=${1:-bundle}; [ -x $B/build/cuda-h200/bin/cudac ] || bash $B/src/tools/cuda-h200/build.sh $B/build/cuda-h200 >/dev/null || exit 1
C=$B/build/cuda-h200/bin/cudac; T=$B/dsl_templates/cuda-h200
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1)
echo "ncu: $NCU"
inst() {  # inst TEMPLATE OUT P=V,...  (bench_chains.py's instantiate: the bundle has no npu-sim/instantiate.sh)
  python3 -c "import sys,shutil; sys.path.insert(0,'$B/src/tools/cuda-h200'); import bench_chains as b
ov=dict(kv.split('=') for kv in '$3'.split(',') if kv); shutil.copy(b.instantiate('$T/$1.template.yaml', ov)[1], '$2')"
}
inst ao_gemv /tmp/ao1.cu BPS=2,WARPS=8,ROWS=2,UNROLL=4,SPLITK=1,LOADHINT=1,XSRC=0,EPI=1
inst ao_gemv /tmp/ao0.cu BPS=2,WARPS=8,ROWS=2,UNROLL=4,SPLITK=1,LOADHINT=1,XSRC=0,EPI=0
inst qkv_gemv /tmp/qkv.cu BPS=2,WARPS=16,ROWS=2,UNROLL=4,SPLITK=1,LOADHINT=1,XSRC=1
inst ff_gemv /tmp/ff.cu ""
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread
run() {  # name file kernel shape regex
  echo "=== $1"
  timeout 60 "$NCU" --clock-control none --kernel-name "regex:$5" --launch-count 3 --metrics $M --csv \
    "$C" run "$2" --kernel "$3" --seed 1 --repeat 2 --shape "$4" 2>&1 | grep -v '^==PROF==' | tail -n 60
}
AO=batch=1,hidden=3840,q_heads=16,head_dim=256
run ao_champion_epi1 /tmp/ao1.cu attention_output $AO 'ao_dist'
run ao_same_epi0 /tmp/ao0.cu attention_output $AO 'ao_kernel'
run ao_baseline $T/baseline_attention_output.cu attention_output $AO 'gemv|gemm|Kernel|rms|cutlass|sm90'
run qkv_champion /tmp/qkv.cu project_qkv batch=1,hidden=3840,q_heads=16,kv_heads=8,head_dim=256 'qkv_kernel'
run ff_defaults /tmp/ff.cu feedforward batch=1,hidden=3840,ffn=15360 'ff_up|ff_dist'
