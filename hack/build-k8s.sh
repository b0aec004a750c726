#!/usr/bin/env bash
# Usage: hack/build-k8s.sh current|oldest [--cached]
#
# Builds Kubernetes' own binaries from hack/k8s-<which>, a Go module of ours that depends
# on k8s.io/kubernetes as a library (its staging modules replaced by their matching v0.x
# releases), from the Go module proxy: `current` is the newest Kubernetes the operator
# supports (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
# kubectl), `oldest` the oldest (the control plane only: the suite's node simulator plays
# kubelet and the current kubectl talks to it). The binaries are the ones the module's
# tools.go names. Cached outside the repository; a second run with the binaries present
# prints their directory and exits at once. Prints the cold build's time. With --cached
# it never builds: it prints the directory if the binaries are there, else says so and
# exits 3 (the CRD admission test, which `cargo test` runs, builds nothing).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  current | oldest) MOD="$HERE/k8s-$1" ;;
  *) echo "usage: $0 current|oldest" >&2; exit 2 ;;
esac
VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$MOD/go.mod")
[ -n "$VERSION" ] || { echo "no k8s.io/kubernetes version in $MOD/go.mod" >&2; exit 1; }
MINOR=$(echo "$VERSION" | cut -d. -f2)
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
BIN_DIR="$CACHE_DIR/k8s-${VERSION#v}/bin"
# The commands tools.go imports, by their last path element.
mapfile -t WANT < <(sed -n 's|^[[:space:]]*_ "k8s.io/kubernetes/cmd/\([a-z-]*\)"$|\1|p' "$MOD/tools.go")
[ "${#WANT[@]}" -gt 0 ] || { echo "no commands in $MOD/tools.go" >&2; exit 1; }
# What `kubectl version`, the API server's /version and each node's kubeletVersion say:
# the operator reads the server's version to choose what it renders.
PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X $PKG.gitVersion=$VERSION -X $PKG.gitMajor=1 -X $PKG.gitMinor=$MINOR"
LDFLAGS="$LDFLAGS -X $PKG.gitTreeState=clean -X $PKG.buildDate=1970-01-01T00:00:00Z"
# The recipe: the module's files and how they are built (not this script's comments). A
# change rebuilds.
STAMP=$(cat "$MOD/go.mod" "$MOD/go.sum" "$MOD/tools.go" <(echo "CGO_ENABLED=0 -trimpath $LDFLAGS") |
  sha256sum | cut -c1-16)

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
if [ "${2:-}" = --cached ]; then
  log "not built yet: run hack/build-k8s.sh $1 (make test does)"
  exit 3
fi

command -v go >/dev/null 2>&1 || { log "needs Go (1.25 or later) and the Go module proxy"; exit 2; }
# The control plane's store. Debian's etcd-server, as root (or with sudo).
if ! command -v etcd >/dev/null 2>&1; then
  as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
  log "installing etcd-server with apt"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq etcd-server >/dev/null
fi


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
