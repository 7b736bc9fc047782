#!/bin/bash
# Profile of Cairn at 2^25 keys (cairn only, binary cb-auth-0caaada): perf (499 Hz, kernel call
# chains, wall-clock timestamps) from the first commit to the end of the UTxO phase; the output
# lines timestamped so that perf's samples can be cut by phase.
cd /work/main
OUT=/work/bench/prof25/out.txt
date
( /work/bench/lk/cb-auth-0caaada auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/prof25/auth-2p25-prof.json 2>&1 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done > $OUT ) &
RUN=$!
until grep -q "load: 100% (33554432/33554432" $OUT 2>/dev/null; do sleep 0.5; kill -0 $RUN 2>/dev/null || break; done
PID=$(pgrep -f "child-engine cairn" | head -1)
perf record -F 499 -g -k CLOCK_REALTIME -p $PID -o /work/bench/prof25/perf.data > /work/bench/prof25/perf.log 2>&1 &
PERF=$!
wait $RUN
kill -INT $PERF 2>/dev/null; wait $PERF
date
