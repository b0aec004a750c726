# Sourced by e2e.sh: a real Prometheus (Debian's `prometheus`, 2.42) in the test's
# network namespace, configured from the monitoring component we ship, as a user without
# the Prometheus Operator would have to:
#
#   prom_start            once the operator runs: the component's objects (kustomize, in
#                         the operator's namespace), translated into prometheus.yml by
#                         tests/support/bin/prometheus-config.rs (the Prometheus
#                         Operator's translation, unit-tested in tests/scrape.rs), the
#                         PrometheusRule's groups as its rule file; Prometheus, a
#                         discovery stand-in and an alert watcher started
#   prom_targets_check    the operator's targets up, under the job of its metrics Service;
#                         the Loki pods' targets counted (up only with a Loki image)
#   prom_loki_targets_check  (loki.sh, every Loki pod Ready) every Loki pod's target up,
#                         with the Go operator's job and its zone
#   prom_zone_outage_short   without a Loki image: one node's kubelet stopped (SIGSTOP) so
#                         its lease goes stale, then resumed
#   prom_zone_outage_check STOP-TIME ZONE RETURN-FN   the zone alert firing within its
#                         `for:` plus one evaluation interval after the operator's metric
#                         showed the zone down, and resolved after RETURN-FN brought it back
#   prom_dashboards_check every query of every dashboard panel returns a series, or is
#                         named as not checked (the Loki dashboard without a Loki image)
#   prom_figures          intervals, seconds, CPU and memory
#
# Debian's Prometheus has no Kubernetes discovery (NEWS.Debian, 1.5.0): k8s-sd.py serves
# the same targets and meta labels over HTTP SD, and prometheus-config --http-sd swaps
# each job's kubernetes_sd_configs for it; every relabeling is the translation's. Nothing
# leaves the namespace: Prometheus, the stand-in and the watcher listen on its loopback.
#
# Uses e2e.sh's helpers (say, assert, pass, fail, kubectl, jp, hk, in_ns, now, secs, TIME,
# STACK, STACK_NS, OP_NS, HOST_KUBECTL) and lib.sh's (W, NS, API, start_cp, KUBELET,
# PROMETHEUS_TOKEN, names, cpu_s, rss).

PROM=127.0.0.1:9090
PROM_SD=127.0.0.1:9091
# Short, for a test: the shipped ServiceMonitors say 30s, Prometheus's default
# evaluation interval is 1m.
PROM_SCRAPE=5s
PROM_EVAL=5s
PROM_SD_REFRESH=5s
PROM_ALERT=LokiStackZoneUnavailable
PROM_DIR=
PROM_T0=
declare -A PROM_TIME

prom_api() { # prom_api PATH [curl args]: GET from Prometheus, inside the namespace
  local path=$1
  shift
  in_ns curl -sf --max-time 10 "$@" "http://$PROM$path"
}
prom_query() { prom_api /api/v1/query -G --data-urlencode "query=$1"; }
seconds() { awk -v s="$1" 'BEGIN { if (s ~ /m$/) print s * 60; else if (s ~ /h$/) print s * 3600; else print s + 0 }'; }

