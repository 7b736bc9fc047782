#!/bin/bash
# Issue 50: A/B at 2^20 (default AuthConfig, 1 GiB cgroup) of what is committed: segment files
# read with the random-access hint (no read-ahead), direct page reads an option left off
# (D = the working tree after the four-part warm-up was taken out), against A = 09128f2.
A=${A:-/work/bench/bin/cb-09128f2}
D=${D:-/work/bench/bin/cb-hint}
OUT=${OUT:-/work/bench/ab20d}
sha256sum $A $D
C20="auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G"
date; /work/shared/tools/fio-baseline /work/bench | tail -1
i=0
for v in A D D A A D D A; do
  i=$((i+1)); bin=$A; [ $v = D ] && bin=$D
  date; echo "== $v$i: $bin"
  $bin $C20 --json $OUT/$v$i.json > $OUT/$v$i.out.txt 2>&1
  echo "exit $?"
done
date; /work/shared/tools/fio-baseline /work/bench | tail -1
