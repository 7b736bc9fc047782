#!/bin/bash
# A/B at 100M entries of lookups planned while they are read: before = 71ca304 (cb3),
# after = a80fd14 (cb5). Table: cb3 utxo setup --db /work/bench/100m --entries 100000000
# --filters-for-hits true. Every lookup checked. Two rounds, order swapped in the second.
set -e
out=$(dirname "$0")
run() { # tag bin mode
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/100m --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 --check \
    --batch-log /work/bench/pl-$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
/work/shared/tools/fio-baseline /work/bench > "$out/fio-start.txt" 2>&1
for round in 1 2; do
  for mode in lookup-only serial pipelined; do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for which in $order; do
      bin=cb3; [ $which = after ] && bin=cb5
      run $mode-$which-$round $bin $mode
    done
  done
done
/work/shared/tools/fio-baseline /work/bench > "$out/fio-end.txt" 2>&1
