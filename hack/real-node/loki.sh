# Sourced by e2e.sh when LOKI_IMAGE_ARCHIVE is set: real Loki on the real nodes.
#
#   loki_s3_start  before the LokiStack: an S3 server for the stack's bucket
#   loki_s3_service  once the stack's namespace exists: Service minio in front of it
#                  (the quick-start Secret's endpoint, http://minio:9000)
#   loki_scenario  after the zone checks: every Loki pod Ready, each one's zone in its
#                  own effective config and in the ring, lines pushed, one zone stopped
#                  (kubelet, containerd, every container; its addresses dropped), lines
#                  pushed during the outage, a surviving ingester restarted and Ready,
#                  lines pushed again, every line queried back, and the surviving
#                  ingesters' chunks flushed to the bucket. The zone stays down: its stop
#                  time and zone are left in LOKI_T_STOP and LOKI_DEAD_ZONE
#   loki_zone_return  the stopped zone back: its traffic let through, containerd and the
#                  kubelet started again (prometheus.sh's outage check calls it once the
#                  zone alert fired)
#
# Object storage: moto's S3 server (PyPI `moto[server]`, in memory), in the test's network
# namespace on the bridge address, outside every zone, as a regional S3 bucket is. A
# filesystem store would be local to each pod: queriers could not read what ingesters of
# other zones flushed, so it is not zone-safe.
#
# Uses e2e.sh's helpers (say, assert, pass, fail, kubectl, jp, now, secs, TIME) and
# lib.sh's (NS, APISERVER_IP, start_cp, in_node, KUBELET, CONTAINERD, HOLDER, ...).

LOKI_S3_PORT=9000
LOKI_TENANT=e2e
LOKI_STREAMS=${LOKI_STREAMS:-20}
LOKI_LINES=${LOKI_LINES:-25}


# The S3 server, before anything else runs (start_cp records it for the teardown).
loki_s3_start() {
  if ! command -v moto_server >/dev/null 2>&1; then
    say "installing moto[server] with pip (the S3 server of the real-Loki part)"
    pip install -q 'moto[server]' >&2 || die "pip install moto[server] failed"
  fi
  start_cp s3 moto_server -H "$APISERVER_IP" -p "$LOKI_S3_PORT"
  for _ in $(seq 100); do
    in_ns curl -s -o /dev/null "http://$APISERVER_IP:$LOKI_S3_PORT/" && break
    sleep 0.2
  done
  in_ns curl -sf -X PUT -o /dev/null "http://$APISERVER_IP:$LOKI_S3_PORT/loki" ||
    die "could not create bucket loki on the S3 server (see $W/logs/s3.log)"
  say "S3 server (moto) on $APISERVER_IP:$LOKI_S3_PORT, bucket loki"
}

# The Secret's endpoint is http://minio:9000: a Service without a selector whose
# Endpoints are the S3 server, as for a store outside the cluster, in the stack's
# namespace once it exists. Uses the host's kubectl (hk): it may run in a subshell.
loki_s3_service() {
  hk apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: minio, namespace: $STACK_NS}
spec:
  ports: [{name: s3, port: 9000, targetPort: $LOKI_S3_PORT, protocol: TCP}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: minio, namespace: $STACK_NS}
subsets:
- addresses: [{ip: $APISERVER_IP}]
  ports: [{name: s3, port: $LOKI_S3_PORT, protocol: TCP}]
YAML
}

# Objects under TENANT's prefix in the bucket (its chunks), or ? if the listing fails.
loki_s3_keys() {
  local xml
  xml=$(in_ns curl -sf "http://$APISERVER_IP:$LOKI_S3_PORT/loki?list-type=2&prefix=$1/") || { echo "?"; return; }
  grep -o '<Key>' <<<"$xml" | wc -l || true
}

