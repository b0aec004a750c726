#!/usr/bin/env bash
# The release as `make test` checks it: `make release` twice from the same commit, the
# second time with the operator crate compiled again for both platforms (its build
# script rerun), and the same digests both times, byte for byte the same dist/. Then a
# commit on top that changes only operator code gives the same loki-zone-wait digest:
# the image every zone-aware Loki pod names, so an operator-only release restarts none.
#
#   hack/release-check.sh        exit 0: reproducible (the digests printed); 1: not, or
#                                the release failed; 2: it cannot run here (why on stdout)
#
# The version is Cargo.toml's; a changed working tree is built as it is (ALLOW_DIRTY=1,
# --version then says -dirty). LOKI_IMAGE_ARCHIVE, when set, pins the Loki image to its
# digest, as the real-node check then pulls it. Leaves dist/ for hack/real-node/e2e.sh.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '[release-check] %s\n' "$*" >&2; }
cannot() { echo "$*"; log "cannot run: $*"; exit 2; }

command -v python3 >/dev/null || cannot "no python3"
python3 -c 'import venv, yaml' 2>/dev/null || cannot "python3 lacks venv or yaml (apt-get install python3-venv python3-yaml)"
command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1 || cannot "no kubectl with kustomize"
if command -v rustup >/dev/null 2>&1; then
  for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    rustup target list --installed | grep -qx "$t" && continue
    out=$(rustup target add "$t" 2>&1) || cannot "rustup target add $t failed: $(tail -n 1 <<<"$out")"
  done
fi

VERSION=v$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
runs=target/release-check
rm -rf "$runs"
mkdir -p "$runs"

release() { # release N
  local t0=$(date +%s)
  if ! ALLOW_DIRTY=1 VERSION=$VERSION bash hack/release.sh >"$runs/$1.out" 2>"$runs/$1.err"; then
    tail -n 30 "$runs/$1.err" >&2
    # Where the tools could not be fetched (no PyPI), the release cannot run here.
    if grep -q "pip install .* failed\|python3 -m venv failed" "$runs/$1.err"; then
      cannot "$(grep -m1 'pip install\|venv failed' "$runs/$1.err" | sed 's/^\[image\] //')"
    fi
    log "make release failed (run $1)"
    exit 1
  fi
  cp dist/digests.txt "$runs/$1.digests"
  cp dist/SHA256SUMS "$runs/$1.sums"
  echo $(($(date +%s) - t0)) >"$runs/$1.seconds"
}

log "make release VERSION=$VERSION (first run)"
release 1
grep -v '^\[' "$runs/1.err" | grep '^!!' >&2 || true
# The operator crate compiled again, for both platforms: its build script (the commit)
# and every embedded template go through the compiler a second time.
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  cargo clean --release -q -p loki-zone-operator --target "$t" \
    --target-dir "$CACHE_DIR/release-target" 2>/dev/null || true
done
log "make release VERSION=$VERSION (second run, the operator crate rebuilt)"
release 2

echo "first run ($(cat "$runs/1.seconds") s):"
sed 's/^/  /' "$runs/1.digests"
echo "second run ($(cat "$runs/2.seconds") s, the operator crate compiled again for both platforms):"
sed 's/^/  /' "$runs/2.digests"
if ! cmp -s "$runs/1.sums" "$runs/2.sums"; then
  diff "$runs/1.sums" "$runs/2.sums" >&2
  log "NOT reproducible: the two runs' dist/ differ (above)"
  exit 1
fi
echo "reproducible: both runs wrote the same $(wc -l <"$runs/1.sums") files of dist/, byte for byte"
grep -h 'arm64 under qemu\|NOT checked' target/release-work/equivalence.txt 2>/dev/null || true

# An operator-only change keeps the zone init container's image: in a worktree of its
# own, a commit on HEAD that changes operator code only (a later commit, as a release
# would be), and the loki-zone-wait image built there as the release builds it.
read -r wait_name wait_digest < <(awk '$1 ~ /zone-wait:v/ {print $1, $2; exit}' "$runs/1.digests") ||
  { log "dist/digests.txt names no loki-zone-wait image"; exit 1; }
if [ -n "$(git status --porcelain -- zone-wait)" ]; then
  echo "!! the operator-only check did NOT run: zone-wait/ has uncommitted changes, and it builds from commits"
  exit 0
fi
wt="$PWD/$runs/operator-only"
git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
git worktree add -q --detach "$wt" HEAD || { log "git worktree add failed"; exit 1; }
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
echo "// An operator-only change (hack/release-check.sh)." >>"$wt/operator/src/lib.rs"
git -C "$wt" -c user.name=release-check -c user.email=release-check@localhost -c commit.gpgsign=false \
  commit -q -a -m "operator-only change" --date="@$(($(git log -1 --format=%ct) + 86400))" ||
  { log "git commit in $wt failed"; exit 1; }
if ! (cd "$wt" && IMAGE=zone-wait PLATFORMS="linux/amd64 linux/arm64" IMG="$wait_name" \
  OUT="$wt/target/zone-wait.oci.tar" bash hack/build-image.sh >"$wt/zone-wait.txt" 2>"$wt/zone-wait.err"); then
  tail -n 20 "$wt/zone-wait.err" >&2
  log "building loki-zone-wait after an operator-only commit failed"
  exit 1
fi
after=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$wt/target/zone-wait.oci.tar.json")
if [ "$after" != "$wait_digest" ]; then
  log "an operator-only commit changed the loki-zone-wait image: $wait_digest -> $after (every zone-aware Loki pod would restart on such a release)"
  exit 1
fi
echo "operator-only commit: the loki-zone-wait image is the same ($wait_name $wait_digest), so such a release changes no Loki pod template"
