#!/usr/bin/env bash
# install | uninstall | deploy | undeploy the operator on the current kubectl context.
#
# It needs kubectl (with its built-in kustomize) and the committed manifests, nothing
# else: no Rust toolchain, no build. The CRDs are manifests/crd as committed; Kubernetes
# before 1.25 rejects CEL validation rules (x-kubernetes-validations) under server-side
# apply, so there they are left out (`without_cel`, the same CRDs `loki-zone-operator crd
# --kube-version 1.24` prints, as tests/bundle.rs checks), and the operator reports the
# same rules as a Degraded condition instead. Before 1.21 the operator's
# PodDisruptionBudget is applied as policy/v1beta1, the only version those servers
# serve. IMG replaces the operator image, and with it RELATED_IMAGE_OPERATOR (the zone
# init container), through a kustomize overlay's `images:` entry: the way a user's own
# overlay does it. OVERLAY (a kustomization directory over manifests/operator) replaces
# manifests/operator for deploy, undeploy and manifests.
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:?usage: hack/deploy.sh install|uninstall|deploy|undeploy|replace-crd|manifests|crds|for-server}
KUBECTL=${KUBECTL:-kubectl}
IMG=${IMG:-}
# The image name manifests/operator sets; overlays match their `images:` entries on it.
BASE_IMAGE_NAME=ghcr.io/loki-zone-operator/loki-zone-operator

server_version() {
  # "1.20", from {"serverVersion": {"major": "1", "minor": "20+", ...}}
  $KUBECTL version -o json 2>/dev/null | tr -d ' \n' |
    sed -n 's/.*"serverVersion":{[^}]*"major":"\([0-9]*\)[^"]*","minor":"\([0-9]*\)[^"]*".*/\1.\2/p'
}

required_server_version() {
  local version
  version=$(server_version)
  [ -n "$version" ] || { echo "cannot read the server version: is the cluster reachable?" >&2; exit 1; }
  echo "$version"
}

# The YAML on stdin without its CEL rules: every `x-kubernetes-validations:` key and
# what belongs to it (deeper lines, and the list items at its own indentation, which is
# how the committed CRDs are written).
without_cel() {
  awk '
    skip != "" {
      match($0, /^ */); ind = RLENGTH
      if (ind > skip || (ind == skip && substr($0, ind + 1, 2) == "- ")) next
      skip = ""
    }
    /^ *x-kubernetes-validations:$/ { match($0, /^ */); skip = RLENGTH; next }
    { print }'
}

