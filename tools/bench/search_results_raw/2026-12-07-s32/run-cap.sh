#!/bin/bash
# session 32: npuopt-screen with capped signed-rank scores (score_cap 0.6) on the 84 cells of the control (session 30 screen-quantities + session 31 screen-rest), in a seeded random order (random.Random(32)); the per-chip knowledge bases of session 30
cd /tmp/s32/cap
mkdir -p claims
while read -r c s k; do
  [ -f stop ] && break
  [ -f w/results/chip-${c}_${s}_${k}_npuopt-screen.json ] && continue
  mkdir claims/$c-$s-$k 2>/dev/null || continue
  echo "== $(date +%T) chip-$c $s $k" >> progress
  nice -n 15 ./search_bench --json --device-runs 100 --only npuopt-screen --work /tmp/s32/cap/w --chip-seeds $c --shapes $s --kernels $k >> screen.json 2>> screen.log
done < order.txt
echo "== $(date +%T) done" >> progress
