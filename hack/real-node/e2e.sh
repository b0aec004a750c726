#!/usr/bin/env bash
# End-to-end on real nodes (issues 27 and 37): the release as a user installs it. The
# release's image index is pushed (hack/publish.sh, skopeo) to a registry in the test's
# network namespace, which every node's containerd takes as its mirror of ghcr.io and
# docker.io; docs/install.md's quick-start runs as it is written, from dist/install.yaml:
# the kubelets of node-a/b/c (zone-a/b/c; containerd, runc, CNI bridge, kube-proxy) pull
# the operator by digest, its two replicas serve the webhooks through their Service, and
# a zone-aware 1x.demo LokiStack's pods get their zone in the binding and pass their zone
# init container (loki-zone-wait, its own image, pulled by digest). Then the documented uninstall keeps
# the CRDs and the stack; `make deploy` with a namePrefix and another namespace, and no
# Rust toolchain on PATH, installs again; and a drain of an ingester's node goes through
# the eviction webhook behind the prefixed Service. A real Prometheus (Debian's 2.42) in
# the test's network namespace scrapes the operator and the Loki pods through the
# monitoring component's ServiceMonitors, translated into its scrape configuration
# (prometheus.sh): the targets are up, the zone alert fires when a zone stops and
# resolves when it returns, and every dashboard query returns data. `make e2e-real` runs
# it (root).
#
#   sudo hack/real-node/e2e.sh
#
# Environment (besides lib.sh's, see run-demo.sh):
#   NODES=N              real nodes, 1..3 (default 3, one per zone)
#   USE_DIST=1           take dist/ as it is (make test runs hack/release-check.sh just
#                        before, which leaves it); else `make release` writes it first
#   LOKI_IMAGE_ARCHIVE=FILE  an OCI archive of the Loki image the operator sets
#                        (docker.io/grafana/loki:3.7.3), pushed to the registry too (and
#                        pinned by its digest in the release): the real-Loki scenario of
#                        loki.sh runs (S3 server, every component Ready, lines pushed, a
#                        zone stopped, a surviving ingester restarted, every line back)
#   RN_TIMINGS=fast|production  the cluster's node timings (lib.sh; default fast: node
#                        grace 8 s, Lease 8 s, tolerations 10 s; production: Kubernetes'
#                        defaults, grace 40 s, Lease 40 s renewed every 10 s, 300 s)
#   CLIENT_VIEW=0        with LOKI_IMAGE_ARCHIVE, leave out the client's view of a zone
#                        loss under production timings (client-view.sh: the cluster is
#                        moved to RN_TIMINGS=production, one zone stopped and brought back
#                        twice, with the fast failover off and on, a steady client through
#                        the Services each time; CV_BEFORE/CV_OUTAGE/CV_AFTER seconds,
#                        default 20/90/20; CV_VARIANTS, default "off on")
#   TRAFFIC_VIEW=0       with LOKI_IMAGE_ARCHIVE, leave out what crosses zones
#                        (traffic-view.sh: bytes between pods of different zones per
#                        phase, idle, push, queries of recent and flushed data, a zone
#                        stopped and back, with Loki's zone-aware gossip off and on;
#                        TV_* variables there)
#   TIMEOUT=SECONDS      per wait (default 300)
#   PROMETHEUS=0         leave out the Prometheus checks (prometheus.sh)
#   KEEP=1               stay up at the end until Enter (or SIGTERM)
#
# Exits non-zero, naming each failed assertion, if anything fails. Tears everything
# down on exit, Ctrl-C or SIGTERM (lib.sh's teardown).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
export NODES=${NODES:-3}
TIMEOUT=${TIMEOUT:-300}
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
# The release's linux/amd64 binary, for `render` and `crd` on this machine.
OP_BIN="$CACHE_DIR/release-target/x86_64-unknown-linux-musl/release/loki-zone-operator"
VERSION=v$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
OP_NS=loki-zone-operator-system
# The quick-start's namespace and stack (docs/install.md).
STACK_NS=loki
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
for c in skopeo:skopeo docker-registry:docker-registry; do
  command -v "${c%%:*}" >/dev/null || { say "installing ${c#*:} with apt"; apt-get install -y -qq "${c#*:}" >/dev/null; }
done
t=$(now); c0=$(child_cpu)
if [ "${USE_DIST:-0}" != 1 ] || [ ! -s dist/digests.txt ]; then
  say "make release VERSION=$VERSION (the dist/ this check installs from)"
  make --no-print-directory release VERSION="$VERSION" ALLOW_DIRTY=1 >&2
