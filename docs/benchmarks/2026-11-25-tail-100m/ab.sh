#!/bin/bash
# A/B at 100M entries: before = 7197d25 (cb1, the engine of the 2026-11-24 suites),
# after = 71ca304 (cb3: removal in steps, duplicates sharing a flush).
# Table: cb3 utxo setup --db /work/bench/100m --entries 100000000 --filters-for-hits true
# Serial then pipelined, one round each way, order swapped in the second round.
set -e
out=$(dirname "$0")
run() { # tag bin mode
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/100m --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 \
    --batch-log /work/bench/$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
/work/shared/tools/fio-baseline /work/bench > "$out/fio-start.txt" 2>&1
for round in 1 2; do
  for mode in serial pipelined; do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for which in $order; do
      bin=cb1; [ $which = after ] && bin=cb3
      run $mode-$which-$round $bin $mode
    done
  done
done
run lookup-only-after-1 cb3 lookup-only
/work/shared/tools/fio-baseline /work/bench > "$out/fio-end.txt" 2>&1
