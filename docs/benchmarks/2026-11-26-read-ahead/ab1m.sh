#!/bin/bash
# Read-ahead window: D = fdf8691 (256 KiB) vs W = the same with CURSOR_AHEAD_PAGES = 256 (1 MiB).
D=/work/bench/ra
run() { # tag binary table mode
  cd /work/wt; sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/lk/$2 utxo run --db /work/bench/lk/$3 --mode $4 --batches 3000 --warmup-batches 500 --memory-limit 1G \
    --json $D/$1.json --batch-log $D/$1.csv > $D/$1.log 2>&1
  python3 -c "
import json,csv; r=json.load(open('$D/$1.json'))
rows=list(csv.reader(open('$D/$1.csv')))[1:]
lk=sorted(float(x[2]) for x in rows); up=sorted(float(x[3]) for x in rows)
print('$1', int(r['ops_per_sec']), 'p50 %.2f p99.9 %.2f ratio %.2f' % (r['p50_batch_ms'], r['p999_batch_ms'], r['p999_batch_ms']/r['p50_batch_ms']), 'lookup p50 %.2f update p50 %.2f' % (lk[len(lk)//2], up[len(up)//2]))"
}
for t in t h; do
  run w-$t-pipelined-D1 cb-rr $t pipelined
  run w-$t-pipelined-W1 cb-ra1m $t pipelined
  run w-$t-pipelined-W2 cb-ra1m $t pipelined
  run w-$t-pipelined-D2 cb-rr $t pipelined
done
