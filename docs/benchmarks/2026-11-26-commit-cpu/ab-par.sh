#!/bin/bash
# A/B at 2^22: A = cb-cpu2 (12038d0), B = cb-par (the work below the retained levels on two threads).
cd /work/main
for v in A B B A; do
  case $v in A) b=cb-cpu2;; B) b=cb-par;; esac
  echo "=== $v $b"
  /work/bench/$b auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn --commits 4 --samples 50 --utxo-batches 500 --memory-limit 1G --json /work/bench/ab-par-$b-$RANDOM.json 2>&1 | grep -E "commit of 10000|commit of 1000[: ]|^UTxO|^load:|^proofs|made"
done