# Whether a server of version $1 ("1.20"; empty: a current one) takes CEL rules.
takes_cel() {
  local major=${1%%.*} minor=${1#*.}
  minor=${minor%%[!0-9]*}
  ! { [ "$major" = 1 ] && [ "$minor" -lt 25 ] 2>/dev/null; }
}

# Every CRD (LokiStack, AlertingRule, RecordingRule, RulerConfig) as one stream, as a
# server of version $1 takes them.
crd() {
  local f
  for f in $(sed -n 's/^- //p' manifests/crd/kustomization.yaml); do
    echo ---
    cat "manifests/crd/$f"
  done | if takes_cel "$1"; then cat; else without_cel; fi
}

# The manifests on stdin as a server of version $1 ("1.20"; empty: a current one)
# takes them. PodDisruptionBudgets are policy/v1 from 1.21 and only policy/v1beta1
# before, with the same fields for ours (minAvailable, selector). Every top-level
# `apiVersion: policy/v1` of the install is a PodDisruptionBudget: the group's other v1
# kind, Eviction, is never a manifest.
for_server() {
  local major=${1%%.*} minor=${1#*.}
  minor=${minor%%[!0-9]*}
  if [ "$major" = 1 ] && [ "$minor" -lt 21 ] 2>/dev/null; then
    sed 's#^apiVersion: policy/v1$#apiVersion: policy/v1beta1#'
  else
    cat
  fi
}

# `kubectl kustomize manifests/operator` (or OVERLAY, a kustomization of your own over
# it: a namePrefix, another namespace, components), with IMG (name, name:tag or
# name@digest) as the operator image when it is set.
operator_manifests() {
  local base=${OVERLAY:-manifests/operator}
  [ -f "$base/kustomization.yaml" ] || [ -f "$base/kustomization.yml" ] || [ -f "$base/Kustomization" ] ||
    { echo "OVERLAY=$base: no kustomization.yaml there" >&2; exit 2; }
  if [ -z "$IMG" ]; then
    $KUBECTL kustomize "$base"
    return
  fi
  local dir name ref last
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # expand now: $dir is local
  trap "rm -rf '$dir'" RETURN
  if [[ $IMG == *@* ]]; then
    name=${IMG%%@*}
    ref="digest: ${IMG#*@}"
  else
    # A tag follows the last ':' of the last path segment (a registry may have a port).
    last=${IMG##*/}
    if [[ $last == *:* ]]; then
      name=${IMG%:*}
      ref="newTag: ${IMG##*:}"
    else
      name=$IMG
      ref="newTag: latest"
    fi
  fi
  printf 'resources:\n- %s\nimages:\n- name: %s\n  newName: %s\n  %s\n' \
    "$(realpath --relative-to="$dir" "$base")" "$BASE_IMAGE_NAME" "$name" "$ref" \
    >"$dir/kustomization.yaml"
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
    crd "$(required_server_version)" | $KUBECTL apply --server-side --force-conflicts -f -
    ;;
  replace-crd)
    # Migration from the Go Loki Operator (docs/migrate.md): a replace takes over the
    # whole CRD, its conversion webhook setting included, which an apply would leave.
    # A CRD the Go operator did not install is created.
    version=$(required_server_version)
    for f in $(sed -n 's/^- //p' manifests/crd/kustomization.yaml); do
      name=$(sed -n 's/^  name: //p' "manifests/crd/$f" | head -n 1)
      if $KUBECTL get customresourcedefinition "$name" >/dev/null 2>&1; then verb=replace; else verb=create; fi
      if takes_cel "$version"; then cat "manifests/crd/$f"; else without_cel <"manifests/crd/$f"; fi |
        $KUBECTL "$verb" -f -
    done
    ;;
  uninstall)
    $KUBECTL delete --ignore-not-found customresourcedefinition lokistacks.loki.grafana.com \
      alertingrules.loki.grafana.com recordingrules.loki.grafana.com rulerconfigs.loki.grafana.com
    ;;
  deploy)
    version=$(required_server_version)
    # The CRD is this operator's: forcing takes its fields over from whoever wrote them
    # before (a replace during a migration, an earlier installer).
    crd "$version" | $KUBECTL apply --server-side --force-conflicts -f -
    wait_established
    operator_manifests | for_server "$version" | $KUBECTL apply --server-side -f -
    ;;
  undeploy)
    # A server whose version cannot be read gets the manifests as they are.
    operator_manifests | for_server "$(server_version)" |
      $KUBECTL delete --ignore-not-found -f -
    # The operator registers its webhook configurations itself; the zone-disruption one
    # fails closed, so left behind it would refuse every eviction of the stacks'
    # ingesters.
    $KUBECTL delete --ignore-not-found mutatingwebhookconfiguration loki-zone-operator-zone-at-bind
    $KUBECTL delete --ignore-not-found validatingwebhookconfiguration loki-zone-operator-zone-disruptions
    ;;
  for-server)
    # A release's install.yaml (stdin) as a server of version $2 takes it: without the
    # CRDs' CEL rules before 1.25, the budget as policy/v1beta1 before 1.21. The
    # release targets current servers; this is for older ones (and the tests' 1.20).
    version=${2:?usage: hack/deploy.sh for-server VERSION <install.yaml}
    if takes_cel "$version"; then cat; else without_cel; fi | for_server "$version"
    ;;
  crds)
    # The CRDs as `install` applies them to a server of version KUBE_VERSION (default:
    # a current one), for review or GitOps.
    crd "${KUBE_VERSION:-}"
    ;;
  manifests)
    # What `deploy` applies after the CRD, for review or GitOps: hack/deploy.sh manifests
    # (as Kubernetes 1.21+ takes them; KUBE_VERSION=1.20 gives them for an older server).
    operator_manifests | for_server "${KUBE_VERSION:-}"
    ;;
  *)
    echo "unknown action $action: use install, uninstall, deploy, undeploy, replace-crd, manifests, crds or for-server" >&2
    exit 2
    ;;
esac
