#!/usr/bin/env bash
# Builds kubelet 1.20.2 (and kube-proxy, for Services) from the Debian source tree
# hack/build-control-plane.sh already fetched and patched (run that first), with the
# same Go toolchain and flags, and caches them next to the control plane binaries:
# $CACHE_DIR/k8s-1.20.2/bin/{kubelet,kube-proxy}.
# A second run with the binaries present exits at once. Prints the kubelet's path.
set -euo pipefail

K8S_VERSION=1.20.2
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
BIN_DIR="$CACHE_DIR/k8s-$K8S_VERSION/bin"
GOPATH_DIR="$CACHE_DIR/k8s-$K8S_VERSION/gopath"
log() { printf '[build-kubelet] %s\n' "$*" >&2; }

WANT=(kubelet kube-proxy)
have_all() { for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done; }
if have_all; then
  log "cached: $BIN_DIR/kubelet"
  echo "$BIN_DIR/kubelet"
  exit 0
fi

tree="$GOPATH_DIR/src/k8s.io/kubernetes"
[ -d "$tree/cmd/kubelet" ] || {
  log "no source tree at $tree: run hack/build-control-plane.sh first"
  exit 1
}

build_log="$CACHE_DIR/k8s-$K8S_VERSION/build-kubelet.log"
log "building ${WANT[*]} (log: $build_log)"
start=$(date +%s)
(
  cd "$tree"
  # Same environment as hack/build-control-plane.sh: vendored, no module downloads.
  # CGO off gives a static binary; the kubelet needs no cgo for a remote (CRI) runtime.
  export GOPATH="$GOPATH_DIR" GO111MODULE=off CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor \
    GOCACHE="$CACHE_DIR/k8s-$K8S_VERSION/gocache"
  nice -n 10 make WHAT="cmd/kubelet cmd/kube-proxy" KUBE_VERBOSE=2
) >"$build_log" 2>&1 || { log "build failed; the end of $build_log:"; tail -n 30 "$build_log" >&2; exit 1; }

for b in "${WANT[@]}"; do
  built=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n1)
  [ -n "$built" ] || { log "build finished but $b is missing"; exit 1; }
  cp "$built" "$BIN_DIR/$b"
done
log "built in $(( $(date +%s) - start ))s: ${WANT[*]} in $BIN_DIR"
echo "$BIN_DIR/kubelet"