prom_start() {
  PROM_T0=$(now)
  PROM_DIR=$W/prometheus
  mkdir -p "$PROM_DIR/monitoring" "$PROM_DIR/data"
  if ! [ -x /usr/bin/prometheus ]; then
    say "installing prometheus with apt (Debian's 2.42)"
    # Installed to be run by the test, not as a service of the machine.
    local policy=""
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; policy=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null || true
    [ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d
    [ -x /usr/bin/prometheus ] || { fail "no /usr/bin/prometheus (apt-get install prometheus failed)"; return 1; }
  fi
  say "Prometheus: $(/usr/bin/prometheus --version 2>&1 | head -n1)"
  # What a Prometheus's discovery needs, as kube-prometheus-stack's ClusterRole grants it.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lzo-prometheus}
rules:
- apiGroups: [""]
  resources: [services, endpoints, pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lzo-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lzo-prometheus}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: lzo-prometheus}
YAML
  (umask 077 && printf '%s' "$PROMETHEUS_TOKEN" >"$PROM_DIR/token")
  # The monitoring objects alone, in the operator's namespace: the kustomization
  # docs/monitoring.md shows beside an install (the operator's Service keeps its labels
  # under a namePrefix, so the ServiceMonitor needs none).
  cat >"$PROM_DIR/monitoring/kustomization.yaml" <<YAML
namespace: $OP_NS
components:
- $(realpath --relative-to="$PROM_DIR/monitoring" "$repo/manifests/components/monitoring")
YAML
  "$HOST_KUBECTL" kustomize "$PROM_DIR/monitoring" >"$PROM_DIR/objects.yaml" ||
    { fail "kubectl kustomize of the monitoring component failed"; return 1; }
  local gen
  gen=$(prom_config_binary) || { fail "could not build prometheus-config"; return 1; }
  "$gen" --objects "$PROM_DIR/objects.yaml" --out "$PROM_DIR/prometheus.yml" \
    --rules-out "$PROM_DIR/rules.yml" --scrape-interval "$PROM_SCRAPE" \
    --interval-override "$PROM_SCRAPE" --evaluation-interval "$PROM_EVAL" \
    --http-sd "http://$PROM_SD/sd" --http-sd-refresh "$PROM_SD_REFRESH" 2>"$PROM_DIR/gen.log" ||
    { cat "$PROM_DIR/gen.log" >&2; fail "prometheus-config failed"; return 1; }
  say "$(cat "$PROM_DIR/gen.log"): jobs $(grep -o 'job_name: .*' "$PROM_DIR/prometheus.yml" | sed 's/job_name: //' | tr '\n' ' ')"
  assert "promtool check config accepts the translated prometheus.yml and its rule file" \
    promtool check config "$PROM_DIR/prometheus.yml"
  PROM_FOR=$(python3 - "$PROM_DIR/rules.yml" "$PROM_ALERT" <<'PY'
import sys, yaml
for g in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for r in g["rules"]:
        if r.get("alert") == sys.argv[2]:
            print(r.get("for", "0s"))
PY
)
  [ -n "$PROM_FOR" ] || { fail "no alert $PROM_ALERT in the PrometheusRule"; return 1; }
  start_cp k8s-sd python3 "$here/k8s-sd.py" --listen "$PROM_SD" --api "$API" \
    --ca "$W/cp/certs/apiserver.crt" --token-file "$PROM_DIR/token"
  start_cp prometheus /usr/bin/prometheus --config.file="$PROM_DIR/prometheus.yml" \
    --storage.tsdb.path="$PROM_DIR/data" --web.listen-address="$PROM" --log.level=info
  PROM_PID=${CP_PIDS[-1]}
  local _
  for _ in $(seq 60); do prom_api /-/ready -o /dev/null && break; sleep 0.5; done
  assert "Prometheus ready on $PROM in the test's network namespace" prom_api /-/ready -o /dev/null
  # The alert and the operator's zone series, every second, for the outage's timings.
  cat >"$PROM_DIR/watch.py" <<'PY'
import json, sys, time, urllib.parse, urllib.request
base, alert = sys.argv[1], sys.argv[2]
def get(path):
    return json.load(urllib.request.urlopen(base + path, timeout=2))["data"]
while True:
    t = time.time()
    try:
        alerts = [{"zone": a["labels"].get("zone"), "state": a["state"], "pod": a["labels"].get("pod")}
                  for a in get("/api/v1/alerts")["alerts"] if a["labels"].get("alertname") == alert]
        avail = [{"zone": r["metric"].get("zone"), "pod": r["metric"].get("pod"), "v": r["value"][1]}
                 for r in get("/api/v1/query?" + urllib.parse.urlencode(
                     {"query": "loki_zone_operator_zone_available"}))["result"]]
        print(json.dumps({"t": t, "alerts": alerts, "avail": avail}), flush=True)
    except Exception as e:
        print(json.dumps({"t": t, "error": str(e)}), flush=True)
    time.sleep(max(0.0, 1.0 - (time.time() - t)))
PY
  start_cp prom-watch python3 "$PROM_DIR/watch.py" "http://$PROM" "$PROM_ALERT"
  PROM_TIME[start]=$(secs "$PROM_T0")
  say "Prometheus up (${PROM_TIME[start]} s): scrape every $PROM_SCRAPE, rules evaluated every $PROM_EVAL, $PROM_ALERT for: $PROM_FOR"
}

