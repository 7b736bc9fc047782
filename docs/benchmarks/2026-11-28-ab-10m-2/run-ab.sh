#!/bin/bash
# Issue 44's A/B at 10M: the engine before the session's change (A) against after (B), Cairn
# alone, with the UTxO suite's protocol per run: 500 untimed batches then 3,000 timed, every
# lookup checked, each run in its own 1 GiB memory cgroup with the page cache dropped before it;
# serial with background merges, pipelined and lookup-only. Runs go A B B A per mode.
#
# Unlike issue 43's A/B, each version sets up its own table (same ids, seed and settings): B
# writes runs in run format version 2 (per-page checksums, checked on every read), which A
# cannot read, and a table A wrote would spare B every page check.
#
#   A_BIN, B_BIN   the two cairn-bench binaries (release)
#   DB             the directory for the two tables (on the disk being measured)
#   OUT            where the JSON records and the output go
#   MODES, ROUNDS  as in ../2026-11-28-floors-ab/run-ab.sh
set -euo pipefail
: "${A_BIN:?}" "${B_BIN:?}" "${DB:?}" "${OUT:?}"
mkdir -p "$OUT" "$DB/A" "$DB/B"
fio=../shared/tools/fio-baseline
[ -x "$fio" ] || fio=/work/shared/tools/fio-baseline
"$fio" "$DB" 8 | tee "$OUT/fio-before.json"
for v in A B; do
  bin=$A_BIN
  [ "$v" = B ] && bin=$B_BIN
  if [ ! -d "$DB/$v/cairn" ]; then
    "$bin" utxo setup --db "$DB/$v" --entries 10000000 --filters-for-hits true \
      --json "$OUT/setup-$v.json"
  fi
done
sync
sleep 120
for mode in ${MODES:-serial pipelined lookup-only}; do
  bg=false
  [ "$mode" = serial ] && bg=true
  for v in ${ROUNDS:-A B B A}; do
    bin=$A_BIN
    [ "$v" = B ] && bin=$B_BIN
    n=$mode-$v-$(date +%s)
    "$bin" utxo run --db "$DB/$v" --mode "$mode" --batches 3000 --warmup-batches 500 --check \
      --memory-limit 1G --background-merges "$bg" --filters-for-hits true \
      --json "$OUT/$n.json" > "$OUT/$n.txt" 2>&1
    echo "$v $mode $(grep -E '^ops/s|^p50 batch|^p99.9 batch|mismatch' "$OUT/$n.txt" | tr -s ' ' | tr '\n' ' ')"
  done
done
"$fio" "$DB" 8 | tee "$OUT/fio-after.json"
