#!/bin/bash
# A/B with batch logs: $A_BIN (A) vs $B_BIN (B); usage: ab2.sh MODE TAG
mode=$1; tag=$2
/work/shared/tools/fio-baseline /work/bench 4
for v in A B B A; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $v = B ]; then bin=$B_BIN; else bin=$A_BIN; fi
  n=$tag-$mode-$v-$RANDOM
  $bin utxo run --db ${DB:-/work/bench/100m} --mode $mode --batches ${BATCHES:-3000} --warmup-batches 500 --memory-limit 1G --json $n.json --batch-log $n.csv > ab.tmp 2>&1
  echo "$v $n $(grep -E '^ops/s|^p50 batch|^p99.9 batch' ab.tmp | tr -s ' ' | tr '\n' ' ')"
done
/work/shared/tools/fio-baseline /work/bench 4
