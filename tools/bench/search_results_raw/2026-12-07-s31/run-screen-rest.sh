#!/bin/bash
# session 31: npuopt-screen (HEAD f6d9ce6 code) on the 31 cells of session 28's 72 (chips 1-8) that
# session 30's run with the declared quantities did not reach; session 28's per-chip knowledge
# bases; two workers share the list through claims/
cd /tmp/s31/scr
mkdir -p claims
while read -r c s k; do
  [ -f stop ] && break
  [ -f w/results/chip-${c}_${s}_${k}_npuopt-screen.json ] && continue
  mkdir claims/$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> progress
  nice -n 15 ./search_bench --json --device-runs 100 --only npuopt-screen --work /tmp/s31/scr/w --chip-seeds $c --shapes $s --kernels $k >> screen.json 2>> screen.log
done < order.txt
echo "== $(date +%T) done" >> progress