# The translation binary: built by `make build`/`make test` already; cargo otherwise.
prom_config_binary() {
  local dir=${CARGO_TARGET_DIR:-$repo/target}
  (cd "$repo" && cargo build -q --locked -p loki-zone-operator-tests --bin prometheus-config >&2) || return 1
  echo "$dir/debug/prometheus-config"
}

# JOB HEALTH ZONE POD per active target (from Prometheus's /api/v1/targets).
prom_targets() {
  prom_api /api/v1/targets | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    l = t["labels"]
    print(l.get("job", "-"), t["health"], l.get("zone", "-"), l.get("pod", "-"), l.get("namespace", "-"))' 2>/dev/null || true
}

prom_targets_check() {
  local t0 op_job want ts="" up=0 deadline
  t0=$(now)
  # The job is the name of the operator's metrics Service (acme-... under the prefixed
  # install): the Service of its pods with a port named metrics.
  op_job=$(jp -n "$OP_NS" get services -l app.kubernetes.io/name=loki-zone-operator \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.ports[*].name}{"\n"}{end}' | awk '$2 == "metrics" {print $1}')
  want=$(jp -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator -o jsonpath='{.items[*].metadata.name}' | wc -w)
  deadline=$(($(date +%s) + 60))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    ts=$(prom_targets)
    up=$(awk -v j="$op_job" '$1 == j && $2 == "up"' <<<"$ts" | grep -c . || true)
    [ "$up" -ge "$want" ] && break
    sleep 1
  done
  say "Prometheus's targets:"; sed 's/^/    /' <<<"$ts" >&2
  assert "the operator's targets are up under job $op_job (the metrics Service's name): $up of $want replicas, $(secs "$t0") s after the check began" \
    [ "$up" -ge "$want" ]
  local loki
  loki=$(awk -v s="$STACK" '$1 ~ "^" s "-.*-http$"' <<<"$ts")
  if [ -z "${LOKI_IMAGE_ARCHIVE:-}" ]; then
    say "NOT CHECKED: Loki targets up: no Loki image, so no Loki container runs ($(grep -c . <<<"$loki" || true) Loki targets discovered, none can answer: $(awk '{print $1 "=" $2}' <<<"$loki" | sort | uniq -c | tr -s ' ' | tr '\n' ',')); prom_loki_targets_check runs with LOKI_IMAGE_ARCHIVE"
  fi
  PROM_TIME[targets]=$(secs "$t0")
}

# Every Loki pod (Ready, loki.sh step 1): a target up, job <stack>-<component>-http, its zone.
prom_loki_targets_check() {
  [ -n "$PROM_DIR" ] || return 0
  local pods ts deadline missing pod node zone ready ip comp uid
  pods=$(loki_pods)
  deadline=$(($(date +%s) + 60))
  while :; do
    ts=$(prom_targets)
    missing=0
    while read -r pod node zone ready ip comp uid; do
      awk -v p="$pod" -v j="$STACK-$comp-http" -v z="$zone" '$4 == p && $1 == j && $2 == "up" && $3 == z' <<<"$ts" | grep -q . || missing=$((missing + 1))
    done <<<"$pods"
    [ "$missing" = 0 ] || [ "$(date +%s)" -ge "$deadline" ] && break
    sleep 1
  done
  while read -r pod node zone ready ip comp uid; do
    assert "Prometheus scrapes Loki pod $pod: job $STACK-$comp-http, zone $zone, up ($(awk -v p="$pod" '$4 == p {print $1, $2, $3}' <<<"$ts" | head -n1))" \
      bash -c "awk -v p='$pod' -v j='$STACK-$comp-http' -v z='$zone' '\$4 == p && \$1 == j && \$2 == \"up\" && \$3 == z' <<<'$ts' | grep -q ."
  done <<<"$pods"
}