# NAME NODE ZONE READY per Loki pod of the stack (all components).
loki_pods() {
  kubectl -n "$STACK_NS" get pods -l app.kubernetes.io/instance="$STACK" -o json 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"].get("deletionTimestamp"):
        continue
    ready = [c["status"] for c in p["status"].get("conditions", []) if c["type"] == "Ready"]
    print(p["metadata"]["name"], p["spec"].get("nodeName") or "-",
          p["metadata"].get("annotations", {}).get("loki.grafana.com/availability-zone") or "-",
          ready[0] if ready else "-", p["status"].get("podIP") or "-",
          p["metadata"]["labels"].get("app.kubernetes.io/component", "-"), p["metadata"]["uid"])'
}
svc_ip() { jp -n "$STACK_NS" get service "$1" -o jsonpath='{.spec.clusterIP}'; }

loki_push() { # PHASE: pushes LOKI_STREAMS x LOKI_LINES lines through the distributor Service
  local out
  out=$(in_ns python3 "$here/loki-client.py" push --url "http://$(svc_ip "$STACK-distributor-http"):3100" \
    --tenant "$LOKI_TENANT" --phase "$1" --streams "$LOKI_STREAMS" --lines "$LOKI_LINES" \
    --log "$W/loki-sent.jsonl" 2>>"$W/logs/loki-client.log")
  say "push $1: $out"
  LOKI_PUSH[$1]=$out
  assert "push $1: all $((LOKI_STREAMS * LOKI_LINES)) lines accepted by the distributor ($(jq_field "$out" accepted) accepted, $(jq_field "$out" retries) retried requests)" \
    [ "$(jq_field "$out" never_accepted)" = 0 ]
}
jq_field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], "?"))' "$1" "$2" 2>/dev/null || echo "?"; }

