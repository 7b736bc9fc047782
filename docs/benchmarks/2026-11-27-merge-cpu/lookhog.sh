#!/bin/bash
# lookup-only on the 100M table alone and beside one busy CPU loop (no I/O), to separate CPU
# contention from the merge's I/O: alone, hog, hog, alone
bin=/work/bench/lk/cb-bloom
one() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  $bin utxo run --db /work/bench/100m --mode lookup-only --batches 3000 --warmup-batches 500 --memory-limit 1G > /tmp/lh.tmp 2>&1
  echo "$1 $(grep -E '^ops/s|^p50 batch|^CPU' /tmp/lh.tmp | tr -s ' ' | tr '\n' ' ')"
}
one alone
for i in 1 2; do
  timeout 200 sh -c 'while :; do :; done' & hog=$!
  one "with a busy core"
  kill $hog 2>/dev/null; wait $hog 2>/dev/null
done
one alone
