#!/bin/bash
# session 31: npuopt-screen with the outlier-aware quick reject (a slow first launch that the
# device's own launch outliers explain gets a second look when the model predicts the design
# faster), on 28 cells: the 12 of chips 9-12 and the first two rounds of session 28's order on
# chips 1-8; session 28's per-chip knowledge bases; paired with session 30/31's control runs
cd /tmp/s31/sl
mkdir -p claims
while read -r c s k; do
  [ -f stop ] && break
  [ -f w/results/chip-${c}_${s}_${k}_npuopt-screen.json ] && continue
  mkdir claims/$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> progress
  nice -n 15 ./search_bench --json --device-runs 100 --only npuopt-screen --work /tmp/s31/sl/w --chip-seeds $c --shapes $s --kernels $k >> screen.json 2>> screen.log
done < order.txt
echo "== $(date +%T) done" >> progress
