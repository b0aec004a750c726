#!/usr/bin/env bash
# Builds a current k8s.io/apiextensions-apiserver (1.36) from Debian sid's
# golang-k8s-*-dev source packages with sid's Go toolchain, and caches it outside the
# repo. tests/admission.rs starts it on a local etcd to run the CRD admission table
# against the CEL rules and bounds exactly as a current kube-apiserver evaluates them;
# the 1.20 control plane of the e2e suite predates CEL.
#
# Nothing is installed: apt runs with a private configuration, state and cache under
# the cache directory, pointed at sid, and only downloads; dpkg-deb -x unpacks. The
# system's apt sources and packages stay as they are. A second run with the binary
# present exits at once. Prints the bin dir on stdout; logs go to stderr. Needs network
# access to deb.debian.org the first time, and about 1 GB of disk while building.
set -euo pipefail

APIEXT_VERSION=1.36
GO_VERSION=1.26
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
ROOT="$CACHE_DIR/apiextensions-$APIEXT_VERSION"
BIN_DIR="$ROOT/bin"
BIN="$BIN_DIR/apiextensions-apiserver"
# The golang-*-dev packages (Go sources) that k8s.io/apiextensions-apiserver 1.36 imports,
# transitively, in sid.
DEBS=(
  golang-cel-cel-go-dev golang-cel-expr-dev golang-etcd-server-dev
  golang-github-antlr4-go-antlr-dev golang-github-beorn7-perks-dev
  golang-github-blang-semver-dev golang-github-cenkalti-backoff-v5-dev
  golang-github-cespare-xxhash-v2-dev golang-github-coreos-go-semver-dev
  golang-github-coreos-go-systemd-dev golang-github-davecgh-go-spew-dev
  golang-github-docker-spdystream-dev golang-github-emicklei-go-restful-dev
  golang-github-evanphx-json-patch-dev golang-github-felixge-httpsnoop-dev
  golang-github-fsnotify-fsnotify-dev golang-github-fxamacker-cbor-dev
  golang-github-go-logr-logr-dev golang-github-go-logr-stdr-dev
  golang-github-go-openapi-jsonpointer-dev golang-github-go-openapi-jsonreference-dev
  golang-github-go-openapi-swag-dev golang-github-gogo-protobuf-dev
  golang-github-golang-protobuf-1-5-dev golang-github-google-gnostic-models-dev
  golang-github-google-uuid-dev golang-github-gorilla-websocket-dev
  golang-github-grpc-ecosystem-go-grpc-middleware-dev
  golang-github-grpc-ecosystem-grpc-gateway-dev golang-github-json-iterator-go-dev
  golang-github-kylelemons-godebug-dev golang-github-modern-go-concurrent-dev
  golang-github-modern-go-reflect2-dev golang-github-munnerz-goautoneg-dev
  golang-github-mxk-go-flowrate-dev golang-github-nytimes-gziphandler-dev
  golang-github-pkg-errors-dev golang-github-pmezard-go-difflib-dev
  golang-github-prometheus-client-golang-dev golang-github-prometheus-client-model-dev
  golang-github-prometheus-common-dev golang-github-prometheus-procfs-dev
  golang-github-spf13-cobra-dev golang-github-spf13-pflag-dev
  golang-github-x448-float16-dev golang-go.uber-multierr-dev golang-go.uber-zap-dev
  golang-golang-x-crypto-dev golang-golang-x-exp-dev golang-golang-x-net-dev
  golang-golang-x-oauth2-dev golang-golang-x-sync-dev golang-golang-x-sys-dev
  golang-golang-x-term-dev golang-golang-x-text-dev golang-golang-x-time-dev
  golang-google-genproto-dev golang-google-grpc-dev golang-google-protobuf-dev
  golang-gopkg-inf.v0-dev golang-gopkg-natefinch-lumberjack.v2-dev
  golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev golang-k8s-api-dev
  golang-k8s-apiextensions-apiserver-dev golang-k8s-apimachinery-dev
  golang-k8s-apiserver-dev golang-k8s-client-go-dev golang-k8s-component-base-dev
  golang-k8s-klog-dev golang-k8s-kms-dev golang-k8s-kube-openapi-dev
  golang-k8s-sigs-apiserver-network-proxy-dev golang-k8s-sigs-json-dev
  golang-k8s-sigs-randfill-dev golang-k8s-sigs-structured-merge-diff-v6-dev
  golang-k8s-sigs-yaml-dev golang-k8s-streaming-dev golang-k8s-utils-dev
  golang-opentelemetry-contrib-dev golang-opentelemetry-otel-dev
  golang-opentelemetry-proto-dev
)
# Bump when the build changes, so a binary from an older recipe is rebuilt.
BUILD_STAMP="sid-gopath-2"

log() { printf '[apiextensions] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# tests/admission.rs runs the server on a local etcd (Debian's etcd-server). A fresh
# machine has none until hack/build-control-plane.sh installs it, which `make test` runs
# after the unit tests: installed here, before them, or the admission table is skipped.
ensure_etcd() {
  command -v etcd >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    log "needs etcd on PATH (Debian's etcd-server)"
    return 1
  fi
  log "installing etcd-server with apt (the admission check's etcd)"
  as_root apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq etcd-server >/dev/null
}

if [ "${1:-}" != "--cached" ]; then
  ensure_etcd || exit 1
fi

if [ -x "$BIN" ] && [ "$(cat "$BIN_DIR/.stamp" 2>/dev/null)" = "$BUILD_STAMP" ]; then
  log "cached binary in $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi
