#!/bin/bash
# A/B of CPU per op: $A_BIN (A) vs $B_BIN (B); usage: abcpu.sh MODE TAG
mode=$1; tag=$2
for v in A B B A; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ $v = B ]; then bin=$B_BIN; else bin=$A_BIN; fi
  n=$tag-$mode-$v-$RANDOM
  $bin utxo run --db ${DB:-/work/bench/100m} --mode $mode --batches ${BATCHES:-2000} --warmup-batches 500 --memory-limit 1G --json $n.json > ab.tmp 2>&1
  echo "$v $n $(grep -E '^ops/s|^p50 batch|^p99.9 batch|^CPU us|^peak RSS' ab.tmp | tr -s ' ' | tr '\n' ' ')"
done
