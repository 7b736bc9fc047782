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

go_bin="${GO:-}"
if [ -z "$go_bin" ]; then
    if command -v go >/dev/null 2>&1; then
        go_bin="$(command -v go)"
    elif [ -x /usr/local/go/bin/go ]; then
        go_bin=/usr/local/go/bin/go
    else
        echo "build.sh: FAILED: no Go toolchain found (need Go >= 1.25; set GO=/path/to/go)" >&2
        exit 1
    fi
fi

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
