#!/bin/bash
set -u
D=/work/main/docs/benchmarks/2026-11-29-receipt-verify
COMMON="--dir /tmp/lr --keys 1000000 --versions 1000 --space-commits 100 --waited-commits 0 --repetitions 3 --samples 200 --samples-on-the-way 10 --verify-receipts 10000 --seconds 3"
for i in 1 2 3; do
  for v in base sha256 blake3; do
    case $v in
      base) B=/tmp/cairn-bench-88e08fa; X="";;
      sha256) B=/tmp/cairn-bench-4244241; X="--hash sha256";;
      blake3) B=/tmp/cairn-bench-4244241; X="--hash blake3";;
    esac
    name=$v-$i
    [ $v = base ] && name=sha256-88e08fa-$i
    echo "== $name $(date -u +%FT%TZ) load $(cat /proc/loadavg)" >> $D/runs.log
    /usr/bin/time -v nice -n 5 $B ledger-receipts $COMMON $X --json $D/$name.json > $D/$name.log 2>&1
    echo "   exit $? $(date -u +%FT%TZ)" >> $D/runs.log
  done
done