loki_scenario() {
  declare -gA LOKI_PUSH
  LOKI_TIMINGS_LABEL=$TIMINGS_LABEL
  local pods n deadline
  # ---- 1. every Loki pod Ready on the real kubelets
  deadline=$(($(date +%s) + TIMEOUT))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    pods=$(loki_pods)
    [ "$(awk '$4 == "True"' <<<"$pods" | grep -c .)" -ge "$expected_zone_aware" ] && break
    sleep 1
  done
  TIME[loki_ready]=$(secs "$t_stack")
  pods=$(loki_pods)
  kubectl -n "$STACK_NS" get pods -o wide >&2 || true
  assert "every Loki pod Ready on the real kubelets: $(awk '$4 == "True"' <<<"$pods" | grep -c .) of $expected_zone_aware, ${TIME[loki_ready]} s after the LokiStack was created" \
    [ "$(awk '$4 == "True"' <<<"$pods" | grep -c .)" -ge "$expected_zone_aware" ]
  if [ "$(awk '$4 == "True"' <<<"$pods" | grep -c .)" -lt "$expected_zone_aware" ]; then
    while read -r pod _ _ ready _; do
      [ "$ready" = True ] && continue
      kubectl -n "$STACK_NS" describe pod "$pod" | sed -n '/^Events:/,$p' | tail -n 8 >&2 || true
      kubectl -n "$STACK_NS" logs "$pod" --tail=15 >&2 || true
    done <<<"$pods"
    fail "real-Loki scenario stopped: not every Loki pod became Ready"
    return
  fi
  local restarts
  restarts=$(jp -n "$STACK_NS" get pods -l app.kubernetes.io/instance="$STACK" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' | awk '{s+=$1} END {print s+0}')
  say "Loki containers restarted before Ready: $restarts in all"

  # ---- 2. the zone reached Loki: its own effective config, and the ingester ring
  local pod node zone ready ip comp uid got
  while read -r pod node zone ready ip comp uid; do
    got=$(in_ns curl -sf --max-time 5 "http://$ip:3100/config" | python3 -c '
import sys, yaml
vals = set()
def walk(x):
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("instance_availability_zone", "availability_zone") and v:
                vals.add(str(v))
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(yaml.safe_load(sys.stdin))
print(",".join(sorted(vals)) or "-")' 2>/dev/null || echo "?")
    assert "$pod ($comp, $node): Loki's effective config (/config) has availability zone $got, its pod's zone $zone (INSTANCE_AVAILABILITY_ZONE expanded)" \
      [ "$got" = "$zone" ]
  done <<<"$pods"
  local dist_ip ring
  dist_ip=$(awk '$6 == "distributor" {print $5; exit}' <<<"$pods")
  ring=$(in_ns curl -sf --max-time 5 -H 'Accept: application/json' "http://$dist_ip:3100/ring" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["shards"]:
    print(s["id"], s["zone"], s["state"])' 2>/dev/null || true)
  say "ingester ring, as the distributor sees it:"; sed 's/^/    /' <<<"$ring" >&2
  while read -r pod node zone ready ip comp uid; do
    [ "$comp" = ingester ] || continue
    assert "$pod is ACTIVE in the ring with zone $zone: $(awk -v p="$pod" '$1 == p {print $2, $3}' <<<"$ring")" \
      [ "$(awk -v p="$pod" '$1 == p {print $2, $3}' <<<"$ring")" = "$zone ACTIVE" ]
  done <<<"$pods"
  # Prometheus (prometheus.sh): every one of these pods scraped, under its job and zone.
  prom_loki_targets_check

  # ---- 3. lines before the outage
  loki_push before-outage

  # ---- 4. one zone stopped: the zone of a node that runs neither the compactor nor the
  # index gateway (one replica each in 1x.demo: losing them is another scenario), and if
  # there is a choice not the operator's leader either: the zone alert's series are the
  # leader's, and a new leader's are new series, whose for: starts again (said below).
  local dead="" cand leader_node
  leader_node=$(jp -n "$OP_NS" get pod "$(holder)" -o jsonpath='{.spec.nodeName}')
  for cand in "${names[@]}"; do
    awk -v n="$cand" '$2 == n && ($6 == "compactor" || $6 == "index-gateway")' <<<"$pods" | grep -q . && continue
    [ -n "$dead" ] && [ "$cand" = "$leader_node" ] && continue
    dead=$cand
  done
  if [ "$dead" = "$leader_node" ]; then
    say "the zone to stop runs the operator's leader ($(holder) on $dead): a standby takes over, and the zone alert's for: counts from the new leader's series"
  fi
  [ -n "$dead" ] || { fail "no node without the compactor and index gateway to stop"; return; }
  say "stopping zone ${NODE_ZONE[$dead]}: on $dead: $(awk -v n="$dead" '$2 == n {printf "%s ", $1}' <<<"$pods")"
  loki_zone_stop "$dead"
  local t_out=$LOKI_T_STOP dead_zone=$LOKI_DEAD_ZONE
  # The node goes NotReady once its lease expires (8 s), the operator sees the zone down.
  deadline=$(($(date +%s) + TIMEOUT))
  local zstate=""
  while [ "$(date +%s)" -lt "$deadline" ]; do
    zstate=$(jp -n "$STACK_NS" get lokistack "$STACK" -o jsonpath="{.status.replication.zoneStatus[?(@.zone==\"$dead_zone\")].state}")
    [ "$zstate" = Unavailable ] && break
    sleep 1
  done
  TIME[zone_unavailable]=$(secs "$t_out")
  assert "the operator reports zone $dead_zone Unavailable in status.replication.zoneStatus (${TIME[zone_unavailable]} s after the stop): $zstate" \
    [ "$zstate" = Unavailable ]
  # Stateless pods of the lost node are evicted (10 s toleration; 300 s with
  # RN_TIMINGS=production) and start elsewhere.
  deadline=$(($(date +%s) + TIMEOUT + TIMINGS_TOLERATION))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    pods=$(loki_pods)
    [ "$(awk -v d="$dead" '$4 == "True" && $2 != d' <<<"$pods" | grep -c .)" -ge $((expected_zone_aware - 1)) ] && break
    sleep 1
  done
  TIME[stateless_back]=$(secs "$t_out")
  pods=$(loki_pods)
  kubectl -n "$STACK_NS" get pods -o wide >&2 || true
  assert "during the outage every Loki pod but $dead_zone's ingester is Ready on the surviving nodes ($(awk -v d="$dead" '$4 == "True" && $2 != d' <<<"$pods" | grep -c .) of $((expected_zone_aware - 1)), ${TIME[stateless_back]} s after the stop)" \
    [ "$(awk -v d="$dead" '$4 == "True" && $2 != d' <<<"$pods" | grep -c .)" -ge $((expected_zone_aware - 1)) ]

  # ---- 5. lines during the outage
  loki_push during-outage

  # ---- 6. a surviving ingester restarted during the outage
  local ing ing_uid t_rs
  read -r ing ing_uid < <(awk -v d="$dead" '$6 == "ingester" && $2 != d {print $1, $7; exit}' <<<"$pods")
  say "restarting ingester $ing (kubectl delete pod) while $dead_zone is down"
  t_rs=$(now)
  kubectl -n "$STACK_NS" delete pod "$ing" --wait=false >/dev/null
  deadline=$(($(date +%s) + TIMEOUT))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    awk -v p="$ing" -v u="$ing_uid" '$1 == p && $7 != u && $4 == "True"' <<<"$(loki_pods)" | grep -q . && break
    sleep 1
  done
  TIME[ingester_restart]=$(secs "$t_rs")
  assert "the restarted ingester $ing is Ready again while $dead_zone is down (${TIME[ingester_restart]} s after its delete)" \
    bash -c "awk -v p='$ing' -v u='$ing_uid' '\$1 == p && \$7 != u && \$4 == \"True\"' <<<'$(loki_pods)' | grep -q ."

  # ---- 7. lines after the restart, then everything queried back
  loki_push after-restart
  local q
  q=$(in_ns python3 "$here/loki-client.py" query --url "http://$(svc_ip "$STACK-query-frontend-http"):3100" \
    --tenant "$LOKI_TENANT" --log "$W/loki-sent.jsonl" 2>>"$W/logs/loki-client.log" || true)
  say "query: $q"
  LOKI_QUERY=$q
  assert "every accepted line queried back through the query frontend with $dead_zone down: $(jq_field "$q" found) of $(jq_field "$q" expected), lost $(jq_field "$q" lost), duplicates $(jq_field "$q" duplicates)" \
    [ "$(jq_field "$q" lost)/$(jq_field "$q" expected)" = "0/$((3 * LOKI_STREAMS * LOKI_LINES))" ]
  TIME[outage_total]=$(secs "$t_out")

  # ---- 8. the object store: the surviving ingesters flush their chunks to the bucket
  # (through Service minio, as configured by the operator from the Secret)
  local before after ing_ips
  before=$(loki_s3_keys "$LOKI_TENANT")
  ing_ips=$(awk -v d="$dead" '$6 == "ingester" && $2 != d && $4 == "True" {print $5}' <<<"$(loki_pods)")
  for ip in $ing_ips; do in_ns curl -s -o /dev/null -X POST --max-time 10 "http://$ip:3100/flush" || true; done
  deadline=$(($(date +%s) + 60))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    after=$(loki_s3_keys "$LOKI_TENANT")
    [ "$after" != "?" ] && [ "$before" != "?" ] && [ "$after" -gt "$before" ] && break
    sleep 1
  done
  assert "the surviving ingesters' flush wrote chunks of tenant $LOKI_TENANT to the bucket through Service minio: $before objects before, ${after:-?} after" \
    bash -c "[ '$before' != '?' ] && [ '$after' != '?' ] && [ '$after' -gt '$before' ]"
}

# A zone lost as a whole: NODE's kubelet, every container in its cgroup, containerd and
# its shims SIGKILLed, and all traffic to and from its node address and pod range
# dropped, so that its pods time out as a lost zone's do rather than refuse. What this
# namespace sends to the zone's pods (the test's clients, through a Service's ClusterIP)
# is dropped at the bridge (nftables, bridge family, output hook), after conntrack has
# confirmed the connection: a drop in iptables' filter OUTPUT comes before that, so the
# unconfirmed entry goes with the SYN, the SYN retransmitted 1 s later is DNATed again,
# and two times in three it reaches a live endpoint, which a lost zone never allows (on a
# bridge with a 2-endpoint VIP: 11 of 40 connections failed that way, 21 of 40 dropped
# at the bridge). Forwarded traffic (pods to the zone's pods, by pod IP) keeps iptables'
# FORWARD rules. Sets LOKI_DEAD_NODE, LOKI_DEAD_ZONE, LOKI_T_STOP (the first kill) and
# LOKI_ZONE_DOWN=1 (0 again on the return).
loki_zone_stop() { # loki_zone_stop NODE
  local dead=$1 dead_ip dead_range i rule
  for i in "${!names[@]}"; do [ "${names[$i]}" = "$dead" ] && dead_ip=10.89.0.$((i + 1)) && dead_range=10.88.$((i + 1)).0/24; done
  LOKI_DEAD_NODE=$dead
  LOKI_DEAD_ZONE=${NODE_ZONE[$dead]}
  LOKI_ZONE_DOWN=1
  say "stopping zone $LOKI_DEAD_ZONE: $dead's kubelet, containerd and every container (SIGKILL), and dropping traffic to and from $dead_ip and $dead_range"
  LOKI_T_STOP=$(now)
  kill -KILL "${KUBELET[$dead]}" 2>/dev/null || true
  kill -KILL $(cgroup_pids "lzo-rn-$ID-$dead") 2>/dev/null || true
  kill -KILL "${CONTAINERD[$dead]}" 2>/dev/null || true
  kill -KILL $(mntns_pids "${HOLDER[$dead]}" | grep -vx "${HOLDER[$dead]}") 2>/dev/null || true
  for rule in "FORWARD -s $dead_range" "FORWARD -d $dead_range" \
    "OUTPUT -d $dead_ip/32" "INPUT -s $dead_range"; do
    ip netns exec "$NS" iptables -I ${rule%% *} 1 ${rule#* } -j DROP -m comment --comment lzo-e2e-zone-down
  done
  ip netns exec "$NS" nft -f - <<NFT
table bridge lzo_zone_down {
  chain out { type filter hook output priority 0; ip daddr $dead_range drop; }
}
NFT
}

# The stopped zone back: the DROP rules out, containerd and the kubelet started again
# (its mount namespace, cgroup root and files were kept; the kubelet registers again and
# takes its pods back).
loki_zone_return() {
  local n=$LOKI_DEAD_NODE rule
  say "bringing zone $LOKI_DEAD_ZONE back: $n's traffic let through, containerd and kubelet started again"
  while rule=$(ip netns exec "$NS" iptables -S | grep -m1 'lzo-e2e-zone-down'); do
    eval "ip netns exec \"\$NS\" iptables ${rule/-A /-D }"
  done
  ip netns exec "$NS" nft delete table bridge lzo_zone_down 2>/dev/null || true
  run_containerd "$n"
  run_kubelet "$n"
  LOKI_ZONE_DOWN=0
}

loki_figures() {
  echo "real Loki (LOKI_IMAGE_ARCHIVE=$LOKI_IMAGE_ARCHIVE), node timings ${LOKI_TIMINGS_LABEL:-?}:"
  printf '  %-44s %8s s\n' "every Loki pod Ready (stack created ->)" "${TIME[loki_ready]:-?}"
  printf '  %-44s %8s s\n' "zone stopped -> operator says Unavailable" "${TIME[zone_unavailable]:-?}"
  printf '  %-44s %8s s\n' "zone stopped -> stateless pods Ready again" "${TIME[stateless_back]:-?}"
  printf '  %-44s %8s s\n' "surviving ingester deleted -> Ready" "${TIME[ingester_restart]:-?}"
  printf '  %-44s %8s s\n' "zone stopped -> all lines queried" "${TIME[outage_total]:-?}"
  local p n lp=()
  for n in "${names[@]}"; do
    for p in $(cgroup_pids "lzo-rn-$ID-$n"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = loki ] && lp+=("$p")
    done
  done
  printf '  %-44s %8s s %6s MiB\n' "Loki processes running at the end (${#lp[@]})" "$(cpu_s "${lp[@]}")" "$(rss "${lp[@]}")"
  for p in before-outage during-outage after-restart; do printf '  push %-39s %s\n' "$p" "${LOKI_PUSH[$p]:-not run}"; done
  printf '  %-44s %s\n' "query" "${LOKI_QUERY:-not run}"
}