# --cached: only say where a built binary is (tests/admission.rs asks this way, so the
# cache location is decided here alone); exit 3 when there is none.
if [ "${1:-}" = "--cached" ]; then
  log "not built yet: run hack/build-apiextensions.sh (make apiextensions)"
  exit 3
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { log "needs $tool (Debian or Ubuntu)"; exit 1; }
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { log "needs $keyring (package debian-archive-keyring)"; exit 1; }

# A private apt: its own sources (sid only), lists, cache and an empty dpkg status, so
# it resolves nothing against what the system has installed and changes none of it.
apt_dir="$ROOT/apt"
mkdir -p "$apt_dir/etc/apt.conf.d" "$apt_dir/etc/preferences.d" "$apt_dir/etc/trusted.gpg.d" \
  "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
: > "$apt_dir/status"
cat > "$apt_dir/etc/sources.list" <<SRC
deb [signed-by=$keyring] http://deb.debian.org/debian sid main
SRC
cat > "$apt_dir/apt.conf" <<CONF
Dir::Etc "$apt_dir/etc";
Dir::Etc::sourcelist "$apt_dir/etc/sources.list";
Dir::Etc::sourceparts "-";
Dir::State "$apt_dir/state";
Dir::State::status "$apt_dir/status";
Dir::Cache "$apt_dir/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
// Signatures are still checked; a mirror or snapshot proxy may serve a Release past
// its Valid-Until, and the sources it signs are what we want either way.
Acquire::Check-Valid-Until "false";
// A source that cannot be fetched is an error, not a warning with stale lists.
APT::Update::Error-Mode "any";
// The private directories belong to whoever runs this, not to apt's _apt user.
APT::Sandbox::User "$(id -un)";
CONF
private_apt() { APT_CONFIG="$apt_dir/apt.conf" apt-get -q "$@"; }

log "updating the private apt lists for Debian sid"
private_apt update >"$ROOT/apt-update.log" 2>&1 \
  || { log "apt-get update against sid failed (no network?):"; tail -n 5 "$ROOT/apt-update.log" >&2; exit 1; }
compgen -G "$apt_dir/state/lists/*_sid_main_binary-amd64_Packages*" >/dev/null \
  || { log "no package list for sid after apt-get update (no network?); see $ROOT/apt-update.log"; exit 1; }

debs=("${DEBS[@]}")
# The toolchain: the compiler and the standard library's sources.
debs+=("golang-$GO_VERSION-go" "golang-$GO_VERSION-src")

deb_dir="$ROOT/debs"
mkdir -p "$deb_dir"
log "downloading ${#debs[@]} packages from sid"
(cd "$deb_dir" && APT_CONFIG="$apt_dir/apt.conf" apt-get -q download "${debs[@]}") >"$ROOT/download.log" 2>&1 \
  || { log "download failed:"; tail -n 5 "$ROOT/download.log" >&2; exit 1; }

# Unpack into a fresh tree, so a package dropped from the list leaves nothing behind.
tree="$ROOT/tree"
rm -rf "$tree"
mkdir -p "$tree"
for d in "$deb_dir"/*.deb; do dpkg-deb -x "$d" "$tree"; done
goroot="$tree/usr/lib/go-$GO_VERSION"
[ -x "$goroot/bin/go" ] || { log "no go binary in $goroot after unpacking"; exit 1; }
gopath="$tree/usr/share/gocode"
[ -d "$gopath/src/k8s.io/apiextensions-apiserver" ] || { log "no apiextensions-apiserver sources in $gopath"; exit 1; }
# The staging repositories are versioned 0.x for Kubernetes 1.x (0.36.4-1 is 1.36.4).
deb_version=$(dpkg-deb -f "$(ls "$deb_dir"/golang-k8s-apiextensions-apiserver-dev_*.deb | head -n1)" Version)
upstream=${deb_version%-*}
version="1.${upstream#0.}"

log "building apiextensions-apiserver $version with go $GO_VERSION (first run only; about 8 minutes on 2 cores)"
mkdir -p "$BIN_DIR"
start=$(date +%s)
build_log="$ROOT/build.log"
(
  export GOROOT="$goroot" GOPATH="$gopath" GO111MODULE=off CGO_ENABLED=0 GOPROXY=off \
    GOTOOLCHAIN=local GOFLAGS= GOCACHE="$ROOT/gocache"
  # The binary's version, which the server also checks its emulation version against:
  # without it, it is 0.x from the package's own version and the server refuses to start.
  ldflags="-X k8s.io/component-base/version.gitVersion=v$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${APIEXT_VERSION#*.}"
  "$goroot/bin/go" build -trimpath -ldflags "$ldflags" -o "$BIN.new" k8s.io/apiextensions-apiserver
) >"$build_log" 2>&1 &
build_pid=$!
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 30
  kill -0 "$build_pid" 2>/dev/null && log "still building ($(( $(date +%s) - start ))s)"
done
if ! wait "$build_pid"; then
  log "build failed; the end of $build_log:"
  tail -n 40 "$build_log" >&2
  exit 1
fi
mv "$BIN.new" "$BIN"
echo "$BUILD_STAMP" > "$BIN_DIR/.stamp"
# Only the binary is needed from here on: drop the sources, packages, apt lists and Go
# build cache (about 1 GB).
rm -rf "$tree" "$deb_dir" "$apt_dir" "$ROOT/gocache"
log "built in $(( $(date +%s) - start ))s, cached in $BIN_DIR"
echo "$BIN_DIR"
