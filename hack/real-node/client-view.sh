# Sourced by e2e.sh with LOKI_IMAGE_ARCHIVE, after the real-Loki scenario (loki.sh) and
# the Prometheus checks: a zone loss as a client sees it, under Kubernetes' production
# node timings (issue 42). Nothing of it runs without a Loki image.
#
#   cv_run      the cluster moved to RN_TIMINGS=production (lib.sh's timings_switch); the
#               stack's distributors, queriers and query frontends scaled to 3 (one per
#               zone, so that a lost zone takes one of each and the Services keep two);
#               every Loki pod recreated so that it carries the production tolerations
#               (300 s); then, for each variant of CV_VARIANTS ("off on"): the LokiStack
#               annotated loki.grafana.com/zone-fast-failover: "false" (off) or not
#               (on), a steady client (loki-client.py steady) and a watcher
#               (zone-watch.py) started, CV_BEFORE s later one zone stopped as loki.sh
#               stops it, CV_OUTAGE s later brought back, and once every Loki pod is
#               Ready and the ingester ring healthy again, CV_AFTER s more before the
#               client stops and reads every accepted line back.
#   cv_figures  the tables again, for the figures at the end of e2e.sh.
#
# Checked: no accepted line lost in either variant, the client's requests in every
# window, both variants in the table; and where the checkout has the fast failover
# (loki.grafana.com/zone-fast-failover), that "on" took the dead zone's pods out of the
# distributor's endpoints (Ready False, reason ZoneUnavailable) before the node went
# NotReady, and "off" did not. The failure windows are figures, not assertions.
#
# Uses e2e.sh's helpers (say, assert, pass, fail, kubectl, hk, jp, now, secs, in_ns,
# holder, STACK, STACK_NS, OP_NS, TIMEOUT), loki.sh's (loki_pods, svc_ip, loki_zone_stop,
# loki_zone_return) and lib.sh's (timings_switch, TIMINGS_LABEL, API, W, ADMIN_TOKEN).

CV_BEFORE=${CV_BEFORE:-20}
CV_OUTAGE=${CV_OUTAGE:-90}
CV_AFTER=${CV_AFTER:-20}
CV_REPLICAS=${CV_REPLICAS:-3}
CV_VARIANTS=${CV_VARIANTS:-off on}
CV_TENANT=client-view
CV_ANNOTATION=loki.grafana.com/zone-fast-failover
CV_DIR=
CV_TIMINGS=
CV_ROWS=()
declare -A CV_TIME

# Replicas the stack's workloads ask for.
cv_expected() {
  kubectl -n "$STACK_NS" get deployments,statefulsets -l "app.kubernetes.io/instance=$STACK" \
    -o jsonpath='{range .items[*]}{.spec.replicas}{"\n"}{end}' 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

# The ingester ring as every Ready distributor sees it: "ok N ZONES" when each shows
# every ingester ACTIVE with a heartbeat under 30 s old, in as many zones as ingesters.
cv_ring() {
  local ips ip want out all=""
  want=$(jp -n "$STACK_NS" get statefulset "$STACK-ingester" -o jsonpath='{.spec.replicas}')
  ips=$(loki_pods | awk '$6 == "distributor" && $4 == "True" {print $5}')
  [ -n "$ips" ] || { echo "no Ready distributor"; return 1; }
  for ip in $ips; do
    out=$(in_ns curl -sf --max-time 3 -H 'Accept: application/json' "http://$ip:3100/ring" | python3 -c '
import json, re, sys, time
from datetime import datetime
d = json.load(sys.stdin)
ok, zones = 0, set()
for s in d["shards"]:
    t = s.get("timestamp") or ""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,6})?\d*(Z|[+-]\d\d:\d\d)$", t)
    age = 0  # no heartbeat time in the answer: the state alone
    if m:
        age = time.time() - datetime.fromisoformat(m.group(1) + (m.group(2) or "") + m.group(3).replace("Z", "+00:00")).timestamp()
    if s["state"] == "ACTIVE" and age < 30:
        ok += 1
        zones.add(s.get("zone"))
print(ok, len(d["shards"]), len(zones))' 2>/dev/null) || out="? ? ?"
    all+="$ip: $out; "
    read -r ok n z <<<"$out"
    [ "$ok" = "$want" ] && [ "$n" = "$want" ] && [ "$z" = "$want" ] || { echo "not healthy: $all"; return 1; }
  done
  echo "ok: $all"
}

