#!/bin/bash
# A/B of lookups that read a merge's published runs instead of locking the merge:
# before = a80fd14 (cb5), after = 24882f3 (cb6). Tables: /work/bench/100m and /work/bench/10m,
# both set up with --filters-for-hits true. Pipelined at both sizes (two rounds, order swapped),
# then one serial run each way at 100M.
set -e
out=$(dirname "$0")
run() { # tag bin mode db
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/$4 --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 \
    --batch-log /work/bench/rr-$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
/work/shared/tools/fio-baseline /work/bench > "$out/fio-start.txt" 2>&1
for db in 100m 10m; do
  for round in 1 2; do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for which in $order; do
      bin=cb5; [ $which = after ] && bin=cb6
      run pipelined-$db-$which-$round $bin pipelined $db
    done
  done
done
run serial-100m-before-1 cb5 serial 100m
run serial-100m-after-1 cb6 serial 100m
/work/shared/tools/fio-baseline /work/bench > "$out/fio-end.txt" 2>&1
