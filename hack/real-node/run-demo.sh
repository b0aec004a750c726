#!/usr/bin/env bash
# Real nodes beside the simulated ones (issue 27): brings up, in a network namespace of
# its own, the control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler of the current Kubernetes, built by hack/build-k8s.sh current) and NODES
# real nodes, each a kubelet of the same build with a private containerd, runs a
# plain pod and a hostNetwork pod per node, checks them (pod IP from the bridge,
# downward API, kubectl logs and exec, pod -> API server), measures, and tears
# everything down by PID, cgroup and namespace.
#
#   sudo hack/real-node/run-demo.sh            # 1 node
#   sudo NODES=3 hack/real-node/run-demo.sh    # node-a/b/c in zone-a/b/c
#
# Environment:
#   NODES=N            real nodes, 1..3 (default 1)
#   KEEP=1             stay up after the checks until Enter, or SIGTERM without a
#                      terminal (prints how to reach it)
#   RESTRICT_OOM=false reproduce the sandbox failure (runc "can't get final child's PID
#                      from pipe: EOF"; see README.md)
#   IDLE_SECONDS=N     how long to sample idle CPU of kubelet and containerd (default 60)
#   POD_TIMEOUT=N      seconds each pod may take to become Ready (default 120)
#   BURST=N            also create N pods per node at once, time them, delete them
#   API_FORWARD=0      no forwarder from the host's loopback to the API server
#   KUBE_PROXY=0       no kube-proxy: only the kubernetes Service works (one DNAT rule)
#   CONTAINERD_LOG_LEVEL=debug   containerd logs every CRI request and sandbox spec
#   OPERATOR_IMAGE=ARCHIVE  also import the operator's image (an OCI or docker archive,
#                      e.g. target/image/loki-zone-operator.oci.tar from `make image`)
#                      and run its `crd` in a pod on node-a
#   ZONE_WAIT_IMAGE=ARCHIVE  also import the zone init container's image
#                      (target/image/loki-zone-wait.oci.tar from `make image`) and run it
#                      as the init container of that pod, as zone-aware Loki pods do
#   WORK_DIR=DIR       where certificates, state and logs go (default: a new /tmp dir,
#                      removed at the end unless KEEP_WORK=1)
#
# Isolation: everything listens inside the network namespace lzo-rn-*, which has only
# lo and the bridge cni0 (10.88.0.1/16), no route and no masquerade, so nothing can
# leave the machine. Each node also gets its own mount namespace, with private
# directories over /run, /var/lib and /var/log (the kubelet and containerd hardcode
# paths there) and the kernel tunables the kubelet insists on masked, so the host's
# files and sysctls are not touched. Its pods run under the cgroup /lzo-rn-<id>-<node>.
set -euo pipefail

# Namespace, control plane, kube-proxy and the nodes, up and Ready; teardown on exit.
# shellcheck source=hack/real-node/lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"


