#!/bin/bash
# 2^25 keys, issue 50: cairn, cairn-plain, nomt, alloy-trie in one invocation, same settings and
# memory limit as the 2026-11-28 and 2026-12-02 (../2026-12-02-2p25/) runs. Binary
# cb-2949d89-peers (main at 2949d89, `cargo build --release -p cairn-bench --features
# nomt,alloy-trie`): cleaning reads a near segment's live records by pointer. Cairn: top page
# depth 3 (first stored page level at trie depth 21, 160 MiB of retained levels), warm-up on a
# thread of its own (Table::warm_up).
cd /work/main
BIN=${BIN:-/work/bench/bin/cb-2949d89-peers}
OUT=${OUT:-/work/bench/full25}
date
/work/shared/tools/fio-baseline /work/bench
$BIN auth --dir /work/bench --keys 33554432 --load-batch 8192 --engines cairn,cairn-plain,nomt,alloy-trie --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --cairn-top-page-depth 3 --cairn-retained-mib 160 --json $OUT/auth-2p25.json
date
/work/shared/tools/fio-baseline /work/bench
