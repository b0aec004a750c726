# Sourced by e2e.sh with LOKI_IMAGE_ARCHIVE, after the real-Loki scenario and the
# Prometheus checks, before the client view: what a zone-aware stack sends across zones
# (issue 41), with Loki's zone-aware gossip off and on in the same run. Nothing of it
# runs without a Loki image; TRAFFIC_VIEW=0 leaves it out.
#
#   tv_run      the stack's distributors, queriers and query frontends at 3 (one per
#               zone, as the client view has them), then for each variant of TV_VARIANTS
#               ("off on"): the LokiStack annotated loki.grafana.com/zone-aware-gossip:
#               "false" (off) or not (on), every Loki pod running the new configuration
#               (its /config) and the ring healthy, TV_SETTLE s for gossip to settle;
#               then zone-traffic.sh's counters from zero and one snapshot per phase:
#                 push          TV_STREAMS x TV_LINES lines of TV_LINE_BYTES bytes
#                               pushed to the distributor pod of one zone (the entry
#                               zone): the test's client is outside every zone, so what
#                               crosses is the distributor's copies to the ingesters
#                 query-recent  every pushed stream queried back through the entry
#                               zone's query frontend pod (the ingesters answer)
#                 flush         every ingester's chunks flushed to the bucket (POST /flush)
#                 idle          nothing but the stack's own chatter (gossip, keepalives),
#                               TV_IDLE s at least and until TV_STORE_AFTER s after the
#                               flush: the ingesters keep flushed chunks for the
#                               operator's chunk_retain_period (5m, dropped at the next
#                               30 s flush check), then only the bucket has them
#                 query-store   the same streams again, now read from the bucket (Loki's
#                               stats in the response say who sent the lines)
#                 zone-down     a zone other than the entry zone stopped as loki.sh
#                               stops it, TV_DOWN_LINES more lines per stream pushed,
#                               snapshot TV_OUTAGE s after the stop
#                 zone-back     the zone back, every Loki pod Ready and the ring healthy
#                               from every distributor
#               then every line of the variant queried back (none may be lost).
#   tv_figures  the tables again, and the comparison, for the figures at the end.
#
# Checked: both variants' tables; idle cross-zone bytes per second lower with the gossip
# on than off; the push phase's cross-zone bytes (idle rate subtracted) within 10 % of the
# physical floor, (R-1) x the bytes pushed, in both variants; the ring healthy again after
# the return; no accepted line lost. The query and outage phases are figures.
#
# Uses e2e.sh's helpers (say, assert, pass, fail, kubectl, hk, jp, now, secs, in_ns,
# until_true, STACK, STACK_NS, TIMEOUT, W, NS, names), loki.sh's (loki_pods, jq_field,
# loki_s3_keys, loki_zone_stop, loki_zone_return), client-view.sh's (cv_wait_healthy,
# cv_balance, cv_one_per_zone, cv_pick_node) and zone-traffic.sh's.

TV_VARIANTS=${TV_VARIANTS:-off on}
TV_SETTLE=${TV_SETTLE:-30}
TV_IDLE=${TV_IDLE:-60}
TV_STORE_AFTER=${TV_STORE_AFTER:-360}
TV_STREAMS=${TV_STREAMS:-20}
TV_LINES=${TV_LINES:-100}
TV_LINE_BYTES=${TV_LINE_BYTES:-4000}
TV_DOWN_LINES=${TV_DOWN_LINES:-25}
TV_OUTAGE=${TV_OUTAGE:-40}
TV_REPLICAS=${TV_REPLICAS:-3}
TV_TENANT=traffic-view
TV_ANNOTATION=loki.grafana.com/zone-aware-gossip
TV_DIR=
TV_RF=
declare -A TV_TABLE TV_TIME TV_Q

