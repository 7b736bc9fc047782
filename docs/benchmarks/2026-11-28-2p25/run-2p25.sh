#!/bin/bash
# 2^25 keys with page format 3 and the cleaning-scan fix: cairn, cairn-plain, nomt, alloy-trie in one invocation.
# Binary cb-auth-0caaada (main at 0caaada, --features nomt,jmt,alloy-trie).
# Not run: jmt-cairn (about 60 GB and hours to load at 2^24), jmt-memory (its 1 GiB cgroup killed it at 2^20).
cd /work/main
BIN=${BIN:-/work/bench/lk/cb-auth-0caaada}
date
/work/shared/tools/fio-baseline /work/bench
$BIN auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn,cairn-plain,nomt,alloy-trie --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth25d/auth-2p25.json
date
/work/shared/tools/fio-baseline /work/bench
