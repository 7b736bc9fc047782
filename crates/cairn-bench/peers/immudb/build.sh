#!/usr/bin/env bash
# Builds the immudb peer of `cairn-bench ledger`: OUTDIR/cairn-immudb-peer.
#
#   crates/cairn-bench/peers/immudb/build.sh OUTDIR
#
# Needs Go >= 1.25 (`go` on PATH, or /usr/local/go/bin/go, or $GO) and the Go
# module proxy for the first build (go.mod pins github.com/codenotary/immudb
# v1.11.1; go.sum is committed, and -mod=readonly refuses to change either).
set -euo pipefail

if [ "$#" -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"

# shellcheck source=go-toolchain.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"
find_go build.sh

echo "build.sh: using $("$go_bin" version) at $go_bin"
echo "build.sh: cd $here && $go_bin build -mod=readonly -trimpath -o $out/cairn-immudb-peer ."
start=$(date +%s)
if ! (cd "$here" && "$go_bin" build -mod=readonly -trimpath -o "$out/cairn-immudb-peer" .); then
    echo "build.sh: FAILED: go build of the immudb peer failed (see above)" >&2
    exit 1
fi
if [ ! -x "$out/cairn-immudb-peer" ]; then
    echo "build.sh: FAILED: $out/cairn-immudb-peer was not produced" >&2
    exit 1
fi
echo "build.sh: built $out/cairn-immudb-peer in $(( $(date +%s) - start )) s"