# Pods whose effective configuration (/config) has memberlist.zone_aware_routing.enabled
# equal to WANT (true|false), and how many Loki pods there are: "MATCHING ALL".
tv_gossip_config() {
  local want=$1 ip n=0 all=0 got
  for ip in $(loki_pods | awk '$4 == "True" {print $5}'); do
    all=$((all + 1))
    got=$(in_ns curl -sf --max-time 5 "http://$ip:3100/config" | python3 -c '
import sys, yaml
c = yaml.safe_load(sys.stdin) or {}
print(str(((c.get("memberlist") or {}).get("zone_aware_routing") or {}).get("enabled", False)).lower())' 2>/dev/null || echo "?")
    [ "$got" = "$want" ] && n=$((n + 1))
  done
  echo "$n $all"
}
tv_all_gossip() { # WANT: every Loki pod Ready runs WANT, and the stack is healthy
  local r
  r=$(tv_gossip_config "$1")
  [ "${r% *}" = "${r#* }" ] && [ "${r% *}" -gt 0 ] && cv_healthy
}

tv_push() { # PHASE URL LINES SENT: pushes; prints the client's JSON line
  in_ns python3 "$here/loki-client.py" push --url "$2" --tenant "$TV_TENANT" --phase "$1" \
    --streams "$TV_STREAMS" --lines "$3" --line-bytes "$TV_LINE_BYTES" --log "$4" 2>>"$W/logs/loki-client.log"
}
# PHASE URL SENT SLACK FILE: every stream of SENT queried, then the counters'
# snapshot PHASE; the requests, response bytes and Loki's stats in TV_Q[PHASE].
tv_query_phase() {
  local q
  q=$(tv_query "$2" "$3" "$4")
  zt_snapshot "$NS" "$1" "$5"
  say "traffic view: $1: $q"
  TV_Q[$1]="$(jq_field "$q" requests) requests, $(jq_field "$q" response_bytes) B of responses, Loki's stats $(jq_field "$q" stats)"
  TV_Q[$1.requests]=$(jq_field "$q" requests)
}
tv_query() { # URL SENT SLACK: every stream of SENT queried back; prints the client's JSON line
  in_ns python3 "$here/loki-client.py" query --url "$1" --tenant "$TV_TENANT" --log "$2" --slack "$3" \
    2>>"$W/logs/loki-client.log" || true
}

tv_run() {
  TV_DIR=$W/traffic-view
  mkdir -p "$TV_DIR"
  local i spec="" t
  for i in "${!names[@]}"; do spec+="${NODE_ZONE[${names[$i]}]}=10.88.$((i + 1)).0/24 "; done
  TV_SPEC=$spec
  TV_RF=$(jp -n "$STACK_NS" get lokistack "$STACK" -o jsonpath='{.spec.replication.factor}')
  say "traffic view (issue 41): zones and pod ranges $TV_SPEC; replication factor ${TV_RF:-?}"
  cv_wait_healthy "$TIMEOUT" "before the traffic view" || return 0
  t=$(now)
  hk -n "$STACK_NS" patch lokistack "$STACK" --type merge -p "{\"spec\":{\"template\":{\"distributor\":{\"replicas\":$TV_REPLICAS},\"querier\":{\"replicas\":$TV_REPLICAS},\"queryFrontend\":{\"replicas\":$TV_REPLICAS}}}}" >/dev/null ||
    { fail "traffic view: could not scale the stack's stateless components to $TV_REPLICAS"; return 0; }
  sleep 5
  cv_wait_healthy $((2 * TIMEOUT)) "after scaling to $TV_REPLICAS" || return 0
  TV_TIME[prepare]=$(secs "$t")
  local v
  for v in $TV_VARIANTS; do tv_variant "$v"; done
  zt_teardown "$NS"
  tv_figures >&2
  local have=""
  for v in off on; do [ -n "${TV_TABLE[$v]:-}" ] && have+="$v "; done
  assert "traffic view: the cross-zone table for both variants, gossip off and on (have: ${have:-none})" [ "$have" = "off on " ]
  if [ "$have" = "off on " ]; then
    local cmp
    cmp=$(tv_compare)
    say "traffic view: $cmp"
    TV_COMPARE=$cmp
    assert "traffic view: idle cross-zone bytes fall with the zone-aware gossip on: $cmp" \
      python3 - "${TV_TABLE[off]}" "${TV_TABLE[on]}" <<'PY'
import json, sys
off, on = (json.load(open(f))["zone_traffic"]["idle_Bps"] for f in sys.argv[1:3])
sys.exit(0 if off and on is not None and on < off else 1)
PY
  fi
}

# The JSON half of a zt_table output, by variant: the idle rates and their ratio.
tv_compare() {
  python3 - "${TV_TABLE[off]}" "${TV_TABLE[on]}" <<'PY'
import json, sys
off, on = (json.load(open(f))["zone_traffic"] for f in sys.argv[1:3])
def ph(s, label):
    return next((p for p in s["phases"] if p["label"] == label), {})
a, b = off["idle_Bps"], on["idle_Bps"]
r = f"{b / a:.2f}" if a else "-"
out = [f"idle cross-zone {a:,.0f} B/s off, {b:,.0f} B/s on (on/off {r})"]
for label, key in (("push", "cross_per_byte_pushed"), ("query-recent", "bytes_per_query"), ("query-store", "bytes_per_query")):
    x, y = ph(off, label).get(key), ph(on, label).get(key)
    out.append(f"{label} {key} {x} off, {y} on")
print("; ".join(out))
PY
}

tv_variant() { # off | on
  local name=$1 dir=$TV_DIR/$1 dead entry entry_zone dist qf out q pushed t want f
  mkdir -p "$dir"
  want=$([ "$name" = off ] && echo false || echo true)
  say "traffic view, variant $name ($([ "$name" = off ] && echo "$TV_ANNOTATION: \"false\"" || echo "no $TV_ANNOTATION annotation: the default, on"))"
  if [ "$name" = off ]; then
    hk -n "$STACK_NS" annotate lokistack "$STACK" "$TV_ANNOTATION=false" --overwrite >/dev/null
  else
    hk -n "$STACK_NS" annotate lokistack "$STACK" "$TV_ANNOTATION-" >/dev/null 2>&1 || true
  fi
  t=$(now)
  # The configuration rolls out: every pod restarts with it (the ingesters one by one).
  if ! until_true $((3 * TIMEOUT)) tv_all_gossip "$want"; then
    kubectl -n "$STACK_NS" get pods -o wide >&2 || true
    fail "traffic view $name: every Loki pod running memberlist.zone_aware_routing.enabled: $want and the ring healthy (pods with it, of all Ready: $(tv_gossip_config "$want"))"
    return 0
  fi
  TV_TIME[rollout_$name]=$(secs "$t")
  pass "traffic view $name: every Loki pod runs memberlist.zone_aware_routing.enabled: $want ($(tv_gossip_config "$want")), ring healthy, ${TV_TIME[rollout_$name]} s after the annotation"
  cv_balance
  assert "traffic view $name: one distributor, querier, query frontend and ingester per zone ($CV_PLACEMENT)" cv_one_per_zone
  dead=$(cv_pick_node) || { fail "traffic view $name: no node without the compactor and the index gateway to stop"; return 0; }
  for entry in "${names[@]}"; do [ "$entry" != "$dead" ] && break; done
  entry_zone=${NODE_ZONE[$entry]}
  dist=$(loki_pods | awk -v n="$entry" '$6 == "distributor" && $2 == n && $4 == "True" {print $5; exit}')
  qf=$(loki_pods | awk -v n="$entry" '$6 == "query-frontend" && $2 == n && $4 == "True" {print $5; exit}')
  [ -n "$dist" ] && [ -n "$qf" ] || { fail "traffic view $name: no Ready distributor and query frontend on $entry ($entry_zone)"; return 0; }
  say "traffic view $name: entry zone $entry_zone (distributor $dist, query frontend $qf), zone to stop ${NODE_ZONE[$dead]}; $TV_SETTLE s for gossip to settle"
  sleep "$TV_SETTLE"

  f=$dir/counters.jsonl
  : >"$f"
  zt_setup "$NS" "$TV_SPEC" || { fail "traffic view $name: zt_setup failed"; return 0; }
  zt_snapshot "$NS" start "$f"

  out=$(tv_push push "http://$dist:3100" "$TV_LINES" "$dir/sent-push.jsonl")
  zt_snapshot "$NS" push "$f"
  say "traffic view $name: push: $out"
  assert "traffic view $name: every pushed line accepted ($(jq_field "$out" accepted) accepted, $(jq_field "$out" retries) requests retried)" \
    [ "$(jq_field "$out" never_accepted)" = 0 ]
  pushed=$(zt_sent_bytes "$dir/sent-push.jsonl" push)

  tv_query_phase query-recent "http://$qf:3100" "$dir/sent-push.jsonl" 1 "$f"

  # Every ingester's chunks to the bucket; done when the tenant's object count has grown
  # and stayed the same for 5 s.
  local before after ip deadline last=-1 same=0 t_flush
  before=$(loki_s3_keys "$TV_TENANT")
  for ip in $(loki_pods | awk '$6 == "ingester" && $4 == "True" {print $5}'); do
    in_ns curl -s -o /dev/null -X POST --max-time 10 "http://$ip:3100/flush" || true
  done
  deadline=$(($(date +%s) + 120))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    after=$(loki_s3_keys "$TV_TENANT")
    if [ "$after" = "$last" ]; then same=$((same + 1)); else same=0; last=$after; fi
    [ "$same" -ge 5 ] && [ "$after" != "?" ] && [ "$before" != "?" ] && [ "$after" -gt "$before" ] && break
    sleep 1
  done
  t_flush=$(now)
  zt_snapshot "$NS" flush "$f"
  say "traffic view $name: ingesters flushed: $before chunk objects of $TV_TENANT before, $after after"

  # Idle: nothing but the stack's own chatter, until the ingesters have dropped the
  # flushed chunks (the operator's chunk_retain_period, 5m, checked every 30 s), so that
  # the next queries are answered from the bucket.
  local idle
  idle=$(awk -v f="$t_flush" -v w="$TV_STORE_AFTER" -v m="$TV_IDLE" -v n="$(now)" 'BEGIN {d = f + w - n; print (d > m ? d : m)}')
  say "traffic view $name: idle for $idle s"
  sleep "$idle"
  zt_snapshot "$NS" idle "$f"

  # A wider range than query-recent's (slack 2 s): another query, not a cached answer.
  tv_query_phase query-store "http://$qf:3100" "$dir/sent-push.jsonl" 2 "$f"

  say "traffic view $name: on $dead: $(loki_pods | awk -v n="$dead" '$2 == n {printf "%s ", $1}')"
  loki_zone_stop "$dead"
  local stop=$LOKI_T_STOP
  out=$(tv_push zone-down "http://$dist:3100" "$TV_DOWN_LINES" "$dir/sent-down.jsonl")
  say "traffic view $name: push with ${NODE_ZONE[$dead]} down: $out"
  assert "traffic view $name: every line pushed with ${NODE_ZONE[$dead]} down accepted ($(jq_field "$out" accepted) accepted, $(jq_field "$out" retries) requests retried)" \
    [ "$(jq_field "$out" never_accepted)" = 0 ]
  sleep "$(awk -v s="$stop" -v k="$TV_OUTAGE" -v n="$(now)" 'BEGIN {d = s + k - n; print (d > 0 ? d : 0)}')"
  zt_snapshot "$NS" zone-down "$f"
  local down_pushed
  down_pushed=$(zt_sent_bytes "$dir/sent-down.jsonl" zone-down)
  loki_zone_return
  t=$(now)
  if cv_wait_healthy "$TIMEOUT" "after the return in traffic view $name"; then
    pass "traffic view $name: every Loki pod Ready and the ring healthy from every distributor ${CV_WAITED} s after the return"
  fi
  TV_TIME[back_$name]=$(secs "$t")
  zt_snapshot "$NS" zone-back "$f"

  cat "$dir/sent-push.jsonl" "$dir/sent-down.jsonl" >"$dir/sent-all.jsonl"
  q=$(tv_query "http://$(svc_ip "$STACK-query-frontend-http"):3100" "$dir/sent-all.jsonl" 1)
  say "traffic view $name: every line of the variant queried back: $q"
  assert "traffic view $name: no line lost through the outage of ${NODE_ZONE[$dead]}: $(jq_field "$q" found) of $(jq_field "$q" expected) found, lost $(jq_field "$q" lost)" \
    [ "$(jq_field "$q" lost)/$(jq_field "$q" expected)" = "0/$((TV_STREAMS * (TV_LINES + TV_DOWN_LINES)))" ]

  zt_table "$f" --rf "${TV_RF:-3}" --pushed-bytes "push=$pushed" \
    --queries "query-recent=${TV_Q[query-recent.requests]}" --queries "query-store=${TV_Q[query-store.requests]}" >"$dir/table.txt" 2>&1 ||
    { fail "traffic view $name: zt_table failed: $(tail -n 3 "$dir/table.txt")"; return 0; }
  sed -n 's/^{"zone_traffic"/&/p' "$dir/table.txt" >"$dir/table.json"
  TV_TABLE[$name]=$dir/table.json
  {
    echo "  gossip $name; entry zone $entry_zone; ${NODE_ZONE[$dead]} stopped in zone-down;"
    echo "  query-recent: ${TV_Q[query-recent]}"
    echo "  query-store: ${TV_Q[query-store]}"
    echo "  zone-down pushed $down_pushed B (copies go to the live zones only)"
  } >"$dir/context.txt"
  local vf
  vf=$(python3 -c 'import json,sys
s = json.load(open(sys.argv[1]))["zone_traffic"]
p = next(p for p in s["phases"] if p["label"] == "push")
print(p["vs_floor"], p["cross_per_byte_pushed"], s["floor_per_byte_pushed"])' "$dir/table.json" 2>/dev/null || echo "? ? ?")
  read -r vsf per fl <<<"$vf"
  assert "traffic view $name: cross-zone bytes of the push, idle rate subtracted, within 10 % of the floor: $per per byte pushed, floor $fl (x$vsf)" \
    awk -v r="$vsf" 'BEGIN { exit !(r ~ /^[0-9.]+$/ && r >= 0.9 && r <= 1.1) }'
}

