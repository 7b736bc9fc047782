#!/bin/bash
# A/B of bounded file removal at 10M entries: before = 7197d25 (cb1), after = 29c8d29 (cb2).
# Table: cb1 utxo setup --db /work/bench/10m --entries 10000000 --filters-for-hits true
# Three rounds, serial then pipelined, the order of before/after swapped every round.
set -e
out=$(dirname "$0")
run() { # tag bin mode
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/10m --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 \
    --batch-log /work/bench/$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
/work/shared/tools/fio-baseline /work/bench > "$out/fio-start.txt" 2>&1
for round in 1 2 3; do
  for mode in serial pipelined; do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for which in $order; do
      bin=cb1; [ $which = after ] && bin=cb2
      run $mode-$which-$round $bin $mode
    done
  done
done
/work/shared/tools/fio-baseline /work/bench > "$out/fio-end.txt" 2>&1
