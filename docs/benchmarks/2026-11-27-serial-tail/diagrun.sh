#!/bin/bash
# diagrun.sh BIN TAG [extra args]: one serial run at 100M with background merges, batch log and DIAG lines
BIN=$1; TAG=$2; shift 2
sync; echo 3 > /proc/sys/vm/drop_caches
$BIN utxo run --db /work/bench/d100m --mode serial --batches 3000 --warmup-batches 500 --background-merges true --memory-limit 1G --batch-log /work/bench/diag-$TAG.csv --json /work/bench/diag-$TAG.json "$@" > /work/bench/diag-$TAG.log 2>&1
python3 - /work/bench/diag-$TAG.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(d['ops_per_sec'], d['p50_batch_ms'], d['p999_batch_ms'], d['max_batch_ms'], d['bytes_written'])
PY
