#!/bin/bash
# 2^20 keys: every engine but jmt-memory (killed by its 1 GiB cgroup at 2^20 on 2026-11-25); binary cb-auth-phase (f282536 and the commit-time breakdown, branch phase-times).
cd /work/wt
/work/bench/lk/cb-auth-phase auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn,cairn-plain,nomt,jmt-cairn,alloy-trie --commits 5 --samples 2000 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth20/auth-2p20.json
