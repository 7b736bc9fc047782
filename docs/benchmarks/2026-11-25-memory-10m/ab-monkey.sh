#!/bin/bash
# A/B at 10M: before = cb-wbuf (0377c3b) on a table set up with TargetFpr(1e-3);
# after = cb-monkey (LevelScaledFpr(3e-3)) on a table it set up. Same seed, same entries.
cd /work/bench
run() { # binary db mode tag
  rm -rf $2-x; cp -r $2 $2-x; sync; echo 3 > /proc/sys/vm/drop_caches
  ./$1 utxo run --db /work/bench/$2-x --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $3 --json mk-$4.json > mk-$4.log 2>&1
  echo "$4 $(grep -E '^ops/s|p50 batch|p99.9 batch|peak RSS|read B/op|bytes read' mk-$4.log | tr -s ' ' | tr '\n' '|')"
}
for round in 1 2; do
  for mode in serial pipelined lookup-only; do
    if [ $round = 1 ]; then
      run cb-wbuf 10m $mode before-$mode-$round; run cb-monkey 10m-s $mode after-$mode-$round
    else
      run cb-monkey 10m-s $mode after-$mode-$round; run cb-wbuf 10m $mode before-$mode-$round
    fi
  done
done
