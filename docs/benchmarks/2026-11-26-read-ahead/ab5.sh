#!/bin/bash
# A/B at 100M: B = d15b033 (cursor read-ahead), D = fdf8691 (+ reads leave removal steps to updates).
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
/work/shared/tools/fio-baseline /work/bench/lk 8 > $D/rr-fio-start.json
for m in ${MODES:-pipelined serial}; do
  run rr-$m-B1 cb-ra /work/wt-b $m
  run rr-$m-D1 cb-rr /work/wt $m
  run rr-$m-D2 cb-rr /work/wt $m
  run rr-$m-B2 cb-ra /work/wt-b $m
done
/work/shared/tools/fio-baseline /work/bench/lk 8 > $D/rr-fio-end.json
