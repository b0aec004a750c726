#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl 1.20.2 from
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
WANT=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# Bump when the build changes, so cached binaries from an older recipe are rebuilt.
BUILD_STAMP="reflect2-go118-fix-1"

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
  [ "$(cat "$BIN_DIR/.stamp" 2>/dev/null)" = "$BUILD_STAMP" ]
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

# Kubernetes 1.20 vendors github.com/modern-go/reflect2 v1.0.1, which Go 1.18 broke:
# reflect.mapiterinit now fills an iterator the caller allocates, and 1.0.1 still
# expects one back, so kube-apiserver segfaults the first time it encodes a map of a
# custom resource. Apply upstream's fix (reflect2 v1.0.2) to the vendored copy.
patch_reflect2() {
  local dir="$1/vendor/github.com/modern-go/reflect2"
  [ -f "$dir/go_above_118.go" ] && return 0
  log "patching vendored reflect2 for Go >= 1.18 (upstream v1.0.2 fix)"
  python3 - "$dir" <<'PY'
import pathlib, re, sys
d = pathlib.Path(sys.argv[1])
link = d / "unsafe_link.go"
s = link.read_text()
s = re.sub(r"// m escapes into the return value, but the caller of mapiterinit\n// doesn't let the return value escape.\n//go:noescape\n//go:linkname mapiterinit reflect.mapiterinit\nfunc mapiterinit\(rtype unsafe.Pointer, m unsafe.Pointer\) \*hiter\n\n", "", s)
s = re.sub(r"type hiter struct \{.*?\n\}\n", """type hiter struct {
	key         unsafe.Pointer
	value       unsafe.Pointer
	t           unsafe.Pointer
	h           unsafe.Pointer
	buckets     unsafe.Pointer
	bptr        unsafe.Pointer
	overflow    *[]unsafe.Pointer
	oldoverflow *[]unsafe.Pointer
	startBucket uintptr
	offset      uint8
	wrapped     bool
	B           uint8
	i           uint8
	bucket      uintptr
	checkBucket uintptr
}
""", s, flags=re.S)
link.write_text(s)
m = d / "unsafe_map.go"
t = m.read_text()
t = re.sub(r"func \(type2 \*UnsafeMapType\) UnsafeIterate\(obj unsafe.Pointer\) MapIterator \{.*?\n\}\n", "", t, flags=re.S)
m.write_text(t)
(d / "go_above_118.go").write_text("""//+build go1.18

package reflect2

import "unsafe"

//go:noescape
//go:linkname mapiterinit reflect.mapiterinit
func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)

func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
	var it hiter
	mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), &it)
	return &UnsafeMapIterator{
		hiter:      &it,
		pKeyRType:  type2.pKeyRType,
		pElemRType: type2.pElemRType,
	}
}
""")
(d / "go_below_118.go").write_text("""//+build !go1.18

package reflect2

import "unsafe"

//go:noescape
//go:linkname mapiterinit reflect.mapiterinit
func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) (val *hiter)

func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
	return &UnsafeMapIterator{
		hiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),
		pKeyRType:  type2.pKeyRType,
		pElemRType: type2.pElemRType,
	}
}
""")
PY
  grep -q 'checkBucket' "$dir/unsafe_link.go" && ! grep -q 'func mapiterinit' "$dir/unsafe_link.go" \
    || { log "reflect2 patch did not apply"; exit 1; }
}
patch_reflect2 "$tree"

# The build wants the tree at GOPATH/src/k8s.io/kubernetes.
gopath="$CACHE_DIR/k8s-$K8S_VERSION/gopath"
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"

log "building ${WANT[*]} (first run only; about 6 minutes on 2 cores)"
start=$(date +%s)
build_log="$CACHE_DIR/k8s-$K8S_VERSION/build.log"
(
  cd "$gopath/src/k8s.io/kubernetes"
  export GOPATH="$gopath" GO111MODULE=off CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor GOCACHE="$CACHE_DIR/k8s-$K8S_VERSION/gocache"
  make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubectl" KUBE_VERBOSE=2
) >"$build_log" 2>&1 &
build_pid=$!
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 30
  kill -0 "$build_pid" 2>/dev/null && log "still building ($(( $(date +%s) - start ))s): $(grep -E '^\+\+\+' "$build_log" | tail -n1 | cut -c1-100)"
done
if ! wait "$build_pid"; then
  log "build failed; the end of $build_log:"
  tail -n 40 "$build_log" >&2
  exit 1
fi

for b in "${WANT[@]}"; do
  built=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n1)
  [ -n "$built" ] || { log "build finished but $b is missing"; exit 1; }
  cp "$built" "$BIN_DIR/$b"
done
echo "$BUILD_STAMP" > "$BIN_DIR/.stamp"
log "built in $(( $(date +%s) - start ))s, cached in $BIN_DIR"
echo "$BIN_DIR"
