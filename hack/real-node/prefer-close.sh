# Sourced by e2e.sh, with or without a Loki image, after the drain: whether the real
# kube-proxy keeps a client's traffic in its zone when a Service asks for it with
# `trafficDistribution`, as the operator's entry Services (the distributor's and the
# query frontend's HTTP Services of a zone-aware stack) do (issue 53, part 3): with
# PC_VALUE, by default PreferSameZone, what the operator writes on 1.34 and later
# (PreferClose, its older name, for 1.31 to 1.33). PREFER_CLOSE=0 leaves it out.
#
#   pc_run   in namespace prefer-close: a Deployment of the demo image answering HTTP on
#            8080 (readiness probe on it), one replica per zone (a required zone spread),
#            a Service in front of it, and a client pod on node-a (zone-a). The
#            cross-zone accounting of zone-traffic.sh (one /24 of pod addresses per node,
#            so per zone here) counts what the namespace forwards between zones while the
#            client sends PC_REQUESTS (default 60) HTTP GETs, one connection each, to the
#            Service: first as it is created (no trafficDistribution), then once the
#            Service asks for PreferClose and the EndpointSlice controller has given every
#            endpoint its zone hint (and the API server wrote no warning about the value).
#            The namespace is deleted again.
#
# Checked: every request answered in both phases; without PreferClose some requests leave
# zone-a (60 requests over 3 endpoints all staying in zone-a by chance: 3^-60); with it,
# not one byte leaves zone-a and the requests' bytes are all inside zone-a. The bytes per
# ordered zone pair of both phases are printed as a figure.
#
# What this rig cannot show: its three nodes share one network namespace, so one
# kube-proxy (hostname node-a, zone-a) programs the rules for every pod; a client on
# node-b would be sent to zone-a's endpoint too. A client in zone-a is the case where
# that kube-proxy's zone and the client's agree, which is what a per-node kube-proxy
# does for every client.
#
# Uses e2e.sh's helpers (say, pass, fail, assert, kubectl, jp, until_true, TIMEOUT, W,
# NS, names, DEMO_IMAGE) and zone-traffic.sh's (zt_setup, zt_snapshot, zt_teardown).

PC_NS=prefer-close
PC_REQUESTS=${PC_REQUESTS:-60}
PC_VALUE=${PC_VALUE:-PreferSameZone}

# "zone-a=10.88.1.0/24 ...": each node's pod range (lib.sh gives node i 10.88.(i+1).0/24)
# under its zone label.
pc_zone_spec() {
  local i zone spec=""
  for i in "${!names[@]}"; do
    zone=$(jp get node "${names[$i]}" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
    spec+="$zone=10.88.$((i + 1)).0/24 "
  done
  echo "${spec% }"
}

pc_apply() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $PC_NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: server, namespace: $PC_NS}
spec:
  replicas: ${#names[@]}
  selector: {matchLabels: {app: pc-server}}
  template:
    metadata: {labels: {app: pc-server}}
    spec:
      automountServiceAccountToken: false
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
         labelSelector: {matchLabels: {app: pc-server}}}
      containers:
      - name: demo
        image: $DEMO_IMAGE
        imagePullPolicy: IfNotPresent
        env: [{name: DEMO_HTTP_PORT, value: "8080"}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: $PC_NS}
spec:
  selector: {app: pc-server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: $PC_NS}
spec:
  automountServiceAccountToken: false
  nodeName: ${names[0]}
  containers: [{name: demo, image: $DEMO_IMAGE, imagePullPolicy: IfNotPresent}]
EOF
}

pc_ready() {
  [ "$(jp -n "$PC_NS" get deploy server -o jsonpath='{.status.readyReplicas}')" = "${#names[@]}" ] &&
    [ "$(jp -n "$PC_NS" get pod client -o jsonpath='{.status.phase}')" = Running ]
}

# Every server pod Ready in the Service's EndpointSlice: before it the GETs would go to
# the endpoints kube-proxy has so far (one run sent all 60 to zone-b's).
pc_endpoints() {
  local ready
  ready=$(jp -n "$PC_NS" get endpointslices -l kubernetes.io/service-name=server \
    -o jsonpath='{range .items[*].endpoints[*]}{.conditions.ready}{"\n"}{end}')
  [ "$(grep -cx true <<<"$ready")" = "${#names[@]}" ]
}

