#!/bin/bash
# A/B at 2^22: A = cb-2s2 (main 858dc9a-equivalent), B = $B (commit CPU work).
cd /work/main
B=${B:-cb-cpu1}
for v in A B B A; do
  case $v in A) b=cb-2s2;; B) b=$B;; esac
  echo "=== $v $b"
  /work/bench/$b auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn --commits 4 --samples 50 --utxo-batches 500 --memory-limit 1G --json /work/bench/ab-cpu-$b-$RANDOM.json 2>&1 | grep -E "commit of 10000|^UTxO|^load:|^proofs|made" 
done