# ---------------------------------------------------------------- pods
# The plain pod is Burstable, the hostNetwork one Guaranteed (its containers get
# oom_score_adj -997 from the kubelet, the sandboxes -998 in both cases). All nodes
# share one network namespace, so each hostNetwork pod needs a port of its own. A CPU
# limit of 10m made the Guaranteed pod take 5 s longer to start: runc's init runs in
# the container's cgroup and is throttled to 1 ms per 100 ms.
pod_yaml() { # pod_yaml NAME NODE HOSTNETWORK PORT
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {app: real-node-demo, node: $2, hostnet: "$3"}
  annotations: {loki.grafana.com/availability-zone: zone-${2#node-}}
spec:
  hostNetwork: $3
  nodeSelector: {topology.kubernetes.io/zone: zone-${2#node-}}
  terminationGracePeriodSeconds: 5
  containers:
  - name: demo
    image: $DEMO_IMAGE
    imagePullPolicy: Never
    env:
    - {name: DEMO_FILES, value: /etc/podinfo/labels:/etc/podinfo/zone}
    - {name: DEMO_HTTP_PORT, value: "$4"}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: NODE_NAME
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    readinessProbe:
      httpGet: {port: $4, path: /ready}
      periodSeconds: 1
    resources:
      requests: {cpu: $([ "$3" = true ] && echo 100m || echo 10m), memory: 16Mi}
$([ "$3" = true ] && echo "      limits: {cpu: 100m, memory: 16Mi}")
    volumeMounts:
    - {name: podinfo, mountPath: /etc/podinfo}
  volumes:
  - name: podinfo
    downwardAPI:
      items:
      - path: labels
        fieldRef: {fieldPath: metadata.labels}
      - path: zone
        fieldRef: {fieldPath: "metadata.annotations['loki.grafana.com/availability-zone']"}
YAML
}
declare -A RUN_SECS
run_pod() { # run_pod NAME NODE HOSTNETWORK PORT
  local t
  t=$(date +%s.%N)
  pod_yaml "$@" | kubectl apply -f - >/dev/null
  if kubectl wait --for=condition=Ready "pod/$1" --timeout="${POD_TIMEOUT:-120}s" >/dev/null 2>&1; then
    RUN_SECS[$1]=$(echo "$(date +%s.%N) - $t" | bc)
    log "pod $1 Ready ${RUN_SECS[$1]}s after it was created"
  else
    RUN_SECS[$1]=FAILED
    log "pod $1 NOT Ready after ${POD_TIMEOUT:-120}s:"
    kubectl describe "pod/$1" | sed -n '/^Events:/,$p' | tail -n 8 >&2
    return 1
  fi
}
FAIL=0
check() { # check DESCRIPTION COMMAND...
  local out
  if out=$("${@:2}" 2>&1); then
    log "ok: $1"
    printf '%s\n' "$out" | sed 's/^/    /' | head -n 12 >&2
  else
    log "FAILED: $1"
    printf '%s\n' "$out" | sed 's/^/    /' | tail -n 12 >&2
    FAIL=1
  fi
}
for ((i = 0; i < NODES; i++)); do
  n=${NODE_NAMES[$i]}
  run_pod "demo-$n" "$n" false 8080 || FAIL=1
  run_pod "demo-$n-hostnet" "$n" true "$((8081 + i))" || FAIL=1
done
kubectl get pods -o wide
logs_match() { local re=$1; shift; kubectl logs "$@" | grep -E "$re"; }
exec_match() { local p=$1 re=$2; shift 2; kubectl exec "$p" -- "$@" | grep -E "$re"; }
oom_adjs_not_negative() { # every pod process of the node: comm=oom_score_adj
  local q out=""
  for q in $(find "/sys/fs/cgroup/pids/$1/kubepods" -name cgroup.procs -exec cat {} +); do
    out+="$(cat "/proc/$q/comm")=$(cat "/proc/$q/oom_score_adj") "
  done
  echo "$out"
  [ -n "$out" ] && ! grep -q -- '=-' <<<"$out"
}
in_cgroup() { [ -n "$(find "/sys/fs/cgroup/memory/$1" -name cgroup.procs -exec cat {} +)" ]; }
for ((i = 0; i < NODES; i++)); do
  n=${NODE_NAMES[$i]}
  p=demo-$n
  if [ "${RUN_SECS[$p]}" != FAILED ]; then
    pod_ip=$(kubectl get "pod/$p" -o jsonpath='{.status.podIP}')
    check "$p has a pod IP from $n's range of the bridge (10.88.$((i + 1)).0/24): $pod_ip" \
      grep -q "^10\.88\.$((i + 1))\." <<<"$pod_ip"
    check "$p: the namespace reaches the pod IP" ip netns exec "$NS" ping -c1 -W2 "$pod_ip"
    check "$p: kubectl logs shows the env and the downward-API files" \
      logs_match '^(POD_IP|NODE_NAME)=|^zone-|^app=|^node=' "$p"
    check "$p: kubectl exec reads the downward-API zone" kubectl exec "$p" -- /demo cat /etc/podinfo/zone
    check "$p: kubectl exec sees the pod's own eth0" exec_match "$p" 'eth0|lo:' /demo ip
    if [ "$SVC_DNAT" = 1 ]; then
      check "$p reaches the API server at the kubernetes Service 10.96.0.1:443" \
        kubectl exec "$p" -- /demo connect 10.96.0.1 443
    fi
    check "$p runs under $n's cgroup root" in_cgroup "lzo-rn-$ID-$n"
    check "$p: its HTTP port answers from the namespace" \
      nsenter --net="/run/netns/$NS" curl -sf "http://$pod_ip:8080/"
  fi
  p=demo-$n-hostnet
  if [ "${RUN_SECS[$p]}" != FAILED ]; then
    check "$p (hostNetwork) sees the namespace's bridge" exec_match "$p" 'cni0' /demo ip
    check "$p: kubectl logs" logs_match '^(POD_IP|NODE_NAME)=' "$p"
    check "$p (Guaranteed): no pod process got a negative oom_score_adj (clamped)" \
      oom_adjs_not_negative "lzo-rn-$ID-$n"
  fi
done

plain_ready=1
for n in "${names[@]}"; do [ "${RUN_SECS[demo-$n]}" = FAILED ] && plain_ready=0; done
if [ "$KUBE_PROXY" = 1 ] && [ "$plain_ready" = 1 ]; then
  # A ClusterIP Service in front of the plain pods (one per node), through kube-proxy.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: demo}
spec:
  selector: {app: real-node-demo, hostnet: "false"}
  ports: [{port: 80, targetPort: 8080}]
YAML
  svc_ip=$(kubectl get service demo -o jsonpath='{.spec.clusterIP}')
  for _ in $(seq 60); do
    [ "$(kubectl get endpoints demo -o jsonpath='{.subsets[*].addresses[*].ip}' | wc -w)" -ge "$NODES" ] &&
      ip netns exec "$NS" iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q "$svc_ip/32" && break
    sleep 0.5
  done
  svc_from_pods() { # every plain pod connects to the Service 3 times
    local n k
    for n in "${names[@]}"; do
      for k in 1 2 3; do kubectl exec "demo-$n" -- /demo connect "$svc_ip" 80 || return 1; done
    done
  }
  check "kube-proxy: the namespace gets HTTP 200 from Service demo ($svc_ip:80)" \
    nsenter --net="/run/netns/$NS" curl -sf --max-time 3 "http://$svc_ip/"
  check "kube-proxy: every plain pod reaches Service demo ($svc_ip:80), 3 times each" svc_from_pods
fi
if [ "${API_FORWARD:-1}" = 1 ]; then
  check "the host's loopback forwarder reaches the API server (kubectl outside the namespace)" \
    "$BIN/kubectl" --kubeconfig "$W/cp/host.kubeconfig" get nodes -L topology.kubernetes.io/zone
fi

# ---------------------------------------------------------------- operator images
# The zone init container on a real kubelet: it waits until the downward-API file
# holding the pod's zone annotation is non-empty, and prints the zone; then the
# operator's image prints its CRD.
archive_image() { # the image name an OCI or docker archive holds
  local name
  name=$(tar xOf "$1" index.json 2>/dev/null | python3 -c 'import json,sys
m = json.load(sys.stdin)["manifests"][0].get("annotations", {})
print(m.get("io.containerd.image.name") or m.get("org.opencontainers.image.ref.name", ""))' 2>/dev/null || true)
  [ -n "$name" ] || name=$(tar xOf "$1" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')
  echo "$name"
}
if [ -n "${OPERATOR_IMAGE:-}${ZONE_WAIT_IMAGE:-}" ]; then
  init=
  if [ -n "${ZONE_WAIT_IMAGE:-}" ]; then
    wait_image=$(archive_image "$ZONE_WAIT_IMAGE")
    init="  initContainers:
  - name: wait-for-zone
    image: $wait_image
    imagePullPolicy: Never
    args: [--file, /etc/podinfo/zone, --timeout, 60s]
    volumeMounts: [{name: podinfo, mountPath: /etc/podinfo}]"
  fi
  if [ -n "${OPERATOR_IMAGE:-}" ]; then
    main_image=$(archive_image "$OPERATOR_IMAGE") main_args=[crd]
  else
    main_image=$wait_image main_args=[--version]
  fi
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: operator-init
  annotations: {loki.grafana.com/availability-zone: zone-a}
spec:
  nodeSelector: {topology.kubernetes.io/zone: zone-a}
  restartPolicy: Never
$init
  containers:
  - name: main
    image: $main_image
    imagePullPolicy: Never
    args: $main_args
  volumes:
  - name: podinfo
    downwardAPI:
      items:
      - path: zone
        fieldRef: {fieldPath: "metadata.annotations['loki.grafana.com/availability-zone']"}
YAML
  for _ in $(seq 120); do
    phase=$(kubectl get pod operator-init -o jsonpath='{.status.phase}')
    case "$phase" in Succeeded | Failed) break ;; esac
    sleep 0.5
  done
  check "operator images: pod operator-init Succeeded (phase: $phase)" [ "$phase" = Succeeded ]
  if [ -n "${ZONE_WAIT_IMAGE:-}" ]; then
    check "zone init container ($wait_image) printed the zone" logs_match '^zone-a$' operator-init -c wait-for-zone
  fi
  if [ -n "${OPERATOR_IMAGE:-}" ]; then
    check "operator image ($main_image): crd printed the CRD" logs_match '^kind: CustomResourceDefinition' operator-init -c main
  fi
fi

# ---------------------------------------------------------------- burst
# BURST pods per node created at once (as a LokiStack's rollout would), then deleted.
if [ "${BURST:-0}" -gt 0 ]; then
  t=$(date +%s.%N)
  for ((i = 0; i < NODES; i++)); do
    for ((k = 0; k < BURST; k++)); do
      pod_yaml "burst-${NODE_NAMES[$i]}-$k" "${NODE_NAMES[$i]}" false 8080 |
        sed 's/app: real-node-demo/app: burst/'
      echo ---
    done
  done | kubectl apply -f - >/dev/null
  if kubectl wait --for=condition=Ready pod -l app=burst --timeout=300s >/dev/null; then
    log "burst: $((BURST * NODES)) pods Ready $(echo "$(date +%s.%N) - $t" | bc)s after they were created"
  else
    log "burst: NOT all Ready after 300s"; FAIL=1
  fi
  t=$(date +%s.%N)
  kubectl delete pod -l app=burst --wait=true >/dev/null
  log "burst: $((BURST * NODES)) pods deleted (gracefully, the demo exits on SIGTERM) in $(echo "$(date +%s.%N) - $t" | bc)s"
fi

# ---------------------------------------------------------------- measurements
# CPU of each node's kubelet and containerd (with its shims) over IDLE_SECONDS, pods
# running and nothing else happening; RSS at the end.
ticks() { # ticks PID...: utime+stime in clock ticks, summed
  local s=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo $s
}
rss_kb() {
  local s=0 p
  for p in "$@"; do
    [ -r "/proc/$p/status" ] && s=$((s + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")))
  done
  echo $s
}
shims() { mntns_pids "${HOLDER[$1]}" | while read -r p; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = containerd-shim ] && echo "$p"; done; true; }
hz=$(getconf CLK_TCK)
if [ "$IDLE_SECONDS" -gt 0 ]; then
  log "sampling idle CPU for ${IDLE_SECONDS}s"
  declare -A K0 C0 S0
  for n in "${names[@]}"; do
    K0[$n]=$(ticks "${KUBELET[$n]}"); C0[$n]=$(ticks "${CONTAINERD[$n]}"); S0[$n]=$(ticks $(shims "$n"))
  done
  declare -A P0
  for i in "${!CP_PIDS[@]}"; do P0[$i]=$(ticks "${CP_PIDS[$i]}"); done
  sleep "$IDLE_SECONDS"
  printf '%-8s %10s %10s %10s %12s %12s %10s\n' node kubelet% containerd% shims% kubelet-MiB containerd-MiB shims-MiB >&2
  for n in "${names[@]}"; do
    printf '%-8s %10s %10s %10s %12s %12s %10s\n' "$n" \
      "$(echo "scale=2; ($(ticks "${KUBELET[$n]}") - ${K0[$n]}) * 100 / $hz / $IDLE_SECONDS" | bc)" \
      "$(echo "scale=2; ($(ticks "${CONTAINERD[$n]}") - ${C0[$n]}) * 100 / $hz / $IDLE_SECONDS" | bc)" \
      "$(echo "scale=2; ($(ticks $(shims "$n")) - ${S0[$n]}) * 100 / $hz / $IDLE_SECONDS" | bc)" \
      "$(($(rss_kb "${KUBELET[$n]}") / 1024))" "$(($(rss_kb "${CONTAINERD[$n]}") / 1024))" \
      "$(($(rss_kb $(shims "$n")) / 1024))" >&2
  done
  for i in "${!CP_PIDS[@]}"; do
    printf '%-24s %6s%% CPU %6s MiB\n' "${CP_NAMES[$i]}" \
      "$(echo "scale=2; ($(ticks "${CP_PIDS[$i]}") - ${P0[$i]}) * 100 / $hz / $IDLE_SECONDS" | bc)" \
      "$(($(rss_kb "${CP_PIDS[$i]}") / 1024))" >&2
  done
fi

if [ "$KEEP" = 1 ]; then
  cat >&2 <<EOF

Up. In another shell:
  nsenter --net=/run/netns/$NS $BIN/kubectl --kubeconfig $KC get pods -o wide
  nsenter -t ${HOLDER[${names[0]}]} -m -n ctr -n k8s.io containers ls     # ${names[0]}'s containerd
Logs in $W/logs. $([ -t 0 ] && echo "Press Enter" || echo "kill -TERM $$") to tear down.
EOF
  if [ -t 0 ]; then
    read -r _ || true
  else
    sleep infinity &
    KEEP_SLEEP=$!
    wait "$KEEP_SLEEP" || true
  fi
fi
[ "$FAIL" = 0 ] && log "all checks passed" || log "some checks FAILED"
exit "$FAIL"
