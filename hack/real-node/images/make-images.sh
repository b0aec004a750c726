#!/usr/bin/env bash
# Compiles the static pause and demo binaries and writes them as OCI archives:
#   OUT_DIR/pause.tar  registry.invalid/lzo/pause:1  (containerd's sandbox_image)
#   OUT_DIR/demo.tar   registry.invalid/lzo/demo:1   (the test image)
# Nothing is pulled: import them with `ctr -n k8s.io images import`.
# The registry.invalid host makes sure a pull, if anything ever tries one, fails at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: make-images.sh OUT_DIR}
mkdir -p "$out"
command -v gcc >/dev/null || { echo "make-images: gcc is needed (apt-get install gcc libc6-dev)" >&2; exit 1; }
gcc -static -Os -s -o "$out/pause" "$here/pause.c"
gcc -static -Os -s -o "$out/demo" "$here/demo.c"
python3 "$here/oci-archive.py" "$out/pause.tar" registry.invalid/lzo/pause:1 /pause "$out/pause=/pause"
python3 "$here/oci-archive.py" "$out/demo.tar" registry.invalid/lzo/demo:1 /demo "$out/demo=/demo"
