#!/bin/bash
# The binary is 595ce83 exactly (built before later edits to the working tree, which is why the record says 595ce83eef-dirty).
# 2^23 keys, Cairn alone: where its commits' time goes (the engine's own account), binary cb-auth-phase.
cd /work/wt  # the phase-times branch
/work/bench/lk/cb-auth-phase auth --dir /work/bench --keys 8388608 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 500 --memory-limit 1G --json /work/bench/auth23/auth-2p23.json
