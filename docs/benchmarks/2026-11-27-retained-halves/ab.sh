#!/bin/bash
# A/B at 2^20 keys, Cairn alone under 1 GiB: A = cb-auth-phase (retained levels rehashed on the caller's thread), B = cb-auth-ret (below the top page on two threads). A B B A.
cd /work/wt
for b in phase ret ret phase; do
  echo "== $b"
  /work/bench/lk/cb-auth-$b auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn --commits 5 --samples 200 --utxo-batches 500 --memory-limit 1G --json /work/bench/abret/$b-$RANDOM.json 2>&1 | grep -E "load: 100%|^\| 1|account|^UTxO, a root"
done
