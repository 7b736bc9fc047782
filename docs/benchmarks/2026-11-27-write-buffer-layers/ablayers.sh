#!/bin/bash
# ablayers.sh MODE: A = cb-recycle... (main's engine, cb-idle without the env var), B = cb-layers (two-layer write buffer). Order A B B A. 100M table /work/bench/d100m.
MODE=$1
one() { # tag bin bg
  sync; echo 3 > /proc/sys/vm/drop_caches
  $2 utxo run --db /work/bench/d100m --mode $MODE --batches 3000 --warmup-batches 500 --background-merges $3 --memory-limit 1G --batch-log /work/bench/lay-$MODE-$1.csv --json /work/bench/lay-$MODE-$1.json > /work/bench/lay-$MODE-$1.log 2>&1
  python3 - /work/bench/lay-$MODE-$1.json /work/bench/lay-$MODE-$1.csv $1 <<'PY'
import json,sys,csv,statistics
d=json.load(open(sys.argv[1]))
rows=list(csv.DictReader(open(sys.argv[2])))
lk=statistics.median(float(r['lookup_ms']) for r in rows); up=statistics.median(float(r['update_ms']) for r in rows)
print(sys.argv[3], round(d['ops_per_sec']), 'p50 %.2f p99.9 %.2f max %.1f'%(d['p50_batch_ms'], d['p999_batch_ms'], d['max_batch_ms']), 'cpu', d.get('cpu_seconds'), 'lookup/update p50 %.2f/%.2f'%(lk,up), 'rss MiB %.1f'%(d['peak_rss_bytes']/2**20))
PY
}
if [ $MODE = pipelined ]; then BG=false; else BG=true; fi
unset CAIRN_BG_IDLE
one A1 /work/bench/lk/cb-idle $BG; one B1 /work/bench/lk/cb-layers $BG; one B2 /work/bench/lk/cb-layers $BG; one A2 /work/bench/lk/cb-idle $BG
