#!/bin/bash
# Proxy A/B of segment read modes at 2^23 keys under a 320 MiB cgroup (disk:memory about as at 2^25 under 1 GiB).
BIN=/work/bench/bin/cb-exp-direct
OUT=/work/bench/exp23
COMMON="auth --dir /work/bench --keys 8388608 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 320M --cairn-top-page-depth 1 --cairn-retained-mib 40"
date; /work/shared/tools/fio-baseline /work/bench | tail -3
for v in ${VARIANTS:-direct default}; do
  date; echo "== $v"
  CAIRN_EXP_PAGE_READS=$v $BIN $COMMON --json $OUT/$v.json > $OUT/$v.out.txt 2>&1
  echo "exit $?"
done
date; /work/shared/tools/fio-baseline /work/bench | tail -3
