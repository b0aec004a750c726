#!/usr/bin/env bash
# Builds the operator's images without Docker or a registry: a static (musl) binary per
# platform in an OCI image archive (hack/oci.py).
#
#   hack/build-image.sh                 build, write target/image/loki-zone-operator.oci.tar
#   IMAGE=zone-wait hack/build-image.sh build the zone init container's image instead,
#                                       target/image/loki-zone-wait.oci.tar
#   hack/build-image.sh rootfs BIN DIR  only lay out the operator image's files in DIR (the
#                                       Dockerfile)
#
# The operator's image holds the binary and what a distroless "static:nonroot" image
# gives a static binary: /etc/passwd and /etc/group with user nonroot (65532), its home,
# /tmp (1777), and the CA bundle of the build machine (Debian's) at /etc/ssl/certs; no
# shell. It runs as 65532:65532, entrypoint /loki-zone-operator, command `run`.
#
# The zone init container's image (zone-wait/, loki-zone-wait) holds its binary alone,
# runs as 65532:65532, entrypoint /loki-zone-wait. Every zone-aware Loki pod template
# names it by digest, so its digest depends on nothing but its crate: its timestamps and
# revision label are those of the last commit that changed zone-wait/ (not HEAD's), its
# version label is the crate's own. An operator release that leaves zone-wait/ alone
# gives the same digest (hack/release-check.sh checks it) and restarts no Loki pod.
#
# Environment:
#   IMAGE      operator (default) or zone-wait
#   PLATFORMS  space-separated, of linux/amd64 and linux/arm64 (default linux/amd64). One
#              gives one image manifest (docker load, kind load, ctr import all take it);
#              several give an image index over them, as a multi-platform release.
#   IMG        the name in the archive (default: the image manifests/operator sets)
#   OUT        the archive; its summary (digests, sizes) goes to OUT.json
#   SOURCE_DATE_EPOCH  every timestamp of the operator's image (default: HEAD's commit
#              time, else 0)
#   LZO_GIT_COMMIT     what --version names (default: HEAD, with -dirty for a changed tree)
#
# Reproducible: the binaries are built with cargo-zigbuild (zig as the C compiler and
# linker, for both platforms: the same pinned toolchain on every machine, and no
# cross-compiler from the distribution), with the checkout's and cargo's paths remapped,
# so that the same commit gives the same binaries, and hack/oci.py writes the same bytes
# for the same files. Two builds of one commit give the same digests.
#
# The build is cached outside the repository ($LZO_CACHE_DIR, default
# ~/.cache/loki-zone-operator: release-target/ for cargo, tools/ for zig), so a fresh clone
# rebuilds only the crate.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CA_COPYRIGHT=/usr/share/doc/ca-certificates/copyright
# The toolchain of the static builds, pinned: zig (as PyPI's ziglang ships it) compiles
# ring's C for either target and links; cargo-zigbuild drives it from cargo.
ZIG_VERSION=0.13.0
ZIGBUILD_VERSION=0.24.1

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The image's files in DIR, with their modes; owners are the tar writer's (--owner
# below) and the Dockerfile's: everything root's except /home/nonroot, which is 65532's.
rootfs() {
  local bin=$1 dir=$2
  [ -f "$CA_BUNDLE" ] || die "no CA bundle at $CA_BUNDLE (apt-get install ca-certificates)"
  rm -rf "$dir"
  mkdir -p "$dir/etc/ssl/certs" "$dir/home/nonroot" "$dir/tmp"
  install -m 0755 "$bin" "$dir/loki-zone-operator"
  printf '%s\n' \
    'root:x:0:0:root:/root:/sbin/nologin' \
    'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$dir/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$dir/etc/group"
  install -m 0644 "$CA_BUNDLE" "$dir/etc/ssl/certs/ca-certificates.crt"
  # The bundle's licence (MPL-2.0) travels with it, as in Debian and distroless.
  if [ -f "$CA_COPYRIGHT" ]; then
    mkdir -p "$dir/usr/share/doc/ca-certificates"
    install -m 0644 "$CA_COPYRIGHT" "$dir/usr/share/doc/ca-certificates/copyright"
  fi
  chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
  # Every directory 0755, the home of nonroot too (distroless makes it 0700): a COPY
  # --chown of the Dockerfile creates it 0755, and both builds give the same files.
  find "$dir" -type d -exec chmod 0755 {} +
  chmod 1777 "$dir/tmp"
}

if [ "${1:-}" = rootfs ]; then
  [ $# -eq 3 ] || die "usage: $0 rootfs BINARY DIR"
  rootfs "$2" "$3"
  exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [rootfs BINARY DIR]"

CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
TARGET_DIR="$CACHE_DIR/release-target"
TOOLS="$CACHE_DIR/tools"
PLATFORMS=${PLATFORMS:-linux/amd64}
IMAGE=${IMAGE:-operator}
dirty() { [ -n "$(git status --porcelain -- "$@" 2>/dev/null)" ]; }
case "$IMAGE" in
  operator)
    PACKAGE=loki-zone-operator
    OUT=${OUT:-target/image/loki-zone-operator.oci.tar}
    IMG=${IMG:-$(bash hack/image-ref.sh loki-zone-operator)}
    # HEAD's commit time: the image says when its source was committed. Kept from cargo:
    # build scripts that read SOURCE_DATE_EPOCH rerun when it changes, and with them most
    # of the build.
    EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
    if [ -z "${LZO_GIT_COMMIT:-}" ]; then
      LZO_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
      # Only what the binary is built from counts: a changed doc or test leaves it clean.
      if [ "$LZO_GIT_COMMIT" != unknown ] && dirty Cargo.toml Cargo.lock operator zone-wait templates; then
        LZO_GIT_COMMIT+=-dirty
      fi
    fi
    REVISION=$LZO_GIT_COMMIT
    VERSION_LABEL=$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
    ;;
  zone-wait)
    PACKAGE=loki-zone-wait
    OUT=${OUT:-target/image/loki-zone-wait.oci.tar}
    IMG=${IMG:-$(bash hack/image-ref.sh loki-zone-wait)}
    # The last commit that changed the crate, never HEAD: see above.
    EPOCH=$(git log -1 --format=%ct -- zone-wait 2>/dev/null || true)
    REVISION=$(git log -1 --format=%H -- zone-wait 2>/dev/null || true)
    EPOCH=${EPOCH:-0} REVISION=${REVISION:-unknown}
    ! dirty zone-wait || REVISION+=-dirty
    VERSION_LABEL=$(awk -F'"' '/^version = / {print $2; exit}' zone-wait/Cargo.toml)
    LZO_GIT_COMMIT=${LZO_GIT_COMMIT:-unknown}
    ;;
  *) die "IMAGE=$IMAGE: operator or zone-wait" ;;
