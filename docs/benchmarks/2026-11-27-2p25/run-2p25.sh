#!/bin/bash
# 2^25 keys: cairn, cairn-plain, nomt, alloy-trie; binary cb-auth-f282536 (main at f282536, --features nomt,jmt,alloy-trie).
cd /work/main
/work/bench/lk/cb-auth-f282536 auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn,cairn-plain,nomt,alloy-trie --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth25/auth-2p25.json
