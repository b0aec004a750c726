#!/usr/bin/env bash
# End-to-end on real nodes (issue 27): the operator image, installed with the manifests
# `make deploy` applies, runs as two in-cluster replicas on real kubelets (containerd,
# runc, CNI bridge, kube-proxy) in node-a/b/c of zone-a/b/c, serves its webhooks
# through its Service, and a zone-aware 1x.demo LokiStack's pods get their zone in the
# binding and pass their zone init container. `make e2e-real` runs it (root).
#
#   sudo hack/real-node/e2e.sh
#
# Environment (besides lib.sh's, see run-demo.sh):
#   NODES=N              real nodes, 1..3 (default 3, one per zone)
#   IMAGE_ARCHIVE=FILE   the operator image (default target/image/loki-zone-operator.oci.tar,
#                        built here with `make image`; SKIP_IMAGE_BUILD=1 uses it as is)
#   LOKI_IMAGE_ARCHIVE=FILE  an archive of the Loki image the operator sets
#                        (docker.io/grafana/loki:3.7.3): imported too, and the whole
#                        real-Loki scenario of loki.sh runs (S3 server, every component
#                        Ready, lines pushed, a zone stopped, a surviving ingester
#                        restarted, every line queried back)
#   TIMEOUT=SECONDS      per wait (default 300)
#   KEEP=1               stay up at the end until Enter (or SIGTERM)
#
# Exits non-zero, naming each failed assertion, if anything fails. Tears everything
# down on exit, Ctrl-C or SIGTERM (lib.sh's teardown).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
export NODES=${NODES:-3}
TIMEOUT=${TIMEOUT:-300}
IMAGE_ARCHIVE=${IMAGE_ARCHIVE:-target/image/loki-zone-operator.oci.tar}
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
OP_BIN="$CACHE_DIR/musl-target/x86_64-unknown-linux-musl/release/loki-zone-operator"
OP_NS=loki-zone-operator-system
STACK_NS=e2e-real
STACK=zones
ZONE_ANNOTATION=loki.grafana.com/availability-zone
ZONE_LABEL=topology.kubernetes.io/zone
HOST_KUBECTL=${HOST_KUBECTL:-$(command -v kubectl || true)}

say() { printf '[e2e-real %s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
# CPU seconds of this shell's waited-for children so far (cutime + cstime).
child_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($16 + $17) / hz}' "/proc/$$/stat"; }
declare -A TIME CPU
T_ALL=$(now)

# ---------------------------------------------------------------- 1. build
[ "$(id -u)" -eq 0 ] || { say "needs root (network and mount namespaces, cgroups)"; exit 1; }
[ -n "$HOST_KUBECTL" ] || { say "needs kubectl with kustomize (what make deploy uses)"; exit 1; }
t=$(now); c0=$(child_cpu)
if [ "${SKIP_IMAGE_BUILD:-0}" != 1 ]; then
  say "make image (musl build cached in $CACHE_DIR/musl-target)"
  make --no-print-directory image IMAGE_ARCHIVE="$IMAGE_ARCHIVE" >&2
