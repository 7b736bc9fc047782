#!/bin/bash
# A/B: merges on the session's background thread (--background-merges true) against the update path, 100M.
cd /work/bench
for run in ${RUNS:-off-1 on-1 on-2 off-2}; do
  mode=${MODE:-serial}
  bg=false; [ "${run%-*}" = on ] && bg=true
  rm -rf t100-run; cp -r t100 t100-run; sync; echo 3 > /proc/sys/vm/drop_caches
  ./cb-base utxo run --db /work/bench/t100-run --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --mode $mode --background-merges $bg --json /work/bench/bg-$mode-$run.json --batch-log /work/bench/bg-$mode-$run.csv > /work/bench/bg-$mode-$run.log 2>&1
  python3 -c "
import json; d=json.load(open('/work/bench/bg-$mode-$run.json'))
print('$mode $run', round(d['ops_per_sec']), 'p50', round(d['p50_batch_ms'],2), 'p99.9', round(d['p999_batch_ms'],2), 'ratio', round(d['p999_batch_ms']/d['p50_batch_ms'],2), 'rss', round(d['peak_rss_bytes']/2**20,1), d.get('background_work_at_start'))"
done
