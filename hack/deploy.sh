#!/usr/bin/env bash
# install | uninstall | deploy | undeploy the operator on the current kubectl context.
#
# It needs kubectl (with its built-in kustomize) and the committed manifests, nothing
# else: no Rust toolchain, no build. The CRDs are manifests/crd as committed, CEL rules
# included. install, replace-crd and deploy first read the server's version and refuse
# one older than Kubernetes MIN_KUBE_VERSION, the oldest the operator supports (which
# would reject parts of what is applied, and which the operator itself refuses at start).
# IMG replaces the operator image and ZONE_WAIT_IMG the zone init container's
# (RELATED_IMAGE_ZONE_WAIT), each through a kustomize overlay's `images:` entry: the way
# a user's own overlay does it. OVERLAY (a kustomization directory over manifests/operator) replaces
# manifests/operator for deploy, undeploy and manifests.
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:?usage: hack/deploy.sh install|uninstall|deploy|undeploy|replace-crd|manifests|crds}
KUBECTL=${KUBECTL:-kubectl}
IMG=${IMG:-}
ZONE_WAIT_IMG=${ZONE_WAIT_IMG:-}
# The image names manifests/operator sets; overlays match their `images:` entries on them.
BASE_IMAGE_NAME=ghcr.io/loki-zone-operator/loki-zone-operator
BASE_ZONE_WAIT_NAME=ghcr.io/loki-zone-operator/loki-zone-wait
# The operator's checks::kube_version::MIN_KUBE_VERSION (tests/bundle.rs keeps them equal).
MIN_KUBE_VERSION=1.31

# The server's version as `kubectl version -o json` reports it: "MAJOR MINOR GITVERSION"
# ("1 31 v1.31.0-gke.1200" from "major": "1", "minor": "31+"); empty when unreachable.
server_version() {
  $KUBECTL version -o json 2>/dev/null | tr -d ' \n' |
    sed -n 's/.*"serverVersion":{[^}]*"major":"\([0-9]*\)[^"]*","minor":"\([0-9]*\)[^"]*"[^}]*"gitVersion":"\([^"]*\)".*/\1 \2 \3/p'
}

# Exits with a message unless the server is reachable and at least MIN_KUBE_VERSION.
require_supported_server() {
  local major minor git
  read -r major minor git <<<"$(server_version)" || true
  [ -n "${minor:-}" ] || { echo "cannot read the server version: is the cluster reachable?" >&2; exit 1; }
  if [ "$major" -lt "${MIN_KUBE_VERSION%%.*}" ] ||
    { [ "$major" -eq "${MIN_KUBE_VERSION%%.*}" ] && [ "$minor" -lt "${MIN_KUBE_VERSION#*.}" ]; }; then
    echo "Kubernetes $MIN_KUBE_VERSION or later is required; this API server is $git" >&2
    exit 1
  fi
}

# Every CRD (LokiStack, AlertingRule, RecordingRule, RulerConfig) as one stream.
crd() {
  local f
  for f in $(sed -n 's/^- //p' manifests/crd/kustomization.yaml); do
    echo ---
    cat "manifests/crd/$f"
  done
}

