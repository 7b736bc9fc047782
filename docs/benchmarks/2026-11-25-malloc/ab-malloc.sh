#!/bin/bash
# A/B: before (cb-head) vs after (cb-malloc), 10M serial and pipelined, 3 rounds, order swapped.
cd /work/bench
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="cb-head cb-malloc"; else order="cb-malloc cb-head"; fi
  for mode in serial pipelined; do
    for b in $order; do
      rm -rf 10m-x; cp -r 10m 10m-x; sync; echo 3 > /proc/sys/vm/drop_caches
      ./$b utxo run --db /work/bench/10m-x --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $mode --json am-$b-$mode-$round.json > am-$b-$mode-$round.log 2>&1
      echo "$round $mode $b $(grep -E '^ops/s|peak RSS' am-$b-$mode-$round.log | awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
