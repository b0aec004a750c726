#!/usr/bin/env bash
# Usage: hack/build-coredns.sh [--cached]
#
# Builds CoreDNS for the real-node rig from hack/coredns, a Go module of ours that
# depends on github.com/coredns/coredns as a library and compiles in only the plugins the
# rig's Corefile uses (see hack/coredns/main.go), from the Go module proxy. Every module
# it builds from is Apache-2.0, MIT, BSD or ISC licensed (CoreDNS 1.13 and later pull in
# an MPL-2.0 module through their server core, so the version stays at 1.12). Cached
# outside the repository; a second run with the binary present prints its path and exits
# at once. Prints the cold build's time. With --cached it never builds: it prints the
# path if the binary is there, else says so and exits 3.
set -euo pipefail

MOD=$(cd "$(dirname "$0")" && pwd)/coredns
VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$MOD/go.mod")
[ -n "$VERSION" ] || { echo "no github.com/coredns/coredns version in $MOD/go.mod" >&2; exit 1; }
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
BIN="$CACHE_DIR/coredns-${VERSION#v}/coredns"
LDFLAGS="-s -w"
# The recipe: the module's files and how they are built. A change rebuilds.
STAMP=$(cat "$MOD/go.mod" "$MOD/go.sum" "$MOD/main.go" <(echo "CGO_ENABLED=0 -trimpath $LDFLAGS") |
  sha256sum | cut -c1-16)

log() { printf '[coredns-%s] %s\n' "${VERSION#v}" "$*" >&2; }

if [ -x "$BIN" ] && [ "$(cat "$BIN.stamp" 2>/dev/null)" = "$STAMP" ]; then
  log "cached binary $BIN"
  echo "$BIN"
  exit 0
fi
if [ "${1:-}" = --cached ]; then
  log "not built yet: run hack/build-coredns.sh"
  exit 3
fi
command -v go >/dev/null 2>&1 || { log "needs Go (1.25 or later) and the Go module proxy"; exit 2; }

mkdir -p "$(dirname "$BIN")"
rm -f "$BIN.stamp"
started=$(date +%s)
log "building from the Go module proxy (first run only)"
(cd "$MOD" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$LDFLAGS" -o "$BIN" .)
echo "$STAMP" >"$BIN.stamp"
log "built in $(( $(date +%s) - started )) s: $BIN"
echo "$BIN"
