# shellcheck shell=bash
# The zone label Kubernetes copies at binding, on real kubelets (sourced by e2e.sh, which
# provides assert, say, jp, hk, W, STACK, STACK_NS and TIMEOUT).
#
# From 1.35 the API server copies a node's topology.kubernetes.io/zone label onto each
# pod it binds there (KEP-4742). The quick-start's stack has that one topology key, so
# its pods read their zone from that label (the pod annotation
# loki.grafana.com/zone-source=pod-label says so), and no webhook takes part in their
# binding. native_zone_check proves it for the pods the quick-start created: the first
# version of each pod with spec.nodeName already has the label, it equals the node's, the
# operator wrote no zone annotation, and the init container read the zone through the
# kubelet's downward-API volume. zone_source_webhook then switches the stack to the
# operator's path (loki.grafana.com/zone-from-pod-label=false) for the checks that
# follow, which are about the zone-at-bind webhook.

ZONE_LABEL_KEY=topology.kubernetes.io/zone
ZONE_SOURCE=loki.grafana.com/zone-source
ZONE_FROM_POD_LABEL=loki.grafana.com/zone-from-pod-label

# native_until SECONDS COMMAND...: whether COMMAND succeeds within SECONDS.
native_until() {
  local end=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 1
  done
}

# NAME NODE LABEL SOURCE ANNOTATION INIT-EXIT UID per zone-aware pod of the stack (not deleting).
native_pods() {
  kubectl -n "$STACK_NS" get pods -l loki.grafana.com/zone-aware=enabled -o json 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    m = p["metadata"]
    if m.get("deletionTimestamp"):
        continue
    init = [s for s in p["status"].get("initContainerStatuses", []) if s["name"] == "az-annotation-check"]
    t = init[0]["state"].get("terminated") if init else None
    print(m["name"], p["spec"].get("nodeName") or "-",
          m.get("labels", {}).get("topology.kubernetes.io/zone") or "-",
          m.get("annotations", {}).get("loki.grafana.com/zone-source") or "-",
          m.get("annotations", {}).get("loki.grafana.com/availability-zone") or "-",
          "-" if t is None else t["exitCode"], m["uid"])'
}

# The replicas of the stack's zone-aware workloads.
native_replicas() {
  kubectl -n "$STACK_NS" get deployments,statefulsets -l "app.kubernetes.io/instance=$STACK" -o json 2>/dev/null |
    python3 -c '
import json, sys
print(sum(w["spec"].get("replicas", 1) for w in json.load(sys.stdin)["items"]
          if w["spec"]["template"]["metadata"].get("labels", {}).get("loki.grafana.com/zone-aware") == "enabled"))'
}

# Whether every zone-aware replica runs, its init container done.
native_settled() {
  local want pods
  want=$(native_replicas)
  pods=$(native_pods)
  [ "${want:-0}" -gt 0 ] && [ "$(grep -c . <<<"$pods")" = "$want" ] && ! awk '{print $6}' <<<"$pods" | grep -qvx 0
}

# The label the first version of pod UID with spec.nodeName carried, from the watch.
native_first_bound() {
  python3 hack/real-node/first-bound.py "$W/pods.watch.json" | awk -v u="$1" '$1 == u {print $4}'
}

native_zone_check() {
  local t pod node label source annotation init uid want first logs
  t=$(now)
  native_until "$TIMEOUT" native_settled || true
  TIME[native]=$(secs "$t")
  assert "the quick-start's zone-aware pods run, their init container done ($(grep -c . <<<"$(native_pods)") of $(native_replicas) replicas)" native_settled
  while read -r pod node label source annotation init uid; do
    [ -n "$pod" ] || continue
    want=$(jp get node "$node" -o jsonpath="{.metadata.labels.topology\.kubernetes\.io/zone}")
    assert "$pod on $node: reads its zone from its $ZONE_LABEL_KEY label ($ZONE_SOURCE=$source)" [ "$source" = pod-label ]
    assert "$pod: label $ZONE_LABEL_KEY=$label equals its node's ($want)" [ "$label" = "$want" ]
    first=$(native_first_bound "$uid")
    assert "$pod: the label came with the binding (the first version with spec.nodeName has it: ${first:-not seen in the watch})" \
      [ "$first" = "$want" ]
    assert "$pod: the operator wrote no zone annotation (${annotation})" [ "$annotation" = - ]
    logs=$(kubectl -n "$STACK_NS" logs "$pod" -c az-annotation-check 2>&1 | tail -n 3 | tr '\n' ' ')
    assert "$pod: its init container read the zone $want from the kubelet's downward-API volume: $logs" \
      grep -qw -- "$want" <<<"$logs"
  done <<<"$(native_pods)"
  local covered_ns
  covered_ns=$(mwc '{.webhooks[0].namespaceSelector.matchExpressions[*].values[*]}')
  assert "the zone-at-bind webhook does not cover $STACK_NS, whose pods need it not (namespaces: ${covered_ns:-none})" \
    bash -c "! grep -qw -- '$STACK_NS' <<<'$covered_ns'"
  say "zone label at binding: every zone-aware pod of the quick-start ran ${TIME[native]} s after the operator was Ready, zoned by Kubernetes"
}

# The stack's workloads exist, none of them reading the label.
native_templates_gone() {
  local w
  w=$(kubectl -n "$STACK_NS" get deployments,statefulsets -l "app.kubernetes.io/instance=$STACK" \
    -o jsonpath="{range .items[*]}{.metadata.name}={.spec.template.metadata.annotations.loki\.grafana\.com/zone-source};{end}" 2>/dev/null)
  [ -n "$w" ] && ! grep -q "=pod-label" <<<"$w"
}

native_workloads_gone() {
  [ -z "$(kubectl -n "$STACK_NS" get deployments,statefulsets -l "app.kubernetes.io/instance=$STACK" -o name 2>/dev/null)" ]
}

# The stack again, annotated to be zoned by the operator. Annotating it in place would
# roll its Deployments, which never finish without a Loki image (their pods are never
# Ready), leaving pods of both templates; so it is deleted with its workloads (not its
# claims) and created again.
zone_source_webhook() {
  hk -n "$STACK_NS" get lokistack "$STACK" -o json | python3 -c '
import json, sys
s = json.load(sys.stdin)
m = s["metadata"]
s["metadata"] = {"name": m["name"], "namespace": m["namespace"],
                 "labels": m.get("labels", {}), "annotations": m.get("annotations", {})}
s["metadata"]["annotations"][sys.argv[1]] = "false"
s.pop("status", None)
print(json.dumps(s))' "$ZONE_FROM_POD_LABEL" >"$W/stack-zoned-by-operator.json"
  assert "the stack deleted with its workloads (kubectl delete --cascade=foreground)" \
    hk -n "$STACK_NS" delete lokistack "$STACK" --cascade=foreground --timeout="${TIMEOUT}s"
  assert "... its workloads gone" native_until "$TIMEOUT" native_workloads_gone
  assert "... and created again, annotated $ZONE_FROM_POD_LABEL=false" \
    hk create -f "$W/stack-zoned-by-operator.json"
  assert "the zone-at-bind webhook covers $STACK_NS" native_until "$TIMEOUT" covered
  assert "... and the stack's workloads read the annotation" native_until "$TIMEOUT" native_templates_gone
}