fi
[ -s "$IMAGE_ARCHIVE" ] || { say "no image archive $IMAGE_ARCHIVE"; exit 1; }
[ -x "$OP_BIN" ] || { say "no operator binary $OP_BIN (make image builds it)"; exit 1; }
bash hack/build-control-plane.sh >/dev/null
bin="$CACHE_DIR/k8s-1.20.2/bin"
{ [ -x "$bin/kubelet" ] && [ -x "$bin/kube-proxy" ]; } || bash hack/real-node/build-kubelet.sh >/dev/null
TIME[build]=$(secs "$t"); CPU[build]=$(awk -v a="$c0" -v b="$(child_cpu)" 'BEGIN {printf "%.1f", b - a}')
# The name in the archive: what `make image` was given as IMG, and what make deploy sets.
OP_IMAGE=$(tar xOf "$IMAGE_ARCHIVE" index.json | python3 -c 'import json,sys
m = json.load(sys.stdin)["manifests"][0].get("annotations", {})
print(m.get("io.containerd.image.name") or m.get("org.opencontainers.image.ref.name", ""))')
[ -n "$OP_IMAGE" ] || { say "cannot read the image name from $IMAGE_ARCHIVE"; exit 1; }
[[ "$OP_IMAGE" != *:latest ]] || say "WARNING: $OP_IMAGE is :latest; the kubelet would try to pull it"
say "build: ${TIME[build]} s; operator image $OP_IMAGE"

# ---------------------------------------------------------------- 2-3. cluster, images
export OPERATOR_IMAGE=$IMAGE_ARCHIVE
EXTRA_IMAGES=()
[ -n "${LOKI_IMAGE_ARCHIVE:-}" ] && EXTRA_IMAGES+=("$(realpath "$LOKI_IMAGE_ARCHIVE")")
export IDLE_SECONDS=0
# A cluster DNS for the pods (lib.sh, cluster-dns.py): Loki's configuration names
# Services; checked below for the operator's webhook Service.
export CLUSTER_DNS=${CLUSTER_DNS:-1}
t=$(now)
# shellcheck source=hack/real-node/lib.sh
source "$repo/hack/real-node/lib.sh"
TIME[cluster]=$(secs "$t")
WATCH_PID=
cleanup() {
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null
  teardown
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say "cluster up: ${TIME[cluster]} s ($NODES real node(s), operator image imported into each)"

FAIL=0
FAILED=()
pass() { say "ok: $*"; }
fail() { say "FAILED: $*"; FAIL=1; FAILED+=("$*"); }
assert() { # assert DESCRIPTION COMMAND...: pass or fail, with the command's output
  local out
  if out=$("${@:2}" 2>&1); then
    pass "$1"
  else
    fail "$1"
    printf '%s\n' "$out" | tail -n 15 | sed 's/^/    /' >&2
  fi
}
hk() { "$HOST_KUBECTL" --kubeconfig "$W/cp/host.kubeconfig" "$@"; }
jp() { kubectl "$@" 2>/dev/null || true; }

for n in "${names[@]}"; do
  assert "$n has the operator image in containerd's k8s.io namespace" \
    in_node "$n" sh -c "ctr --address /run/containerd/containerd.sock -n k8s.io images ls -q | grep -Fx '$OP_IMAGE'"
done

# ---------------------------------------------------------------- 4. install
# What `make deploy IMG=$OP_IMAGE` applies (hack/deploy.sh deploy: the CRD for the
# server's version, then manifests/operator with the image set by a kustomize overlay),
# from the host through the loopback forwarder, as a user's kubectl would. BIN (for
# `crd --kube-version`) is the musl binary in the image: `make deploy` would first run
# `cargo build` of the whole workspace for it, which this check does not need.
t_op=$(now)
say "installing the operator as make deploy does (hack/deploy.sh deploy, IMG=$OP_IMAGE)"
KUBECONFIG="$W/cp/host.kubeconfig" KUBECTL="$HOST_KUBECTL" BIN="$OP_BIN" IMG="$OP_IMAGE" \
  bash hack/deploy.sh deploy >"$W/logs/deploy.log" 2>&1 ||
  { cat "$W/logs/deploy.log" >&2; die "hack/deploy.sh deploy failed"; }
dep() { jp -n "$OP_NS" get deployment loki-zone-operator -o jsonpath="$1"; }
assert "Deployment: 2 replicas" [ "$(dep '{.spec.replicas}')" = 2 ]
assert "Deployment: image $OP_IMAGE, RELATED_IMAGE_OPERATOR the same" \
  [ "$(dep '{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].env[?(@.name=="RELATED_IMAGE_OPERATOR")].value}')" = "$OP_IMAGE $OP_IMAGE" ]
pull=$(dep '{.spec.template.spec.containers[0].imagePullPolicy}')
assert "Deployment: imagePullPolicy IfNotPresent (server default for a tag other than :latest): $pull" [ "$pull" = IfNotPresent ]
assert "Deployment: the shipped security context (read-only root filesystem, non-root, no capabilities)" \
  [ "$(dep '{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].securityContext.runAsNonRoot} {.spec.template.spec.containers[0].securityContext.capabilities.drop[0]}')" = "true true ALL" ]

# ---------------------------------------------------------------- 5. operator Ready
ready_pods() {
  kubectl -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
    grep -c '=True' || true
}
holder() { jp -n "$OP_NS" get lease loki-zone-operator -o jsonpath='{.spec.holderIdentity}'; }
mwc() { jp get mutatingwebhookconfiguration loki-zone-operator-zone-at-bind -o jsonpath="$1"; }
deadline=$(($(date +%s) + TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ]; do
  [ "$(ready_pods)" = 2 ] && [ -n "$(holder)" ] && [ -n "$(mwc '{.metadata.name}')" ] && break
  sleep 1
done
TIME[operator]=$(secs "$t_op")
kubectl -n "$OP_NS" get pods -o wide >&2 || true
OP_PODS=($(jp -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator -o jsonpath='{.items[*].metadata.name}'))
assert "both operator pods Ready ($(ready_pods) of 2)" [ "$(ready_pods)" = 2 ]
if [ "$(ready_pods)" != 2 ]; then
  for p in "${OP_PODS[@]}"; do
    kubectl -n "$OP_NS" describe pod "$p" | sed -n '/^Events:/,$p' | tail -n 10 >&2 || true
    kubectl -n "$OP_NS" logs "$p" --tail=30 >&2 || true
  done
  die "the operator did not become Ready within ${TIMEOUT}s: stopping here"
fi
LEADER=$(holder)
assert "one replica holds the Lease loki-zone-operator: $LEADER" \
  bash -c "printf '%s\n' ${OP_PODS[*]} | grep -Fx '$LEADER'"
assert "MutatingWebhookConfiguration loki-zone-operator-zone-at-bind registered (no webhook in it until a zone-aware stack exists)" \
  [ -n "$(mwc '{.metadata.name}')" ]
say "operator Ready (2 replicas, leader $LEADER, webhook configuration registered): ${TIME[operator]} s after the install began"

# Which address the API server dials for the webhooks: two rules that only count, first
# in the nat table's OUTPUT chain of the namespace (the API server's own connections;
# pods' go through PREROUTING), one for connections to the webhook Service's ClusterIP,
# one for connections straight to a pod's webhook port 9443. kube-proxy never rewrites
# OUTPUT itself (only its jump to KUBE-SERVICES, whose counters it resets at each sync).
wh_ip=$(jp -n "$OP_NS" get service loki-zone-operator-webhook -o jsonpath='{.spec.clusterIP}')
[ -n "$wh_ip" ] || die "the webhook Service loki-zone-operator-webhook has no ClusterIP"
if [ "$CLUSTER_DNS" = 1 ]; then
  name=loki-zone-operator-webhook.$OP_NS.svc.cluster.local
  got=""
  for _ in $(seq 10); do
    got=$(nsenter --net="/run/netns/$NS" python3 hack/real-node/cluster-dns.py resolve "$APISERVER_IP" "$name" 2>&1) && [ "$got" = "$wh_ip" ] && break
    sleep 0.5
  done
  assert "the cluster DNS pods are given ($APISERVER_IP) resolves $name to its ClusterIP $wh_ip: $got" [ "$got" = "$wh_ip" ]
  got=$(nsenter --net="/run/netns/$NS" python3 hack/real-node/cluster-dns.py resolve "$APISERVER_IP" example.com 2>&1 || true)
  assert "... and answers NXDOMAIN outside the cluster (nothing forwarded): example.com: $got" [ "$got" = NXDOMAIN ]
fi
ip netns exec "$NS" iptables -t nat -I OUTPUT 1 -p tcp -d "$wh_ip/32" --dport 443 \
  -m comment --comment lzo-e2e-webhook-clusterip
ip netns exec "$NS" iptables -t nat -I OUTPUT 1 -p tcp --dport 9443 \
  -m comment --comment lzo-e2e-webhook-pod-ip
out_count() { ip netns exec "$NS" iptables -t nat -L OUTPUT -v -n -x | awk -v c="$1" '$0 ~ c {print $1}'; }

# ---------------------------------------------------------------- 6. the stack
# Local volumes for the StatefulSets' claims (compactor, 3 ingesters x storage and wal,
# index gateway = 8): a WaitForFirstConsumer class, as zone-aware stacks need, and four
# volumes per node in the node's own directory.
kubectl apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: lzo-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
YAML
for n in "${names[@]}"; do
  for k in 1 2 3 4; do
    mkdir -p "$W/nodes/$n/pv/$k"
    cat <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: $n-pv-$k}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: lzo-local
  persistentVolumeReclaimPolicy: Retain
  local: {path: $W/nodes/$n/pv/$k}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$n]}]