# Every Loki pod Ready (none being deleted, as many as the workloads ask for) and the
# ring healthy from every distributor, within SECONDS.
cv_healthy() {
  local want pods ready
  want=$(cv_expected)
  pods=$(loki_pods)
  ready=$(awk '$4 == "True"' <<<"$pods" | grep -c . || true)
  [ "$ready" = "$want" ] && [ "$(grep -c . <<<"$pods")" = "$want" ] && cv_ring >/dev/null
}
cv_wait_healthy() { # SECONDS WHAT: CV_WAITED is the seconds it took; fails after SECONDS
  local t=$(now) end=$(($(date +%s) + $1))
  CV_WAITED="?"
  until cv_healthy; do
    if [ "$(date +%s)" -ge "$end" ]; then
      kubectl -n "$STACK_NS" get pods -o wide >&2 || true
      say "ring: $(cv_ring)"
      fail "client view: every Loki pod Ready and the ingester ring healthy $2 (within $1 s; $(loki_pods | awk '$4 == "True"' | grep -c .) of $(cv_expected) Ready)"
      return 1
    fi
    sleep 1
  done
  CV_WAITED=$(secs "$t")
}

# One distributor, querier and query frontend per node (zone). The operator spreads
# them with whenUnsatisfiable: ScheduleAnyway, and a zone's outage or a kubelet restart
# makes it render them away from that zone for a while, so two can share a zone: one of
# a crowded node is deleted (the ReplicaSet's replacement goes where the spread is
# thinnest), up to 4 times per component. Prints the placement.
cv_balance() {
  local comp k crowded victim pods
  for comp in distributor querier query-frontend; do
    for k in 1 2 3 4; do
      pods=$(loki_pods)
      crowded=$(awk -v c="$comp" '$6 == c {n[$2]++} END {for (k in n) if (n[k] > 1) print k}' <<<"$pods" | head -n1)
      [ -n "$crowded" ] || break
      victim=$(awk -v c="$comp" -v n="$crowded" '$6 == c && $2 == n {print $1; exit}' <<<"$pods")
      say "client view: two ${comp}s on $crowded: deleting $victim so that its replacement goes to the zone without one"
      kubectl -n "$STACK_NS" delete pod "$victim" --wait=false >/dev/null
      sleep 3
      cv_wait_healthy "$TIMEOUT" "after moving a $comp" || return 0
    done
  done
  CV_PLACEMENT=$(loki_pods | awk '$6 == "distributor" || $6 == "querier" || $6 == "query-frontend" || $6 == "ingester" {n[$6] = n[$6] " " $2} END {for (c in n) printf "%s:%s; ", c, n[c]}')
}
cv_one_per_zone() {
  local comp
  for comp in distributor querier query-frontend ingester; do
    [ "$(loki_pods | awk -v c="$comp" '$6 == c {print $2}' | sort -u | grep -c .)" = "${#names[@]}" ] || return 1
  done
}