# The first watcher record at or after SINCE where COND holds for ZONE: zero (the
# operator's zone_available is 0), firing, one (back to 1 everywhere), resolved (no alert
# for the zone, pending or firing). Prints its time, or nothing.
prom_when() { # prom_when ZONE SINCE COND
  python3 - "$W/logs/prom-watch.log" "$@" <<'PY'
import json, sys
path, zone, since, cond = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
for line in open(path):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r["t"] < since or "error" in r:
        continue
    avail = [a["v"] for a in r["avail"] if a["zone"] == zone]
    alerts = [a["state"] for a in r["alerts"] if a["zone"] == zone]
    if (cond == "zero" and "0" in avail) or (cond == "firing" and "firing" in alerts) or \
       (cond == "one" and avail and all(v == "1" for v in avail)) or \
       (cond == "resolved" and not alerts):
        print("%.3f" % r["t"])
        break
PY
}
prom_wait() { # prom_wait ZONE SINCE COND SECONDS: the time, once COND holds (or nothing)
  local end=$(($(date +%s) + $4)) at
  while :; do
    at=$(prom_when "$1" "$2" "$3")
    [ -n "$at" ] && { echo "$at"; return 0; }
    [ "$(date +%s)" -lt "$end" ] || return 0
    sleep 1
  done
}
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "?"; else printf "%.1f", b - a }'; }

# The zone alert through one outage of ZONE that began at STOP (a Unix time): firing
# within its for: plus one evaluation interval (and the 1 s the watcher polls) after the
# operator's metric, as Prometheus scraped it, first showed the zone down; not before
# for: minus one interval; then RETURN (a command) brings the zone back, and the alert
# must be gone from /api/v1/alerts once the metric is 1 again.
prom_zone_outage_check() { # STOP ZONE RETURN...
  [ -n "$PROM_DIR" ] || return 0
  local stop=$1 zone=$2 for_s eval_s zero fire ret one resolved
  shift 2
  for_s=$(seconds "$PROM_FOR"); eval_s=$(seconds "$PROM_EVAL")
  zero=$(prom_wait "$zone" "$stop" zero 120)
  assert "the operator's loki_zone_operator_zone_available{zone=\"$zone\"} is 0 in Prometheus $(diff_s "$stop" "$zero") s after the stop" [ -n "$zero" ]
  [ -n "$zero" ] || return 0
  fire=$(prom_wait "$zone" "$stop" firing $((for_s + 60)))
  PROM_TIME[zero]=$(diff_s "$stop" "$zero")
  PROM_TIME[firing]=$(diff_s "$stop" "$fire")
  PROM_TIME[zero_to_firing]=$(diff_s "$zero" "$fire")
  say "alert $PROM_ALERT{zone=\"$zone\"}: metric 0 after ${PROM_TIME[zero]} s, firing after ${PROM_TIME[firing]} s (${PROM_TIME[zero_to_firing]} s after the metric; for: $PROM_FOR, evaluation every $PROM_EVAL)"
  assert "$PROM_ALERT{zone=\"$zone\"} is firing in /api/v1/alerts ${PROM_TIME[firing]} s after the zone stopped: within for ($for_s s) + one evaluation interval ($eval_s s) + 2 s of polling after the operator's metric showed it (${PROM_TIME[zero]} s, the operator's detection and a scrape)" \
    awk -v d="${PROM_TIME[zero_to_firing]}" -v f="$for_s" -v e="$eval_s" 'BEGIN { exit !(d != "?" && d <= f + e + 2 && d >= f - e) }'
  ret=$(now)
  "$@"
  one=$(prom_wait "$zone" "$ret" one 240)
  resolved=$(prom_wait "$zone" "${one:-$ret}" resolved 60)
  PROM_TIME[one]=$(diff_s "$ret" "$one")
  PROM_TIME[resolved]=$(diff_s "$ret" "$resolved")
  say "zone $zone back: metric 1 after ${PROM_TIME[one]} s, alert resolved after ${PROM_TIME[resolved]} s"
  assert "$PROM_ALERT{zone=\"$zone\"} resolves after the zone returns: gone from /api/v1/alerts ${PROM_TIME[resolved]} s after the return (the metric 1 again after ${PROM_TIME[one]} s)" \
    [ -n "$resolved" ]
}

