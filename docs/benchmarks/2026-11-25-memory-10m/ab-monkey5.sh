#!/bin/bash
# A/B at 10M: before = cb-wbuf (0377c3b, TargetFpr(1e-3)); after = cb-monkey5 (LevelScaledFpr(5e-3)), each on its own setup.
cd /work/bench
run() { # binary db mode tag
  rm -rf $2-x; cp -r $2 $2-x; sync; echo 3 > /proc/sys/vm/drop_caches
  ./$1 utxo run --db /work/bench/$2-x --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $3 --json mk5-$4.json > mk5-$4.log 2>&1
  echo "$4 $(grep -E '^ops/s|p50 batch|p99.9 batch|peak RSS|bytes read' mk5-$4.log | tr -s ' ' | tr '\n' '|')"
}
for round in 1 2; do
  for mode in serial pipelined; do
    if [ $round = 1 ]; then
      run cb-wbuf 10m $mode before-$mode-$round; run cb-monkey5 10m-s5 $mode after-$mode-$round
    else
      run cb-monkey5 10m-s5 $mode after-$mode-$round; run cb-wbuf 10m $mode before-$mode-$round
    fi
  done
done
run cb-monkey5 10m-s5 lookup-only after-lookup-only-1
run cb-wbuf 10m lookup-only before-lookup-only-1