# The node to stop: one that runs neither the compactor nor the index gateway (single
# replicas), and not the operator's leader: if it does, the leader pod is deleted once so
# that a standby elsewhere takes over (a leader lost with the zone is another scenario).
cv_pick_node() {
  local pods cand dead="" leader_node
  pods=$(loki_pods)
  for cand in "${names[@]}"; do
    awk -v n="$cand" '$2 == n && ($6 == "compactor" || $6 == "index-gateway")' <<<"$pods" | grep -q . && continue
    dead=$cand
    leader_node=$(jp -n "$OP_NS" get pod "$(holder)" -o jsonpath='{.spec.nodeName}')
    [ "$cand" != "$leader_node" ] && break
  done
  [ -n "$dead" ] || return 1
  leader_node=$(jp -n "$OP_NS" get pod "$(holder)" -o jsonpath='{.spec.nodeName}')
  if [ "$dead" = "$leader_node" ]; then
    local old
    old=$(holder)
    say "the operator's leader $old runs on $dead, the node to stop: deleting it so that the standby leads"
    kubectl -n "$OP_NS" delete pod "$old" --wait=false >/dev/null
    until_true 60 bash -c "h=\$(nsenter --net=/run/netns/$NS $BIN/kubectl --kubeconfig $KC -n $OP_NS get lease loki-zone-operator -o jsonpath='{.spec.holderIdentity}'); [ -n \"\$h\" ] && [ \"\$h\" != '$old' ]" || true
    say "leader now $(holder) on $(jp -n "$OP_NS" get pod "$(holder)" -o jsonpath='{.spec.nodeName}')"
  fi
  echo "$dead"
}

cv_run() {
  CV_DIR=$W/client-view
  mkdir -p "$CV_DIR"
  (umask 077 && printf '%s' "$ADMIN_TOKEN" >"$CV_DIR/token")
  local t
  say "client view (issue 42): the zone of the previous outage back, every Loki pod Ready, the ring healthy"
  cv_wait_healthy "$TIMEOUT" "after the previous outage" || return 0
  CV_TIME[healthy_first]=$CV_WAITED
  t=$(now)
  timings_switch production
  CV_TIMINGS=$TIMINGS_LABEL
  CV_TIME[switch]=$(secs "$t")
  say "client view: node timings $CV_TIMINGS (switched in ${CV_TIME[switch]} s)"
  # One distributor, querier and query frontend per zone.
  t=$(now)
  hk -n "$STACK_NS" patch lokistack "$STACK" --type merge -p "{\"spec\":{\"template\":{\"distributor\":{\"replicas\":$CV_REPLICAS},\"querier\":{\"replicas\":$CV_REPLICAS},\"queryFrontend\":{\"replicas\":$CV_REPLICAS}}}}" >/dev/null ||
    { fail "client view: could not scale the stack's stateless components to $CV_REPLICAS"; return 0; }
  scaled() { [ "$(jp -n "$STACK_NS" get deployment "$STACK-distributor" -o jsonpath='{.spec.replicas}') $(jp -n "$STACK_NS" get deployment "$STACK-querier" -o jsonpath='{.spec.replicas}') $(jp -n "$STACK_NS" get deployment "$STACK-query-frontend" -o jsonpath='{.spec.replicas}')" = "$CV_REPLICAS $CV_REPLICAS $CV_REPLICAS" ]; }
  assert "client view: the operator scaled the distributors, queriers and query frontends to $CV_REPLICAS" until_true 120 scaled
  # Pods created under the fast timings tolerate an unreachable node for 10 s: recreated.
  local old
  old=$(kubectl -n "$STACK_NS" get pods -l "app.kubernetes.io/instance=$STACK" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.tolerations[?(@.key=="node.kubernetes.io/unreachable")].tolerationSeconds}{"\n"}{end}' |
    awk -v t="$TIMINGS_TOLERATION" '$2 != t {print $1}')
  if [ -n "$old" ]; then
    say "client view: recreating the pods created with other tolerations than $TIMINGS_TOLERATION s: $(echo $old)"
    kubectl -n "$STACK_NS" delete pod $old --wait=false >/dev/null
    sleep 5
  fi
  cv_wait_healthy $((2 * TIMEOUT)) "after scaling and recreating the pods" || return 0
  CV_TIME[prepare]=$(secs "$t")
  local tol
  tol=$(kubectl -n "$STACK_NS" get pods -l "app.kubernetes.io/instance=$STACK" -o jsonpath='{range .items[*]}{.spec.tolerations[?(@.key=="node.kubernetes.io/unreachable")].tolerationSeconds}{"\n"}{end}' | sort | uniq -c | tr -s ' \n' ' ')
  assert "client view: every Loki pod tolerates an unreachable node for $TIMINGS_TOLERATION s (count, seconds: $tol)" \
    [ "$(kubectl -n "$STACK_NS" get pods -l "app.kubernetes.io/instance=$STACK" -o jsonpath='{range .items[*]}{.spec.tolerations[?(@.key=="node.kubernetes.io/unreachable")].tolerationSeconds}{"\n"}{end}' | sort -u)" = "$TIMINGS_TOLERATION" ]
  kubectl -n "$STACK_NS" get pods -o wide >&2 || true
  local v
  for v in $CV_VARIANTS; do cv_variant "$v"; done
  cv_figures >&2
  local names_in
  names_in=$(printf '%s\n' "${CV_ROWS[@]}" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | sort | tr '\n' ' ')
  assert "client view: the table has both variants, off and on (rows: ${names_in:-none})" [ "$names_in" = "off on " ]
}

