#!/bin/bash
# Issue 50's A/B at 2^20 keys, Cairn alone, default AuthConfig (top page depth 6, 20 MiB retained):
# A = 4e1ad8a (before the page geometry, the background warm-up and raw relocation; its warm-up
# is Table::prefetch), B = b5e2fb9 (Table::warm_up on a thread of its own), C = b5e2fb9 with
# --cairn-inline-warm-up (Table::prefetch). Three rounds of A B C C B A, each its own invocation with the
# same settings as the 2^25 run but 2^20 keys.
cd /work/main
A=/work/bench/i50/cb-4e1ad8a
B=/work/bench/i50/cb-b5e2fb9
sha256sum $A $B
COMMON="auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G"
run() { # name binary extra...
  local name=$1 bin=$2; shift 2
  date; echo "== run $name: $bin $*"
  $bin $COMMON "$@" --json /work/bench/i50/ab20/$name.json > /work/bench/i50/ab20/$name.out.txt 2>&1
  echo "exit $?"
}

ROUNDS=${ROUNDS:-1 2 3}
for r in $ROUNDS; do
  run A$((2*r-1)) $A
  run B$((2*r-1)) $B
  run C$((2*r-1)) $B --cairn-inline-warm-up
  run C$((2*r)) $B --cairn-inline-warm-up
  run B$((2*r)) $B
  run A$((2*r)) $A
done
date

