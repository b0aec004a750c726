#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
# kubectl of a current Kubernetes from hack/k8s-current, a Go module of ours that depends on
# k8s.io/kubernetes as a library (its staging modules replaced by their matching
# v0.x releases), from the Go module proxy. Cached outside the repository; a second run
# with the binaries present prints their directory and exits at once. Prints the cold
# build's time.
#
# Issue 53, step 1: the e2e suite and the real-node check do not run on these binaries
# yet; until they do, the README's supported range is what `make test` runs today.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/k8s-current"
VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$MOD/go.mod")
[ -n "$VERSION" ] || { echo "no k8s.io/kubernetes version in $MOD/go.mod" >&2; exit 1; }
MINOR=$(echo "$VERSION" | cut -d. -f2)
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
BIN_DIR="$CACHE_DIR/k8s-${VERSION#v}/bin"
WANT=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# The recipe: the module's files and this script. A change rebuilds.
STAMP=$(cat "$MOD/go.mod" "$MOD/go.sum" "$MOD/tools.go" "$HERE/build-k8s-current.sh" | sha256sum | cut -c1-16)

log() { printf '[k8s-%s] %s\n' "${VERSION#v}" "$*" >&2; }

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
  [ "$(cat "$BIN_DIR/.stamp" 2>/dev/null)" = "$STAMP" ]
}

if have_all; then
  log "cached binaries in $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null 2>&1 || { log "needs Go (1.25 or later) and the Go module proxy"; exit 2; }

# What `kubectl version`, the API server's /version and each node's kubeletVersion say:
# the operator reads the server's version to choose what it renders.
PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X $PKG.gitVersion=$VERSION -X $PKG.gitMajor=1 -X $PKG.gitMinor=$MINOR"
LDFLAGS="$LDFLAGS -X $PKG.gitTreeState=clean -X $PKG.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$BIN_DIR"
rm -f "$BIN_DIR/.stamp"
started=$(date +%s)
log "building ${WANT[*]} from the Go module proxy (first run only)"
(
  cd "$MOD"
  pkgs=()
  for b in "${WANT[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$LDFLAGS" -o "$BIN_DIR/" "${pkgs[@]}"
) &
build=$!
while kill -0 "$build" 2>/dev/null; do
  sleep 30
  kill -0 "$build" 2>/dev/null && log "still building ($(( $(date +%s) - started ))s)"
done
wait "$build"
echo "$STAMP" > "$BIN_DIR/.stamp"
log "built in $(( $(date +%s) - started )) s: $BIN_DIR"
echo "$BIN_DIR"
