#!/bin/bash
# Proxy A/B/C at 2^23 keys under a 320 MiB cgroup: warm-up in 2 parts (as main) vs 4 parts, and 4 parts with direct page reads.
BIN=/work/bench/bin/cb-exp-parts
OUT=/work/bench/exp23b
COMMON="auth --dir /work/bench --keys 8388608 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 320M --cairn-top-page-depth 1 --cairn-retained-mib 40"
date; /work/shared/tools/fio-baseline /work/bench | tail -1
run() { local name=$1; shift; date; echo "== $name $*"; env "$@" $BIN $COMMON --json $OUT/$name.json > $OUT/$name.out.txt 2>&1; echo "exit $?"; }
run parts2 CAIRN_EXP_WARM_PARTS=1
run parts4 CAIRN_EXP_WARM_PARTS=2
run parts4-direct CAIRN_EXP_WARM_PARTS=2 CAIRN_EXP_PAGE_READS=direct
date; /work/shared/tools/fio-baseline /work/bench | tail -1
