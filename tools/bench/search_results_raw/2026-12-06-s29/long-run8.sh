#!/bin/bash
# long searches (1000 device runs) on the first interleaved round: one cell per chip
# $1 strategy, $2 work dir
cd $WORK/long
S=(gemma4-12b llama3.1-8b llama3.2-3b); K=(attention_output feedforward project_qkv)
for c in 1 2 3 4 5 6 7 8; do
  s=${S[$(( c % 3 ))]}; k=${K[$(( (2*c) % 3 ))]}
  [ -f stop ] && break
  [ -f $2/results/chip-${c}_${s}_${k}_$1.json ] && continue
  echo "== $(date +%T) chip-$c $s $k" >> $2.progress
  nice -n 10 ./search_bench --json --device-runs 1000 --only $1 --work $WORK/long/$2 --chip-seeds $c --shapes $s --kernels $k >> $2.json 2>> $2.log
done
echo "== $(date +%T) done" >> $2.progress
