#!/bin/bash
# A/B at 2^22: A = main (7c042e5), B = page format 3 (leaves without their hash, blob hash only with a blob).
cd /work/main
i=0
for v in A B B A; do
  i=$((i+1))
  if [ $v = A ]; then BIN=/work/bench/lk/cb-auth-main; else BIN=/work/bench/lk/cb-auth-v3; fi
  echo "=== run $i: $v ($BIN)"
  $BIN auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn --commits 4 --samples 200 --utxo-batches 400 --memory-limit 1G --json /work/bench/ab/v3-r$i-$v.json 2>&1 | grep -v "load:  \|load: [1-9][0-9]%\|UTxO: batch"
done
