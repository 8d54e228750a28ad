#!/bin/bash
# session 30: npuopt-screen after the all_engines quantity; the 12 unseen cells (chips 9-12), then
# session 28's 72 cells in its interleaved order; two workers share the list through claims/
cd /tmp/s30/scr
S=(gemma4-12b llama3.1-8b llama3.2-3b); K=(attention_output feedforward project_qkv)
cells=()
for c in 9 10 11 12; do for k in 0 1 2; do cells+=("$c ${S[$(( (c + k) % 3 ))]} ${K[$k]}"); done; done
for j in 0 1 2 3 4 5 6 7 8; do for c in 1 2 3 4 5 6 7 8; do
  cells+=("$c ${S[$(( (j + c) % 3 ))]} ${K[$(( (j / 3 + j + 2*c) % 3 ))]}")
done; done
mkdir -p claims
for cell in "${cells[@]}"; do
  read -r c s k <<<"$cell"
  [ -f stop ] && break
  [ -f w/results/chip-${c}_${s}_${k}_npuopt-screen.json ] && continue
  mkdir claims/$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> progress
  nice -n 15 ./search_bench --json --device-runs 100 --only npuopt-screen --work /tmp/s30/scr/w --chip-seeds $c --shapes $s --kernels $k >> screen.json 2>> screen.log
done
echo "== $(date +%T) done" >> progress
