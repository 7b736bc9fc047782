#!/bin/bash
# 2^20 keys with BLAKE3 (NOMT's own hash; this CPU has no SHA extensions): cairn, cairn-plain, nomt; binary cb-auth-f044ddb (main at f044ddb).
cd /work/main
/work/bench/lk/cb-auth-f044ddb auth --dir /work/bench --keys 1048576 --load-batch 8192 --hash blake3 --engines cairn,cairn-plain,nomt --commits 5 --samples 2000 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth20b/auth-2p20-blake3.json
