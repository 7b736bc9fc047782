#!/bin/bash
# A/B at 2^22 keys, cairn only, A B A B: trie page reads in one batch per page level (A, main at
# 0974572 = 0caaada's code) and in batches of at most 4 MiB through a pooled arena (B, branch
# chunked-reads).
cd /work/main
for v in A1 B1 A2 B2; do
  case $v in A*) BIN=/work/bench/lk/cb-auth-0caaada;; B*) BIN=/work/bench/lk/cb-chunked;; esac
  date
  $BIN auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/ab22/auth-2p22-$v.json > /work/bench/ab22/$v.out.txt 2>&1
done
date
/work/shared/tools/fio-baseline /work/bench
