#!/bin/bash
# 100M: pipelined with the per-batch thread (cb-malloc) against the lookup worker (cb-worker),
# then serial and lookup-only with cb-worker; fio before and after.
cd /work/bench
/work/shared/tools/fio-baseline /work/bench > w-fio-start.txt 2>&1
run() { # binary mode tag extra
  sync; echo 3 > /proc/sys/vm/drop_caches
  ./$1 utxo run --db /work/bench/100m --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $2 --json w-$3.json --batch-log w-$3.csv $4 > w-$3.log 2>&1
  echo "$3 $(grep -E '^ops/s|peak RSS|p50|p99.9|mismatch' w-$3.log | tr -s ' ' | tr '\n' '|')"
}
run cb-malloc pipelined pl-before-1
run cb-worker pipelined pl-after-1 --check
run cb-worker pipelined pl-after-2
run cb-malloc pipelined pl-before-2
run cb-worker serial serial-1
run cb-worker lookup-only lo-1
run cb-worker serial serial-2
run cb-worker lookup-only lo-2
run cb-worker lookup-only lo-3
/work/shared/tools/fio-baseline /work/bench > w-fio-end.txt 2>&1
