#!/bin/bash
# 2^24 keys: cairn, cairn-plain, nomt, alloy-trie; binary BIN (main at the commit the record names, --features nomt,jmt,alloy-trie).
# Not run: jmt-cairn (about 60 GB and hours to load at 2^24), jmt-memory (its 1 GiB cgroup killed it at 2^20).
cd /work/main
BIN=${BIN:-/work/bench/lk/cb-auth-main}  # main at 82f94b1
$BIN auth --dir /work/bench --keys 16777216 --load-batch 8192 --engines cairn,cairn-plain,nomt,alloy-trie --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth24/auth-2p24.json
