#!/usr/bin/env bash
# Pushes what `make release` wrote to dist/ to a registry, with skopeo (no daemon), and
# checks that the registry serves exactly those bytes: each image is pulled back by its
# digest and compared with the archive, manifest by manifest.
#
#   hack/publish.sh VERSION
#
# Environment:
#   IMAGE_REPO   where the image index goes (default: what dist/digests.txt names,
#                ghcr.io/loki-zone-operator/loki-zone-operator for a default release)
#   BUNDLE_REPO  where the bundle image goes (default IMAGE_REPO-bundle)
#   ZONE_WAIT_REPO  where the zone init container's image goes (default: loki-zone-wait
#                beside IMAGE_REPO); tagged with its own version (zone-wait/)
#   DIST         default dist
#   TLS_VERIFY   false for a registry over plain HTTP (a local test registry)
#   SKOPEO       the skopeo to run (default skopeo); credentials come from its usual
#                auth file (`skopeo login`, REGISTRY_AUTH_FILE)
#
# The digests are preserved (--preserve-digests): the registry serves the index digest
# install.yaml pins, or the push fails. Tags: VERSION on the operator's and the bundle's
# images, the zone init container's own version on its image.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[publish] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

VERSION=${1:?usage: hack/publish.sh VERSION}
DIST=${DIST:-dist}
SKOPEO=${SKOPEO:-skopeo}
TLS_VERIFY=${TLS_VERIFY:-true}
[ -s "$DIST/digests.txt" ] || die "$DIST/digests.txt missing: run make release VERSION=$VERSION first"
released=$(awk -v v=":$VERSION" 'index($1, v) == length($1) - length(v) + 1 && !/-bundle:/ {print $1; exit}' "$DIST/digests.txt")
[ -n "$released" ] || die "$DIST is not a release of $VERSION (see $DIST/digests.txt)"
IMAGE_REPO=${IMAGE_REPO:-${released%:"$VERSION"}}
BUNDLE_REPO=${BUNDLE_REPO:-$IMAGE_REPO-bundle}
image_digest=$(awk -v r="$released" '$1 == r {print $2}' "$DIST/digests.txt")
bundle_digest=$(awk '$1 ~ /-bundle:/ {print $2}' "$DIST/digests.txt")
read -r wait_ref wait_digest < <(awk '$1 ~ /zone-wait:v/ {print $1, $2; exit}' "$DIST/digests.txt") ||
  die "$DIST/digests.txt names no loki-zone-wait image: run make release VERSION=$VERSION again"
WAIT_TAG=${wait_ref##*:}
ZONE_WAIT_REPO=${ZONE_WAIT_REPO:-${IMAGE_REPO%/*}/loki-zone-wait}
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "$DIST does not match its SHA256SUMS"

pulled=$(mktemp -d)
trap 'rm -rf "$pulled"' EXIT
push() { # push ARCHIVE REPO DIGEST [TAG]
  local archive=$1 repo=$2 digest=$3 tag=${4:-$VERSION} got n
  log "pushing $archive to $repo:$tag"
  "$SKOPEO" copy --quiet --all --preserve-digests --dest-tls-verify="$TLS_VERIFY" \
    "oci-archive:$archive" "docker://$repo:$tag" >&2
  # Pulled back by digest: the registry must serve the very manifest (or index) the
  # archive holds, and every blob under it, byte for byte.
  got=$("$SKOPEO" inspect --raw --tls-verify="$TLS_VERIFY" "docker://$repo@$digest" | sha256sum | cut -d' ' -f1)
  [ "sha256:$got" = "$digest" ] || die "$repo@$digest: the registry serves a manifest whose digest is sha256:$got"
  rm -rf "$pulled/layout" "$pulled/archive"
  "$SKOPEO" copy --quiet --all --preserve-digests --src-tls-verify="$TLS_VERIFY" \
    "docker://$repo@$digest" "oci:$pulled/layout" >&2
  mkdir -p "$pulled/archive"
  tar xf "$archive" -C "$pulled/archive" blobs
  n=0
  for b in "$pulled/layout"/blobs/sha256/*; do
    cmp -s "$b" "$pulled/archive/blobs/sha256/$(basename "$b")" ||
      die "$repo@$digest: blob $(basename "$b") pulled back differs from (or is not in) $archive"
    n=$((n + 1))
  done
  [ "$n" = "$(find "$pulled/archive/blobs/sha256" -type f | wc -l)" ] ||
    die "$repo@$digest: $n blobs pulled back, $(find "$pulled/archive/blobs/sha256" -type f | wc -l) in $archive"
  log "$repo:$tag is $digest: pulled back by digest, its $n blobs equal to the archive's"
}
push "$DIST/loki-zone-operator-$VERSION.oci.tar" "$IMAGE_REPO" "$image_digest"
push "$DIST/loki-zone-wait-$WAIT_TAG.oci.tar" "$ZONE_WAIT_REPO" "$wait_digest" "$WAIT_TAG"
push "$DIST/loki-zone-operator-bundle-$VERSION.oci.tar" "$BUNDLE_REPO" "$bundle_digest"
echo "$IMAGE_REPO@$image_digest"
echo "$ZONE_WAIT_REPO@$wait_digest"
echo "$BUNDLE_REPO@$bundle_digest"
