#!/bin/bash
# 100M: before = cb-worker (5dffcf1) on /work/bench/100m (set up with TargetFpr(1e-3), used by
# earlier runs today); after = cb-final (f6d8518 + docs) on /work/bench/100m-s (set up by it with
# LevelScaledFpr(5e-3)). fio before and after.
cd /work/bench
/work/shared/tools/fio-baseline /work/bench > f-fio-start.txt 2>&1
run() { # binary db mode tag extra
  sync; echo 3 > /proc/sys/vm/drop_caches
  ./$1 utxo run --db /work/bench/$2 --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $3 --json f-$4.json --batch-log f-$4.csv $5 > f-$4.log 2>&1
  echo "$4 $(grep -E '^ops/s|p50 batch|p99.9 batch|peak RSS|bytes read|mismatch' f-$4.log | tr -s ' ' | tr '\n' '|')"
}
for round in 1 2; do
  for mode in serial pipelined lookup-only; do
    if [ $round = 1 ]; then
      run cb-worker 100m $mode before-$mode-$round; run cb-final 100m-s $mode after-$mode-$round
    else
      run cb-final 100m-s $mode after-$mode-$round; run cb-worker 100m $mode before-$mode-$round
    fi
  done
done
run cb-final 100m-s serial after-check --check
/work/shared/tools/fio-baseline /work/bench > f-fio-end.txt 2>&1
