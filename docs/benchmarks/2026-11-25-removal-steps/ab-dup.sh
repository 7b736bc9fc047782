#!/bin/bash
# A/B of duplicates that share a flush in progress, 10M entries: before = 29c8d29 (cb2),
# after = 71ca304 (cb3). Same table as ab.sh. Two rounds, pipelined then serial, order swapped.
set -e
out=$(dirname "$0")
run() { # tag bin mode
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/10m --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 \
    --batch-log /work/bench/$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
/work/shared/tools/fio-baseline /work/bench > "$out/dup-fio-start.txt" 2>&1
for round in 1 2; do
  for mode in pipelined serial; do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for which in $order; do
      bin=cb2; [ $which = after ] && bin=cb3
      run dup-$mode-$which-$round $bin $mode
    done
  done
done
