# Sourced by run-demo.sh and e2e.sh (bash, set -euo pipefail): checks the tools, creates
# the network namespace, starts the control plane, kube-proxy and NODES real nodes, and
# returns once they are Ready, with the teardown trapped on EXIT (Ctrl-C and SIGTERM
# exit through it). See run-demo.sh for the environment it reads; also
# EXTRA_IMAGES=(ARCHIVE...) are imported into every node like OPERATOR_IMAGE and
# ZONE_WAIT_IMAGE, and
# CLUSTER_DNS=1 starts a cluster DNS for the pods (CoreDNS, hack/build-coredns.sh).
# Leaves for the caller: W (work dir), NS, BIN, KC, kubectl (a function, inside the
# namespace), the PIDs (CP_PIDS/CP_NAMES, HOLDER, CONTAINERD, KUBELET), names (the
# nodes), log, die, in_node, mntns_pids, cgroup_pids, t0 (API server start),
# run_containerd and run_kubelet (start a node's daemons again after a test stopped
# them: its mount namespace, cgroups and files are kept), PROMETHEUS_TOKEN (a user
# lzo-prometheus with no role yet, for a Prometheus's discovery), and the node timings:
# RN_TIMINGS (fast or production, below), TIMINGS_LABEL (what they are, for every
# printed figure) and timings_switch MODE (the running cluster moved to other timings).
#
# RN_TIMINGS=fast (the default): the harness's timings, for speed: the node lifecycle
# controller calls a node lost 8 s after its last heartbeat (checked every 1 s), kubelets
# hold an 8 s Lease renewed every 2 s and post their status every 2 s, and pods tolerate
# a not-ready or unreachable node for 10 s. RN_TIMINGS=production: Kubernetes' defaults:
# --node-monitor-grace-period=40s, --node-monitor-period=5s (startup grace 1m and
# eviction rate 0.1 left at their defaults), kubelets nodeLeaseDurationSeconds 40
# (renewed every 40 x 0.25 = 10 s) and nodeStatusUpdateFrequency 10s, tolerations 300 s.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES=${NODES:-1}
KEEP=${KEEP:-0}
RESTRICT_OOM=${RESTRICT_OOM:-true}
IDLE_SECONDS=${IDLE_SECONDS:-60}
CACHE_DIR=${LZO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loki-zone-operator}
# The current Kubernetes (hack/k8s-current): control plane, kubelet, kube-proxy, kubectl.
BIN=$(bash "$here/../build-k8s.sh" current) || { echo "hack/build-k8s.sh current failed" >&2; exit 1; }
NODE_NAMES=(node-a node-b node-c)
APISERVER_IP=10.88.0.1
API="https://$APISERVER_IP:6443"
ADMIN_TOKEN=real-node-admin-token
PROMETHEUS_TOKEN=
DEMO_IMAGE=registry.invalid/lzo/demo:1
RN_TIMINGS=${RN_TIMINGS:-fast}

# The flags and settings of node timings MODE (see the top of this file).
timings_set() { # timings_set MODE
  case $1 in
    fast)
      TIMINGS_CM=(--node-monitor-period=1s --node-monitor-grace-period=8s
        --node-startup-grace-period=10s --node-eviction-rate=100)
      TIMINGS_TOLERATION=10
      TIMINGS_LEASE=8
      TIMINGS_STATUS=2s
      TIMINGS_LABEL="fast (node grace 8 s checked every 1 s, kubelet Lease 8 s renewed every 2 s, status every 2 s, tolerations 10 s)"
      ;;
    production)
      TIMINGS_CM=(--node-monitor-period=5s --node-monitor-grace-period=40s)
      TIMINGS_TOLERATION=300
      TIMINGS_LEASE=40
      TIMINGS_STATUS=10s
      TIMINGS_LABEL="production (node grace 40 s checked every 5 s, kubelet Lease 40 s renewed every 10 s, status every 10 s, tolerations 300 s)"
      ;;
    *) die "RN_TIMINGS must be fast or production, not $1" ;;
  esac
  TIMINGS_API=(--default-not-ready-toleration-seconds="$TIMINGS_TOLERATION"
    --default-unreachable-toleration-seconds="$TIMINGS_TOLERATION")
  RN_TIMINGS=$1
}