cv_variant() { # off | on
  local name=$1 dir=$CV_DIR/$1 dead dist qf wpid cpid stop ret t_h sum ev out
  mkdir -p "$dir"
  say "client view, variant $name ($([ "$name" = off ] && echo "$CV_ANNOTATION: \"false\"" || echo "no $CV_ANNOTATION annotation: the default, on"); node timings $CV_TIMINGS)"
  cv_wait_healthy "$TIMEOUT" "before variant $name" || return 0
  if [ "$name" = off ]; then
    hk -n "$STACK_NS" annotate lokistack "$STACK" "$CV_ANNOTATION=false" --overwrite >/dev/null
  else
    hk -n "$STACK_NS" annotate lokistack "$STACK" "$CV_ANNOTATION-" >/dev/null 2>&1 || true
  fi
  sleep 5 # the operator's reconcile of the annotation
  cv_balance
  assert "client view $name: one distributor, querier, query frontend and ingester per zone ($CV_PLACEMENT)" cv_one_per_zone
  dead=$(cv_pick_node) || { fail "client view $name: no node without the compactor and the index gateway to stop"; return 0; }
  dist=$(svc_ip "$STACK-distributor-http")
  qf=$(svc_ip "$STACK-query-frontend-http")
  in_ns python3 "$here/zone-watch.py" watch --api "$API" --token-file "$CV_DIR/token" \
    --ca "$W/cp/certs/apiserver.crt" --namespace "$STACK_NS" --selector "app.kubernetes.io/instance=$STACK" \
    --services "$STACK-distributor-http,$STACK-query-frontend-http" --out "$dir/watch.jsonl" \
    --stop-file "$dir/stop" 2>"$dir/watch.err" &
  wpid=$!
  in_ns python3 "$here/loki-client.py" steady --push-url "http://$dist:3100" --query-url "http://$qf:3100" \
    --tenant "$CV_TENANT" --run "cv-$name-$ID" --out "$dir/requests.jsonl" --sent "$dir/sent.jsonl" \
    --stop-file "$dir/stop" >"$dir/steady.out" 2>"$dir/steady.err" &
  cpid=$!
  say "client view $name: steady client (a push and a query every 0.1 s through $dist and $qf, 2 s timeouts; pushes of mode retry retried once) and watcher started; $CV_BEFORE s before the stop"
  sleep "$CV_BEFORE"
  say "client view $name: on $dead: $(loki_pods | awk -v n="$dead" '$2 == n {printf "%s ", $1}')"
  loki_zone_stop "$dead"
  stop=$LOKI_T_STOP
  local k
  for ((k = 10; k <= CV_OUTAGE; k += 10)); do
    sleep "$(awk -v s="$stop" -v k="$k" -v n="$(now)" 'BEGIN {d = s + k - n; print (d > 0 ? d : 0)}')"
    say "client view $name: +$k s: $dead $(jp get node "$dead" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'), distributor endpoints ready $(jp -n "$STACK_NS" get endpoints "$STACK-distributor-http" -o jsonpath='{.subsets[*].addresses[*].targetRef.name}' | wc -w), requests so far $(grep -c . "$dir/requests.jsonl" 2>/dev/null), failed $(grep -c '"ok": false' "$dir/requests.jsonl" 2>/dev/null)"
  done
  ret=$(now)
  loki_zone_return
  cv_wait_healthy "$TIMEOUT" "after the return in variant $name" || true
  t_h=$CV_WAITED
  say "client view $name: every Loki pod Ready and the ring healthy $t_h s after the return; $CV_AFTER s more"
  sleep "$CV_AFTER"
  touch "$dir/stop"
  wait "$cpid" || true
  wait "$wpid" || true
  say "client view $name: client stopped: $(cat "$dir/steady.out" 2>/dev/null) $(tail -n 3 "$dir/steady.err" 2>/dev/null)"
  out=$(python3 "$here/loki-client.py" summary --log "$dir/requests.jsonl" --stop "$stop" --return "$ret" --label "$name" 2>&1) || true
  grep -v '^SUMMARY ' <<<"$out" | sed 's/^/    /' >&2
  sum=$(sed -n 's/^SUMMARY //p' <<<"$out")
  ev=$(python3 "$here/zone-watch.py" events --log "$dir/watch.jsonl" --node "$dead" --stop "$stop" --return "$ret" 2>&1) || true
  say "client view $name: events (s after the stop; *_back after the return): $ev"
  printf '%s\n' "$sum" >"$dir/summary.json"
  printf '%s\n' "$ev" >"$dir/events.json"
  printf '%s\n' "$t_h" >"$dir/healthy-after-return"
  # The row and the checks.
  local row
  row=$(python3 - "$dir/summary.json" "$dir/events.json" "$name" "$t_h" "$STACK-distributor-http" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ev = json.load(open(sys.argv[2]))
name, healthy, svc = sys.argv[3], sys.argv[4], sys.argv[5]
w, k, f, v = s["windows"], s["kinds"], s["final"] or {}, s["verify"]
pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"
n = lambda x: "-" if x is None else str(x)
print("| " + " | ".join([
    name,
    f"{k['push']['failure_window_s']} / {k['query']['failure_window_s']}",
    f"{pct(w['during']['push']['failed_share'])} / {pct(w['during']['query']['failed_share'])}",
    f"{n(w['before']['push']['p99_ms'])} / {n(w['during']['push']['p99_ms'])}",
    f"{k['push_retry']['failed_after_stop']} of {w['during']['push_retry']['requests'] + w['after']['push_retry']['requests']}",
    n(f.get("lost")),
    n(v["stop_to_all_queryable_s"]),
    f"{k['push']['return_failed']} / {k['query']['return_failed']} ({k['push']['return_window_s']} / {k['query']['return_window_s']})",
]) + " |")
eo = ev.get("endpoints_out", {})
print("| " + " | ".join([
    name, n(ev.get("last_renew")), f"{n(ev.get('pods_notready'))} ({','.join(ev.get('pods_notready_reason') or [])})",
    n(eo.get(svc)), n((ev.get("dnat_out") or {}).get(svc)), n(ev.get("node_notready")),
    f"{n(ev.get('node_ready_back'))} / {n((ev.get('endpoints_back') or {}).get(svc))} / {healthy}",
]) + " |")
PY
  ) || row=""
  if [ -n "$row" ]; then
    CV_ROWS+=("$(sed -n 1p <<<"$row")")
    CV_EVROWS+=("$(sed -n 2p <<<"$row")")
  fi
  local q
  q() { python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else d)' "$@" 2>/dev/null; }
  assert "client view $name: every line the distributors accepted was read back at the end: $(q "$dir/summary.json" final.found) of $(q "$dir/summary.json" final.expected), lost $(q "$dir/summary.json" final.lost)" \
    bash -c "[ '$(q "$dir/summary.json" final.lost)' = 0 ] && [ '$(q "$dir/summary.json" final.expected)' -gt 0 ]"
  local wn
  for wn in before during after; do
    assert "client view $name: the client pushed and queried $wn the outage's window ($(q "$dir/summary.json" windows.$wn.push.requests) pushes, $(q "$dir/summary.json" windows.$wn.query.requests) queries)" \
      bash -c "[ '$(q "$dir/summary.json" windows.$wn.push.requests)' -gt 0 ] && [ '$(q "$dir/summary.json" windows.$wn.query.requests)' -gt 0 ]"
  done
  # The fast failover, where this checkout has it.
  if grep -q ANNOTATION_ZONE_FAST_FAILOVER "$repo/operator/src/model/names.rs" 2>/dev/null; then
    local out_at nr_at reason
    # The distributor's Service (one per zone, balanced above).
    out_at=$(q "$dir/events.json" "endpoints_out.$STACK-distributor-http")
    nr_at=$(q "$dir/events.json" node_notready)
    reason=$(q "$dir/events.json" pods_notready_reason)
    if [ "$name" = on ]; then
      assert "client view on: the operator took $dead's pods out of the distributor's endpoints ${out_at:-never} s after the stop, before the node went NotReady (${nr_at:-never} s; reasons $reason)" \
        awk -v o="$out_at" -v r="$nr_at" 'BEGIN { exit !(o ~ /^[0-9.]+$/ && (r == "" || o + 0 < r + 0)) }'
      assert "client view on: the dead zone's pods Ready False with reason ZoneUnavailable ($reason)" grep -q ZoneUnavailable <<<"$reason"
    else
      assert "client view off: $dead's pods left the distributor's endpoints only with the node lifecycle controller (${out_at:-never} s after the stop, the node NotReady after ${nr_at:-never} s)" \
        awk -v o="$out_at" -v r="$nr_at" 'BEGIN { exit !(o ~ /^[0-9.]+$/ && r != "" && o + 0 >= r - 1) }'
    fi
  else
    say "NOT CHECKED: this checkout's operator has no fast failover (no ANNOTATION_ZONE_FAST_FAILOVER in operator/src/model/names.rs): variant $name's annotation changes nothing"
  fi
}

