#!/usr/bin/env bash
# install | uninstall | deploy | undeploy the operator on the current kubectl context.
#
# The CRD comes from the operator binary for the server's version: Kubernetes before
# 1.25 rejects CEL validation rules (x-kubernetes-validations) under server-side apply,
# so they are left out there; the operator reports the same rules as a Degraded
# condition instead. IMG replaces the operator image (the zone init container too).
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:?usage: hack/deploy.sh install|uninstall|deploy|undeploy}
BIN=${BIN:-target/debug/loki-zone-operator}
KUBECTL=${KUBECTL:-kubectl}
DEFAULT_IMG=ghcr.io/loki-zone-operator/loki-zone-operator:v0.1.0
IMG=${IMG:-$DEFAULT_IMG}

server_version() {
  # "1.20", from {"serverVersion": {"major": "1", "minor": "20+", ...}}
  $KUBECTL version -o json 2>/dev/null | tr -d ' \n' |
    sed -n 's/.*"serverVersion":{[^}]*"major":"\([0-9]*\)[^"]*","minor":"\([0-9]*\)[^"]*".*/\1.\2/p'
}

crd() {
  local version
  version=$(server_version)
  [ -n "$version" ] || { echo "cannot read the server version: is the cluster reachable?" >&2; exit 1; }
  "$BIN" crd --kube-version "$version"
}

case "$action" in
  install)
    crd | $KUBECTL apply --server-side -f -
    ;;
  uninstall)
    $KUBECTL delete --ignore-not-found customresourcedefinition lokistacks.loki.grafana.com
    ;;
  deploy)
    crd | $KUBECTL apply --server-side -f -
    $KUBECTL wait --for condition=established --timeout=60s customresourcedefinition/lokistacks.loki.grafana.com
    $KUBECTL kustomize manifests/operator | sed "s#$DEFAULT_IMG#$IMG#g" | $KUBECTL apply --server-side -f -
    ;;
  undeploy)
    $KUBECTL kustomize manifests/operator | $KUBECTL delete --ignore-not-found -f -
    ;;
  *)
    echo "unknown action $action: use install, uninstall, deploy or undeploy" >&2
    exit 2
    ;;
esac
