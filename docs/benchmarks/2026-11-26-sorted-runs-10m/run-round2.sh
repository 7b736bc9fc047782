#!/bin/bash
# Issue 15 acceptance 3: UTxO suite at 10M, Cairn only, before (6b76685, cb-pre15) and after
# (sorted runs, cb-sorted), A B B A, each suite with its own setup and fio baseline.
set -e
suite() { # binary cwd tag
  cd $2
  /work/bench/$1 utxo suite --db /work/bench/ab15b/db-$3 --out /work/bench/ab15b/$3 --entries 10000000 \
    --batches 3000 --warmup-batches 500 --check --remove-after --filters-for-hits true \
    --fio-baseline /work/shared/tools/fio-baseline --engines cairn > /work/bench/ab15b/$3.log 2>&1
}
suite cb-pre15 /work/main A1
suite cb-sorted2 /work/wt-b1 B1
suite cb-sorted2 /work/wt-b1 B2
suite cb-pre15 /work/main A2
echo done > /work/bench/ab15b/done