log() { printf '[real-node %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (network and mount namespaces, cgroups)"
[[ "$NODES" =~ ^[1-3]$ ]] || die "NODES must be 1, 2 or 3"
timings_set "$RN_TIMINGS"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run hack/build-k8s.sh current"
done
KUBE_PROXY=${KUBE_PROXY:-1}
# Image archives by absolute path: the imports run in each node's mount namespace,
# whose working directory is not the caller's.
if [ -n "${OPERATOR_IMAGE:-}" ]; then
  [ -s "$OPERATOR_IMAGE" ] || die "OPERATOR_IMAGE $OPERATOR_IMAGE: no such archive"
  OPERATOR_IMAGE=$(realpath "$OPERATOR_IMAGE")
fi
if [ -n "${ZONE_WAIT_IMAGE:-}" ]; then
  [ -s "$ZONE_WAIT_IMAGE" ] || die "ZONE_WAIT_IMAGE $ZONE_WAIT_IMAGE: no such archive"
  ZONE_WAIT_IMAGE=$(realpath "$ZONE_WAIT_IMAGE")
fi
missing=()
for c in containerd:containerd runc:runc etcd:etcd-server ip:iproute2 iptables:iptables \
  gcc:gcc openssl:openssl nsenter:util-linux ping:iputils-ping bc:bc curl:curl socat:socat; do
  command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}")
done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} with apt"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# cgroup v1 with the cgroupfs driver: that is what this machine has (no systemd, no
# cgroup2-only mount). The script does not handle a cgroup2-only host.
[ -d /sys/fs/cgroup/memory ] || die "expects cgroup v1 controllers under /sys/fs/cgroup"

if [ -n "${WORK_DIR:-}" ]; then
  W=$WORK_DIR
  mkdir -p "$W"
  [ -z "$(ls -A "$W")" ] || die "WORK_DIR $W is not empty"
else W=$(mktemp -d /tmp/lzo-real-node.XXXXXX); fi
W=$(cd "$W" && pwd)
# kubectl's discovery cache, per run: ~/.kube/cache is keyed by the API server's address,
# which every run shares (10.88.0.1:6443), so a run on another Kubernetes version would
# read the groups of the last (1.20's policy/v1beta1: `get pdb` then says NotFound).
export KUBECACHEDIR="$W/kubectl-cache"
ID=$(basename "$W" | tr -cd 'a-zA-Z0-9' | tail -c 6)
NS="lzo-rn-$ID"
mkdir -p "$W/logs" "$W/cp/certs"
KC="$W/cp/admin.kubeconfig"
CP_PIDS=()
CP_NAMES=()
declare -A HOLDER CONTAINERD KUBELET
kubectl() { nsenter --net="/run/netns/$NS" "$BIN/kubectl" --kubeconfig "$KC" "$@"; }

# ---------------------------------------------------------------- teardown
# Stops every process this script started, and only those: by the PIDs it recorded,
# by the node's cgroup (pod processes), by the node's mount namespace (containerd
# shims) and by the network namespace (anything left in it); then removes the cgroups
# and the namespace. Mounts made inside the nodes' mount namespaces go with them.
stop_pids() { # stop_pids SECONDS PID...
  local t=$1; shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq $((t * 10))); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return 0
    sleep 0.1
  done
  log "still running ${t} s after SIGTERM, killed: $(ps -o pid=,comm= -p "$(IFS=,; echo "$*")" 2>/dev/null | tr -s ' \n' ' ')"
  kill -KILL "$@" 2>/dev/null || true
}
cgroup_pids() { # every PID in the node's cgroup tree
  local root=/sys/fs/cgroup/pids/$1
  [ -d "$root" ] && find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}
