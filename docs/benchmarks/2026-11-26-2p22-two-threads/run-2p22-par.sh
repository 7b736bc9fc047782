#!/bin/bash
# 2^22 keys: cairn (dfaaee8: the CPU changes and the second thread), cairn-plain, nomt, one invocation.
cd /work/main
/work/bench/cb-par2 auth --dir /work/bench --keys 4194304 --load-batch 8192 --engines cairn,cairn-plain,nomt --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G --json /work/bench/auth-2p22-par.json
