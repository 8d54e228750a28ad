#!/usr/bin/env bash
# One device session on the GPU machine, inside a bundle (tools/cuda-h200/bundle.sh pack DIR):
#   DIR/src/tools/cuda-h200/h200_session.sh DIR STEP... (results under $OUT, default /tmp/h200-out)
# STEP: chains[:REPEAT[:BATCHES]]    bench_chains.py over baselines (eager, graph), eager PyTorch + torch.cuda.graphs
#                                    (--torch) and templates at defaults
#       campaign:MINUTES[:SHAPE]     DIR/run.sh: kb build + npuopt run + report, packed as campaign-SHAPE.tgz
#       kb[:SHAPE]                   init + kb build only (microbenchmarks, fitted model), packed
#       resume:TGZ[:MINUTES]         unpack a packed campaign and run it on without a new kb build
#       variants:FILE[:REPEAT]       bench_chains.py at batch 1 over template variants (FILE in tools/cuda-h200/)
#       champions[:REPEAT]           bench_chains.py again with the last campaign's champions as designs
#                                    (at that campaign's batch; champions-bBATCH.json)
set -uo pipefail
bundle=$(cd "$1" && pwd); shift
out=${OUT:-/tmp/h200-out}; mkdir -p "$out"
tools=$bundle/src/tools/cuda-h200
cudac=$bundle/build/cuda-h200/bin/cudac
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv > "$out/nvidia-smi.csv" 2>&1
cat "$out/nvidia-smi.csv"
if [ ! -x "$cudac" ]; then
  log "building cudac"; "$tools/build.sh" "$bundle/build/cuda-h200" || exit 1
fi
"$cudac" --version; "$cudac" device
last_campaign=""
for step in "$@"; do
  IFS=: read -r what a b <<<"$step"
  case $what in
    chains)
      log "chains"; python3 "$tools/bench_chains.py" --cudac "$cudac" --root "$bundle" --repeat "${a:-20}" \
        --batches "${b:-1,4,8}" --torch --out "$out/chains.json" ;;
    campaign)
      shape=${b:-gemma4-12b-b1}; last_campaign=/tmp/campaign-$shape
      log "campaign $shape ${a:-5} min"
      "$bundle/run.sh" "$last_campaign" --shape "$shape" --minutes "${a:-5}" --out "$out/campaign-$shape.tgz" ;;
    kb)
      shape=${a:-gemma4-12b-b1}; last_campaign=/tmp/campaign-$shape
      log "kb build $shape"
      "$bundle/run.sh" "$last_campaign" --shape "$shape" --kb-only --out "$out/campaign-$shape.tgz" ;;
    resume)   # resume:TGZ:MINUTES — a campaign carried back (its hardware model kept), run on
      mkdir -p /tmp/resumed && tar -C /tmp/resumed -xzf "$a"
      last_campaign=$(ls -d /tmp/resumed/campaign-* | head -n1); shape=${last_campaign##*/campaign-}
      log "resume $last_campaign ${b:-5} min"
      "$bundle/run.sh" "$last_campaign" --shape "$shape" --no-kb --minutes "${b:-5}" --out "$out/campaign-$shape.tgz" ;;
    champions)
      [ -n "$last_campaign" ] || { echo "champions: no campaign ran"; continue; }
      batch=$(sed -n 's/^shape: "gemma4-12b-b\([0-9]*\)".*/\1/p' "$last_campaign/campaign.yaml"); batch=${batch:-1}
      designs=()
      for k in project_qkv attention_output feedforward; do
        f=$(ls -t "$last_campaign"/submission*/"$k"* "$last_campaign"/champions/"$k"* 2>/dev/null | head -n1)
        [ -n "$f" ] && designs+=(--design "$k@$batch=$f")
      done
      log "champions ${designs[*]}"
      python3 "$tools/bench_chains.py" --cudac "$cudac" --root "$bundle" --repeat "${a:-30}" --batches "$batch" \
        "${designs[@]}" --torch --out "$out/champions-b$batch.json" ;;
    variants)  # variants:FILE:REPEAT — bench_chains.py at batch 1 over the lines of FILE, each TEMPLATE:P=V,P=V
      args=(); while read -r v; do [ -n "$v" ] && args+=(--variant "$v"); done < "$bundle/src/tools/cuda-h200/$a"
      log "variants ${#args[@]}"
      python3 "$tools/bench_chains.py" --cudac "$cudac" --root "$bundle" --repeat "${b:-15}" --batches 1 "${args[@]}" \
        --out "$out/variants.json" ;;
    *) echo "unknown step $step" ;;
  esac
done
log "done"
