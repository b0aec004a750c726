#!/usr/bin/env bash
# hack/image-ref.sh NAME [SUFFIX]: the reference (newName:newTag) that
# manifests/operator/kustomization.yaml gives image NAME (loki-zone-operator or
# loki-zone-wait), with SUFFIX appended to the name (e.g. -bundle): the one place the
# Makefile, hack/build-image.sh and hack/release.sh read the committed images from.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=$(awk -v want="$1" -v suffix="${2:-}" '
  $1 == "-" && $2 == "name:" { on = ($3 == want) }
  on && $1 == "newName:" { n = $2 }
  on && $1 == "newTag:" { t = $2 }
  END { if (n != "" && t != "") print n suffix ":" t }' manifests/operator/kustomization.yaml)
[ -n "$ref" ] || { echo "manifests/operator/kustomization.yaml has no image $1 with newName and newTag" >&2; exit 1; }
echo "$ref"