tv_figures() {
  [ -n "$TV_DIR" ] || return 0
  echo "traffic view (issue 41): bytes between pods of different zones, node timings ${TIMINGS_LABEL:-?};"
  echo "  push: $TV_STREAMS streams x $TV_LINES lines of $TV_LINE_BYTES B (random base64) to the entry zone's distributor pod; queries: one query_range per stream through the entry zone's query frontend pod"
  local v
  for v in $TV_VARIANTS; do
    [ -f "$TV_DIR/$v/table.txt" ] || continue
    echo "  --- zone-aware gossip $v ---"
    cat "$TV_DIR/$v/context.txt" 2>/dev/null
    grep -v '^{"zone_traffic"' "$TV_DIR/$v/table.txt" | sed 's/^/  /'
  done
  [ -z "${TV_COMPARE:-}" ] || echo "  compared: $TV_COMPARE"
  printf '  %-44s %8s s\n' "scale to $TV_REPLICAS -> healthy" "${TV_TIME[prepare]:-?}"
  for v in $TV_VARIANTS; do
    printf '  %-44s %8s s\n' "gossip $v: annotation -> every pod runs it" "${TV_TIME[rollout_$v]:-?}"
    printf '  %-44s %8s s\n' "gossip $v: return -> Ready, ring healthy" "${TV_TIME[back_$v]:-?}"
  done
}
