#!/bin/bash
# pipelined with background merges: A = before the fix (cb-head of 29dd7fc... the bench binary built before), B = with the fix; usage: abfix.sh MODE TAG
mode=$1; tag=$2
/work/shared/tools/fio-baseline /work/bench 4
for v in A B B A; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $v = B ]; then bin=$B_BIN; else bin=$A_BIN; fi
  n=$tag-$mode-$v-$RANDOM
  $bin utxo run --db ${DB:-/work/bench/100m} --mode $mode --batches ${BATCHES:-3000} --warmup-batches 500 --memory-limit 1G --background-merges ${BG:-true} --json $n.json --batch-log $n.csv > abp.tmp 2>&1
  echo "$v $n $(grep -E '^ops/s|^p50 batch|^p99.9 batch|^CPU' abp.tmp | tr -s ' ' | tr '\n' ' ')"
done
/work/shared/tools/fio-baseline /work/bench 4
