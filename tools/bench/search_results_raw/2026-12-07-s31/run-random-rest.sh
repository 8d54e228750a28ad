#!/bin/bash
# session 31: random search (100 device runs) on the 33 cells of session 28's 72 (chips 1-8) that
# session 29's random run did not reach; session 28's per-chip knowledge bases; two workers
cd /tmp/s31/rnd
mkdir -p claims
while read -r c s k; do
  [ -f stop ] && break
  [ -f w/results/chip-${c}_${s}_${k}_random.json ] && continue
  mkdir claims/$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> progress
  nice -n 15 ./search_bench --json --device-runs 100 --only random --work /tmp/s31/rnd/w --chip-seeds $c --shapes $s --kernels $k >> random.json 2>> random.log
done < order.txt
echo "== $(date +%T) done" >> progress
