#!/bin/bash
# Issue 50's A/B at 2^20 keys of cleaning by pointer, Cairn alone, default AuthConfig (top page
# depth 6, 20 MiB retained): A = 8445215 (cleaning scans every piece), B = 2949d89 (a near
# segment whose live records the retained pages all point at is read record by record). Three
# rounds of A B B A, each run its own invocation, with the settings of the 2^25 run but 2^20
# keys (as the 2026-12-02 A/B in ../2026-12-02-ab-2p20/). Both binaries are release builds of
# `-p cairn-bench` without peers, in checkouts of their own.
cd /work/main
A=${A:-/work/bench/bin/cb-8445215}
B=${B:-/work/bench/bin/cb-2949d89}
OUT=${OUT:-/work/bench/abc20}
mkdir -p $OUT
sha256sum $A $B
COMMON="auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G"
run() { # name binary extra...
  local name=$1 bin=$2; shift 2
  date; echo "== run $name: $bin $*"
  $bin $COMMON "$@" --json $OUT/$name.json > $OUT/$name.out.txt 2>&1
  echo "exit $?"
}
ROUNDS=${ROUNDS:-1 2 3}
for r in $ROUNDS; do
  run A$((2*r-1)) $A
  run B$((2*r-1)) $B
  run B$((2*r)) $B
  run A$((2*r)) $A
done
date
