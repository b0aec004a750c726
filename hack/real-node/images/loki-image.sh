#!/usr/bin/env bash
# Packages an already-built, static Loki binary as an OCI image archive laid out like
# the official image (cmd/loki/Dockerfile of grafana/loki 3.x, distroless since 3.6):
# /usr/bin/loki, user and group loki 10001, /etc/loki and /loki owned by it, no shell,
# entrypoint /usr/bin/loki. It builds nothing: for a machine that cannot pull
# docker.io/grafana/loki but has the binary. With network access, take the real image
# instead:
#
#   skopeo copy docker://docker.io/grafana/loki:3.7.3 oci-archive:loki.tar:docker.io/grafana/loki:3.7.3
#   docker pull grafana/loki:3.7.3 && docker save grafana/loki:3.7.3 -o loki.tar
#
# Either archive is what hack/real-node/e2e.sh takes as LOKI_IMAGE_ARCHIVE.
#
#   hack/real-node/images/loki-image.sh LOKI_BINARY OUT.tar [IMAGE]
#
# IMAGE defaults to the Loki image the operator deploys, docker.io/grafana/loki:3.7.3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: loki-image.sh LOKI_BINARY OUT.tar [IMAGE]}
out=${2:?usage: loki-image.sh LOKI_BINARY OUT.tar [IMAGE]}
image=${3:-docker.io/grafana/loki:3.7.3}
log() { printf '[loki-image] %s\n' "$*" >&2; }

[ -x "$bin" ] || { log "$bin: not an executable"; exit 1; }
# The image has no libc: refuse a dynamically linked binary (one with an ELF interpreter).
python3 - "$bin" <<'PY'
import struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    head = f.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1 or struct.unpack_from("<H", head, 18)[0] != 62:
        sys.exit(f"{path}: not an x86-64 ELF file")
    phoff, = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        if struct.unpack("<I", f.read(4))[0] == 3:
            sys.exit(f"{path}: dynamically linked (has an ELF interpreter); the image has no libc")
PY
version=$("$bin" -version 2>&1 | head -n1 || true)
log "binary: $bin ($version)"
[[ "$image" != *:* ]] || [[ "$version" == *"${image##*:}"* ]] ||
  log "WARNING: the binary says '$version', the image name says ${image##*:}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' \
  'loki:x:10001:10001::/home/loki:/sbin/nologin' >"$stage/passwd"
printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' 'loki:x:10001:' >"$stage/group"
ca=()
[ -f /etc/ssl/certs/ca-certificates.crt ] &&
  ca=(--data "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt")
mkdir -p "$(dirname "$out")"
python3 "$here/oci-archive.py" --user 10001 --port 3100 \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --data "$stage/passwd=/etc/passwd" --data "$stage/group=/etc/group" "${ca[@]}" \
  --dir /etc/loki=10001:10001 --dir /loki=10001:10001 --dir /loki/rules=10001:10001 \
  --dir /loki/rules-temp=10001:10001 --dir /home/nonroot=65532:65532 \
  "$out" "$image" /usr/bin/loki "$bin=/usr/bin/loki" >&2
log "wrote $out ($(du -h "$out" | cut -f1)): $image"
