#!/bin/bash
# 10M pipelined A/B: A = 9596bc0 (main before), B = d15b033 (read-ahead), D = fdf8691 (+ read removals).
D=/work/bench/ra
run() { # tag binary cwd mode
  cd $3; sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/lk/$2 utxo run --db /work/bench/lk/t --mode $4 --batches 3000 --warmup-batches 500 --memory-limit 1G \
    --json $D/$1.json --batch-log $D/$1.csv > $D/$1.log 2>&1
  python3 -c "
import json,csv; r=json.load(open('$D/$1.json'))
rows=list(csv.reader(open('$D/$1.csv')))[1:]
lk=sorted(float(x[2]) for x in rows); up=sorted(float(x[3]) for x in rows)
print('$1', int(r['ops_per_sec']), 'p50 %.2f p99.9 %.2f ratio %.2f' % (r['p50_batch_ms'], r['p999_batch_ms'], r['p999_batch_ms']/r['p50_batch_ms']), 'lookup p50 %.2f update p50 %.2f p99 %.2f' % (lk[len(lk)//2], up[len(up)//2], up[int(len(up)*.99)]))"
}
for m in ${MODES:-pipelined}; do
  run t10-$m-A3 cb-main /work/main $m
  run t10-$m-D3 cb-rr /work/wt $m
  run t10-$m-D4 cb-rr /work/wt $m
  run t10-$m-A4 cb-main /work/main $m
done