# Without a Loki image: the zone of a node that runs no operator replica goes dark the
# cheap way, its kubelet stopped (SIGSTOP) so that its Lease goes stale (8 s here), and
# comes back when it is resumed (SIGCONT).
prom_zone_outage_short() {
  [ -n "$PROM_DIR" ] || return 0
  local op_nodes n dead="" t0
  t0=$(now)
  op_nodes=$(jp -n "$OP_NS" get pods -l app.kubernetes.io/name=loki-zone-operator -o jsonpath='{.items[*].spec.nodeName}')
  for n in "${names[@]}"; do grep -qw -- "$n" <<<"$op_nodes" || dead=$n; done
  [ -n "$dead" ] || { dead=${names[-1]}; say "every node runs an operator replica: stopping $dead's anyway"; }
  PROM_DEAD_NODE=$dead
  local zone
  zone=$(jp get node "$dead" -o jsonpath="{.metadata.labels.topology\.kubernetes\.io/zone}")
  say "stopping zone $zone for the alert: $dead's kubelet (SIGSTOP; its containers run on, its Lease goes stale)"
  local stop
  stop=$(now)
  kill -STOP "${KUBELET[$dead]}"
  prom_zone_outage_check "$stop" "$zone" prom_resume_kubelet "$dead"
  PROM_TIME[outage]=$(secs "$t0")
}
prom_resume_kubelet() { kill -CONT "${KUBELET[$1]}" 2>/dev/null || true; }

# Every query of every panel of the dashboards we ship, with Grafana's variables filled
# in for the quick-start's stack: at least one series each, or named as not checked.
prom_dashboards_check() {
  [ -n "$PROM_DIR" ] || return 0
  local t0 out
  t0=$(now)
  out=$(in_ns python3 - "$repo/manifests/components/monitoring" "http://$PROM" "$STACK" "$STACK_NS" \
    "${LOKI_IMAGE_ARCHIVE:+loki}" 2>&1 <<'PY'
import glob, json, os, sys, urllib.parse, urllib.request
d, base, stack, ns, loki = sys.argv[1:6]
bad = 0
for path in sorted(glob.glob(os.path.join(d, "*.json"))):
    dash = json.load(open(path))
    # Loki's own metrics need Loki running; the operator's are there without it.
    needs_loki = "loki_build_info" in json.dumps(dash["templating"])
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = (t["expr"].replace("$__rate_interval", "1m").replace("$namespace", ns)
                    .replace("$stack", stack))
            name = f'{dash["title"]} / {p["title"]} [{t.get("refId", "A")}]'
            if needs_loki and not loki:
                print(f"NOT CHECKED (no Loki image): {name}")
                continue
            try:
                r = json.load(urllib.request.urlopen(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10))
                n = len(r["data"]["result"])
            except Exception as e:
                n, expr = 0, f"{expr} ({e})"
            print(f"{'ok' if n else 'EMPTY'}: {name}: {n} series" + ("" if n else f": {expr}"))
            bad += n == 0
sys.exit(1 if bad else 0)
PY
  ) && rc=0 || rc=$?
  sed 's/^/    /' <<<"$out" >&2
  assert "every dashboard panel's query returns at least one series against Prometheus ($(grep -c '^ok' <<<"$out") checked, $(grep -c '^NOT CHECKED' <<<"$out") not checked, $(grep -c '^EMPTY' <<<"$out") empty)" [ "$rc" = 0 ]
  PROM_TIME[dashboards]=$(secs "$t0")
}

prom_figures() {
  [ -n "$PROM_DIR" ] || return 0
  echo "Prometheus (Debian's 2.42, scrape $PROM_SCRAPE, evaluation $PROM_EVAL, $PROM_ALERT for: $PROM_FOR, HTTP discovery refresh $PROM_SD_REFRESH):"
  printf '  %-44s %8s s\n' "config, rules, start -> ready" "${PROM_TIME[start]:-?}"
  printf '  %-44s %8s s\n' "operator targets up (check)" "${PROM_TIME[targets]:-?}"
  printf '  %-44s %8s s\n' "zone stop -> metric 0 in Prometheus" "${PROM_TIME[zero]:-?}"
  printf '  %-44s %8s s\n' "zone stop -> alert firing" "${PROM_TIME[firing]:-?}"
  printf '  %-44s %8s s\n' "metric 0 -> alert firing" "${PROM_TIME[zero_to_firing]:-?}"
  printf '  %-44s %8s s\n' "zone return -> metric 1" "${PROM_TIME[one]:-?}"
  printf '  %-44s %8s s\n' "zone return -> alert resolved" "${PROM_TIME[resolved]:-?}"
  printf '  %-44s %8s s\n' "short outage, all in (no Loki image)" "${PROM_TIME[outage]:-not run}"
  printf '  %-44s %8s s\n' "dashboard queries" "${PROM_TIME[dashboards]:-?}"
  printf '  %-44s %8s s %6s MiB\n' "prometheus process" "$(cpu_s "$PROM_PID")" "$(rss "$PROM_PID")"
}
