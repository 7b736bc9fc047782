#!/bin/bash
# Issue 49's A/B at 10M (its acceptance 4): the engine and driver before issue 49 (A) against
# after (B), Cairn alone, under the short protocol: 500 untimed batches then 3,000 timed, every
# lookup checked, each run in its own 1 GiB memory cgroup with the page cache dropped before it;
# serial with background merges, pipelined and lookup-only, each version with its own defaults
# (B's pipelined runs keep three batches' lookups in flight under a read budget of 128, A's one).
# C is B's binary with the read budget off (`--read-budget 0`), in pipelined mode only, where
# the budget acts. D is B's binary at A's pipeline depth (`--pipeline-depth 1`), in pipelined
# mode only. Each version sets up its own table (same ids, seed and settings); C and D run on
# B's (every Cairn run starts from its setup's snapshot).
#
#   A_BIN, B_BIN   the two cairn-bench binaries (release, built alike)
#   DB             the directory for the two tables (on the disk being measured)
#   OUT            where the JSON records and the output go
#   SERIAL, PIPELINED, LOOKUP_ONLY   the order of versions per mode (set and empty: none)
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
sleep 180
for mode in serial pipelined lookup-only; do
  bg=false
  [ "$mode" = serial ] && bg=true
  case $mode in
    serial) rounds=${SERIAL-A B B A B A A B} ;;
    pipelined) rounds=${PIPELINED-A B C C B A B C A C A B} ;;
    lookup-only) rounds=${LOOKUP_ONLY-A B B A B A A B} ;;
  esac
  for v in $rounds; do
    bin=$A_BIN db=$DB/A extra=()
    [ "$v" != A ] && bin=$B_BIN db=$DB/B
    [ "$v" = C ] && extra=(--read-budget 0)
    [ "$v" = D ] && extra=(--pipeline-depth 1)
    n=$mode-$v-$(date +%s)
    "$bin" utxo run --db "$db" --mode "$mode" --batches 3000 --warmup-batches 500 --check \
      --memory-limit 1G --background-merges "$bg" --filters-for-hits true "${extra[@]}" \
      --json "$OUT/$n.json" > "$OUT/$n.txt" 2>&1
    echo "$v $mode $(grep -E '^ops/s  |^ops/s +[0-9]|^p50 batch|^p99.9 batch|mismatch' "$OUT/$n.txt" | tr -s ' ' | tr '\n' ' ')"
  done
done
"$fio" "$DB" 8 | tee "$OUT/fio-after.json"
