#!/bin/bash
# vmrun.sh BIN TAG [args]: diagrun (with --check) with memcg reclaim tracepoints recorded
BIN=$1; TAG=$2; shift 2
sync; echo 3 > /proc/sys/vm/drop_caches
perf record -q -e vmscan:mm_vmscan_memcg_reclaim_begin -e vmscan:mm_vmscan_memcg_reclaim_end -e vmscan:mm_vmscan_throttled -e vmscan:mm_vmscan_direct_reclaim_begin -e vmscan:mm_vmscan_direct_reclaim_end -a -o /work/bench/vm-$TAG.data -- \
 $BIN utxo run --db ${DB:-/work/bench/d100m} --mode serial --batches 3000 --warmup-batches 500 --check --background-merges true --memory-limit 1G --batch-log /work/bench/vm-$TAG.csv --json /work/bench/vm-$TAG.json "$@" > /work/bench/vm-$TAG.log 2>&1
python3 /work/bench/slow.py /work/bench/vm-$TAG.csv
