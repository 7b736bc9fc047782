# Sourced by build.sh and build-server.sh: `find_go NAME` sets go_bin to $GO, else `go` on
# PATH, else /usr/local/go/bin/go; with none, it prints NAME's FAILED line and exits 1.
find_go() {
    go_bin="${GO:-}"
    if [ -z "$go_bin" ]; then
        if command -v go >/dev/null 2>&1; then
            go_bin="$(command -v go)"
        elif [ -x /usr/local/go/bin/go ]; then
            go_bin=/usr/local/go/bin/go
        else
            echo "$1: FAILED: no Go toolchain found (need Go >= 1.25; set GO=/path/to/go)" >&2
            exit 1
        fi
    fi
    if [ ! -x "$go_bin" ] && ! command -v "$go_bin" >/dev/null 2>&1; then
        echo "$1: FAILED: $go_bin is not an executable Go toolchain" >&2
        exit 1
    fi
}
