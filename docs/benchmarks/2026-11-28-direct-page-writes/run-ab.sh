#!/bin/bash
# A/B at 2^23 keys, cairn only: page-log segments written through the page cache (A, main at
# 0caaada) and past it with O_DIRECT (B, branch direct-pages). A flat CPU profile (perf, 499 Hz,
# no call graphs) of each run's UTxO phase, the same for both.
cd /work/main
for v in A B; do
  case $v in A) BIN=/work/bench/lk/cb-auth-0caaada;; B) BIN=/work/bench/lk/cb-direct;; esac
  OUT=/work/bench/ab23/$v.out.txt
  date
  ( $BIN auth --dir /work/bench --keys 8388608 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/ab23/auth-2p23-$v.json > $OUT 2>&1 ) &
  until grep -q "cairn UTxO: batch" $OUT 2>/dev/null; do sleep 0.5; if ! kill -0 $! 2>/dev/null; then break; fi; done
  PID=$(pgrep -f "child-engine cairn" | head -1)
  [ -n "$PID" ] && perf record -F 499 -p $PID -o /work/bench/ab23/perf-$v.data -- sleep 20 > /dev/null 2>&1
  wait
  date
done
/work/shared/tools/fio-baseline /work/bench
