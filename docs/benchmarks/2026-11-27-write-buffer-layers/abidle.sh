#!/bin/bash
# abidle.sh MODE: A = background merges as the suite runs them (pipelined: off; serial: on),
# B = background merges on, merge thread SCHED_IDLE. Order A B B A. 100M table /work/bench/d100m.
MODE=$1; BIN=/work/bench/lk/cb-idle
one() { # tag bg idle
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ "$3" = 1 ]; then export CAIRN_BG_IDLE=1; else unset CAIRN_BG_IDLE; fi
  $BIN utxo run --db /work/bench/d100m --mode $MODE --batches 3000 --warmup-batches 500 --background-merges $2 --memory-limit 1G --batch-log /work/bench/idle-$MODE-$1.csv --json /work/bench/idle-$MODE-$1.json > /work/bench/idle-$MODE-$1.log 2>&1
  python3 - /work/bench/idle-$MODE-$1.json $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(sys.argv[2], round(d['ops_per_sec']), d['p50_batch_ms'], d['p999_batch_ms'], d['max_batch_ms'], d.get('cpu_seconds'), round(d['seconds'],2))
PY
}
if [ $MODE = pipelined ]; then ABG=false; else ABG=true; fi
one A1 $ABG 0; one B1 true 1; one B2 true 1; one A2 $ABG 0
