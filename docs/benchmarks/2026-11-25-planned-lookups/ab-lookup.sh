#!/bin/bash
# Two more rounds of lookup-only for ab.sh's A/B (the first two disagreed).
set -e
out=$(dirname "$0")
run() { # tag bin mode
  sync; echo 3 > /proc/sys/vm/drop_caches
  /work/bench/$2 utxo run --db /work/bench/100m --batches 3000 --warmup-batches 500 \
    --memory-limit 1G --filters-for-hits true --mode $3 --check \
    --batch-log /work/bench/pl-$1.csv --json "$out/$1.json" > /dev/null 2>&1
}
for round in 3 4; do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=cb3; [ $which = after ] && bin=cb5
    run lookup-only-$which-$round $bin lookup-only
  done
done
