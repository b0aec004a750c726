#!/usr/bin/env bash
# Builds the operator image without Docker or a registry: a static (musl) binary in an
# OCI image archive that `docker load`, `podman load`, `ctr images import`,
# `kind load image-archive` and `skopeo copy oci-archive:...` all take.
#
#   hack/build-image.sh                 build, write target/image/loki-zone-operator.oci.tar
#   hack/build-image.sh rootfs BIN DIR  only lay out the image's files in DIR (the Dockerfile)
#
# The image holds the binary and what a distroless "static:nonroot" image gives a static
# binary: /etc/passwd and /etc/group with user nonroot (65532), its home, /tmp (1777),
# and the CA bundle of the build machine (Debian's) at /etc/ssl/certs; no shell. It runs
# as 65532:65532, entrypoint /loki-zone-operator, command `run`. Every timestamp is
# SOURCE_DATE_EPOCH (default 0), tar entries are sorted with fixed owners and gzip
# writes no name or time, so two builds of the same binary give the same digest.
#
# The musl build is cached outside the repository, next to the control plane
# ($LZO_CACHE_DIR, default ~/.cache/loki-zone-operator/musl-target), so a fresh clone
# rebuilds only the crate. Environment: IMG (the name in the archive; default the image
# manifests/operator sets), OUT (the archive), SOURCE_DATE_EPOCH.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-musl
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CA_COPYRIGHT=/usr/share/doc/ca-certificates/copyright

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The image's files in DIR, with their modes; owners are the tar writer's (below) and
# the Dockerfile's: everything root's except /home/nonroot, which is 65532's.
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
MUSL_TARGET_DIR="$CACHE_DIR/musl-target"
OUT=${OUT:-target/image/loki-zone-operator.oci.tar}
IMG=${IMG:-$(awk '/newName:/ {n=$2} /newTag:/ {t=$2} END {print n ":" t}' manifests/operator/kustomization.yaml)}
# Not exported: ring's build script reruns when it changes, and with it most of the build.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# The musl target of the toolchain, and a C compiler for it: ring builds C, and cc
# looks for musl-gcc (Debian's musl-tools) for this target.
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$TARGET"; then
  log "adding the rust target $TARGET"
  rustup target add "$TARGET" >&2
fi
if ! command -v musl-gcc >/dev/null 2>&1 && ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1 \
  && [ -z "${CC_x86_64_unknown_linux_musl:-}" ]; then
  log "installing musl-tools with apt (a C compiler for $TARGET)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq musl-tools >/dev/null
fi

log "building the static binary (cached in $MUSL_TARGET_DIR)"
start=$(date +%s)
CARGO_TARGET_DIR="$MUSL_TARGET_DIR" ${CARGO:-cargo} build --locked --release \
  --target "$TARGET" -p loki-zone-operator --bin loki-zone-operator >&2
log "built in $(($(date +%s) - start)) s"
BIN="$MUSL_TARGET_DIR/$TARGET/release/loki-zone-operator"

# A dynamic binary would fail in an image without a libc: refuse one with an ELF
# interpreter (static-pie binaries have PT_DYNAMIC but no PT_INTERP).
python3 - "$BIN" <<'PY'
import struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    head = f.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        sys.exit(f"{path}: not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", head, 18)[0]
    if machine != 62:
        sys.exit(f"{path}: not x86-64 (e_machine {machine})")
    phoff, = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        if struct.unpack("<I", f.read(4))[0] == 3:  # PT_INTERP
            sys.exit(f"{path}: dynamically linked (has an ELF interpreter); the image has no libc")
PY
"$BIN" wait-for-zone --help >/dev/null || die "$BIN does not run"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rootfs "$BIN" "$stage/rootfs"

