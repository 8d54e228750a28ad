#!/bin/bash
# chips the template cut never saw (seeds 9-12), 3 cells each (one per kernel, shapes rotating),
# npuopt-screen then hill on each cell; waits for the long screen search to free its core
cd $WORK/newseed
while kill -0 24104 2>/dev/null; do sleep 15; done
S=(gemma4-12b llama3.1-8b llama3.2-3b); K=(attention_output feedforward project_qkv)
for c in 9 10 11 12; do for k in 0 1 2; do
  s=${S[$(( (c + k) % 3 ))]}; kn=${K[$k]}
  for st in npuopt-screen hill; do
    [ -f stop ] && exit
    [ -f $st/results/chip-${c}_${s}_${kn}_$st.json ] && continue
    echo "== $(date +%T) chip-$c $s $kn $st" >> progress
    nice -n 10 ./search_bench --json --device-runs 100 --only $st --work $WORK/newseed/$st --chip-seeds $c --shapes $s --kernels $kn >> $st.json 2>> $st.log
    # the same chip's kb for the other strategy
    if [ "$st" = npuopt-screen ] && [ ! -d hill/chip-$c/kb ]; then mkdir -p hill/chip-$c; cp -r npuopt-screen/chip-$c/kb npuopt-screen/chip-$c/chip.profile hill/chip-$c/ 2>/dev/null; fi
  done
done; done
echo "== $(date +%T) done" >> progress
