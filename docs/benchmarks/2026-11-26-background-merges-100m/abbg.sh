#!/bin/bash
# A/B of background merges on one binary: A = off, B = on; usage: abbg.sh MODE TAG
mode=$1; tag=$2; bin=${BIN:-/work/target-wt/release/cairn-bench}
/work/shared/tools/fio-baseline /work/bench 4
for v in A B B A; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $v = B ]; then bg=true; else bg=false; fi
  n=$tag-$mode-$v-$RANDOM
  $bin utxo run --db ${DB:-/work/bench/100m} --mode $mode --batches ${BATCHES:-3000} --warmup-batches 500 --memory-limit 1G --background-merges $bg --json $n.json --batch-log $n.csv > abbg.tmp 2>&1
  echo "$v $n $(grep -E '^ops/s|^p50 batch|^p99.9 batch|^CPU' abbg.tmp | tr -s ' ' | tr '\n' ' ')"
done
/work/shared/tools/fio-baseline /work/bench 4
