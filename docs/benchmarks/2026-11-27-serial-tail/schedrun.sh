#!/bin/bash
# schedrun.sh BIN TAG: diagrun with perf sched events recorded system-wide
BIN=$1; TAG=$2
sync; echo 3 > /proc/sys/vm/drop_caches
perf record -q -e sched:sched_switch -e sched:sched_wakeup -e block:block_rq_issue -e block:block_rq_complete -a -o /work/bench/sched-$TAG.data -- \
 $BIN utxo run --db /work/bench/d100m --mode serial --batches 3000 --warmup-batches 500 --background-merges true --memory-limit 1G --batch-log /work/bench/sched-$TAG.csv --json /work/bench/sched-$TAG.json > /work/bench/sched-$TAG.log 2>&1
python3 /work/bench/slow.py /work/bench/sched-$TAG.csv
