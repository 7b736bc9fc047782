#!/bin/bash
# A/B: cb-base (A) vs $B_BIN (B); usage: ab.sh MODE TAG
mode=$1; tag=$2; B_BIN=${B_BIN:-/work/bench/lk/cb-early}
/work/shared/tools/fio-baseline /work/bench 4
for v in A B B A; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $v = B ]; then bin=$B_BIN; else bin=/work/bench/lk/cb-base; fi
  $bin utxo run --db ${DB:-/work/bench/100m} --mode $mode --batches ${BATCHES:-2000} --warmup-batches 500 --memory-limit 1G --json $tag-$mode-$v-$RANDOM.json > ab.tmp 2>&1
  echo "$v $(grep -E '^ops/s|^p50 batch|^p99.9 batch' ab.tmp | tr -s ' ' | tr '\n' ' ')"
done
/work/shared/tools/fio-baseline /work/bench 4
