#!/usr/bin/env bash
# `make release VERSION=vX.Y.Z`: every artefact of a release in dist/, built here with
# no Docker and no registry.
#
#   dist/loki-zone-operator-vX.Y.Z.oci.tar         the image: an OCI image index over
#                                                 linux/amd64 and linux/arm64
#   dist/loki-zone-wait-vA.B.C.oci.tar             the zone init container's image, at its
#                                                 own version (zone-wait/Cargo.toml), same
#                                                 platforms
#   dist/loki-zone-operator-bundle-vX.Y.Z.oci.tar  the OLM bundle image
#   dist/bundle/                                  the bundle it holds (manifests/, metadata/)
#   dist/install.yaml                             CRDs, namespace, RBAC, webhook Service,
#                                                 Deployment (2 replicas) and its budget
#   dist/install-namespaced.yaml                  the same in the namespaced mode, watching
#                                                 the namespace `loki`
#   dist/sbom.cdx.json                            CycloneDX SBOM of the crates in the binary
#   dist/RELEASE-NOTES.md                         CHANGELOG.md's section of the version
#   dist/SHA256SUMS                               every file above
#   dist/digests.txt                              the image digests, to pin and to compare
#
# Every image is named by digest: the operator's (its index, so each node pulls its own
# platform) in both installs and the bundle's CSV (containerImage, relatedImages, the
# Deployment), the zone init container's in RELATED_IMAGE_ZONE_WAIT (its digest changes
# only when zone-wait/ does: an operator upgrade restarts no Loki pod); Loki's too when
# its digest is known:
# LOKI_IMAGE_DIGEST=sha256:..., or LOKI_IMAGE_ARCHIVE (an OCI archive of the image, as
# `skopeo copy --all docker://... oci-archive:...` writes it). Offline, without either,
# Loki stays a tag, loudly, and REQUIRE_PINNED=1 (the release workflow) makes that an
# error.
#
# Environment: VERSION (required, equal to Cargo.toml's version with a v), IMAGE_REPO
# (default ghcr.io/loki-zone-operator/loki-zone-operator), BUNDLE_REPO (default
# IMAGE_REPO-bundle), ZONE_WAIT_REPO (default loki-zone-wait beside IMAGE_REPO), DIST (default dist), ALLOW_DIRTY=1 to build a changed tree (its
# --version then says <commit>-dirty).
#
# Checks before it ends: each platform's image at most MAX_IMAGE_MB (20) MB as registries
# count it (the compressed layer); the linux/arm64 binary, under qemu-aarch64-static,
# prints byte for byte what the linux/amd64 one prints for --version, `crd`, and `render`
# of every sample (where qemu is missing it says loudly that this did NOT run).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

