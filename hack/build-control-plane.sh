#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2 from
# Debian's `kubernetes` source package (vendored, so no module downloads) and
# caches them outside the repo. A second run with the binaries present exits at once.
#
# 1.20 is the newest control plane whose source and toolchain Debian's registry
# carries; the product targets 1.30+, and the e2e suite gates newer pieces on it.
set -euo pipefail

K8S_VERSION=1.20.2
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
BIN_DIR="$CACHE_DIR/k8s-$K8S_VERSION/bin"
SRC_ROOT="$CACHE_DIR/k8s-$K8S_VERSION/src"
WANT=(kube-apiserver kube-controller-manager kube-scheduler)

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
}

log() { printf '[control-plane] %s\n' "$*" >&2; }

if have_all; then
  log "cached binaries in $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_packages() {
  local missing=()
  command -v go >/dev/null 2>&1 || missing+=(golang-go)
  command -v rsync >/dev/null 2>&1 || missing+=(rsync)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v dpkg-source >/dev/null 2>&1 || missing+=(dpkg-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} with apt"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

ensure_deb_src() {
  if ! grep -rqsE '^(deb-src|Types: *deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "adding a deb-src entry for bookworm"
    as_root tee /etc/apt/sources.list.d/loki-zone-operator-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    as_root apt-get update -qq
  fi
}

ensure_packages
ensure_deb_src

mkdir -p "$SRC_ROOT" "$BIN_DIR"
tree=$(find "$SRC_ROOT" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
if [ -z "$tree" ]; then
  log "fetching the kubernetes source package (about 60 MB)"
  (cd "$SRC_ROOT" && apt-get source -qq kubernetes >/dev/null)
  tree=$(find "$SRC_ROOT" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
fi
[ -n "$tree" ] || { log "no kubernetes source tree under $SRC_ROOT"; exit 1; }

# The build wants the tree at GOPATH/src/k8s.io/kubernetes.
gopath="$CACHE_DIR/k8s-$K8S_VERSION/gopath"
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"

log "building ${WANT[*]} (first run only; about 6 minutes on 2 cores)"
start=$(date +%s)
(
  cd "$gopath/src/k8s.io/kubernetes"
  export GOPATH="$gopath" GO111MODULE=off CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor GOCACHE="$CACHE_DIR/k8s-$K8S_VERSION/gocache"
  # KUBE_VERBOSE=2 prints one line per step, enough to show progress in CI logs.
  make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" KUBE_VERBOSE=2
) 2>&1 | sed -u 's/^/[control-plane build] /' >&2

for b in "${WANT[@]}"; do
  built=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n1)
  [ -n "$built" ] || { log "build finished but $b is missing"; exit 1; }
  cp "$built" "$BIN_DIR/$b"
done
log "built in $(( $(date +%s) - start ))s, cached in $BIN_DIR"
echo "$BIN_DIR"