esac
unset SOURCE_DATE_EPOCH
export LZO_GIT_COMMIT

rust_target() {
  case "$1" in
    linux/amd64) echo x86_64-unknown-linux-musl ;;
    linux/arm64) echo aarch64-unknown-linux-musl ;;
    *) die "platform $1: only linux/amd64 and linux/arm64 are built" ;;
  esac
}

# zig and cargo-zigbuild, pinned, in a virtualenv of the cache (nothing installed
# system-wide).
tools() {
  local want="ziglang==$ZIG_VERSION cargo-zigbuild==$ZIGBUILD_VERSION"
  if [ "$(cat "$TOOLS/.versions" 2>/dev/null)" != "$want" ] || [ ! -x "$TOOLS/bin/cargo-zigbuild" ]; then
    log "installing $want into $TOOLS (PyPI)"
    rm -rf "$TOOLS"
    python3 -m venv "$TOOLS" || die "python3 -m venv failed (apt-get install python3-venv)"
    # shellcheck disable=SC2086 # two requirements
    "$TOOLS/bin/pip" install -q --disable-pip-version-check $want >&2 ||
      die "pip install $want failed"
    echo "$want" >"$TOOLS/.versions"
  fi
  export PATH="$TOOLS/bin:$PATH"
}

# The ELF machine a binary of this platform has, and a way to run it here.
elf_machine() { case "$1" in linux/amd64) echo 62 ;; linux/arm64) echo 183 ;; esac; }
runner() {
  case "$1" in
    linux/amd64) [ "$(uname -m)" = x86_64 ] && echo "" ;;
    linux/arm64)
      if [ "$(uname -m)" = aarch64 ]; then echo ""
      elif command -v qemu-aarch64-static >/dev/null 2>&1; then echo qemu-aarch64-static
      else return 1; fi ;;
  esac
}

