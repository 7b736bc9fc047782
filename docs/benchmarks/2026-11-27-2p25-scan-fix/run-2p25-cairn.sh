#!/bin/bash
# 2^25 keys with page format 3 and the cleaning-scan fix (04dc1f9): cairn and cairn-plain only
# (the run that checks the fix at the size where the scan failed; NOMT and alloy-trie not in
# this invocation). Binary cb-auth-04dc1f9 (main at 04dc1f9, --features nomt,jmt,alloy-trie).
cd /work/main
BIN=${BIN:-/work/bench/lk/cb-auth-04dc1f9}
date
/work/shared/tools/fio-baseline /work/bench
$BIN auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn,cairn-plain --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth25c/auth-2p25-cairn.json
date
/work/shared/tools/fio-baseline /work/bench
