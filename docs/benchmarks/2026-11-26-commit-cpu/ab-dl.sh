#!/bin/bash
# A/B at 2^22: A = cb-2s2 (main), B = cb-dl (page log read with O_DIRECT, walks resumed), C = cb-dl with CAIRN_PAGELOG_BUFFERED=1 (walks resumed only).
cd /work/main
for v in A B C C B A; do
  case $v in A) b=cb-2s2; env="";; B) b=cb-dl; env="";; C) b=cb-dl; env="CAIRN_PAGELOG_BUFFERED=1";; esac
  echo "=== $v $b $env"
  env $env /work/bench/$b auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn --commits 4 --samples 50 --utxo-batches 500 --memory-limit 1G --json /work/bench/ab-dl-$v-$RANDOM.json 2>&1 | grep -E "commit of 10000|^UTxO|^load:|KiB|^proofs|made" 
done