mkdir -p "$(dirname "$OUT")"
SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH python3 - "$stage/rootfs" "$OUT" "$IMG" <<'PY'
"""Writes the OCI image layout (oci-layout, index.json, blobs/sha256/...) as a tar, with
Docker's manifest.json beside it so that loaders of the older Docker format take it
too. Every byte depends only on the files, IMG and SOURCE_DATE_EPOCH."""
import gzip, hashlib, io, json, os, stat, sys, tarfile, time

root, out, img = sys.argv[1:4]
epoch = int(os.environ["SOURCE_DATE_EPOCH"])
created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
OWNED_BY_NONROOT = {"home/nonroot"}


def normalized(ref):
    """The name containerd and the kubelet use for IMG (docker.io/library/... when IMG
    names no registry), for the containerd name annotation."""
    first, _, rest = ref.partition("/")
    if not rest:
        return "docker.io/library/" + ref
    if "." in first or ":" in first or first == "localhost":
        return ref
    return "docker.io/" + ref


last = img.rsplit("/", 1)[-1]
if "@" in img:
    sys.exit(f"IMG={img}: give a name and tag, not a digest")
if ":" not in last:
    img += ":latest"


def entry(name, mode, size=0, kind=tarfile.REGTYPE, uid=0, gid=0):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.mtime = kind, mode, size, epoch
    ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
    return ti


# The layer: every file and directory under root, sorted, with fixed owners and times.
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            paths.append(os.path.relpath(os.path.join(dirpath, n), root))
    for rel in sorted(paths):
        st = os.lstat(os.path.join(root, rel))
        uid = 65532 if rel in OWNED_BY_NONROOT else 0
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            tar.addfile(entry(rel + "/", mode, kind=tarfile.DIRTYPE, uid=uid, gid=uid))
        elif stat.S_ISREG(st.st_mode):
            with open(os.path.join(root, rel), "rb") as f:
                tar.addfile(entry(rel, mode, st.st_size, uid=uid, gid=uid), f)
        else:
            sys.exit(f"unexpected file type in the image: {rel}")
layer_tar = layer.getvalue()
gz = io.BytesIO()
with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=gz, mtime=0) as z:
    z.write(layer_tar)
layer_gz = gz.getvalue()


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


config = canonical({
    "created": created,
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "User": "65532:65532",
        "Entrypoint": ["/loki-zone-operator"],
        "Cmd": ["run"],
        "Env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        ],
        "WorkingDir": "/",
    },
    "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
    "history": [{"created": created, "created_by": "hack/build-image.sh"}],
})
manifest = canonical({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": digest(config), "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest(layer_gz), "size": len(layer_gz)}],
})
index = canonical({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest(manifest), "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
        # ref.name: the name skopeo, podman and `ctr import` give the image; containerd
        # (and so kind) prefers its own annotation, which must be the normalized name.
        "annotations": {"org.opencontainers.image.ref.name": img,
                        "io.containerd.image.name": normalized(img)},
    }],
})


def blob(b):
    return "blobs/sha256/" + digest(b).split(":", 1)[1]


docker_manifest = canonical([{"Config": blob(config), "RepoTags": [img],
                              "Layers": [blob(layer_gz)]}])
files = {
    "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
    "index.json": index,
    "manifest.json": docker_manifest,
    blob(layer_gz): layer_gz,
    blob(config): config,
    blob(manifest): manifest,
}
tmp = out + ".tmp"
with open(tmp, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
    tar.addfile(entry("blobs/", 0o755, kind=tarfile.DIRTYPE))
    tar.addfile(entry("blobs/sha256/", 0o755, kind=tarfile.DIRTYPE))
    for name in sorted(files):
        tar.addfile(entry(name, 0o644, len(files[name])), io.BytesIO(files[name]))
os.replace(tmp, out)

mb = lambda n: f"{n / 1e6:.1f} MB"
print(f"image {img}")
print(f"archive {out}: {mb(os.path.getsize(out))} (layer {mb(len(layer_gz))} compressed, "
      f"{mb(len(layer_tar))} uncompressed)")
print(f"digest {digest(manifest)}")
PY