log() { printf '[release] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
loud() {
  printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
  printf '!! %s\n' "$@" >&2
  printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
}

VERSION=${VERSION:?usage: make release VERSION=vX.Y.Z}
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/loki-zone-operator/loki-zone-operator}
BUNDLE_REPO=${BUNDLE_REPO:-$IMAGE_REPO-bundle}
ZONE_WAIT_REPO=${ZONE_WAIT_REPO:-${IMAGE_REPO%/*}/loki-zone-wait}
DIST=${DIST:-dist}
MAX_IMAGE_MB=${MAX_IMAGE_MB:-20}
# The names the committed manifests use; the release replaces them with digests.
BASE_IMAGE=ghcr.io/loki-zone-operator/loki-zone-operator
BASE_ZONE_WAIT=ghcr.io/loki-zone-operator/loki-zone-wait
ZONE_WAIT_VERSION=v$(awk -F'"' '/^version = / {print $2; exit}' zone-wait/Cargo.toml)
[ "$(bash hack/image-ref.sh loki-zone-wait)" = "$BASE_ZONE_WAIT:$ZONE_WAIT_VERSION" ] ||
  die "manifests/operator/kustomization.yaml tags loki-zone-wait $(bash hack/image-ref.sh loki-zone-wait), not $ZONE_WAIT_VERSION (zone-wait/Cargo.toml): set newTag: $ZONE_WAIT_VERSION and run make bundle"
LOKI_IMAGE=$(awk '/name: RELATED_IMAGE_LOKI/ {getline; print $2}' manifests/operator/manager/deployment.yaml)
[ -n "$LOKI_IMAGE" ] || die "cannot read RELATED_IMAGE_LOKI from manifests/operator/manager/deployment.yaml"
t_start=$(date +%s)

# ---------------------------------------------------------------- inputs
[[ "$VERSION" =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]] ||
  die "VERSION=$VERSION: expected vMAJOR.MINOR.PATCH (e.g. v0.1.0)"
semver=${BASH_REMATCH[1]}
crate=$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
[ "$crate" = "$semver" ] ||
  die "VERSION=$VERSION but Cargo.toml's workspace version is $crate: set version = \"$semver\" in Cargo.toml (and run make bundle), or release v$crate"
grep -q "^## $VERSION\$" CHANGELOG.md ||
  die "CHANGELOG.md has no section '## $VERSION': add what the release changes"
csv_version=$(sed -n 's/^  name: loki-zone-operator\.v//p' bundle/manifests/loki-zone-operator.clusterserviceversion.yaml)
[ "$csv_version" = "$semver" ] || die "bundle/ is for $csv_version, not $semver: run make bundle"
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  [ "${ALLOW_DIRTY:-0}" = 1 ] || die "the working tree has changes: commit them (or ALLOW_DIRTY=1 for a build that says -dirty)"
  log "building a changed tree (ALLOW_DIRTY=1): --version will say -dirty"
fi
commit=$(git rev-parse HEAD)
# Every timestamp of the release: HEAD's commit time. Not exported (build-image.sh keeps
# it from cargo, whose build scripts rerun when it changes).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
unset SOURCE_DATE_EPOCH

if [ -n "${LOKI_IMAGE_DIGEST:-}" ]; then
  loki_digest=$LOKI_IMAGE_DIGEST
elif [ -n "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  # The digest a registry serves for an OCI archive pushed as it is: what index.json
  # names. A `docker save` archive has no such digest.
  loki_digest=$(tar xOf "$LOKI_IMAGE_ARCHIVE" index.json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])' 2>/dev/null) ||
    die "LOKI_IMAGE_ARCHIVE=$LOKI_IMAGE_ARCHIVE has no OCI index.json (a docker-save archive has no registry digest): give LOKI_IMAGE_DIGEST"
else
  loki_digest=
fi
[ -z "$loki_digest" ] || [[ "$loki_digest" =~ ^sha256:[0-9a-f]{64}$ ]] ||
  die "the Loki image digest '$loki_digest' is not sha256:<64 hex>"
if [ -z "$loki_digest" ]; then
  [ "${REQUIRE_PINNED:-0}" != 1 ] || die "REQUIRE_PINNED=1 and no digest for $LOKI_IMAGE: give LOKI_IMAGE_DIGEST (skopeo inspect docker://$LOKI_IMAGE)"
  loud "$LOKI_IMAGE is NOT pinned by digest in this release: no LOKI_IMAGE_DIGEST or" \
    "LOKI_IMAGE_ARCHIVE, and no network to ask the registry. The release workflow pins it."
fi

rm -rf "$DIST"
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
WORK="$REPO/target/release-work"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---------------------------------------------------------------- image
IMAGE_ARCHIVE="$DIST/loki-zone-operator-$VERSION.oci.tar"
LZO_GIT_COMMIT=$commit$([ -z "$(git status --porcelain -- Cargo.toml Cargo.lock operator zone-wait templates)" ] || echo -dirty)
export LZO_GIT_COMMIT
PLATFORMS="linux/amd64 linux/arm64" IMG="$IMAGE_REPO:$VERSION" OUT="$IMAGE_ARCHIVE" \
  SOURCE_DATE_EPOCH=$epoch bash hack/build-image.sh >"$WORK/image.txt"
cat "$WORK/image.txt" >&2
mv "$IMAGE_ARCHIVE.json" "$WORK/image.json"
image_digest=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$WORK/image.json")
OPERATOR_REF="$IMAGE_REPO@$image_digest"
ZONE_WAIT_ARCHIVE="$DIST/loki-zone-wait-$ZONE_WAIT_VERSION.oci.tar"
IMAGE=zone-wait PLATFORMS="linux/amd64 linux/arm64" IMG="$ZONE_WAIT_REPO:$ZONE_WAIT_VERSION" \
  OUT="$ZONE_WAIT_ARCHIVE" bash hack/build-image.sh >"$WORK/zone-wait.txt"
cat "$WORK/zone-wait.txt" >&2
mv "$ZONE_WAIT_ARCHIVE.json" "$WORK/zone-wait.json"
zone_wait_digest=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$WORK/zone-wait.json")
ZONE_WAIT_REF="$ZONE_WAIT_REPO@$zone_wait_digest"
if [ -n "$loki_digest" ]; then LOKI_REF="${LOKI_IMAGE%:*}@$loki_digest"; else LOKI_REF=$LOKI_IMAGE; fi
python3 - "$WORK/image.json" "$MAX_IMAGE_MB" <<'PY'
import json, sys
summary, limit = json.load(open(sys.argv[1])), float(sys.argv[2])
for platform, s in summary["platforms"].items():
    mb = s["layer"] / 1e6
    if mb > limit:
        sys.exit(f"[release] ERROR: the {platform} image is {mb:.1f} MB, over {limit:.0f} MB")
PY

# ---------------------------------------------------------------- installs
# Overlays of the committed manifests, as a user's overlay would be: the images by
# digest, and the version as a label on every object (not on selectors or pod templates,
# which an upgrade must not change).
overlay() { # overlay DIR RESOURCES... (relative to the repository)
  local dir=$1 r
  shift
  mkdir -p "$dir"
  {
    echo "resources:"
    for r in "$@"; do echo "- $(realpath -m --relative-to="$dir" "$r")"; done
    echo "images:"
    printf -- '- name: %s\n  newName: %s\n  digest: %s\n' "$BASE_IMAGE" "$IMAGE_REPO" "$image_digest"
    printf -- '- name: %s\n  newName: %s\n  digest: %s\n' "$BASE_ZONE_WAIT" "$ZONE_WAIT_REPO" "$zone_wait_digest"
    [ -z "$loki_digest" ] || printf -- '- name: %s\n  digest: %s\n' "${LOKI_IMAGE%:*}" "$loki_digest"
    cat <<YAML
labels:
- pairs:
    app.kubernetes.io/version: $VERSION
  includeSelectors: false
  includeTemplates: false
YAML
  } >"$dir/kustomization.yaml"
}
overlay "$WORK/install" manifests/crd manifests/operator
kubectl kustomize "$WORK/install" >"$DIST/install.yaml"

# The namespaced mode (docs/install.md): no cluster-wide rights on the namespaced
# kinds, the stacks of the namespace `loki`, with its Role there.
overlay "$WORK/namespaced" manifests/crd manifests/operator "$WORK/namespaced/loki"
mkdir -p "$WORK/namespaced/loki"
printf 'namespace: loki\nresources:\n- %s\n' \
  "$(realpath -m --relative-to="$WORK/namespaced/loki" manifests/watched-namespace)" \
  >"$WORK/namespaced/loki/kustomization.yaml"
cat >>"$WORK/namespaced/kustomization.yaml" <<YAML
components:
- $(realpath --relative-to="$WORK/namespaced" manifests/components/namespaced)
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: loki-zone-operator}
    spec:
      template:
        spec:
          containers:
          - name: manager
            env:
            - name: WATCH_NAMESPACES
              value: loki
YAML
kubectl kustomize "$WORK/namespaced" >"$DIST/install-namespaced.yaml"
python3 - "$DIST/install-namespaced.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
dep = next(d for d in docs if d["kind"] == "Deployment")
env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
if env.get("WATCH_NAMESPACES") != "loki":
    sys.exit(f"[release] ERROR: install-namespaced.yaml watches {env.get('WATCH_NAMESPACES')!r}, not loki")
PY

for f in install.yaml install-namespaced.yaml; do
  grep -q "image: $OPERATOR_REF" "$DIST/$f" || die "$f does not run $OPERATOR_REF"
  ! grep -q "$BASE_IMAGE:" "$DIST/$f" || die "$f still names the operator image by tag"
  grep -q "value: $ZONE_WAIT_REF" "$DIST/$f" || die "$f does not name $ZONE_WAIT_REF"
  ! grep -q "$BASE_ZONE_WAIT:" "$DIST/$f" || die "$f still names the zone init container's image by tag"
done

# ---------------------------------------------------------------- OLM bundle
# The committed bundle (make bundle keeps it equal to manifests/, tests/bundle.rs checks
# it) with the two image references replaced by digests, and its image.
mkdir -p "$DIST/bundle"
cp -r bundle/manifests bundle/metadata "$DIST/bundle/"
tag_ref=$(bash hack/image-ref.sh loki-zone-operator)
python3 - "$DIST/bundle/manifests/loki-zone-operator.clusterserviceversion.yaml" \
  "$tag_ref" "$OPERATOR_REF" "$LOKI_IMAGE" "$LOKI_REF" \
  "$(bash hack/image-ref.sh loki-zone-wait)" "$ZONE_WAIT_REF" <<'PY'
import sys, yaml
path, old_op, new_op, old_loki, new_loki, old_wait, new_wait = sys.argv[1:]
text = open(path).read()
count = text.count(old_op)
if count < 3:  # containerImage, the Deployment's image, relatedImages
    sys.exit(f"[release] ERROR: the CSV names {old_op} {count} times, expected 3 or more")
if text.count(old_wait) < 2:  # RELATED_IMAGE_ZONE_WAIT, relatedImages
    sys.exit(f"[release] ERROR: the CSV names {old_wait} fewer than 2 times")
text = text.replace(old_op, new_op).replace(old_loki, new_loki).replace(old_wait, new_wait)
csv = yaml.safe_load(text)
related = {i["name"]: i["image"] for i in csv["spec"]["relatedImages"]}
assert related["loki-zone-operator"] == new_op and related["loki"] == new_loki, related
assert related["loki-zone-wait"] == new_wait, related
assert csv["metadata"]["annotations"]["containerImage"] == new_op
open(path, "w").write(text)
PY
labels=()
while read -r l; do labels+=(--label "$l"); done < <(sed -n 's/^LABEL //p' bundle.Dockerfile)
python3 hack/oci.py bundle --out "$DIST/loki-zone-operator-bundle-$VERSION.oci.tar" \
  --name "$BUNDLE_REPO:$VERSION" --created "$epoch" --dir "$DIST/bundle" \
  "${labels[@]}" >"$WORK/bundle.json"
bundle_digest=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$WORK/bundle.json")

# ---------------------------------------------------------------- SBOM, notes, sums
python3 hack/sbom.py --version "$semver" --commit "$LZO_GIT_COMMIT" --created "$epoch" \
  --target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl >"$DIST/sbom.cdx.json"
awk -v v="## $VERSION" '$0 == v {on = 1; next} on && /^## / {exit} on' CHANGELOG.md >"$DIST/RELEASE-NOTES.md"
{
  echo "$IMAGE_REPO:$VERSION $image_digest"
  python3 - "$WORK/image.json" "$IMAGE_REPO" <<'PY'
import json, sys
summary, repo = json.load(open(sys.argv[1])), sys.argv[2]
for platform, s in sorted(summary["platforms"].items()):
    print(f"{repo}:{platform} {s['manifest']}")
PY
  echo "$ZONE_WAIT_REPO:$ZONE_WAIT_VERSION $zone_wait_digest"
  echo "$BUNDLE_REPO:$VERSION $bundle_digest"
  echo "$LOKI_IMAGE ${loki_digest:-not-pinned}"
} >"$DIST/digests.txt"
(cd "$DIST" && find . -type f ! -name SHA256SUMS | sed 's#^\./##' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

# ---------------------------------------------------------------- arm64 = amd64
bin_of() { echo "${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}/release-target/$1/release/loki-zone-operator"; }
AMD=$(bin_of x86_64-unknown-linux-musl)
ARM=$(bin_of aarch64-unknown-linux-musl)
equivalence=
if ! command -v qemu-aarch64-static >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing qemu-user-static with apt (to run the arm64 binary)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static; } >/dev/null 2>&1 || true
fi
if command -v qemu-aarch64-static >/dev/null 2>&1; then
  compared=0
  same() { # same NAME ARGS...: amd64 and arm64 give the same stdout, stderr and status
    local name=$1 a b
    shift
    a=$("$AMD" "$@" 2>"$WORK/amd.err"; echo "exit $?")
    b=$(qemu-aarch64-static "$ARM" "$@" 2>"$WORK/arm.err"; echo "exit $?")
    [ "$a" = "$b" ] || die "arm64 and amd64 differ on $name (stdout)"
    cmp -s "$WORK/amd.err" "$WORK/arm.err" || die "arm64 and amd64 differ on $name (stderr)"
    compared=$((compared + 1))
  }
  same --version --version
  same crd crd
  # Below the oldest supported Kubernetes: the same refusal, exit status and message.
  same "crd --kube-version 1.20 (refused)" crd --kube-version 1.20
  for s in manifests/samples/lokistack-*.yaml; do
    same "render $s" render -f "$s"
    same "render $s --nodes" render -f "$s" --nodes manifests/samples/nodes-three-zones.yaml
    for secret in manifests/samples/secret-*.yaml; do
      same "render $s --secret $secret" render -f "$s" --secret "$secret" \
        --nodes manifests/samples/nodes-three-zones.yaml
    done
    same "render $s --rules" render -f "$s" --nodes manifests/samples/nodes-three-zones.yaml \
      --rules manifests/samples/alertingrule.yaml --rules manifests/samples/recordingrule.yaml \
      --rules manifests/samples/rulerconfig.yaml
  done
  equivalence="linux/arm64 under qemu-aarch64-static printed what linux/amd64 printed, byte for byte, in $compared runs (--version, crd, render of every sample)"
  log "$equivalence"
else
  loud "the arm64 binary was NOT run: no qemu-aarch64-static (apt-get install qemu-user-static);" \
    "its equivalence with the amd64 binary is NOT checked"
fi
echo "${equivalence:-NOT checked: no qemu-aarch64-static}" >"$WORK/equivalence.txt"

log "dist/ for $VERSION (commit $LZO_GIT_COMMIT) in $(($(date +%s) - t_start)) s:"
(cd "$DIST" && ls -l --time-style=+ | tail -n +2 | awk '{printf "  %10d  %s\n", $5, $NF}') >&2
echo "digests:"
sed 's/^/  /' "$DIST/digests.txt"
