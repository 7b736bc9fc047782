#!/bin/bash
# Issue 43's A/B: the engine before the floor plan (A, f9d0121) against after (B), Cairn alone,
# on ONE 10M-entry table set up once (the snapshot format did not change), with the UTxO
# suite's protocol per run: 500 untimed batches then 3,000 timed, every lookup checked, each run
# in its own 1 GiB memory cgroup with the page cache dropped before it; serial with background
# merges, pipelined and lookup-only, as the suite runs them. Rounds go A B B A, twice, per mode,
# so that neither version always runs first.
#
#   A_BIN, B_BIN   the two cairn-bench binaries (release)
#   DB             the directory for the table (on the disk being measured)
#   OUT            where the JSON records and the output go
#   MODES          the modes (default: serial pipelined lookup-only)
#   ROUNDS         the order of versions per mode (default: A B B A A B B A)
#   CACHED         1: read through the page cache (`--cached`) with no memory limit, a second
#                  pass over the table first, so that the disk is out of the comparison
set -euo pipefail
: "${A_BIN:?}" "${B_BIN:?}" "${DB:?}" "${OUT:?}"
mkdir -p "$OUT"
fio=../shared/tools/fio-baseline
[ -x "$fio" ] || fio=/work/shared/tools/fio-baseline
"$fio" "$DB" 8 | tee "$OUT/fio-before.json"
if [ ! -d "$DB/cairn" ]; then
  "$A_BIN" utxo setup --db "$DB" --entries 10000000 --filters-for-hits true --json "$OUT/setup.json"
  sync
  sleep 180
fi
limit=(--memory-limit 1G)
if [ "${CACHED:-0}" = 1 ]; then
  limit=(--cached)
  cat "$DB"/cairn/table/snapshots/*/* > /dev/null 2>&1 || true
fi
for mode in ${MODES:-serial pipelined lookup-only}; do
  bg=false
  [ "$mode" = serial ] && bg=true
  for v in ${ROUNDS:-A B B A A B B A}; do
    bin=$A_BIN
    [ "$v" = B ] && bin=$B_BIN
    n=$mode-$v-$(date +%s)
    "$bin" utxo run --db "$DB" --mode "$mode" --batches 3000 --warmup-batches 500 --check \
      "${limit[@]}" --background-merges "$bg" --filters-for-hits true \
      --json "$OUT/$n.json" > "$OUT/$n.txt" 2>&1
    echo "$v $mode $(grep -E '^ops/s|^p50 batch|^p99.9 batch|mismatch' "$OUT/$n.txt" | tr -s ' ' | tr '\n' ' ')"
  done
done
"$fio" "$DB" 8 | tee "$OUT/fio-after.json"
