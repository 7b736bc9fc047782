#!/bin/bash
# 2^25 keys: cairn, cairn-plain, nomt (alloy-trie and JMT left out: see the notes), binary cb-25 at 12038d0.
cd /work/main
/work/bench/cb-25 auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn,cairn-plain,nomt --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth-2p25.json
