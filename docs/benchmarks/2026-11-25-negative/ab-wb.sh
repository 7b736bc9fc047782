#!/bin/bash
# A/B at 10M: before = cb-worker (5dffcf1), after = cb-wb (run key/ops files written back before publishing).
cd /work/bench
for round in 1 2; do
  if [ $round = 1 ]; then order="cb-worker cb-wb"; else order="cb-wb cb-worker"; fi
  for mode in serial pipelined; do
    for b in $order; do
      rm -rf 10m-x; cp -r 10m 10m-x; sync; echo 3 > /proc/sys/vm/drop_caches
      ./$b utxo run --db /work/bench/10m-x --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $mode --json wb-$b-$mode-$round.json --batch-log wb-$b-$mode-$round.csv > wb-$b-$mode-$round.log 2>&1
      echo "$round $mode $b $(grep -E '^ops/s|p50 batch|p99.9 batch|peak RSS' wb-$b-$mode-$round.log | awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
