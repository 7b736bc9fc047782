#!/bin/bash
# Issue 50: A/B/C of the warm-up in four parts with segment files read without read-ahead (B),
# and the same with trie pages read with O_DIRECT (C), against main before them (A = 09128f2).
# 2^23 keys under a 320 MiB cgroup (the disk:memory ratio of 2^25 under 1 GiB), then 2^20 keys
# under 1 GiB with the default AuthConfig (the regression check of acceptance 3).
A=${A:-/work/bench/bin/cb-09128f2}
B=${B:-/work/bench/bin/cb-parts}
sha256sum $A $B
run() { # out name binary extra...
  local out=$1 name=$2 bin=$3; shift 3
  date; echo "== $name: $bin $*"
  $bin "$@" --json $out/$name.json > $out/$name.out.txt 2>&1
  echo "exit $?"
}
C23="auth --dir /work/bench --keys 8388608 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 320M --cairn-top-page-depth 1 --cairn-retained-mib 40"
C20="auth --dir /work/bench --keys 1048576 --load-batch 8192 --engines cairn --commits 5 --samples 500 --utxo-batches 1000 --memory-limit 1G"
date; /work/shared/tools/fio-baseline /work/bench | tail -1
i=0
for v in A B C C B A; do
  i=$((i+1))
  case $v in
    A) run /work/bench/ab23 $v$i $A $C23 ;;
    B) run /work/bench/ab23 $v$i $B $C23 ;;
    C) run /work/bench/ab23 $v$i $B $C23 --cairn-direct-page-reads ;;
  esac
done
date; /work/shared/tools/fio-baseline /work/bench | tail -1
i=0
for v in A B C C B A A B; do
  i=$((i+1))
  case $v in
    A) run /work/bench/ab20 $v$i $A $C20 ;;
    B) run /work/bench/ab20 $v$i $B $C20 ;;
    C) run /work/bench/ab20 $v$i $B $C20 --cairn-direct-page-reads ;;
  esac
done
date; /work/shared/tools/fio-baseline /work/bench | tail -1
