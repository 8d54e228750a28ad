#!/bin/bash
cd $WORK/newseed
S=(gemma4-12b llama3.1-8b llama3.2-3b); K=(attention_output feedforward project_qkv)
for c in 9 10 11 12; do
  if [ ! -d random/chip-$c/kb ]; then mkdir -p random/chip-$c; cp -r npuopt-screen/chip-$c/kb npuopt-screen/chip-$c/chip.profile random/chip-$c/; fi
  for k in 0 1 2; do
  s=${S[$(( (c + k) % 3 ))]}; kn=${K[$k]}; st=random
  [ -f stop ] && exit
  [ -f $st/results/chip-${c}_${s}_${kn}_$st.json ] && continue
  echo "== $(date +%T) chip-$c $s $kn $st" >> progress
  nice -n 10 ./search_bench --json --device-runs 100 --only $st --work $WORK/newseed/$st --chip-seeds $c --shapes $s --kernels $kn >> $st.json 2>> $st.log
done; done
echo "== $(date +%T) done random" >> progress