cv_figures() {
  [ -n "$CV_DIR" ] || return 0
  echo "client view of a zone loss (issue 42), node timings $CV_TIMINGS;"
  echo "  steady client: a push (3 lines) and a query (last 30 s) every 0.1 s, new connection, 2 s timeout, no retry; pushes of mode retry sent once more at once;"
  echo "  stop at +${CV_BEFORE} s, return ${CV_OUTAGE} s after the stop; figures in seconds after the stop unless said; failure window = send times of the first to the last failed request between the stop and the return (those after the return in the last column):"
  echo "  | variant | failure window push / query (s) | failed share push / query during | p99 push latency before / during (ms) | failed pushes with one retry | lines lost | stop -> all lines queryable (s) | after the return: failed push / query (window s) |"
  echo "  |---|---|---|---|---|---|---|---|"
  local r
  for r in "${CV_ROWS[@]}"; do echo "  $r"; done
  echo "  what Kubernetes showed (s after the stop; last column after the return):"
  echo "  | variant | last Lease renewal | pods Ready False (reason) | out of the distributor's endpoints | out of kube-proxy's rules | node NotReady | return -> node Ready / distributor endpoints all back / every pod Ready and the ring healthy |"
  echo "  |---|---|---|---|---|---|---|"
  for r in "${CV_EVROWS[@]}"; do echo "  $r"; done
  printf '  %-44s %8s s\n' "switch to production timings" "${CV_TIME[switch]:-?}"
  printf '  %-44s %8s s\n' "scale to $CV_REPLICAS, recreate the pods -> healthy" "${CV_TIME[prepare]:-?}"
}
CV_EVROWS=()