mntns_pids() { # every PID in the mount namespace of PID $1 (the holder)
  local want p
  want=$(readlink "/proc/$1/ns/mnt" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$want" ] && echo "${p#/proc/}"
  done
  return 0
}
teardown() {
  set +e
  trap - EXIT INT TERM
  log "tearing down"
  [ -n "${KEEP_SLEEP:-}" ] && kill "$KEEP_SLEEP" 2>/dev/null
  local n
  for n in "${!HOLDER[@]}"; do
    [ -n "${KUBELET[$n]:-}" ] && stop_pids 10 "${KUBELET[$n]}"
    # Pods: TERM then KILL everything in the node's cgroups (pause, demo, exec'd).
    stop_pids 3 $(cgroup_pids "lzo-rn-$ID-$n")
    # containerd and its shims share the node's mount namespace with the holder.
    [ -n "${CONTAINERD[$n]:-}" ] && stop_pids 10 "${CONTAINERD[$n]}"
    stop_pids 3 $(mntns_pids "${HOLDER[$n]}" | grep -vx "${HOLDER[$n]}")
    stop_pids 3 "${HOLDER[$n]}"
    local c
    for c in /sys/fs/cgroup/*/"lzo-rn-$ID-$n"; do
      [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
  # Control plane, newest first.
  local i
  for ((i = ${#CP_PIDS[@]} - 1; i >= 0; i--)); do stop_pids 10 "${CP_PIDS[$i]}"; done
  if [ -n "${NS_CREATED:-}" ] && [ -e "/run/netns/$NS" ]; then
    stop_pids 3 $(ip netns pids "$NS" 2>/dev/null)
    ip netns del "$NS"
  fi
  if [ "$KEEP" = 1 ] || [ "${KEEP_WORK:-0}" = 1 ] || [ -n "${WORK_DIR:-}" ]; then
    log "kept $W (logs in $W/logs)"
  else
    rm -rf "$W"
  fi
  log "down"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- network namespace
log "network namespace $NS, work dir $W"
ip netns add "$NS" || { NS=""; die "could not create the network namespace"; }
NS_CREATED=1
ip -n "$NS" link set lo up
# The pod bridge, as the CNI bridge plugin would create it (same name, same gateway
# address), made up front so the API server can advertise and serve on it before the
# first pod; the plugin then only attaches veths. isGateway, no ipMasq, no route out.
ip -n "$NS" link add cni0 type bridge
ip -n "$NS" addr add "$APISERVER_IP/16" dev cni0
ip -n "$NS" link set cni0 up
# Service addresses are reached through the bridge (kube-proxy or the DNAT rule below
# rewrite them); without a route the namespace itself (kubelets, hostNetwork pods)
# could not even try. Still nothing off the machine: the namespace has no other route.
ip -n "$NS" route add 10.96.0.0/16 dev cni0
# The nodes' own addresses: the kubelet refuses a 127/8 node IP, and this kernel has no
# dummy interfaces, so 10.89.0.1-3/32 go on the namespace's lo. The API server reaches
# each kubelet there; pods reach them through their default route to the bridge.
for ((i = 0; i < NODES; i++)); do ip -n "$NS" addr add "10.89.0.$((i + 1))/32" dev lo; done
# Pods reach the API server at the kubernetes Service address, as in-cluster clients
# do. Without kube-proxy, one DNAT rule inside the namespace stands in for it.
SVC_DNAT=0
if [ "$KUBE_PROXY" = 1 ]; then
  SVC_DNAT=1
elif ip netns exec "$NS" iptables -t nat -A PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 \
  -j DNAT --to-destination "$APISERVER_IP:6443" 2>"$W/logs/iptables.log" &&
  ip netns exec "$NS" iptables -t nat -A OUTPUT -d 10.96.0.1/32 -p tcp --dport 443 \
    -j DNAT --to-destination "$APISERVER_IP:6443" 2>>"$W/logs/iptables.log"; then
  SVC_DNAT=1
else
  SVC_DNAT=0
  log "no iptables in the namespace ($(head -c 200 "$W/logs/iptables.log")): pods cannot use 10.96.0.1"
fi

# ---------------------------------------------------------------- control plane
start_cp() { # start_cp NAME PROGRAM ARGS...
  local name=$1; shift
  setsid nsenter --net="/run/netns/$NS" "$@" </dev/null >"$W/logs/$name.log" 2>&1 &
  CP_PIDS+=($!)
  CP_NAMES+=("$name")
}
# Stops the control-plane process NAME (by its recorded PID) and starts it again with
# these arguments, in the same slot of CP_PIDS; its log goes on in the same file.
# Without PROGRAM it only stops it (restart_cp NAME PROGRAM... starts it later).
restart_cp() { # restart_cp NAME [PROGRAM ARGS...]
  local name=$1 i; shift
  for i in "${!CP_NAMES[@]}"; do [ "${CP_NAMES[$i]}" = "$name" ] && break; done
  [ "${CP_NAMES[$i]}" = "$name" ] || die "restart_cp: no control-plane process $name"
  stop_pids 10 "${CP_PIDS[$i]}"
  [ $# -gt 0 ] || return 0
  echo "---- restarted $(date +%T): $*" >>"$W/logs/$name.log"
  setsid nsenter --net="/run/netns/$NS" "$@" </dev/null >>"$W/logs/$name.log" 2>&1 &
  CP_PIDS[$i]=$!
}
openssl genrsa -out "$W/cp/sa.key" 2048 2>/dev/null
{
  echo "$ADMIN_TOKEN,real-node-admin,real-node-admin,system:masters"
  # The built-in binding system:node-proxier names this user.
  echo "kube-proxy-token-$ID,system:kube-proxy,system:kube-proxy,"
  # A Prometheus's discovery (prometheus.sh grants it what kube-prometheus-stack's does).
  echo "prometheus-token-$ID,lzo-prometheus,lzo-prometheus,"
  for ((i = 0; i < NODES; i++)); do
    n=${NODE_NAMES[$i]}
    echo "node-token-$ID-$n,system:node:$n,system:node:$n,system:nodes"
  done
} >"$W/cp/tokens.csv"
PROMETHEUS_TOKEN=prometheus-token-$ID
kubeconfig() { # kubeconfig FILE USER TOKEN [SERVER]
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: real-node
  cluster:
    server: ${4:-$API}
    certificate-authority: $W/cp/certs/apiserver.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: real-node
  context:
    cluster: real-node
    user: $2
current-context: real-node
KC
}
log "starting etcd and kube-apiserver"
t0=$(date +%s.%N)
start_cp etcd etcd --data-dir="$W/cp/etcd" \
  --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
  --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
  --initial-cluster=default=http://127.0.0.1:2380 --log-level=warn
# As tests/support/harness.rs (also the node lifecycle timing below: a node is
# NotReady 8 s after its last heartbeat, so the kubelets renew their lease every 2 s),
# except: it serves on the bridge address as well as
# loopback (pods and kubelets use $API), and it reaches kubelets by their InternalIP
# (the node name does not resolve).
# (The node timings' flags come from timings_set.)
APISERVER_ARGS=(--etcd-servers=http://127.0.0.1:2379 --bind-address=0.0.0.0 --advertise-address="$APISERVER_IP"
  --secure-port=6443 --cert-dir="$W/cp/certs"
  --token-auth-file="$W/cp/tokens.csv" --authorization-mode=RBAC
  --service-account-key-file="$W/cp/sa.key" --service-account-signing-key-file="$W/cp/sa.key"
  --service-account-issuer=https://kubernetes.default.svc.cluster.local
  --service-cluster-ip-range=10.96.0.0/16 --allow-privileged=true
  --kubelet-preferred-address-types=InternalIP --v=1
  ${AGGREGATOR_ROUTING:+--enable-aggregator-routing="$AGGREGATOR_ROUTING"})
start_cp kube-apiserver "$BIN/kube-apiserver" "${APISERVER_ARGS[@]}" "${TIMINGS_API[@]}"
# Up to 180 s: 4-14 s here, but once (of ~20 runs, with two other test suites and
# builds on the 2 cores) it was not listening after 90 s.
apiserver_wait() {
  for _ in $(seq 360); do
    kill -0 "${CP_PIDS[0]}" 2>/dev/null && kill -0 "${CP_PIDS[1]}" 2>/dev/null || break # etcd, kube-apiserver
    [ -s "$W/cp/certs/apiserver.crt" ] &&
      [ "$(nsenter --net="/run/netns/$NS" curl -s -o /dev/null -w '%{http_code}' \
        --cacert "$W/cp/certs/apiserver.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "$API/readyz")" = 200 ] && break
    sleep 0.5
  done
}
apiserver_wait
kubeconfig "$KC" real-node-admin "$ADMIN_TOKEN"
if ! kubectl get --raw /readyz >/dev/null; then
  # The work dir goes with the teardown: show why here (CI keeps only the output).
  for l in etcd kube-apiserver; do
    log "--- last lines of $l's log:"
    tail -n 15 "$W/logs/$l.log" | cut -c1-300 >&2
  done
  die "kube-apiserver not ready (exited, or not ready after 180 s); see $W/logs/kube-apiserver.log"
fi
log "kube-apiserver ready after $(echo "$(date +%s.%N) - $t0" | bc)s"
# For clients outside the namespace (a test process, the operator under test): a
# forwarder on the host's loopback whose every connection is relayed into the
# namespace. The serving certificate names localhost (not 127.0.0.1).
if [ "${API_FORWARD:-1}" = 1 ]; then
  fwd_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  setsid socat "TCP-LISTEN:$fwd_port,bind=127.0.0.1,reuseaddr,fork" \
    EXEC:"nsenter --net=/run/netns/$NS socat STDIO TCP\:$APISERVER_IP\:6443" \
    </dev/null >"$W/logs/api-forward.log" 2>&1 &
  CP_PIDS+=($!)
  CP_NAMES+=(api-forward)
  kubeconfig "$W/cp/host.kubeconfig" real-node-admin "$ADMIN_TOKEN" "https://localhost:$fwd_port"
  log "API server also at https://localhost:$fwd_port from the host ($W/cp/host.kubeconfig)"
fi
CM_ARGS=(--kubeconfig="$KC" --leader-elect=false --secure-port=0
  --concurrent-statefulset-syncs=10
  --service-account-private-key-file="$W/cp/sa.key" --root-ca-file="$W/cp/certs/apiserver.crt"
  --use-service-account-credentials=false --v=1)
start_cp kube-controller-manager "$BIN/kube-controller-manager" "${CM_ARGS[@]}" "${TIMINGS_CM[@]}"
start_cp kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$KC" --leader-elect=false \
  --secure-port=0 --v=1
# RBAC only (as the harness): the kubelets' users, system:node:<name> in the group
# system:nodes, get the built-in system:node role.
kubectl create clusterrolebinding real-node-kubelets --clusterrole=system:node \
  --group=system:nodes >/dev/null
# One kube-proxy for all nodes: they share the network namespace, hence the iptables
# rules. It must not touch the machine-wide conntrack settings (nf_conntrack_max is not
# per namespace): every conntrack flag is 0, "leave as is". No --cluster-cidr, so it
# masquerades nothing; replies between pods on the bridge go through conntrack because
# bridge-nf-call-iptables is on in the namespace.
if [ "$KUBE_PROXY" = 1 ]; then
  kubeconfig "$W/cp/kube-proxy.kubeconfig" system:kube-proxy "kube-proxy-token-$ID"
  start_cp kube-proxy "$BIN/kube-proxy" --kubeconfig="$W/cp/kube-proxy.kubeconfig" \
    --hostname-override=node-a --proxy-mode=iptables --oom-score-adj=0 \
    --conntrack-max-per-core=0 --conntrack-min=0 \
    --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 --v=1
fi

# A registry (REGISTRY=1): Debian's docker-registry (the CNCF distribution) on the bridge
# address, port 5000, plain HTTP, storing under the work dir. Every node's containerd
# takes it as the mirror of ghcr.io and docker.io (hosts.toml, below), as an air-gapped
# cluster takes its mirror: images named ghcr.io/... or docker.io/... by digest are
# pulled from it, and nothing reaches the real registries (the namespace has no route
# out). Push with skopeo inside the namespace: $REGISTRY_ADDR/<repository>.
REGISTRY_ADDR="$APISERVER_IP:5000"
if [ "${REGISTRY:-0}" = 1 ]; then
  command -v docker-registry >/dev/null || die "REGISTRY=1 needs docker-registry (apt-get install docker-registry)"
  mkdir -p "$W/registry/data"
  cat >"$W/registry/config.yml" <<YAML
version: 0.1
log: {level: info, accesslog: {disabled: false}}
storage:
  filesystem: {rootdirectory: $W/registry/data}
http:
  addr: $REGISTRY_ADDR
YAML
  start_cp registry docker-registry serve "$W/registry/config.yml"
  for _ in $(seq 100); do
    nsenter --net="/run/netns/$NS" curl -sf -o /dev/null "http://$REGISTRY_ADDR/v2/" && break
    sleep 0.2
  done
  nsenter --net="/run/netns/$NS" curl -sf -o /dev/null "http://$REGISTRY_ADDR/v2/" ||
    die "the registry did not start on $REGISTRY_ADDR; see $W/logs/registry.log"
  log "registry on $REGISTRY_ADDR (the nodes' mirror of ghcr.io and docker.io)"
fi

# A cluster DNS (CLUSTER_DNS=1): CoreDNS (hack/build-coredns.sh, built here from the Go
# module proxy) on the bridge address, its kubernetes plugin answering cluster.local from
# the API server; every other name gets NXDOMAIN (nothing is forwarded, nothing leaves
# the machine). The kubelets give it to pods as clusterDNS. Loki's configuration names
# Services; the operator needs none.
if [ "${CLUSTER_DNS:-0}" = 1 ]; then
  COREDNS=$(bash "$here/../build-coredns.sh") || die "hack/build-coredns.sh failed"
  cat >"$W/cp/coredns.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: rig, cluster: {server: "$API", certificate-authority: "$W/cp/certs/apiserver.crt"}}]
users: [{name: coredns, user: {token: "$ADMIN_TOKEN"}}]
contexts: [{name: rig, context: {cluster: rig, user: coredns}}]
current-context: rig
KUBECONFIG
  cat >"$W/cp/Corefile" <<COREFILE
cluster.local:53 {
    bind $APISERVER_IP
    errors
    ready $APISERVER_IP:8181
    kubernetes cluster.local {
        kubeconfig $W/cp/coredns.kubeconfig rig
    }
}
.:53 {
    bind $APISERVER_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
  start_cp coredns "$COREDNS" -conf "$W/cp/Corefile"
  for _ in $(seq 100); do
    nsenter --net="/run/netns/$NS" curl -sf -o /dev/null "http://$APISERVER_IP:8181/ready" && break
    sleep 0.2
  done
  nsenter --net="/run/netns/$NS" curl -sf -o /dev/null "http://$APISERVER_IP:8181/ready" ||
    die "CoreDNS did not become ready on $APISERVER_IP; see $W/logs/coredns.log"
  log "cluster DNS: CoreDNS $("$COREDNS" -version | head -n1 | cut -d- -f2) (cluster.local) on $APISERVER_IP:53"
fi

# ---------------------------------------------------------------- images
log "building the pause and demo images"
"$here/images/make-images.sh" "$W/images" >"$W/logs/images.log"

# ---------------------------------------------------------------- nodes
# Kernel tunables the kubelet sets at start (or, with --protect-kernel-defaults, insists
# on). They are global, not per network namespace: masked in the node's mount namespace
# with files holding the expected value, so the kubelet neither changes the host nor
# refuses to start.
KUBELET_SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

in_node() { local n=$1; shift; nsenter -t "${HOLDER[$n]}" -m -n "$@"; }

start_node() { # start_node INDEX
  local i=$1 n=${NODE_NAMES[$1]} zone=zone-${NODE_NAMES[$1]#node-}
  local d="$W/nodes/$n" ip="10.89.0.$((i + 1))" cg="lzo-rn-$ID-$n"
  mkdir -p "$d"/{run,lib,log,cni,sysctl}
  # The node's mount namespace: `ip netns exec` makes one (a slave of the host's, with
  # /sys remounted for the network namespace); this sleep holds it.
  setsid ip netns exec "$NS" sleep infinity </dev/null >/dev/null 2>&1 &
  HOLDER[$n]=$!
  sleep 0.2
  # That new /sys has lost the cgroup mounts under it: mount the same hierarchies again
  # (mounting a v1 hierarchy with the same controllers attaches to the existing one).
  in_node "$n" mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  local dev mnt type opts _rest
  while read -r dev mnt type opts _rest; do
    case "$type" in cgroup | cgroup2) ;; *) continue ;; esac
    in_node "$n" mkdir -p "$mnt"
    in_node "$n" mount -t "$type" -o "$opts" "$dev" "$mnt"
  done </proc/self/mounts
  in_node "$n" mount --bind "$d/run" /run
  in_node "$n" mount --bind "$d/lib" /var/lib
  in_node "$n" mount --bind "$d/log" /var/log
  local kv key
  for kv in "${KUBELET_SYSCTLS[@]}"; do
    key=${kv%%=*}
    if [ "$(cat "/proc/sys/$key")" != "${kv#*=}" ]; then
      echo "${kv#*=}" >"$d/sysctl/${key//\//.}"
      in_node "$n" mount --bind "$d/sysctl/${key//\//.}" "/proc/sys/$key"
    fi
  done
  # The node's cgroup root, in every v1 hierarchy (cpuset needs cpus and mems first).
  local c
  for c in /sys/fs/cgroup/*/; do
    [ "$(basename "$c")" = unified ] && continue
    mkdir -p "$c$cg"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cg/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cg/cpuset.mems"

  # CNI: one bridge for all nodes; each node's host-local range is its own /24 of the
  # /16, leases in the node's private /var/lib/cni.
  sed -e "s/@RANGE_START@/10.88.$((i + 1)).2/" -e "s/@RANGE_END@/10.88.$((i + 1)).254/" \
    "$here/cni.conflist.in" >"$d/cni/10-lzo-pods.conflist"
  # Registry hosts (containerd's hosts.toml): with REGISTRY=1, the test's registry as the
  # only host of ghcr.io and docker.io; without, none (images are imported).
  mkdir -p "$d/certs.d"
  if [ "${REGISTRY:-0}" = 1 ]; then
    local upstream
    for upstream in ghcr.io docker.io; do
      mkdir -p "$d/certs.d/$upstream"
      cat >"$d/certs.d/$upstream/hosts.toml" <<TOML
server = "http://$REGISTRY_ADDR"
[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
TOML
    done
  fi
  sed -e "s#@CNI_CONF_DIR@#$d/cni#" -e "s/@RESTRICT_OOM@/$RESTRICT_OOM/" \
    -e "s/@LOG_LEVEL@/${CONTAINERD_LOG_LEVEL:-info}/" -e "s#@REGISTRY_CONFIG_DIR@#$d/certs.d#" \
    "$here/containerd.toml.in" >"$d/containerd.toml"
  run_containerd "$n"
  local img
  for img in "$W/images/pause.tar" "$W/images/demo.tar" ${OPERATOR_IMAGE:+"$OPERATOR_IMAGE"} \
    ${ZONE_WAIT_IMAGE:+"$ZONE_WAIT_IMAGE"} ${EXTRA_IMAGES[@]+"${EXTRA_IMAGES[@]}"}; do
    in_node "$n" ctr --address /run/containerd/containerd.sock -n k8s.io images import \
      "$img" >>"$W/logs/images.log"
  done

  kubeconfig "$d/kubelet.kubeconfig" "system:node:$n" "node-token-$ID-$n"
  echo "nameserver $APISERVER_IP" >"$d/resolv.conf"
  # Serving on its own address, anonymous and AlwaysAllow: only the API server (and
  # anything else inside this network namespace) can reach it. The root dir stays
  # /var/lib/kubelet, which is the node's own directory.
  cat >"$d/kubelet.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$cg
# This machine has cgroup v1, which kubelets refuse from 1.35 unless told so;
# containerd 1.6 does not report its cgroup driver, so the kubelet takes cgroupDriver.
failCgroupV1: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
# Checks the kernel tunables instead of setting them; they are masked above.
protectKernelDefaults: true
# Not -999: without CAP_SYS_RESOURCE nothing here may go below 0.
oomScoreAdj: 0
makeIPTablesUtilChains: false
# The machine's disk is ~80% full: the default thresholds (10%, 15%) would put the
# node under DiskPressure at once.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: $d/resolv.conf
$([ "${CLUSTER_DNS:-0}" = 1 ] && printf 'clusterDNS: [%s]\nclusterDomain: cluster.local' "$APISERVER_IP")
maxPods: 20
serializeImagePulls: false
runtimeRequestTimeout: 2m
# The node timings (timings_set): fast, the controller manager calls a node lost 8 s
# after its last heartbeat; production, 40 s.
nodeLeaseDurationSeconds: $TIMINGS_LEASE
nodeStatusUpdateFrequency: $TIMINGS_STATUS
volumePluginDir: /var/lib/kubelet/volumeplugins
KCFG
  run_kubelet "$n"
  log "$n ($zone, $ip): containerd ${CONTAINERD[$n]}, kubelet ${KUBELET[$n]}"
}

# The node's containerd, in its mount namespace; returns once it answers. Logs append,
# so a restart keeps the first run's.
run_containerd() { # run_containerd NODE
  local n=$1
  setsid nsenter -t "${HOLDER[$n]}" -m -n containerd --config "$W/nodes/$n/containerd.toml" \
    </dev/null >>"$W/logs/containerd-$n.log" 2>&1 &
  CONTAINERD[$n]=$!
  for _ in $(seq 100); do
    in_node "$n" ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 && break
    sleep 0.2
  done
}

# The node's kubelet, with the configuration start_node wrote.
run_kubelet() { # run_kubelet NODE
  local n=$1 d="$W/nodes/$1" i
  for i in "${!NODE_NAMES[@]}"; do [ "${NODE_NAMES[$i]}" = "$n" ] && break; done
  setsid nsenter -t "${HOLDER[$n]}" -m -n "$BIN/kubelet" --config="$d/kubelet.yaml" \
    --kubeconfig="$d/kubelet.kubeconfig" --hostname-override="$n" --node-ip="10.89.0.$((i + 1))" \
    --node-labels="topology.kubernetes.io/zone=zone-${n#node-}" --v="${KUBELET_V:-1}" \
    </dev/null >>"$W/logs/kubelet-$n.log" 2>&1 &
  KUBELET[$n]=$!
}

t_nodes=$(date +%s.%N)
for ((i = 0; i < NODES; i++)); do start_node "$i"; done
names=("${NODE_NAMES[@]:0:$NODES}")
for _ in $(seq 240); do
  ready=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c '=True' || true)
  [ "$ready" -ge "$NODES" ] && break
  for n in "${names[@]}"; do
    kill -0 "${KUBELET[$n]}" 2>/dev/null || die "kubelet of $n exited: $(grep -m1 -E '^F[0-9]{4}' "$W/logs/kubelet-$n.log")"
    kill -0 "${CONTAINERD[$n]}" 2>/dev/null || die "containerd of $n exited; see $W/logs/containerd-$n.log"
  done
  sleep 0.5
done
kubectl get nodes -L topology.kubernetes.io/zone -o wide
[ "$ready" -ge "$NODES" ] || die "only $ready of $NODES nodes Ready; see $W/logs/kubelet-*.log"
log "$NODES node(s) Ready $(echo "$(date +%s.%N) - $t_nodes" | bc)s after the first containerd started"
for _ in $(seq 60); do kubectl get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done

# The running cluster moved to the node timings MODE: the controller manager stopped,
# the API server restarted (its default tolerations apply to pods created from then on:
# pods that exist keep theirs), the controller manager started with the new flags (not
# before: it exits when the API server does not answer within 10 s of its start, and
# while it is stopped nothing marks a node NotReady for the API server's gap; with
# production's 40 s grace the kubelet gaps below mark none either, going back to fast
# timings they may), then one kubelet after the other with its configuration
# rewritten. Each kubelet's Lease is deleted while it is stopped: the kubelet's lease
# controller copies an existing Lease (component-helpers' newLease), so without that it
# would go on renewing a Lease that says 8 s every 10 s. Returns once every node is Ready
# with a Lease of the new duration.
timings_switch() { # timings_switch MODE
  [ "$1" != "$RN_TIMINGS" ] || return 0
  local from=$RN_TIMINGS n t=$(date +%s.%N) dur
  timings_set "$1"
  log "node timings $from -> $TIMINGS_LABEL"
  restart_cp kube-controller-manager
  restart_cp kube-apiserver "$BIN/kube-apiserver" "${APISERVER_ARGS[@]}" "${TIMINGS_API[@]}"
  apiserver_wait
  kubectl get --raw /readyz >/dev/null || die "kube-apiserver not ready after its restart; see $W/logs/kube-apiserver.log"
  restart_cp kube-controller-manager "$BIN/kube-controller-manager" "${CM_ARGS[@]}" "${TIMINGS_CM[@]}"
  for n in "${names[@]}"; do
    stop_pids 10 "${KUBELET[$n]}"
    sed -i -e "s/^nodeLeaseDurationSeconds: .*/nodeLeaseDurationSeconds: $TIMINGS_LEASE/" \
      -e "s/^nodeStatusUpdateFrequency: .*/nodeStatusUpdateFrequency: $TIMINGS_STATUS/" "$W/nodes/$n/kubelet.yaml"
    kubectl -n kube-node-lease delete lease "$n" --ignore-not-found >/dev/null
    local since
    since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    run_kubelet "$n"
    for _ in $(seq 120); do
      dur=$(kubectl -n kube-node-lease get lease "$n" -o jsonpath='{.spec.leaseDurationSeconds}' 2>/dev/null || true)
      [ "$dur" = "$TIMINGS_LEASE" ] && break
      sleep 0.5
    done
    [ "$dur" = "$TIMINGS_LEASE" ] || die "$n's Lease says ${dur:-nothing}, not $TIMINGS_LEASE s, after its kubelet restarted"
    # A kubelet that starts reports its node NotReady for a few seconds (PLEG not yet
    # healthy): one node at a time, so that at most one zone looks down.
    local hb st
    for _ in $(seq 120); do
      # (jsonpath prints no newline: read returns 1, which set -e would exit on)
      read -r st hb < <(kubectl get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null || true) || true
      [ "$st" = True ] && [[ "$hb" > "$since" ]] && break
      sleep 0.5
    done
  done
  for _ in $(seq 240); do
    [ "$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True)" -ge "$NODES" ] && break
    sleep 0.5
  done
  local i
  for i in "${!CP_NAMES[@]}"; do
    case ${CP_NAMES[$i]} in kube-apiserver | kube-controller-manager)
      kill -0 "${CP_PIDS[$i]}" 2>/dev/null || die "${CP_NAMES[$i]} exited after the switch to $RN_TIMINGS timings: $(grep -a -m1 '^F[0-9]' "$W/logs/${CP_NAMES[$i]}.log" | tail -c 300)" ;;
    esac
  done
  log "node timings now $RN_TIMINGS: $(echo "$(date +%s.%N) - $t" | bc) s to switch; $(kubectl get nodes --no-headers 2>/dev/null | awk '{printf "%s %s, ", $1, $2}')"
}

