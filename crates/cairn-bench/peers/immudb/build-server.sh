#!/usr/bin/env bash
# Builds immudb's server, pinned at v1.11.1, for the server mode of the immudb
# peer of `cairn-bench ledger`: OUTDIR/immudb.
#
#   crates/cairn-bench/peers/immudb/build-server.sh OUTDIR
#
# `go install github.com/codenotary/immudb/cmd/immudb@v1.11.1` does not work:
# immudb's go.mod has `replace` directives, which `go install pkg@version`
# refuses. The module in server/ requires immudb v1.11.1 as a tool
# (`tool github.com/codenotary/immudb/cmd/immudb` in go.mod) and copies those
# two replaces; go.sum is committed, and -mod=readonly refuses to change either.
# Needs Go >= 1.25 (`go` on PATH, or /usr/local/go/bin/go, or $GO) and the Go
# module proxy for the first build.
set -euo pipefail

if [ "$#" -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server"
mkdir -p "$1"
out="$(cd "$1" && pwd)"

# shellcheck source=go-toolchain.sh
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"
find_go build-server.sh

pkg=github.com/codenotary/immudb/cmd/immudb
# As immudb's Makefile does, so that `immudb version` says what this is.
ldflags="-X github.com/codenotary/immudb/cmd/version.App=immudb -X github.com/codenotary/immudb/cmd/version.Version=1.11.1"
echo "build-server.sh: using $("$go_bin" version) at $go_bin"
echo "build-server.sh: cd $here && $go_bin build -mod=readonly -trimpath -ldflags '$ldflags' -o $out/immudb $pkg"
start=$(date +%s)
if ! (cd "$here" && "$go_bin" build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/immudb" "$pkg"); then
    echo "build-server.sh: FAILED: go build of immudb v1.11.1 failed (see above)" >&2
    exit 1
fi
if [ ! -x "$out/immudb" ]; then
    echo "build-server.sh: FAILED: $out/immudb was not produced" >&2
    exit 1
fi
echo "build-server.sh: built $out/immudb in $(( $(date +%s) - start )) s"