fi
[ -s dist/digests.txt ] || { say "no dist/digests.txt: make release failed"; exit 1; }
[ -x "$OP_BIN" ] || { say "no operator binary $OP_BIN (make release builds it)"; exit 1; }
bash hack/build-k8s.sh current >/dev/null
TIME[build]=$(secs "$t"); CPU[build]=$(awk -v a="$c0" -v b="$(child_cpu)" 'BEGIN {printf "%.1f", b - a}')
# What the release pins: the operator's image index, by digest, in install.yaml.
RELEASED=$(awk -v v=":$VERSION" 'substr($1, length($1) - length(v) + 1) == v && $1 !~ /-bundle:/ {print $1; exit}' dist/digests.txt)
INDEX_DIGEST=$(awk -v r="$RELEASED" '$1 == r {print $2}' dist/digests.txt)
OP_IMAGE=${RELEASED%:"$VERSION"}@$INDEX_DIGEST
grep -q "image: $OP_IMAGE" dist/install.yaml || { say "dist/install.yaml does not run $OP_IMAGE"; exit 1; }
# And the zone init container's image (loki-zone-wait, its own version), by digest.
read -r WAIT_TAGGED WAIT_DIGEST < <(awk '$1 ~ /zone-wait:v/ {print $1, $2; exit}' dist/digests.txt) ||
  { say "dist/digests.txt names no loki-zone-wait image"; exit 1; }
WAIT_IMAGE=${WAIT_TAGGED%:*}@$WAIT_DIGEST
grep -q "value: $WAIT_IMAGE" dist/install.yaml || { say "dist/install.yaml does not name $WAIT_IMAGE"; exit 1; }
say "build: ${TIME[build]} s; operator image $OP_IMAGE; zone init container image $WAIT_IMAGE"

