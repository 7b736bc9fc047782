#!/bin/bash
# A/B: filters in transparent huge pages (cb-lazy) against the same commit without (cb-base), 100M serial.
cd /work/bench
for run in ${RUNS:-base-1 lazy-1 lazy-2 base-2}; do
  bin=cb-${run%-*}
  rm -rf t100-run; cp -r t100 t100-run; sync; echo 3 > /proc/sys/vm/drop_caches
  ./$bin utxo run --db /work/bench/t100-run --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode serial --json /work/bench/lazy-$run.json --batch-log /work/bench/lazy-$run.csv > /work/bench/lazy-$run.log 2>&1 &
  pid=$!

  wait $pid
  python3 -c "
import json; d=json.load(open('/work/bench/lazy-$run.json'))
print('$run', round(d['ops_per_sec']), 'p50', round(d['p50_batch_ms'],2), 'p99.9', round(d['p999_batch_ms'],2), 'ratio', round(d['p999_batch_ms']/d['p50_batch_ms'],2), 'rss', round(d['peak_rss_bytes']/2**20,1))"
done