---
YAML
  done
done | kubectl apply -f - >/dev/null
kubectl create namespace "$STACK_NS" >/dev/null
# Kubernetes 1.21+ labels every namespace kubernetes.io/metadata.name=<name>; 1.20, this
# control plane, does not. The zone-at-bind webhook selects namespaces by that label, so
# here, as the simulated e2e's node simulator does, the test sets it the way 1.21 would.
# Without it (LABEL_NAMESPACE=0) the API server never calls the webhook on 1.20: the
# annotator zones every pod right after its bind, and the checks of the binding path fail.
if [ "${LABEL_NAMESPACE:-1}" = 1 ]; then
  kubectl label namespace "$STACK_NS" "kubernetes.io/metadata.name=$STACK_NS" >/dev/null
  say "namespace $STACK_NS labelled kubernetes.io/metadata.name=$STACK_NS, as Kubernetes 1.21+ does by itself (1.20 does not)"
fi
# The storage Secret the e2e suite uses (tests/support/lib.rs).
kubectl -n "$STACK_NS" create secret generic loki-s3 --from-literal=bucketnames=loki \
  --from-literal=endpoint=http://minio:9000 --from-literal=access_key_id=id \
  --from-literal=access_key_secret=secret >/dev/null
if [ -n "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  # shellcheck source=hack/real-node/loki.sh
  source "$repo/hack/real-node/loki.sh"
  loki_prepare
fi
# Three zones with one ingester each and factor 3: a write needs 2 of 3, so one zone can
# be lost (the real-Loki part stops one); with fewer nodes, factor 1.
factor=$([ "$NODES" -ge 3 ] && echo 3 || echo 1)
cat >"$W/stack.yaml" <<YAML
apiVersion: loki.grafana.com/v1
kind: LokiStack
metadata: {name: $STACK, namespace: $STACK_NS}
spec:
  size: 1x.demo
  storage: {secret: {name: loki-s3, type: s3}}
  storageClassName: lzo-local
  template:
    ingester: {replicas: 3}
  replication:
    factor: $factor
    zones: [{topologyKey: $ZONE_LABEL, maxSkew: 1}]
YAML
# Every version of every pod of the namespace, from before the first one exists: the
# first version with spec.nodeName shows whether the zone came with the binding.
"$HOST_KUBECTL" --kubeconfig "$W/cp/host.kubeconfig" -n "$STACK_NS" get pods --watch -o json \
  >"$W/pods.watch.json" 2>"$W/logs/pods-watch.log" &
WATCH_PID=$!
sleep 1
t_stack=$(now)
kubectl apply -f "$W/stack.yaml" >/dev/null
say "LokiStack $STACK_NS/$STACK created (1x.demo, 3 ingesters, factor $factor, zones by $ZONE_LABEL)"

# ---------------------------------------------------------------- 7. assertions
# Children: what the operator's own renderer gives for this stack, these nodes and this
# Secret, by kind and name.
kubectl get nodes -o yaml >"$W/nodes.yaml"
kubectl -n "$STACK_NS" get secret loki-s3 -o yaml >"$W/secret.yaml"
"$OP_BIN" render -f "$W/stack.yaml" --nodes "$W/nodes.yaml" --secret "$W/secret.yaml" \
  --kube-version 1.20 --operator-image "$OP_IMAGE" 2>"$W/logs/render.log" |
  awk '/^kind:/ {k=$2} /^metadata:/ {m=1; next} m && /^  name:/ {print k "/" $2; m=0}' |
  sort -u >"$W/children.expected"
expected_zone_aware=$("$OP_BIN" render -f "$W/stack.yaml" --nodes "$W/nodes.yaml" --secret "$W/secret.yaml" \
  --kube-version 1.20 2>/dev/null | python3 -c 'import sys, yaml
n = 0
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] in ("Deployment", "StatefulSet") and \
       d["spec"]["template"]["metadata"].get("labels", {}).get("loki.grafana.com/zone-aware") == "enabled":
        n += d["spec"].get("replicas", 1)
print(n)') || die "cannot count the zone-aware replicas the renderer gives"
[ -s "$W/children.expected" ] || { cat "$W/logs/render.log" >&2; die "render gave no children"; }
children_missing() {
  local kn missing=()
  for kn in $(cat "$W/children.expected"); do
    kubectl -n "$STACK_NS" get "$(echo "${kn%%/*}" | tr A-Z a-z)" "${kn#*/}" >/dev/null 2>&1 || missing+=("$kn")
  done
  echo "${missing[*]}"
}
zpods() { # NAME NODE ZONE-ANNOTATION INIT-EXIT per zone-aware pod
  kubectl -n "$STACK_NS" get pods -l loki.grafana.com/zone-aware=enabled -o json 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    init = [s for s in p["status"].get("initContainerStatuses", []) if s["name"] == "az-annotation-check"]
    t = init[0]["state"].get("terminated") if init else None
    print(p["metadata"]["name"], p["spec"].get("nodeName") or "-",
          p["metadata"].get("annotations", {}).get("loki.grafana.com/availability-zone") or "-",
          "-" if t is None else t["exitCode"])'
}
deadline=$(($(date +%s) + TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ]; do
  if [ -z "$(children_missing)" ]; then
    z=$(zpods)
    [ "$(grep -c . <<<"$z")" -ge "$expected_zone_aware" ] && ! awk '{print $4}' <<<"$z" | grep -qx -- - && break
  fi
  sleep 1
done
TIME[stack]=$(secs "$t_stack")
kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null || true; WATCH_PID=
kubectl -n "$STACK_NS" get pods -o wide >&2 || true

missing=$(children_missing)
assert "the stack's children exist ($(wc -l <"$W/children.expected") objects the renderer lists: $(cut -d/ -f1 "$W/children.expected" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')missing: ${missing:-none})" \
  [ -z "$missing" ]
z=$(zpods)
assert "$expected_zone_aware zone-aware pods (the workloads' replicas): $(grep -c . <<<"$z")" \
  [ "$(grep -c . <<<"$z")" = "$expected_zone_aware" ]
declare -A NODE_ZONE
for n in "${names[@]}"; do
  NODE_ZONE[$n]=$(jp get node "$n" -o jsonpath="{.metadata.labels.topology\.kubernetes\.io/zone}")
done
# The first version of each pod with spec.nodeName, from the watch.
python3 - "$W/pods.watch.json" >"$W/first-bound.txt" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec, i, seen = json.JSONDecoder(), 0, {}
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    try:
        obj, i = dec.raw_decode(text, i)
    except ValueError:
        break
    for p in obj.get("items", [obj]) if obj.get("kind") == "List" else [obj]:
        name = p["metadata"]["name"]
        if name in seen or not p.get("spec", {}).get("nodeName"):
            continue
        seen[name] = (p["spec"]["nodeName"], p["metadata"].get("annotations", {}).get(
            "loki.grafana.com/availability-zone") or "-", p["metadata"]["resourceVersion"])
for name, (node, zone, rv) in sorted(seen.items()):
    print(name, node, zone, rv)
PY
while read -r pod node zone init; do
  [ -n "$pod" ] || continue
  want=${NODE_ZONE[$node]:-?}
  assert "$pod on $node: annotation $ZONE_ANNOTATION=$zone equals the node's $ZONE_LABEL=$want" [ "$zone" = "$want" ]
  first=$(awk -v p="$pod" '$1 == p {print $3 " (resourceVersion " $4 ")"}' "$W/first-bound.txt")
  assert "$pod: zone set in the binding (the first version with spec.nodeName already has it: ${first:-not seen in the watch})" \
    [ "${first%% *}" = "$want" ]
  assert "$pod: init container az-annotation-check (the operator image's wait-for-zone) exited ${init}" [ "$init" = 0 ]
  logs=$(kubectl -n "$STACK_NS" logs "$pod" -c az-annotation-check 2>&1 | tail -n 3 | tr '\n' ' ')
  assert "$pod: its log names the zone $want (read by the kubelet from the downward-API volume): $logs" \
    grep -qw -- "$want" <<<"$logs"
done <<<"$z"

# The webhook configurations, now that a zone-aware stack exists: the Service, the
# operator's CA, the stack's namespace.
svc=$(mwc '{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}:{.webhooks[0].clientConfig.service.port} url={.webhooks[0].clientConfig.url}')
assert "MutatingWebhookConfiguration loki-zone-operator-zone-at-bind calls Service $svc, no URL" \
  [ "$svc" = "$OP_NS/loki-zone-operator-webhook:443 url=" ]
assert "... on pods/binding" bash -c "[[ '$(mwc '{.webhooks[0].rules[*].resources}')' == *pods/binding* ]]"
vwc=$(jp get validatingwebhookconfiguration loki-zone-operator-zone-disruptions -o jsonpath='{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}:{.webhooks[0].clientConfig.service.port} url={.webhooks[0].clientConfig.url}')
assert "ValidatingWebhookConfiguration loki-zone-operator-zone-disruptions calls Service $vwc, no URL" \
  [ "$vwc" = "$OP_NS/loki-zone-operator-webhook:443 url=" ]
ca=$(mwc '{.webhooks[0].clientConfig.caBundle}')
assert "... with a caBundle (a certificate: $(echo "$ca" | base64 -d 2>/dev/null | openssl x509 -noout -subject 2>/dev/null))" \
  bash -c "echo '$ca' | base64 -d | openssl x509 -noout"
sel=$(mwc '{.webhooks[0].namespaceSelector.matchExpressions[*].values[*]}')
assert "... selecting the stack's namespace $STACK_NS (namespaceSelector values: $sel)" grep -qw -- "$STACK_NS" <<<"$sel"
# The webhook's own count, on each replica (both serve it; the leader annotates).
declare -A METRIC
bind_total=0
for p in "${OP_PODS[@]}"; do
  ip=$(jp -n "$OP_NS" get pod "$p" -o jsonpath='{.status.podIP}')
  METRIC[$p]=$(nsenter --net="/run/netns/$NS" curl -sf --max-time 5 "http://$ip:8080/metrics" |
    awk '/^loki_zone_operator_pods_zoned_total\{.*path="bind"/ {print $NF}' | head -n1)
  say "$p$([ "$p" = "$LEADER" ] && echo ' (leader)'): pods_zoned_total{path=\"bind\"} ${METRIC[$p]:-absent}, annotator: $(nsenter --net="/run/netns/$NS" curl -sf --max-time 5 "http://$ip:8080/metrics" | awk '/^loki_zone_operator_pods_zoned_total\{.*path="annotator"/ {print $NF}' | head -n1)"
  bind_total=$(echo "$bind_total + ${METRIC[$p]:-0}" | bc)
done
assert "loki_zone_operator_pods_zoned_total{path=\"bind\"}, summed over both replicas, counts every zone-aware pod: $bind_total >= $expected_zone_aware" \
  [ "$(echo "$bind_total >= $expected_zone_aware" | bc)" = 1 ]
# The path the API server took (the counting rules above): without
# --enable-aggregator-routing it dials the ClusterIP and kube-proxy's DNAT takes the
# connection to a pod; with it (AGGREGATOR_ROUTING=true) it dials a pod IP itself.
some_and_none() { [ "${1:-0}" -gt 0 ] && [ "${2:-x}" = 0 ]; }
via_svc=$(out_count lzo-e2e-webhook-clusterip); via_pod=$(out_count lzo-e2e-webhook-pod-ip)
say "API server connections to the webhook: to ClusterIP $wh_ip:443: ${via_svc:-?}, straight to a pod IP:9443: ${via_pod:-?}"
if [ "${AGGREGATOR_ROUTING:-false}" = true ]; then
  assert "--enable-aggregator-routing: the API server dialled pod IPs (${via_pod:-?} connections), never the ClusterIP (${via_svc:-?})" \
    some_and_none "$via_pod" "$via_svc"
else
  assert "the API server dialled the webhook Service's ClusterIP $wh_ip:443 (${via_svc:-?} connections; kube-proxy's DNAT took them to a pod), never a pod IP directly (${via_pod:-?})" \
    some_and_none "$via_svc" "$via_pod"
fi
assert "the API server logged no failed webhook call" \
  bash -c "! grep -E 'failed calling webhook|Failed calling webhook' '$W/logs/kube-apiserver.log'"

# The Loki containers themselves.
waiting=$(kubectl -n "$STACK_NS" get pods -l loki.grafana.com/zone-aware=enabled \
  -o jsonpath='{range .items[*]}{.metadata.name}: {.status.containerStatuses[0].state.waiting.reason}{.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}' 2>/dev/null || true)
if [ -z "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  cat >&2 <<EOF

!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! The Loki containers did NOT run: their image (docker.io/grafana/loki:3.7.3) cannot
!! be pulled here (no network, by design) and no LOKI_IMAGE_ARCHIVE was given. Checked
!! up to the zone init container's exit; INSTANCE_AVAILABILITY_ZONE in a running Loki
!! container is NOT tested. The containers' states:
$(sed 's/^/!!   /' <<<"$waiting")
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!

EOF
else
  loki_image=$(jp -n "$STACK_NS" get deployment "$STACK-distributor" -o jsonpath='{.spec.template.spec.containers[0].image}')
  for n in "${names[@]}"; do
    assert "$n has the Loki image the operator sets ($loki_image) from LOKI_IMAGE_ARCHIVE" \
      in_node "$n" sh -c "ctr --address /run/containerd/containerd.sock -n k8s.io images ls -q | grep -Fx '$loki_image'"
  done
  loki_scenario
fi

# ---------------------------------------------------------------- 9. figures
ticks() { local s=0 p; for p in "$@"; do [ -r "/proc/$p/stat" ] && s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $s; }
rss() { local s=0 p; for p in "$@"; do [ -r "/proc/$p/status" ] && s=$((s + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status"))); done; echo $((s / 1024)); }
hz=$(getconf CLK_TCK)
cpu_s() { awk -v t="$(ticks "$@")" -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}'; }
node_pids=(); shim_pids=(); op_pids=()
for n in "${names[@]}"; do
  node_pids+=("${KUBELET[$n]}" "${CONTAINERD[$n]}")
  for p in $(mntns_pids "${HOLDER[$n]}"); do
    case "$(cat "/proc/$p/comm" 2>/dev/null)" in
      containerd-shim*) shim_pids+=("$p") ;;
      loki-zone-opera*) op_pids+=("$p") ;;
    esac
  done
done
# Operator processes are in the nodes' cgroups, not their mount namespaces.
for n in "${names[@]}"; do
  for p in $(cgroup_pids "lzo-rn-$ID-$n"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = loki-zone-opera ] && op_pids+=("$p")
  done
done
op_pids=($(printf '%s\n' "${op_pids[@]}" | sort -u))
TIME[total]=$(secs "$T_ALL")
{
  echo
  echo "timings (wall):"
  printf '  %-44s %8s s  (CPU of the build: %s s)\n' "build (make image, control plane, kubelet)" "${TIME[build]}" "${CPU[build]}"
  printf '  %-44s %8s s\n' "cluster up ($NODES real nodes Ready, images in)" "${TIME[cluster]}"
  printf '  %-44s %8s s\n' "operator Ready (install -> 2 Ready, lease)" "${TIME[operator]}"
  printf '  %-44s %8s s\n' "stack pods zoned (create -> every init exited)" "${TIME[stack]}"
  printf '  %-44s %8s s\n' "total until the checks ended" "${TIME[total]}"
  echo "CPU (seconds since start) and RSS now, per part:"
  printf '  %-44s %8s s %6s MiB\n' "control plane (${#CP_PIDS[@]} processes)" "$(cpu_s "${CP_PIDS[@]}")" "$(rss "${CP_PIDS[@]}")"
  for i in "${!CP_PIDS[@]}"; do
    printf '    %-42s %8s s %6s MiB\n' "${CP_NAMES[$i]}" "$(cpu_s "${CP_PIDS[$i]}")" "$(rss "${CP_PIDS[$i]}")"
  done
  for n in "${names[@]}"; do
    printf '  %-44s %8s s %6s MiB\n' "$n kubelet" "$(cpu_s "${KUBELET[$n]}")" "$(rss "${KUBELET[$n]}")"
    printf '  %-44s %8s s %6s MiB\n' "$n containerd" "$(cpu_s "${CONTAINERD[$n]}")" "$(rss "${CONTAINERD[$n]}")"
  done
  printf '  %-44s %8s s %6s MiB\n' "containerd shims (${#shim_pids[@]}, all nodes)" "$(cpu_s "${shim_pids[@]}")" "$(rss "${shim_pids[@]}")"
  printf '  %-44s %8s s %6s MiB\n' "operator replicas (${#op_pids[@]} processes)" "$(cpu_s "${op_pids[@]}")" "$(rss "${op_pids[@]}")"
  [ -z "${LOKI_IMAGE_ARCHIVE:-}" ] || loki_figures
} >&2

if [ "$KEEP" = 1 ]; then
  say "up; KUBECONFIG=$W/cp/host.kubeconfig kubectl get pods -A. $([ -t 0 ] && echo "Press Enter" || echo "kill -TERM $$") to tear down."
  if [ -t 0 ]; then read -r _ || true; else sleep infinity & KEEP_SLEEP=$!; wait "$KEEP_SLEEP" || true; fi
fi
if [ "$FAIL" = 0 ]; then
  say "ALL CHECKS PASSED"
else
  say "FAILED (${#FAILED[@]}):"
  printf '  - %s\n' "${FAILED[@]}" >&2
fi
exit "$FAIL"