# ---------------------------------------------------------------- 2-3. cluster, registry
# No image is imported but the pause and demo images: the nodes pull the operator (and
# Loki) from the registry lib.sh starts (REGISTRY=1), their mirror of ghcr.io and
# docker.io.
unset OPERATOR_IMAGE
EXTRA_IMAGES=()
export IDLE_SECONDS=0 REGISTRY=1
# A cluster DNS for the pods (lib.sh, CoreDNS): Loki's configuration names
# Services; checked below for the operator's webhook Service.
export CLUSTER_DNS=${CLUSTER_DNS:-1}
t=$(now)
# shellcheck source=hack/real-node/lib.sh
source "$repo/hack/real-node/lib.sh"
# shellcheck source=hack/real-node/prometheus.sh
source "$repo/hack/real-node/prometheus.sh"
source "$repo/hack/real-node/native-zone.sh"
TIME[cluster]=$(secs "$t")
# Every figure printed below names the node timings it was measured under.
RUN_TIMINGS_LABEL=$TIMINGS_LABEL
WATCH_PID=
cleanup() {
  local rc=$?
  # set -e ends a run at a failed command without a word: name it.
  [ "$rc" = 0 ] || [ -n "${FINISHED:-}" ] || say "stopped early (exit $rc), at the command: $BASH_COMMAND"
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null
  teardown
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say "cluster up: ${TIME[cluster]} s ($NODES real node(s); images come from the registry at $REGISTRY_ADDR; node timings $TIMINGS_LABEL)"

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
in_ns() { nsenter --net="/run/netns/$NS" "$@"; }

# ---------------------------------------------------------------- 4. publish
# The release workflow's push (hack/publish.sh), to the test's registry: the image index
# and the bundle image, each pulled back by digest and compared blob by blob.
t=$(now)
REPO_PATH=${RELEASED#*/}
REPO_PATH=${REPO_PATH%:"$VERSION"}
in_ns env IMAGE_REPO="$REGISTRY_ADDR/$REPO_PATH" TLS_VERIFY=false bash hack/publish.sh "$VERSION" \
  >"$W/logs/publish.out" 2>"$W/logs/publish.log" || { cat "$W/logs/publish.log" >&2; die "hack/publish.sh failed"; }
sed 's/^/    /' "$W/logs/publish.log" >&2
assert "hack/publish.sh pushed the image index ($INDEX_DIGEST), the zone init container's ($WAIT_DIGEST) and the bundle image, pulled each back by digest, every blob equal" \
  grep -q "^$REGISTRY_ADDR/$REPO_PATH@$INDEX_DIGEST\$" "$W/logs/publish.out" &&
  grep -q "^$REGISTRY_ADDR/${REPO_PATH%/*}/loki-zone-wait@$WAIT_DIGEST\$" "$W/logs/publish.out"
TIME[publish]=$(secs "$t")
if [ -n "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  loki_ref=$(awk '/name: RELATED_IMAGE_LOKI/ {getline; print $2}' manifests/operator/manager/deployment.yaml)
  transport=oci-archive
  tar tf "$LOKI_IMAGE_ARCHIVE" index.json >/dev/null 2>&1 || transport=docker-archive
  in_ns skopeo copy --quiet --all --preserve-digests --dest-tls-verify=false \
    "$transport:$(realpath "$LOKI_IMAGE_ARCHIVE")" "docker://$REGISTRY_ADDR/${loki_ref#docker.io/}" >&2 ||
    die "pushing $LOKI_IMAGE_ARCHIVE to the registry failed"
  say "pushed $LOKI_IMAGE_ARCHIVE to $REGISTRY_ADDR/${loki_ref#docker.io/} ($transport)"
fi

# ---------------------------------------------------------------- 5. the quick-start
# Local volumes for the StatefulSets' claims (compactor, 3 ingesters x storage and wal,
# index gateway = 8): the cluster's default StorageClass, WaitForFirstConsumer as
# zone-aware stacks need (what the quick-start asks of a cluster), and four volumes per
# node in the node's own directory.
kubectl apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: lzo-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
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
if [ -n "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  # shellcheck source=hack/real-node/loki.sh
  source "$repo/hack/real-node/loki.sh"
  loki_s3_start
fi
# Which address the API server dials for the webhooks: two rules that only count, first
# in the nat table's OUTPUT chain of the namespace (the API server's own connections;
# pods' go through PREROUTING), one for connections to a ClusterIP on 443 (the only
# Service the API server dials is a webhook's), one for connections straight to a pod's
# webhook port 9443. kube-proxy never rewrites OUTPUT itself (only its jump to
# KUBE-SERVICES, whose counters it resets at each sync).
ip netns exec "$NS" iptables -t nat -I OUTPUT 1 -p tcp -d 10.96.0.0/16 --dport 443 \
  -m comment --comment lzo-e2e-webhook-clusterip
ip netns exec "$NS" iptables -t nat -I OUTPUT 1 -p tcp --dport 9443 \
  -m comment --comment lzo-e2e-webhook-pod-ip
out_count() { ip netns exec "$NS" iptables -t nat -L OUTPUT -v -n -x | awk -v c="$1" '$0 ~ c {print $1}'; }
# Every version of every pod of the stack, from before the first one exists: the first
# version of a pod with spec.nodeName shows whether the zone came with the binding.
hk get pods --all-namespaces -l "app.kubernetes.io/instance=$STACK" --watch -o json \
  >"$W/pods.watch.json" 2>"$W/logs/pods-watch.log" &
WATCH_PID=$!

# docs/install.md's quick-start, as it is written, with two substitutions: the release's
# install.yaml is dist/'s, as it is; and without a Loki image the last command (wait for
# Ready) is left out, since no Loki container can start.
python3 - docs/install.md >"$W/quick-start.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- quick-start[^>]*-->\n```sh\n(.*?)```\n<!-- /quick-start -->", text, re.S)
if not m:
    sys.exit("no quick-start block in docs/install.md")
print(m.group(1), end="")
PY
url="https://github.com/loki-zone-operator/loki-zone-operator/releases/download/$VERSION/install.yaml"
grep -qF "$url" "$W/quick-start.sh" || die "the quick-start does not install $url"
cp dist/install.yaml "$W/install.yaml"
sed -i "s#$url#$W/install.yaml#" "$W/quick-start.sh"
if [ -z "${LOKI_IMAGE_ARCHIVE:-}" ]; then
  sed -i '/wait lokistack/d' "$W/quick-start.sh"
  say "without a Loki image the quick-start's last command (wait for Ready) is left out"
fi
# Once the quick-start creates the namespace, with a Loki image: the Service `minio` the
# quick-start's Secret names, in front of the test's S3 server.
namespace_created() {
  [ -z "${LOKI_IMAGE_ARCHIVE:-}" ] || loki_s3_service
}
t_op=$(now)
t_stack=$t_op
say "running docs/install.md's quick-start ($(grep -c '^kubectl' "$W/quick-start.sh") commands)"
(
  set -euo pipefail
  export KUBECONFIG="$W/cp/host.kubeconfig"
  kubectl() {
    "$HOST_KUBECTL" "$@"
    if [ "$*" = "create namespace $STACK_NS" ]; then namespace_created; fi
  }
  # shellcheck disable=SC1090 # the block of docs/install.md
  source "$W/quick-start.sh"
) >"$W/logs/quick-start.log" 2>&1 || { cat "$W/logs/quick-start.log" >&2; fail "the quick-start failed"; }
sed 's/^/    /' "$W/logs/quick-start.log" >&2
assert "the quick-start ran: LokiStack $STACK_NS/$STACK exists" hk -n "$STACK_NS" get lokistack "$STACK"

dep() { jp -n "$OP_NS" get deployment loki-zone-operator -o jsonpath="$1"; }
assert "Deployment: 2 replicas" [ "$(dep '{.spec.replicas}')" = 2 ]
assert "Deployment: image $OP_IMAGE (by digest), RELATED_IMAGE_ZONE_WAIT $WAIT_IMAGE" \
  [ "$(dep '{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].env[?(@.name=="RELATED_IMAGE_ZONE_WAIT")].value}')" = "$OP_IMAGE $WAIT_IMAGE" ]
pull=$(dep '{.spec.template.spec.containers[0].imagePullPolicy}')
assert "Deployment: imagePullPolicy IfNotPresent (the server's default for a digest): $pull" [ "$pull" = IfNotPresent ]
assert "Deployment: the shipped security context (read-only root filesystem, non-root, no capabilities)" \
  [ "$(dep '{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].securityContext.runAsNonRoot} {.spec.template.spec.containers[0].securityContext.capabilities.drop[0]}')" = "true true ALL" ]

# ---------------------------------------------------------------- 6. operator Ready
ready_pods() {
  kubectl -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
    grep -c '=True' || true
}
holder() { jp -n "$OP_NS" get lease loki-zone-operator -o jsonpath='{.spec.holderIdentity}'; }
mwc() { jp get mutatingwebhookconfiguration loki-zone-operator-zone-at-bind -o jsonpath="$1"; }
covered() { mwc '{.webhooks[0].namespaceSelector.matchExpressions[*].values[*]}' | grep -qw -- "$STACK_NS"; }
deadline=$(($(date +%s) + TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ]; do
  [ "$(ready_pods)" = 2 ] && [ -n "$(holder)" ] && break
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
say "operator Ready (2 replicas, leader $LEADER): ${TIME[operator]} s after the install began"
# Pulled, not imported: every operator container runs the index the release pins (the
# kubelet reports the digest it pulled by), and the registry served it to the nodes.
ids=$(jp -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator -o jsonpath='{range .items[*]}{.status.containerStatuses[0].imageID}{"\n"}{end}')
assert "both operator containers run $INDEX_DIGEST, the index digest (imageIDs: $(echo $ids))" \
  [ "$(grep -c "@$INDEX_DIGEST\$" <<<"$ids")" = 2 ]
served=$(grep -c "GET /v2/$REPO_PATH/manifests/$INDEX_DIGEST" "$W/logs/registry.log" || true)
assert "the registry served the index by digest to the nodes ($served GET /v2/$REPO_PATH/manifests/$INDEX_DIGEST)" [ "$served" -ge 1 ]
wh_ip=$(jp -n "$OP_NS" get service loki-zone-operator-webhook -o jsonpath='{.spec.clusterIP}')
[ -n "$wh_ip" ] || die "the webhook Service loki-zone-operator-webhook has no ClusterIP"
if [ "$CLUSTER_DNS" = 1 ]; then
  name=loki-zone-operator-webhook.$OP_NS.svc.cluster.local
  got=""
  for _ in $(seq 10); do
    got=$(in_ns python3 hack/real-node/dns-query.py "$APISERVER_IP" "$name" 2>&1) && [ "$got" = "$wh_ip" ] && break
    sleep 0.5
  done
  assert "the cluster DNS pods are given ($APISERVER_IP) resolves $name to its ClusterIP $wh_ip: $got" [ "$got" = "$wh_ip" ]
  got=$(in_ns python3 hack/real-node/dns-query.py "$APISERVER_IP" example.com 2>&1 || true)
  assert "... and answers NXDOMAIN outside the cluster (nothing forwarded): example.com: $got" [ "$got" = NXDOMAIN ]
fi
# The release's namespaced install is accepted as it is (server-side dry run) in the
# namespace it watches.
assert "dist/install-namespaced.yaml applies (server-side dry run; it watches namespace loki)" \
  hk apply --server-side --force-conflicts --dry-run=server -f dist/install-namespaced.yaml

# On 1.35 the quick-start's stack reads its zone from the label Kubernetes copies at
# binding (native-zone.sh); then it is switched to the operator's zone-at-bind webhook,
# which the checks below are about (the path of other topology keys, older servers and
# clusters that switch the copy off).
native_zone_check
zone_source_webhook
assert "MutatingWebhookConfiguration loki-zone-operator-zone-at-bind covers namespace $STACK_NS" covered

# The quick-start created the stack while the operator was starting: pods bound before
# the API server saw the zone-at-bind configuration were zoned by the annotator a moment
# later. Now that it covers the namespace (and after a pause for the API server's
# informer), every zone-aware pod is recreated, and each of those must be zoned in its
# binding.
sleep 3
t_recreate=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# The API server's log from here on: the install itself may see failed (ignored) calls
# of the zone-at-bind webhook, made before the Service had a ready endpoint.
log_from=$(($(wc -l <"$W/logs/kube-apiserver.log") + 1))
sleep 1
kubectl -n "$STACK_NS" delete pods -l loki.grafana.com/zone-aware=enabled --wait=false >/dev/null
say "every zone-aware pod of $STACK_NS deleted at $t_recreate, to be recreated under the webhook"

# ---------------------------------------------------------------- 7. assertions
# Children: what the operator's own renderer gives for this stack, these nodes and this
# Secret, by kind and name.
hk -n "$STACK_NS" get lokistack "$STACK" -o yaml >"$W/stack.yaml"
kubectl get nodes -o yaml >"$W/nodes.yaml"
kubectl -n "$STACK_NS" get secret loki-s3 -o yaml >"$W/secret.yaml"
"$OP_BIN" render -f "$W/stack.yaml" --nodes "$W/nodes.yaml" --secret "$W/secret.yaml" \
  --zone-wait-image "$WAIT_IMAGE" 2>"$W/logs/render.log" |
  awk '/^kind:/ {k=$2} /^metadata:/ {m=1; next} m && /^  name:/ {print k "/" $2; m=0}' |
  sort -u >"$W/children.expected"
expected_zone_aware=$("$OP_BIN" render -f "$W/stack.yaml" --nodes "$W/nodes.yaml" --secret "$W/secret.yaml" \
  2>/dev/null | python3 -c 'import sys, yaml
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
zpods() { # NAME NODE ZONE-ANNOTATION INIT-EXIT UID INIT-IMAGE per zone-aware pod created
           # since the recreation (and not being deleted)
  kubectl -n "$STACK_NS" get pods -l loki.grafana.com/zone-aware=enabled -o json 2>/dev/null | python3 -c '
import json, sys
since = sys.argv[1]
for p in json.load(sys.stdin)["items"]:
    m = p["metadata"]
    if m.get("deletionTimestamp") or m["creationTimestamp"] < since:
        continue
    init = [s for s in p["status"].get("initContainerStatuses", []) if s["name"] == "az-annotation-check"]
    t = init[0]["state"].get("terminated") if init else None
    image = [c["image"] for c in p["spec"].get("initContainers", []) if c["name"] == "az-annotation-check"]
    print(m["name"], p["spec"].get("nodeName") or "-",
          m.get("annotations", {}).get("loki.grafana.com/availability-zone") or "-",
          "-" if t is None else t["exitCode"], m["uid"], image[0] if image else "-")' "$t_recreate"
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
# The first version of each pod (by uid) with spec.nodeName, from the watch.
python3 hack/real-node/first-bound.py "$W/pods.watch.json" >"$W/first-bound.txt"
while read -r pod node zone init uid init_image; do
  [ -n "$pod" ] || continue
  want=${NODE_ZONE[$node]:-?}
  assert "$pod on $node: annotation $ZONE_ANNOTATION=$zone equals the node's $ZONE_LABEL=$want" [ "$zone" = "$want" ]
  first=$(awk -v u="$uid" '$1 == u {print $3 " (resourceVersion " $5 ")"}' "$W/first-bound.txt")
  assert "$pod: zone set in the binding (the first version with spec.nodeName already has it: ${first:-not seen in the watch})" \
    [ "${first%% *}" = "$want" ]
  assert "$pod: init container az-annotation-check runs loki-zone-wait by digest ($init_image)" \
    [ "$init_image" = "$WAIT_IMAGE" ]
  assert "$pod: init container az-annotation-check (loki-zone-wait) exited ${init}" [ "$init" = 0 ]
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
no_failed_calls() { ! tail -n "+$1" "$W/logs/kube-apiserver.log" | grep -E 'failed calling webhook|Failed calling webhook'; }
assert "the API server logged no failed webhook call since the pods were recreated" no_failed_calls "$log_from"

# ---------------------------------------------------------------- 8. uninstall, a prefixed install, a drain
# docs/install.md's uninstall: everything of the operator but the CRDs. The stack stays,
# and its pods run on.
stack_uids() {
  kubectl -n "$STACK_NS" get pods -l "app.kubernetes.io/instance=$STACK" \
    -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' 2>/dev/null | sort
}
until_true() { # until_true SECONDS COMMAND...: whether COMMAND succeeds within SECONDS
  local end=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 1
  done
}
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
uids_before=$(stack_uids)
t=$(now)
hk delete -l app.kubernetes.io/name=loki-zone-operator -f "$W/install.yaml" >"$W/logs/uninstall.log" 2>&1 ||
  { cat "$W/logs/uninstall.log" >&2; fail "kubectl delete -l app.kubernetes.io/name=loki-zone-operator -f install.yaml failed"; }
assert "uninstall: namespace $OP_NS is gone" until_true "$TIMEOUT" gone namespace "$OP_NS"
webhooks_gone() {
  gone mutatingwebhookconfiguration loki-zone-operator-zone-at-bind &&
    gone validatingwebhookconfiguration loki-zone-operator-zone-disruptions
}
assert "uninstall: both webhook configurations went with their owner, the ClusterRole" until_true 60 webhooks_gone
TIME[uninstall]=$(secs "$t")
assert "uninstall: the four CRDs stay" kubectl get crd lokistacks.loki.grafana.com alertingrules.loki.grafana.com \
  recordingrules.loki.grafana.com rulerconfigs.loki.grafana.com
assert "uninstall: LokiStack $STACK_NS/$STACK stays, and every pod of it runs on ($(grep -c . <<<"$uids_before") pods, none recreated)" \
  [ "$(stack_uids)" = "$uids_before" ]

# `make deploy` of an overlay with a namePrefix and another namespace, the release's
# image, and no Rust toolchain on PATH: the operator must register its webhooks behind
# the renamed Service (the eviction webhook fails closed from 1.28).
ACME_NS=lzo-acme
mkdir -p "$W/overlay"
cat >"$W/overlay/kustomization.yaml" <<YAML
namePrefix: acme-
namespace: $ACME_NS
resources:
- $(realpath --relative-to="$W/overlay" "$repo/manifests/operator")
YAML
# With the Loki image at hand the release pins it by digest; a user moving from
# install.yaml to make deploy keeps that pin with the same `images:` entry, or every Loki
# pod rolls to the tag. The check below (no pod recreated) holds only with it.
loki_pin=$(awk '/name: RELATED_IMAGE_LOKI/ {getline; print $2}' dist/install.yaml)
if [[ $loki_pin == *@sha256:* ]]; then
  printf 'images:\n- name: %s\n  digest: %s\n' "${loki_pin%@*}" "${loki_pin##*@}" >>"$W/overlay/kustomization.yaml"
fi
nocargo=$(tr ':' '\n' <<<"$PATH" | while read -r d; do
  [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ] || printf '%s:' "$d"; done)
nocargo=${nocargo%:}
assert "PATH without cargo, rustc or rustup for make deploy: $(PATH=$nocargo command -v cargo rustc rustup || echo none found)" \
  bash -c "PATH='$nocargo'; ! command -v cargo && ! command -v rustc && ! command -v rustup"
# The API server's connections to a ClusterIP on 443 from here on can only be to the
# renamed webhook Service (the first install's webhook configurations are gone).
svc_before=$(out_count lzo-e2e-webhook-clusterip)
pod_before=$(out_count lzo-e2e-webhook-pod-ip)
t=$(now)
env PATH="$nocargo" KUBECONFIG="$W/cp/host.kubeconfig" \
  make --no-print-directory -C "$repo" deploy OVERLAY="$W/overlay" IMG="$OP_IMAGE" ZONE_WAIT_IMG="$WAIT_IMAGE" >"$W/logs/make-deploy.log" 2>&1 ||
  { cat "$W/logs/make-deploy.log" >&2; die "make deploy OVERLAY=... (no cargo on PATH) failed"; }
OP_NS=$ACME_NS
acme_ready() { [ "$(ready_pods)" = 2 ] && [ -n "$(holder)" ] && covered &&
  [ "$(mwc '{.webhooks[0].clientConfig.service.name}')" = acme-loki-zone-operator-webhook ]; }
assert "make deploy OVERLAY (namePrefix acme-, namespace $ACME_NS), no cargo on PATH: 2 replicas Ready, a leader, the webhooks registered" \
  until_true "$TIMEOUT" acme_ready
TIME[prefixed]=$(secs "$t")
OP_PODS=($(jp -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator -o jsonpath='{.items[*].metadata.name}'))
for cfg in mutatingwebhookconfiguration/loki-zone-operator-zone-at-bind validatingwebhookconfiguration/loki-zone-operator-zone-disruptions; do
  target=$(jp get "$cfg" -o jsonpath='{.webhooks[0].clientConfig.service.namespace}/{.webhooks[0].clientConfig.service.name}')
  assert "${cfg#*/} calls the renamed Service: $target" [ "$target" = "$ACME_NS/acme-loki-zone-operator-webhook" ]
  owner=$(jp get "$cfg" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')
  assert "${cfg#*/} is owned by the renamed ClusterRole: $owner" [ "$owner" = ClusterRole/acme-loki-zone-operator-webhook-configuration ]
done
sleep 5
now_uids=$(stack_uids)
assert "the prefixed install renders what the first did: no pod of the stack recreated" [ "$now_uids" = "$uids_before" ]

# A real Prometheus from here on, scraping this install through the monitoring
# component's objects (prometheus.sh).
if [ "${PROMETHEUS:-1}" = 1 ]; then
  t_prom=$(now)
  prom_start && prom_targets_check || fail "Prometheus did not start: its checks are left out"
  PROM_ADDED=$(secs "$t_prom")
fi

# A drain of an ingester's node: kubectl evicts it, the API server asks the eviction
# webhook behind the prefixed Service, which allows one zone's ingesters.
# Evictions the leader decided to allow, summed over the replicas: `allowed`, or
# `already_down` for an ingester that was not Ready anyway (without a Loki image none is).
evictions() {
  local p ip sum=0 n
  for p in "${OP_PODS[@]}"; do
    ip=$(jp -n "$OP_NS" get pod "$p" -o jsonpath='{.status.podIP}')
    n=$(in_ns curl -sf --max-time 5 "http://$ip:8080/metrics" |
      awk '/^loki_zone_operator_webhook_evictions_total\{.*result="(allowed|already_down)"/ {s += $NF} END {print s + 0}')
    sum=$(echo "$sum + ${n:-0}" | bc)
  done
  echo "$sum"
}
ingester=$STACK-ingester-0
drained=$(jp -n "$STACK_NS" get pod "$ingester" -o jsonpath='{.spec.nodeName}')
allowed_before=$(evictions)
drain_log_from=$(($(wc -l <"$W/logs/kube-apiserver.log") + 1))
t=$(now)
hk drain "$drained" --ignore-daemonsets --delete-emptydir-data --timeout=120s \
  --pod-selector=app.kubernetes.io/component=ingester >"$W/logs/drain.log" 2>&1 ||
  { cat "$W/logs/drain.log" >&2; fail "kubectl drain $drained failed"; }
TIME[drain]=$(secs "$t")
allowed_after=$(evictions)
assert "kubectl drain $drained evicted $ingester in ${TIME[drain]} s" grep -q "evicted" "$W/logs/drain.log"
assert "the eviction webhook behind acme-loki-zone-operator-webhook decided it, on the leader (evictions allowed: $allowed_before -> $allowed_after)" \
  [ "$(echo "$allowed_after > $allowed_before" | bc)" = 1 ]
# Two observations, either of which shows the Service's path: new connections to a
# ClusterIP on 443 counted in nat OUTPUT since the prefixed install, or the API server's
# connection to the renamed Service's ClusterIP, open now (it keeps it for the next
# call). The count alone stayed at 8 -> 8 in two runs where the renamed webhook was
# reached all the same, and no connection to a pod IP was counted either; why the first
# packet of that connection was not counted is not known, so the socket table, which
# does not depend on netfilter, is read as well. A pod IP dialled directly would show in
# the other counter, which must not move.
acme_ip=$(jp -n "$OP_NS" get service acme-loki-zone-operator-webhook -o jsonpath='{.spec.clusterIP}')
svc_after=$(out_count lzo-e2e-webhook-clusterip)
pod_after=$(out_count lzo-e2e-webhook-pod-ip)
open_conns=$(in_ns ss -Htn state established "( dst ${acme_ip:-0.0.0.0}:443 )" 2>/dev/null | grep -c . || true)
if [ "${AGGREGATOR_ROUTING:-false}" = true ]; then
  say "AGGREGATOR_ROUTING=true: the API server dials the webhook's pod IPs (counted above), so the drain's path is not checked here (to a pod IP:9443 in all: $pod_before -> $pod_after)"
else
  assert "... through the Service's ClusterIP $acme_ip:443 (API server connections to a ClusterIP:443 since the prefixed install: $svc_before -> $svc_after; open to $acme_ip:443 now: $open_conns; to a pod IP:9443 in all: $pod_before -> $pod_after)" \
    bash -c "[ -n '$acme_ip' ] && [ '${pod_after:-x}' = '${pod_before:-y}' ] && { [ '${svc_after:-0}' -gt '${svc_before:-0}' ] || [ '$open_conns' -ge 1 ]; }"
fi
assert "the API server logged no failed webhook call during the drain" no_failed_calls "$drain_log_from"
kubectl uncordon "$drained" >/dev/null
back() {
  kubectl -n "$STACK_NS" get pod "$ingester" -o jsonpath='{.metadata.deletionTimestamp}{" "}{.status.initContainerStatuses[0].state.terminated.exitCode}' 2>/dev/null | grep -qx ' 0'
}
assert "$ingester is back on $drained after the uncordon (its zone init container exited 0)" until_true "$TIMEOUT" back

# Zone-local routing on the real kube-proxy (issue 53): what the entry Services ask for.
if [ "${PREFER_CLOSE:-1}" = 1 ]; then
  # shellcheck source=hack/real-node/zone-traffic.sh
  source "$repo/hack/real-node/zone-traffic.sh"
  # shellcheck source=hack/real-node/prefer-close.sh
  source "$repo/hack/real-node/prefer-close.sh"
  t=$(now)
  pc_run
  TIME[prefer_close]=$(secs "$t")
fi

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
  t_prom=$(now)
  prom_zone_outage_short
else
  loki_image=$(jp -n "$STACK_NS" get deployment "$STACK-distributor" -o jsonpath='{.spec.template.spec.containers[0].image}')
  for n in "${names[@]}"; do
    assert "$n pulled the Loki image the operator sets ($loki_image) from the registry" \
      in_node "$n" sh -c "ctr --address /run/containerd/containerd.sock -n k8s.io images ls -q | grep -Fx '$loki_image'"
  done
  loki_scenario
  t_prom=$(now)
  if [ -n "${LOKI_T_STOP:-}" ]; then
    # The scenario stopped a zone and left it down: the alert, then the zone back.
    prom_zone_outage_check "$LOKI_T_STOP" "$LOKI_DEAD_ZONE" loki_zone_return
    # Without Prometheus (PROMETHEUS=0) the check above returns at once: the zone back
    # here, for what follows.
    [ "${LOKI_ZONE_DOWN:-0}" = 0 ] || loki_zone_return
  fi
fi
prom_dashboards_check
[ -z "${PROM_DIR:-}" ] || PROM_ADDED=$(awk -v a="${PROM_ADDED:-0}" -v b="$(secs "$t_prom")" 'BEGIN {printf "%.1f", a + b}')
# What crosses zones (issue 41): with a Loki image only, before the client view (it
# uses the client view's helpers; the client view sources them again and starts clean).
if [ -n "${LOKI_IMAGE_ARCHIVE:-}" ] && [ "${TRAFFIC_VIEW:-1}" = 1 ]; then
  # shellcheck source=hack/real-node/zone-traffic.sh
  source "$repo/hack/real-node/zone-traffic.sh"
  # shellcheck source=hack/real-node/client-view.sh
  source "$repo/hack/real-node/client-view.sh"
  # shellcheck source=hack/real-node/traffic-view.sh
  source "$repo/hack/real-node/traffic-view.sh"
  t=$(now)
  tv_run
  TIME[traffic_view]=$(secs "$t")
fi
# The client's view of a zone loss under production timings (issue 42): with a Loki
# image only, last, since it moves the cluster to other node timings.
if [ -n "${LOKI_IMAGE_ARCHIVE:-}" ] && [ "${CLIENT_VIEW:-1}" = 1 ]; then
  # shellcheck source=hack/real-node/client-view.sh
  source "$repo/hack/real-node/client-view.sh"
  t=$(now)
  cv_run
  TIME[client_view]=$(secs "$t")
fi

# ---------------------------------------------------------------- 9. figures
ticks() { local s=0 p; for p in "$@"; do [ -r "/proc/$p/stat" ] && s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $s; }
rss() { local s=0 p v; for p in "$@"; do v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null); s=$((s + ${v:-0})); done; echo $((s / 1024)); }
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
  echo "node timings of every figure below unless it says otherwise: $RUN_TIMINGS_LABEL"
  echo "timings (wall):"
  printf '  %-44s %8s s  (CPU of the build: %s s)\n' "build (release unless USE_DIST, control plane, kubelet)" "${TIME[build]}" "${CPU[build]}"
  printf '  %-44s %8s s\n' "cluster up ($NODES real nodes Ready, registry)" "${TIME[cluster]}"
  printf '  %-44s %8s s\n' "publish (push both images, pull back, compare)" "${TIME[publish]:-?}"
  printf '  %-44s %8s s\n' "operator Ready (quick-start -> 2 Ready, lease)" "${TIME[operator]}"
  printf '  %-44s %8s s\n' "zone label at binding (operator Ready -> every quick-start pod's init exited)" "${TIME[native]:-?}"
  printf '  %-44s %8s s\n' "stack pods zoned (quick-start -> every init exited after the recreation)" "${TIME[stack]}"
  printf '  %-44s %8s s\n' "uninstall (delete -l ... -f install.yaml)" "${TIME[uninstall]:-?}"
  printf '  %-44s %8s s\n' "prefixed make deploy -> 2 Ready, webhooks" "${TIME[prefixed]:-?}"
  printf '  %-44s %8s s\n' "drain of an ingester's node (kubectl drain)" "${TIME[drain]:-?}"
  printf '  %-44s %8s s\n' "trafficDistribution (${PC_REQUESTS:-60} GETs without, then with)" "${TIME[prefer_close]:-not run}"
  printf '  %-44s %8s s\n' "traffic view (gossip off and on, 2 outages)" "${TIME[traffic_view]:-not run}"
  printf '  %-44s %8s s\n' "client view (production timings, 2 outages)" "${TIME[client_view]:-not run}"
  printf '  %-44s %8s s\n' "total until the checks ended" "${TIME[total]}"
  [ -z "${PC_FIGURES:-}" ] || echo "trafficDistribution from a client in zone-a, bytes per phase (out of zone-a, inside it, per ordered pair): $PC_FIGURES"
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
  [ -z "${PROM_DIR:-}" ] || echo "(the Prometheus figures below: node timings $RUN_TIMINGS_LABEL)"
  prom_figures
  [ -z "${PROM_DIR:-}" ] || printf '  %-44s %8s s\n' "added by the Prometheus checks (wall)" "${PROM_ADDED:-?}"
  [ -z "${TV_DIR:-}" ] || tv_figures
  [ -z "${CV_DIR:-}" ] || cv_figures
} >&2

if [ "$KEEP" = 1 ]; then
  say "up; KUBECONFIG=$W/cp/host.kubeconfig kubectl get pods -A. $([ -t 0 ] && echo "Press Enter" || echo "kill -TERM $$") to tear down."
  if [ -t 0 ]; then read -r _ || true; else sleep infinity & KEEP_SLEEP=$!; wait "$KEEP_SLEEP" || true; fi
fi
FINISHED=1
if [ "$FAIL" = 0 ]; then
  say "ALL CHECKS PASSED"
else
  say "FAILED (${#FAILED[@]}):"
  printf '  - %s\n' "${FAILED[@]}" >&2
fi
exit "$FAIL"
