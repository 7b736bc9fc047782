#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 240; `operations` gets 7/4 of that), with a
# corpus under CORPUS (default fuzz/corpus, git-ignored) seeded from the golden files, and prints
# one summary line per target. Each target runs with CAIRN_FUZZ_SEEDS set to its corpus
# directory, where a target may write seeds of its own first (`proof_verify`, `history_verify` and
# `receipt_verify` write true proofs and receipts, `range_verify` honest range answers,
# `ledger_records` one valid encoding of each record `cairn-ledger` stores).
# A crash is saved under fuzz/artifacts/<target>/; the script then prints the end of that
# target's log, goes on with the others and exits with status 1.
# Every target `cargo fuzz list` knows is run, in alphabetical order.
#   fuzz/run-all.sh [SECONDS] [CORPUS]
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-240}
corpus=${2:-corpus}
golden=../crates/cairn/testdata/golden
# Seed files: a name in the engine's golden directory, or a path under crates/.
proof_golden=cairn-proof/testdata/golden
declare -A seeds=(
  [page]="page-v1.bin" [bloom]="bloom-v1.bin" [index]="index-compact-v1.bin index-ordinary-v1.bin"
  [run_checksums]="run-checksums-v1.txt" [session_metadata]="session-metadata-v1.bin"
  [snapshot_metadata]="snapshot-metadata-v2.bin snapshot-metadata-v3-parts.bin" [operations]=""
  [hostile_snapshot]="" [trie_pages]="trie-manifest-v1.bin trie-segment-v1-pages-v2.bin trie-segment-v1-pages-v3.bin" [log]="log-segment-v1.bin log-catalog-v1.bin" [proof_verify]="$proof_golden/proof-v1-full.bin $proof_golden/proof-v1-compact.bin $proof_golden/proof-v1-blake3.bin"
  [history_verify]="$proof_golden/history-v1-digest.bin $proof_golden/history-v1-inclusion.bin $proof_golden/history-v1-consistency.bin $proof_golden/history-v1-leaf.bin"
  [receipt_verify]="$proof_golden/ledger-v1-receipt.bin"
  [range_verify]="$proof_golden/ledger-v1-range.bin $proof_golden/ledger-v1-link-head.bin $proof_golden/ledger-v1-link-entry.bin"
  [ledger_records]="$proof_golden/ledger-v1-link-head.bin $proof_golden/ledger-v1-link-entry.bin"
  [ledger_export]="cairn-ledger/testdata/golden/export-v1.bin"
)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
RUSTC_BOOTSTRAP=1 cargo fuzz build -s none || exit 1
failed=()
for target in $(cargo fuzz list); do
  mkdir -p "$corpus/$target"
  for f in ${seeds[$target]:-}; do
    case $f in */*) cp "../crates/$f" "$corpus/$target/" ;; *) cp "$golden/$f" "$corpus/$target/" ;; esac
  done
  t=$secs; extra=()
  if [ "$target" = operations ]; then t=$((secs * 7 / 4)); extra=(-max_len=512); fi
  log="$corpus/$target.log"
  CAIRN_FUZZ_SEEDS=$(cd "$corpus/$target" && pwd) RUSTC_BOOTSTRAP=1 \
    cargo fuzz run -s none "$target" "$corpus/$target" -- \
    -max_total_time="$t" "${extra[@]}" >"$log" 2>&1
  status=$?
  echo "$target: exit $status, $(grep -E '^Done [0-9]+ runs' "$log" | tail -1)"
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    tail -n 30 "$log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]} (logs: $corpus/<target>.log)"
  exit 1
fi