# The `images:` entry that gives image BASE the reference REF (name, name:tag or
# name@digest).
image_entry() { # image_entry BASE REF
  local base=$1 ref=$2 name last
  if [[ $ref == *@* ]]; then
    name=${ref%%@*}
    printf -- '- name: %s\n  newName: %s\n  digest: %s\n' "$base" "$name" "${ref#*@}"
    return
  fi
  # A tag follows the last ':' of the last path segment (a registry may have a port).
  last=${ref##*/}
  if [[ $last == *:* ]]; then
    printf -- '- name: %s\n  newName: %s\n  newTag: %s\n' "$base" "${ref%:*}" "${ref##*:}"
  else
    printf -- '- name: %s\n  newName: %s\n  newTag: latest\n' "$base" "$ref"
  fi
}

# `kubectl kustomize manifests/operator` (or OVERLAY, a kustomization of your own over
# it: a namePrefix, another namespace, components), with IMG as the operator image and
# ZONE_WAIT_IMG as the zone init container's when they are set.
operator_manifests() {
  local base=${OVERLAY:-manifests/operator}
  [ -f "$base/kustomization.yaml" ] || [ -f "$base/kustomization.yml" ] || [ -f "$base/Kustomization" ] ||
    { echo "OVERLAY=$base: no kustomization.yaml there" >&2; exit 2; }
  if [ -z "$IMG$ZONE_WAIT_IMG" ]; then
    $KUBECTL kustomize "$base"
    return
  fi
  local dir
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # expand now: $dir is local
  trap "rm -rf '$dir'" RETURN
  {
    printf 'resources:\n- %s\nimages:\n' "$(realpath --relative-to="$dir" "$base")"
    [ -z "$IMG" ] || image_entry "$BASE_IMAGE_NAME" "$IMG"
    [ -z "$ZONE_WAIT_IMG" ] || image_entry "$BASE_ZONE_WAIT_NAME" "$ZONE_WAIT_IMG"
  } >"$dir/kustomization.yaml"
  $KUBECTL kustomize "$dir"
}

# `kubectl wait --for condition=established` fails at once ("accessor error") when it
# reads a just-created CRD before the server has written its status: poll instead.
wait_established() {
  local crd i pending
  for i in $(seq 120); do
    pending=
    for crd in lokistacks alertingrules recordingrules rulerconfigs; do
      [ "$($KUBECTL get "customresourcedefinition/$crd.loki.grafana.com" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] || pending=$crd
    done
    [ -z "$pending" ] && return 0
    sleep 0.5
  done
  echo "the CRD $pending.loki.grafana.com was not established within 60s" >&2
  return 1
}

case "$action" in
  install)
    require_supported_server
    crd | $KUBECTL apply --server-side --force-conflicts -f -
    ;;
  replace-crd)
    # Migration from the Go Loki Operator (docs/migrate.md): a replace takes over the
    # whole CRD, its conversion webhook setting included, which an apply would leave.
    # A CRD the Go operator did not install is created.
    require_supported_server
    for f in $(sed -n 's/^- //p' manifests/crd/kustomization.yaml); do
      name=$(sed -n 's/^  name: //p' "manifests/crd/$f" | head -n 1)
      if $KUBECTL get customresourcedefinition "$name" >/dev/null 2>&1; then verb=replace; else verb=create; fi
      $KUBECTL "$verb" -f "manifests/crd/$f"
    done
    ;;
  uninstall)
    $KUBECTL delete --ignore-not-found customresourcedefinition lokistacks.loki.grafana.com \
      alertingrules.loki.grafana.com recordingrules.loki.grafana.com rulerconfigs.loki.grafana.com
    ;;
  deploy)
    require_supported_server
    # The CRD is this operator's: forcing takes its fields over from whoever wrote them
    # before (a replace during a migration, an earlier installer).
    crd | $KUBECTL apply --server-side --force-conflicts -f -
    wait_established
    operator_manifests | $KUBECTL apply --server-side -f -
    ;;
  undeploy)
    # Whatever the server's version: removing is never refused.
    operator_manifests | $KUBECTL delete --ignore-not-found -f -
    # The operator registers its webhook configurations itself; the zone-disruption one
    # fails closed, so left behind it would refuse every eviction of the stacks'
    # ingesters.
    $KUBECTL delete --ignore-not-found mutatingwebhookconfiguration loki-zone-operator-zone-at-bind
    $KUBECTL delete --ignore-not-found validatingwebhookconfiguration loki-zone-operator-zone-disruptions
    ;;
  crds)
    # The CRDs as `install` applies them, for review or GitOps.
    crd
    ;;
  manifests)
    # What `deploy` applies after the CRD, for review or GitOps.
    operator_manifests
    ;;
  *)
    echo "unknown action $action: use install, uninstall, deploy, undeploy, replace-crd, manifests or crds" >&2
    exit 2
    ;;
esac