# A dynamic binary would fail in an image without a libc: refuse one with an ELF
# interpreter (static-pie binaries have PT_DYNAMIC but no PT_INTERP), or one for another
# machine.
check_static() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
path, want = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as f:
    head = f.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        sys.exit(f"{path}: not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", head, 18)[0]
    if machine != want:
        sys.exit(f"{path}: ELF machine {machine}, expected {want}")
    phoff, = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        if struct.unpack("<I", f.read(4))[0] == 3:  # PT_INTERP
            sys.exit(f"{path}: dynamically linked (has an ELF interpreter); the image has no libc")
PY
}

tools
targets=()
for p in $PLATFORMS; do
  t=$(rust_target "$p")
  targets+=(--target "$t")
  if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$t"; then
    log "adding the rust target $t"
    rustup target add "$t" >&2
  fi
done

# Paths of this checkout and of cargo's registry are remapped, so a clone elsewhere
# builds the same bytes (panic messages carry source paths).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
export CARGO_ENCODED_RUSTFLAGS="--remap-path-prefix=$REPO=/src"$'\x1f'"--remap-path-prefix=$cargo_home=/cargo"
log "building $PACKAGE for $PLATFORMS (revision $REVISION; cached in $TARGET_DIR)"
start=$(date +%s)
CARGO_TARGET_DIR="$TARGET_DIR" ${CARGO:-cargo} zigbuild --locked --release \
  "${targets[@]}" -p "$PACKAGE" --bin "$PACKAGE" >&2
log "built in $(($(date +%s) - start)) s"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rootfs_args=()
for p in $PLATFORMS; do
  bin="$TARGET_DIR/$(rust_target "$p")/release/$PACKAGE"
  check_static "$bin" "$(elf_machine "$p")"
  if run=$(runner "$p"); then
    $run "$bin" --version >/dev/null || die "$bin ($p) does not run"
  else
    log "cannot run the $p binary here (no qemu-aarch64-static): not started"
  fi
  dir="$stage/${p//\//-}"
  if [ "$IMAGE" = operator ]; then
    rootfs "$bin" "$dir"
  else
    mkdir -p "$dir" && install -m 0755 "$bin" "$dir/$PACKAGE" && chmod 0755 "$dir"
  fi
  rootfs_args+=(--rootfs "$p=$dir")
done

labels=(
  --label org.opencontainers.image.source=https://github.com/loki-zone-operator/loki-zone-operator
  --label "org.opencontainers.image.revision=$REVISION"
  --label "org.opencontainers.image.version=$VERSION_LABEL"
  --label org.opencontainers.image.licenses=Apache-2.0
)
if [ "$IMAGE" = operator ]; then
  config=(--owner home/nonroot=65532:65532 --entrypoint /loki-zone-operator --cmd run
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
else
  config=(--entrypoint /loki-zone-wait)
fi
mkdir -p "$(dirname "$OUT")"
python3 hack/oci.py image --out "$OUT" --name "$IMG" --created "$EPOCH" \
  "${rootfs_args[@]}" --user 65532:65532 "${config[@]}" "${labels[@]}" >"$OUT.json"
python3 - "$OUT" "$OUT.json" <<'PY'
import json, os, sys
out, summary = sys.argv[1], json.load(open(sys.argv[2]))
mb = lambda n: f"{n / 1e6:.1f} MB"
print(f"image {summary['name']}")
print(f"archive {out}: {mb(os.path.getsize(out))}")
for platform, s in sorted(summary["platforms"].items()):
    print(f"  {platform}: manifest {s['manifest']}, layer {mb(s['layer'])} compressed, {mb(s['unpacked'])} unpacked")
print(f"digest {summary['digest']}")
PY
