#!/bin/bash
# A/B at 100M (filters-for-hits): lookups before (b0913c9: a second sweep for deepest-level reads
# a newer filter claimed) against after (148be32: conditional reads in the same wave).
cd /work/bench
/work/shared/tools/fio-baseline /work/bench/ab100 8 > ab4-fio-start.json
for round in 1 2; do
  for mode in lookup-only serial; do
    if [ $round = 1 ]; then order="suite cond"; else order="cond suite"; fi
    for b in $order; do
      sync; echo 3 > /proc/sys/vm/drop_caches
      ./cairn-bench-$b utxo run --engine cairn --db ab100 --mode $mode --batches 3000 --warmup-batches 500 --memory-limit 1G --filters-for-hits true --json ab4-$mode-$b-$round.json > ab4-$mode-$b-$round.log 2>&1
      python3 -c "
import json; d=json.load(open('ab4-$mode-$b-$round.json'))
print('$round $mode $b', round(d['ops_per_sec']), 'p50', round(d['p50_batch_ms'],2), 'p99', round(d['p99_batch_ms'],1), 'p99.9', round(d['p999_batch_ms'],1), 'max', round(d['max_batch_ms'],1), 'rss', round(d['peak_rss_bytes']/2**20,1), 'readB/op', round(d['bytes_read']/(d['ops_per_sec']*d['seconds'])))"
    done
  done
done
/work/shared/tools/fio-baseline /work/bench/ab100 8 > ab4-fio-end.json
cat ab4-fio-start.json ab4-fio-end.json