# Every endpoint of the Service hinted for a zone (the EndpointSlice controller's answer
# to PreferClose), as many hints as endpoints.
pc_hinted() {
  local hints
  hints=$(jp -n "$PC_NS" get endpointslices -l kubernetes.io/service-name=server \
    -o jsonpath='{range .items[*].endpoints[*]}{.hints.forZones[0].name}{"\n"}{end}')
  [ "$(grep -c . <<<"$hints")" = "${#names[@]}" ]
}

# One phase: PC_REQUESTS GETs from the client to the Service, snapshot LABEL after.
pc_requests() { # LABEL
  local ip out
  ip=$(jp -n "$PC_NS" get svc server -o jsonpath='{.spec.clusterIP}')
  out=$(kubectl -n "$PC_NS" exec client -- demo get "$ip" 80 "$PC_REQUESTS" 2>&1)
  assert "prefer-close, $1: the client's $PC_REQUESTS GETs to the Service $ip:80 answered: $out" \
    grep -q " $PC_REQUESTS/$PC_REQUESTS ok" <<<"$out"
  zt_snapshot "$NS" "$1" "$W/prefer-close.jsonl"
}

# "without with" -> per phase, bytes from the client's zone to each other zone, bytes
# within it, and every ordered pair (from consecutive snapshots).
pc_figures() {
  python3 - "$W/prefer-close.jsonl" "$(jp get node "${names[0]}" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')" <<'PY'
import json, sys
snaps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
home = sys.argv[2]
for prev, cur in zip(snaps, snaps[1:]):
    pairs = {k: cur["pairs"].get(k, {"bytes": 0})["bytes"] - prev["pairs"].get(k, {"bytes": 0})["bytes"]
             for k in sorted(set(cur["pairs"]) | set(prev["pairs"]))}
    same = cur["same"].get(home, {"bytes": 0})["bytes"] - prev["same"].get(home, {"bytes": 0})["bytes"]
    out = sum(v for k, v in pairs.items() if k.startswith(home + ">"))
    listed = " ".join(f"{k}={v}" for k, v in pairs.items() if v)
    print(cur["label"], out, same, listed or "none")
PY
}

pc_run() {
  say "trafficDistribution: $PC_VALUE on the real kube-proxy: $PC_REQUESTS GETs from zone-a to a Service over ${#names[@]} zones, without then with it"
  pc_apply || { fail "prefer-close: the Deployment, Service and client could not be created"; return 0; }
  assert "prefer-close: a server pod per zone Ready and the client running" until_true "$TIMEOUT" pc_ready
  assert "prefer-close: every server pod a ready endpoint of the Service" until_true "$TIMEOUT" pc_endpoints
  # kube-proxy programs the endpoints from the EndpointSlice it watches: a moment to sync.
  sleep 3
  zt_setup "$NS" "$(pc_zone_spec)" || { fail "prefer-close: zt_setup failed"; return 0; }
  rm -f "$W/prefer-close.jsonl"
  zt_snapshot "$NS" start "$W/prefer-close.jsonl"
  pc_requests without
  local said
  said=$(kubectl -n "$PC_NS" patch svc server --type merge \
    -p "{\"spec\":{\"trafficDistribution\":\"$PC_VALUE\"}}" 2>&1 >/dev/null)
  assert "prefer-close: the API server takes $PC_VALUE without a warning${said:+: $said}" [ -z "$said" ]
  assert "prefer-close: every endpoint of the Service given its zone hint" until_true "$TIMEOUT" pc_hinted
  # kube-proxy reads the hints from the EndpointSlice it watches: a moment to sync.
  sleep 3
  zt_snapshot "$NS" switch "$W/prefer-close.jsonl"
  pc_requests with
  local without with figures
  figures=$(pc_figures)
  without=$(awk '$1 == "without"' <<<"$figures")
  with=$(awk '$1 == "with"' <<<"$figures")
  say "prefer-close, bytes by phase (label, out of zone-a, inside zone-a, every ordered pair):"
  say "  $without"
  say "  $with"
  assert "prefer-close: without $PC_VALUE some requests leave zone-a: $(awk '{print $2}' <<<"$without") B" \
    [ "$(awk '{print $2}' <<<"$without")" -gt 0 ]
  assert "prefer-close: with $PC_VALUE no byte leaves zone-a ($(awk '{print $2}' <<<"$with") B) and the requests stay inside it ($(awk '{print $3}' <<<"$with") B)" \
    awk '{exit !($2 == 0 && $3 > 0)}' <<<"$with"
  PC_FIGURES="$PC_VALUE; without: $without; with: $with"
  zt_teardown "$NS"
  kubectl delete namespace "$PC_NS" --wait=false >/dev/null 2>&1 || true
}
