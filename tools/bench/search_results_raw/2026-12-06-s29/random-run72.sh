#!/bin/bash
# the 72 cells in session 28's interleaved order (9 rounds of 8 chips); $1 strategy, $2 work dir
cd $WORK/rnd
S=(gemma4-12b llama3.1-8b llama3.2-3b); K=(attention_output feedforward project_qkv)
cells=()
for j in 0 1 2 3 4 5 6 7 8; do for c in 1 2 3 4 5 6 7 8; do
  cells+=("$c ${S[$(( (j + c) % 3 ))]} ${K[$(( (j / 3 + j + 2*c) % 3 ))]}")
done; done
mkdir -p claims
for cell in "${cells[@]}"; do
  read -r c s k <<<"$cell"
  [ -f stop ] && break
  [ -f $2/results/chip-${c}_${s}_${k}_$1.json ] && continue
  mkdir claims/$2-$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> $2.progress
  nice -n 15 ./search_bench --json --device-runs 100 --only $1 --work $WORK/rnd/$2 --chip-seeds $c --shapes $s --kernels $k >> $2.json 2>> $2.log
done
echo "== $(date +%T) done72" >> $2.progress
