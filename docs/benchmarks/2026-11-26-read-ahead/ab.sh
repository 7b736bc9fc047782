#!/bin/bash
# A/B at 100M (one table, set up with --filters-for-hits true by 9596bc0): A = main (9596bc0),
# B = run cursors with their own bounded read-ahead (d15b033). Same table each run (runs do not
# save), page cache dropped before each, 1 GiB cgroup, 3,000 batches after 500 of warm-up.
set -e
D=/work/bench/ra
run() { # tag binary cwd mode
  cd $3; sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/lk/$2 utxo run --db /work/bench/lk/h --mode $4 --batches 3000 --warmup-batches 500 --memory-limit 1G \
    --json $D/$1.json --batch-log $D/$1.csv > $D/$1.log 2>&1
  python3 -c "
import json,csv; r=json.load(open('$D/$1.json'))
rows=list(csv.reader(open('$D/$1.csv')))[1:]
slow=sum(1 for x in rows if float(x[2])>7)
print('$1', int(r['ops_per_sec']), 'p50 %.2f p99.9 %.2f ratio %.2f' % (r['p50_batch_ms'], r['p999_batch_ms'], r['p999_batch_ms']/r['p50_batch_ms']), 'lookups>7ms', slow)"
}
/work/shared/tools/fio-baseline /work/bench/lk 8 > $D/fio-start.json
for m in ${MODES:-serial pipelined}; do
  run $m-A1 cb-main /work/main $m
  run $m-B1 cb-ra /work/wt $m
  run $m-B2 cb-ra /work/wt $m
  run $m-A2 cb-main /work/main $m
done
/work/shared/tools/fio-baseline /work/bench/lk 8 > $D/fio-end.json
