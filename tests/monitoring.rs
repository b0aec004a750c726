//! The optional monitoring component's alerts, proven three ways:
//!
//! - every alert parses as PromQL, reads only series the operator or Loki export (names,
//!   and the label values it matches on), and links a runbook anchor that exists;
//! - the Go Loki Operator's alerts are shipped as it ships them (names, expressions,
//!   thresholds, `for:`, severities): a migrated user's silences and routes match;
//! - promtool (Debian's `prometheus` package): `check rules` on the rules of the
//!   PrometheusRule, `test rules` on tests/promtool/ (every alert fired and kept silent),
//!   and the Go operator's own expressions, with ours, evaluated on the series our
//!   exporter writes, so that a change of our series that breaks them fails here.
//!
//! Without promtool the promtool tests fail, unless `make` set `LZO_PROMTOOL_UNAVAILABLE`
//! to why it could not install it: then they say loudly that they did NOT run.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use loki_zone_operator::model::api::{LokiStackSpec, LokiStackStatus};
use loki_zone_operator::telemetry::metrics::{Metrics, StackView};
use loki_zone_operator_tests::bundle::{kustomize, write_overlay};
use loki_zone_operator_tests::harness::which;
use loki_zone_operator_tests::repo_root;
use promql_parser::parser::{Expr, VectorSelector};
use promql_parser::util::{walk_expr, ExprVisitor};
use serde_json::{json, Value};

const DIR: &str = "manifests/components/monitoring";
const RULE: &str = "manifests/components/monitoring/prometheus_rule.yaml";
const REPO_DOCS: &str = "https://github.com/loki-zone-operator/loki-zone-operator/blob/main/";
/// Set by `make` to why promtool is missing, when it is (hack/promtool.sh).
const PROMTOOL_UNAVAILABLE_ENV: &str = "LZO_PROMTOOL_UNAVAILABLE";

/// The Go Loki Operator's alerts that apply without a gateway, as grafana/loki ships them
/// (operator/internal/manifests/internal/alerts/prometheus-alerts.yaml, commit 260115c):
/// name, expression, `for:`, severity. These are the compatibility facts: our
/// PrometheusRule must carry them unchanged. Left out: LokiStackWriteRequestErrors and
/// LokiStackReadRequestErrors, which read the gateway's series (we run no gateway).
const GO_ALERTS: &[(&str, &str, &str, &str)] = &[
    (
        "LokiRequestErrors",
        r#"sum(
  job_namespace_route_statuscode:loki_request_duration_seconds_count:irate1m{status_code=~"5.."}
) by (job, namespace, route)
/
sum(
  job_namespace_route_statuscode:loki_request_duration_seconds_count:irate1m
) by (job, namespace, route)
* 100
> 10"#,
        "15m",
        "critical",
    ),
    (
        "LokiRequestPanics",
        r#"sum(
  increase(
    loki_panic_total[10m]
  )
) by (job, namespace)
> 0"#,
        "",
        "critical",
    ),
    (
        "LokiRequestLatency",
        r#"histogram_quantile(0.99,
  sum(
    irate(
      loki_request_duration_seconds_bucket{route!~"(?i).*tail.*"}[2m]
    )
  ) by (job, le, namespace, route)
)
> 5"#,
        "15m",
        "critical",
    ),
    (
        "LokiTenantRateLimit",
        r#"sum(
  job_namespace_route_statuscode:loki_request_duration_seconds_count:irate1m{status_code="429"}
) by (job, namespace, route)
/
sum(
  job_namespace_route_statuscode:loki_request_duration_seconds_count:irate1m
) by (job, namespace, route)
* 100
> 10"#,
        "15m",
        "warning",
    ),
    (
        "LokiWritePathHighLoad",
        r#"sum(
  loki_ingester_wal_replay_flushing
) by (job, namespace)
> 0"#,
        "15m",
        "warning",
    ),
    (
        "LokiReadPathHighLoad",
        r#"histogram_quantile(0.99,
  sum(
    rate(
      loki_logql_querystats_latency_seconds_bucket[5m]
    )
  ) by (job, le, namespace)
)
> 30"#,
        "15m",
        "warning",
    ),
    (
        "LokiDiscardedSamplesWarning",
        r#"sum by(namespace, tenant, reason) (
  irate(loki_discarded_samples_total{
    reason!="rate_limited",
    reason!="per_stream_rate_limit",
    reason!="stream_limit"}[2m])
)
> 0"#,
        "15m",
        "warning",
    ),
    (
        "LokiIngesterFlushFailureRateCritical",
        r#"sum (
  rate(loki_ingester_chunks_flush_failures_total[5m])
  /
  rate(loki_ingester_chunks_flush_requests_total[5m])
) by (namespace, pod)
> 0.20"#,
        "15m",
        "critical",
    ),
    (
        "LokistackSchemaUpgradesRequired",
        r#"sum (
  lokistack_status_condition{reason="StorageNeedsSchemaUpdate",status="true"}
) by (stack_namespace, stack_name)
> 0"#,
        "1m",
        "warning",
    ),
    (
        "LokistackComponentsNotReadyWarning",
        r#"sum (
  label_replace(
    lokistack_status_condition{condition="Ready", status="false"},
    "namespace", "$1", "stack_namespace", "(.+)"
  )
) by (stack_name, namespace)
> 0"#,
        "15m",
        "warning",
    ),
];

/// The Go operator's recording rule that its request alerts read (prometheus-rules.yaml).
const GO_RECORD: (&str, &str) = (
    "job_namespace_route_statuscode:loki_request_duration_seconds_count:irate1m",
    r#"sum(
  irate(
    loki_request_duration_seconds_count[1m]
  )
) by (job, namespace, route, status_code)"#,
);

/// Our alerts: their names are API too (silences, routes).
const OURS: &[&str] = &[
    "LokiStackZoneUnavailable",
    "LokiStackWriteQuorumLost",
    "LokiStackZoneFailureToleranceLost",
    "LokiStackZoneMaintenanceTooLong",
    "LokiStackRolloutStalled",
    "LokiStackDegraded",
    "LokiStackPodsWithoutZone",
    "LokiStackZoneSwitchStalled",
    "LokiZoneAnnotatorFailing",
    "LokiZonePodsMostlyZonedByAnnotator",
    "LokiZoneOperatorWebhookFailing",
    "LokiZoneOperatorReconcilesFailing",
];

/// Loki's own series that the alerts read, each checked in Loki 3.7.3's source (the
/// version we deploy): dskit's server (`loki_request_duration_seconds`, a histogram),
/// pkg/util/server/recovery.go, pkg/ingester/metrics.go, pkg/logql/metrics.go,
/// pkg/validation/validate.go.
const LOKI_SERIES: &[&str] = &[
    "loki_request_duration_seconds_count",
    "loki_request_duration_seconds_bucket",
    "loki_panic_total",
    "loki_ingester_wal_replay_flushing",
    "loki_logql_querystats_latency_seconds_bucket",
    "loki_discarded_samples_total",
    "loki_ingester_chunks_flush_failures_total",
    "loki_ingester_chunks_flush_requests_total",
];

/// Labels Prometheus adds to every series it scrapes from the operator.
const SCRAPE_LABELS: &[(&str, &str)] = &[
    ("job", "loki-zone-operator-metrics"),
    ("namespace", "loki-zone-operator-system"),
    ("pod", "loki-zone-operator-5d8f7c9b6d-x2x7q"),
    ("instance", "10.244.1.7:8080"),
];

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn prometheus_rule() -> Value {
    serde_yaml_ng::from_str(&read(RULE)).expect("prometheus_rule.yaml")
}

/// Every rule of the PrometheusRule, with the name of its group.
fn rules(rule: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_array().expect("groups") {
        let name = group["name"].as_str().expect("group name");
        for r in group["rules"].as_array().expect("rules") {
            out.push((name.to_string(), r.clone()));
        }
    }
    out
}

fn alert_names(rule: &Value) -> Vec<String> {
    rules(rule)
        .iter()
        .filter_map(|(_, r)| r["alert"].as_str().map(str::to_string))
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------
// What the operator exports.
// ---------------------------------------------------------------------------------------

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn spec(schema: &str, zones: bool) -> LokiStackSpec {
    let mut s = json!({
        "size": "1x.small",
        "storage": {"schemas": [{"version": schema, "effectiveDate": "2022-06-01"}],
                    "secret": {"type": "s3", "name": "logs-s3"}},
    });
    if zones {
        s["replication"] = json!({"factor": 3,
            "zones": [{"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1}]});
    }
    serde_json::from_value(s).expect("spec")
}

fn zone(name: &str, state: &str) -> Value {
    let up = state != "Unavailable";
    json!({"zone": name, "state": state, "available": up, "nodesReady": i32::from(up) * 2,
           "nodes": 2, "ingestersReady": i32::from(up), "ingesters": 1})
}

/// The stacks of [`populated`]: name, spec, status. Each alert on stacks has one that
/// makes its expression true ([`EXPECTED_ON_OUR_SERIES`] counts them).
fn stacks() -> Vec<(&'static str, LokiStackSpec, LokiStackStatus)> {
    let status = |v: Value| -> LokiStackStatus { serde_json::from_value(v).expect("status") };
    vec![
        // Three zones, one in maintenance and one lost, writes below quorum, a rollout
        // paused by the lost zone, zones being turned on, an old schema.
        (
            "logs",
            spec("v12", true),
            status(json!({
                "conditions": [condition("Ready", "False", "ComponentsNotReady"),
                               condition("Degraded", "True", "WriteQuorumLost"),
                               condition("Warning", "True", "ZoneUnavailable")],
                "replication": {"factor": 3, "writeQuorum": 2,
                    "zones": ["zone-a", "zone-b", "zone-c"],
                    "zonesAvailable": ["zone-a", "zone-b"],
                    "zoneFailuresTolerated": 0, "writeQuorumMet": false,
                    "zoneStatus": [zone("zone-a", "Available"), zone("zone-b", "Maintenance"),
                                   zone("zone-c", "Unavailable")]},
                "rollout": {"zone": "zone-b", "waitingFor": "zone zone-c unavailable",
                    "zones": [{"zone": "zone-a", "updated": 2, "total": 2},
                              {"zone": "zone-b", "updated": 0, "total": 2},
                              {"zone": "zone-c", "updated": 0, "total": 2}]},
                "zoneAwareness": {"stage": "Enabling"},
            })),
        ),
        // Every zone available, a rollout with pods left, pods waiting for a zone.
        (
            "steady",
            spec("v13", true),
            status(json!({
                "conditions": [condition("Ready", "True", "ReadyComponents"),
                               condition("Degraded", "False", "NoIssues"),
                               condition("Warning", "True", "PodZoneUnknown")],
                "replication": {"factor": 3, "writeQuorum": 2,
                    "zones": ["zone-a", "zone-b", "zone-c"],
                    "zonesAvailable": ["zone-a", "zone-b", "zone-c"],
                    "zoneFailuresTolerated": 1, "writeQuorumMet": true,
                    "zoneStatus": [zone("zone-a", "Available"), zone("zone-b", "Available"),
                                   zone("zone-c", "Available")]},
                "rollout": {"zone": "zone-b", "waitingFor": "pods of zone zone-b Ready",
                    "zones": [{"zone": "zone-a", "updated": 2, "total": 2},
                              {"zone": "zone-b", "updated": 0, "total": 2}]},
                "zoneAwareness": {"stage": "Enabled"},
            })),
        ),
        // Zones being turned on, the write path done: waits for the clock, not for pods.
        (
            "turning",
            spec("v13", true),
            status(json!({
                "conditions": [condition("Ready", "True", "ReadyComponents")],
                "zoneAwareness": {"stage": "Enabling", "readPathAt": "2026-01-01T03:00:00Z"},
            })),
        ),
        // Never reconciled yet: no condition at all (the Go operator's default series).
        ("fresh", spec("v13", false), LokiStackStatus::default()),
        (
            "audit",
            spec("v13", false),
            status(json!({"conditions": [condition("Ready", "True", "ReadyComponents")]})),
        ),
    ]
}

/// An exporter that has seen [`stacks`] and some of every kind of work.
fn populated() -> Metrics {
    let m = Metrics::default();
    for (name, spec, status) in stacks() {
        m.set_stack(
            "logging",
            name,
            Some(StackView {
                spec: &spec,
                status: &status,
            }),
        );
    }
    Metrics::count(&m.reconciles, "ok", 3);
    Metrics::count(&m.reconciles, "apply_failed", 1);
    Metrics::count(&m.annotations, "written", 2);
    Metrics::count(&m.annotations, "failed", 1);
    Metrics::count(&m.applies, "applied", 5);
    m.zoned("bind");
    m.zoned("annotator");
    m.webhook_configuration("zone-at-bind", true);
    m.webhook_configuration("zone-disruption", false);
    m.webhook_certificate_ready.set(1);
    m.reconciled("lokistack", true, std::time::Duration::from_millis(40));
    m.webhook_request("zone-at-bind", 200, std::time::Duration::from_millis(2));
    m
}

/// One sample of the text exposition.
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a text exposition (Prometheus' or OpenMetrics').
fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => line.split_once(' ').map(|(n, _)| (n, "")).expect("sample"),
        };
        let mut labels = BTreeMap::new();
        let mut chars = rest.chars().peekable();
        let mut after = line[name.len()..].to_string();
        if line[name.len()..].starts_with('{') {
            // key="value",... } value
            loop {
                let key: String = chars
                    .by_ref()
                    .take_while(|c| *c != '=')
                    .collect::<String>()
                    .trim_start_matches(',')
                    .trim()
                    .to_string();
                if key.starts_with('}') || key.is_empty() {
                    break;
                }
                assert_eq!(chars.next(), Some('"'), "{line}");
                let mut value = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => match chars.next() {
                            Some('n') => value.push('\n'),
                            Some(other) => value.push(other),
                            None => break,
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(key, value);
                if chars.peek() == Some(&',') {
                    chars.next();
                }
                if chars.peek() == Some(&'}') {
                    chars.next();
                    break;
                }
            }
            after = chars.collect();
        }
        let value = after
            .split_whitespace()
            .next()
            .expect("value")
            .parse::<f64>()
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

/// The operator's series by name, each with the label sets it has.
fn exported() -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for s in samples(&populated().encode()) {
        out.entry(s.name).or_default().push(s.labels);
    }
    out
}

/// Metric families the operator declares (`# TYPE` lines), with or without series.
fn families() -> BTreeSet<String> {
    Metrics::default()
        .encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Expressions.
// ---------------------------------------------------------------------------------------

/// The vector selectors of an expression.
fn selectors(expr: &str) -> Vec<VectorSelector> {
    struct Collect(Vec<VectorSelector>);
    impl ExprVisitor for Collect {
        type Error = ();
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
            match e {
                Expr::VectorSelector(vs) => self.0.push(vs.clone()),
                Expr::MatrixSelector(ms) => self.0.push(ms.vs.clone()),
                _ => {}
            }
            Ok(true)
        }
    }
    let parsed = promql_parser::parser::parse(expr)
        .unwrap_or_else(|e| panic!("{expr}: does not parse: {e}"));
    let mut c = Collect(Vec::new());
    let _ = walk_expr(&mut c, &parsed);
    c.0
}

/// Every series `expr` reads is one the operator exports (with a series for each label
/// value it matches exactly), one of Loki's, or one recorded by a rule of ours.
fn check_expr(
    what: &str,
    expr: &str,
    exported: &BTreeMap<String, Vec<BTreeMap<String, String>>>,
    recorded: &BTreeSet<String>,
) {
    let selectors = selectors(expr);
    assert!(!selectors.is_empty(), "{what} reads no series: {expr}");
    for vs in selectors {
        let name = vs
            .name
            .clone()
            .unwrap_or_else(|| panic!("{what}: a selector without a name"));
        if recorded.contains(&name) || LOKI_SERIES.contains(&name.as_str()) {
            continue;
        }
        let series = exported.get(&name).unwrap_or_else(|| {
            panic!("{what} reads {name}, which neither the operator nor Loki exports")
        });
        for m in &vs.matchers.matchers {
            if SCRAPE_LABELS.iter().any(|(l, _)| *l == m.name) {
                continue;
            }
            assert!(
                series.iter().any(|s| s.contains_key(&m.name)),
                "{what} matches {name} on label {}, which it does not have",
                m.name
            );
            if m.op.to_string() == "=" {
                assert!(
                    series.iter().any(|s| s.get(&m.name) == Some(&m.value)),
                    "{what} matches {name}{{{}=\"{}\"}}, a value the operator never exports",
                    m.name,
                    m.value
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Runbook anchors, as GitHub makes them from headings.
// ---------------------------------------------------------------------------------------

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), numbered as GitHub
/// numbers repeated ones.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Fails unless `file#anchor` (relative to the repository) exists.
fn check_anchor(what: &str, file: &str, anchor: &str) {
    assert!(
        repo_root().join(file).is_file(),
        "{what}: {file} does not exist"
    );
    let found = anchors(&read(file));
    assert!(
        found.contains(anchor),
        "{what}: {file} has no heading for #{anchor} (it has {found:?})"
    );
}

// ---------------------------------------------------------------------------------------
// Tests without promtool.
// ---------------------------------------------------------------------------------------

#[test]
fn alerts_parse_read_exported_series_and_link_runbook_anchors() {
    let exported = exported();
    let rule = prometheus_rule();
    let all = rules(&rule);
    let recorded: BTreeSet<String> = all
        .iter()
        .filter_map(|(_, r)| r["record"].as_str().map(str::to_string))
        .collect();
    let mut names = BTreeSet::new();
    for (_, r) in &all {
        let expr = r["expr"].as_str().expect("expr");
        let Some(name) = r["alert"].as_str() else {
            let record = r["record"].as_str().expect("a rule records or alerts");
            check_expr(record, expr, &exported, &recorded);
            continue;
        };
        assert!(names.insert(name), "{name} twice");
        check_expr(name, expr, &exported, &recorded);
        assert!(
            ["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: severity"
        );
        for a in ["summary", "description"] {
            assert!(
                !r["annotations"][a].as_str().unwrap_or("").is_empty(),
                "{name}: no {a}"
            );
        }
        let url = r["annotations"]["runbook_url"]
            .as_str()
            .expect("runbook_url");
        let path = url
            .strip_prefix(REPO_DOCS)
            .unwrap_or_else(|| panic!("{name}: {url} is not in this repository's docs"));
        let (file, anchor) = path
            .split_once('#')
            .unwrap_or_else(|| panic!("{name}: {url} names no anchor"));
        check_anchor(name, file, anchor);
    }
    for want in OURS.iter().chain(GO_ALERTS.iter().map(|a| &a.0)) {
        assert!(names.contains(want), "no alert {want}");
    }
    let shipped: BTreeSet<&str> = OURS
        .iter()
        .copied()
        .chain(GO_ALERTS.iter().map(|a| a.0))
        .collect();
    let unlisted: Vec<_> = names.difference(&shipped).collect();
    assert!(
        unlisted.is_empty(),
        "alerts {unlisted:?} are not in OURS: their names are API, list them"
    );
}

#[test]
fn the_go_operators_alerts_are_shipped_as_it_ships_them() {
    let rule = prometheus_rule();
    let all = rules(&rule);
    for (name, expr, for_, severity) in GO_ALERTS {
        let (group, r) = all
            .iter()
            .find(|(_, r)| r["alert"] == *name)
            .unwrap_or_else(|| panic!("no alert {name}"));
        assert_eq!(
            group, "logging_loki.alerts",
            "{name}: the Go operator's group"
        );
        assert_eq!(
            one_line(r["expr"].as_str().expect("expr")),
            one_line(expr),
            "{name}: not the Go operator's expression"
        );
        assert_eq!(r["for"].as_str().unwrap_or(""), *for_, "{name}: for");
        assert_eq!(r["labels"]["severity"], *severity, "{name}: severity");
        assert_eq!(
            r["labels"].as_object().map(|l| l.len()),
            Some(1),
            "{name}: the Go operator sets no label but severity"
        );
    }
    let (record, expr) = GO_RECORD;
    let (group, r) = all
        .iter()
        .find(|(_, r)| r["record"] == record)
        .unwrap_or_else(|| panic!("no recording rule {record}"));
    assert_eq!(group, "logging_loki.rules");
    assert_eq!(one_line(r["expr"].as_str().expect("expr")), one_line(expr));
    // The gateway's alerts and recording rule are left out.
    for (_, r) in &all {
        let name = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("");
        assert!(
            ![
                "LokiStackWriteRequestErrors",
                "LokiStackReadRequestErrors",
                "code_handler_job_namespace:lokistack_gateway_http_requests:irate1m",
            ]
            .contains(&name),
            "{name}: reads the gateway, which we do not run"
        );
    }
}

/// The Go operator's per-stack series carry exactly its labels, so that its alerts,
/// dashboards and recording rules group and join the same way.
#[test]
fn the_go_operators_series_have_its_labels() {
    let exported = exported();
    let common = ["stack_namespace", "stack_name", "size"];
    for (name, extra) in [
        (
            "lokistack_status_condition",
            &["condition", "reason", "status"][..],
        ),
        (
            "lokistack_info",
            &[
                "object_storage_type",
                "credential_mode",
                "schema_version",
                "tenancy_mode",
            ][..],
        ),
        ("lokistack_component_replicas", &["component"][..]),
        ("lokistack_global_ingestion_rate_limit_bytes", &[][..]),
    ] {
        let want: BTreeSet<&str> = common.iter().chain(extra).copied().collect();
        let series = exported
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not exported"));
        for s in series {
            let got: BTreeSet<&str> = s.keys().map(String::as_str).collect();
            assert_eq!(got, want, "{name}: labels");
        }
    }
    // Per condition a "true" and a "false" series, one of them 1.
    let conditions: Vec<Sample> = samples(&populated().encode())
        .into_iter()
        .filter(|s| s.name == "lokistack_status_condition")
        .collect();
    for s in &conditions {
        let status = &s.labels["status"];
        assert!(status == "true" || status == "false", "status {status}");
        let twin = conditions
            .iter()
            .find(|t| {
                t.labels
                    .iter()
                    .all(|(k, v)| k == "status" || s.labels.get(k) == Some(v))
                    && &t.labels["status"] != status
            })
            .unwrap_or_else(|| panic!("{:?} has no twin", s.labels));
        assert_eq!(s.value + twin.value, 1.0, "{:?}", s.labels);
    }
    assert!(
        !exported["lokistack_component_replicas"]
            .iter()
            .any(|s| s["component"] == "gateway"),
        "we run no gateway"
    );
}

#[test]
fn dashboard_queries_parse_and_read_exported_series() {
    let exported = exported();
    let dashboard: Value =
        serde_json::from_str(&read(&format!("{DIR}/zone-health.json"))).expect("json");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for p in panels {
        for t in p["targets"].as_array().expect("targets") {
            // Grafana variables are substituted before Prometheus sees the query.
            let expr = t["expr"].as_str().expect("expr").replace("$stack", ".*");
            check_expr(
                p["title"].as_str().unwrap_or("panel"),
                &expr,
                &exported,
                &BTreeSet::new(),
            );
        }
    }
}

/// docs/monitoring.md lists every alert and every metric family, and the links of the
/// monitoring docs and the runbook reach headings that exist.
#[test]
fn the_monitoring_docs_list_every_alert_and_series_and_their_links_resolve() {
    let doc = read("docs/monitoring.md");
    for name in alert_names(&prometheus_rule()) {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "docs/monitoring.md: no row for alert {name}"
        );
    }
    for family in families() {
        assert!(
            doc.contains(&format!("`{family}")),
            "docs/monitoring.md: metric {family} is not described"
        );
    }
    for file in ["docs/monitoring.md", "docs/zone-failure-runbook.md"] {
        let text = read(file);
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap_or_default();
            if target.starts_with("http") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.to_string()
            } else {
                let dir = Path::new(file).parent().expect("dir");
                normalize(&dir.join(path))
            };
            assert!(
                repo_root().join(&resolved).exists(),
                "{file} links to missing {resolved}"
            );
            if !anchor.is_empty() && resolved.ends_with(".md") {
                check_anchor(&format!("{file} -> {target}"), &resolved, anchor);
            }
        }
    }
}

/// `docs/../hack/x` as `hack/x`.
fn normalize(p: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.to_str().expect("utf-8").split('/') {
        match c {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            c => parts.push(c),
        }
    }
    parts.join("/")
}

#[test]
fn the_component_renders_with_the_install() {
    let dir = repo_root().join("target/monitoring-overlay");
    write_overlay(&dir, &["monitoring"], "").expect("overlay");
    let objects = kustomize(&dir).expect("kubectl kustomize");
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in ["ServiceMonitor", "PrometheusRule"] {
        assert!(kinds.contains(k), "no {k} in {kinds:?}");
    }
    let dashboard = objects
        .iter()
        .find(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"] == "loki-zone-operator-dashboard"
        })
        .expect("dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
}

// ---------------------------------------------------------------------------------------
// promtool.
// ---------------------------------------------------------------------------------------

/// promtool, or `None` when `make` said why it is missing; a failure otherwise.
fn promtool(test: &str) -> Option<PathBuf> {
    if let Some(p) = which("promtool") {
        return Some(p);
    }
    let why = std::env::var(PROMTOOL_UNAVAILABLE_ENV).unwrap_or_default();
    assert!(
        !why.trim().is_empty(),
        "no promtool on PATH: install Debian's prometheus package (apt-get install prometheus), \
         or run `make unit` or `make test`, which install it as root or say why they cannot"
    );
    // Straight to stderr, past the test harness's capture: a skip must be seen.
    let bar = "!".repeat(78);
    let _ = writeln!(
        std::io::stderr(),
        "{bar}\n!! monitoring: {test} did NOT run: no promtool.\n!! Why: {why}\n{bar}"
    );
    None
}

/// Runs promtool in `dir`; fails with its output unless it succeeds. Returns stdout.
fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "promtool {} failed in {}:\n{stdout}{}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Writes `text` to `path` in one step (a rename), so that another run beside this one
/// never reads half a file.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A fresh directory under target/promtool/.
fn work_dir(name: &str) -> PathBuf {
    let dir = repo_root().join("target/promtool").join(name);
    std::fs::create_dir_all(&dir).expect("target/promtool");
    dir
}

/// The rules of the PrometheusRule as a plain rule file: `groups:` of its spec.
fn rule_file() -> String {
    let rule = prometheus_rule();
    let groups = json!({"groups": rule["spec"]["groups"]});
    serde_yaml_ng::to_string(&groups).expect("yaml")
}

/// The unit-test files of tests/promtool/, by file name.
fn unit_tests() -> Vec<(String, Value)> {
    let dir = repo_root().join("tests/promtool");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("tests/promtool")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().to_string();
            let text = std::fs::read_to_string(&p).expect("test file");
            (name, serde_yaml_ng::from_str(&text).expect("yaml"))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every alert has a case that fires it and one that does not, every recording rule an
/// expression test, and no case names a rule that does not exist (promtool would pass a
/// silent case of a misspelt alert).
#[test]
fn the_promtool_unit_tests_fire_and_silence_every_alert() {
    let rule = prometheus_rule();
    let alerts: BTreeSet<String> = alert_names(&rule).into_iter().collect();
    let records: Vec<String> = rules(&rule)
        .iter()
        .filter_map(|(_, r)| r["record"].as_str().map(str::to_string))
        .collect();
    let mut fired = BTreeSet::new();
    let mut silent = BTreeSet::new();
    let mut exprs = Vec::new();
    let files = unit_tests();
    assert!(!files.is_empty(), "no tests in tests/promtool");
    for (file, t) in &files {
        assert_eq!(
            t["rule_files"],
            json!(["rules.yaml"]),
            "{file}: rule_files must be the extracted rules.yaml"
        );
        for group in t["tests"].as_array().expect("tests") {
            for case in group["alert_rule_test"].as_array().into_iter().flatten() {
                let name = case["alertname"].as_str().expect("alertname").to_string();
                assert!(alerts.contains(&name), "{file}: no alert {name}");
                if case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()) {
                    fired.insert(name);
                } else {
                    silent.insert(name);
                }
            }
            for case in group["promql_expr_test"].as_array().into_iter().flatten() {
                exprs.push(case["expr"].as_str().expect("expr").to_string());
            }
        }
    }
    for a in &alerts {
        assert!(fired.contains(a), "tests/promtool: no case fires {a}");
        assert!(
            silent.contains(a),
            "tests/promtool: no case keeps {a} silent"
        );
    }
    for r in &records {
        assert!(
            exprs.iter().any(|e| e.contains(r.as_str())),
            "tests/promtool: no expression test reads {r}"
        );
    }
}

#[test]
fn promtool_checks_the_rules_and_runs_the_unit_tests() {
    let Some(promtool) = promtool("promtool check rules and test rules") else {
        return;
    };
    let dir = work_dir("rules");
    write(&dir.join("rules.yaml"), &rule_file());
    let checked = run_promtool(&promtool, &dir, &["check", "rules", "rules.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let mut args = vec!["test".to_string(), "rules".to_string()];
    for (file, _) in unit_tests() {
        let text = read(&format!("tests/promtool/{file}"));
        write(&dir.join(&file), &text);
        args.push(file);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_promtool(&promtool, &dir, &args);
    println!("promtool: {}{out}", checked.trim());
}

/// What each of our alert expressions selects on the series of [`populated`], 15
/// minutes into a scrape that never changed: the stack of [`stacks`] that should match.
/// Alerts on counters' rates (nothing moves here) and on Loki's series are left out.
const EXPECTED_ON_OUR_SERIES: &[(&str, usize)] = &[
    // zone-c of logs.
    ("LokiStackZoneUnavailable", 1),
    ("LokiStackWriteQuorumLost", 1),
    // logs: 0 tolerated over 3 zones; steady tolerates 1.
    ("LokiStackZoneFailureToleranceLost", 1),
    // zone-b of logs.
    ("LokiStackZoneMaintenanceTooLong", 1),
    // steady; logs' rollout waits for its lost zone.
    ("LokiStackRolloutStalled", 1),
    ("LokiStackDegraded", 1),
    // steady.
    ("LokiStackPodsWithoutZone", 1),
    // logs: Enabling, no readPathAt (turning has one).
    ("LokiStackZoneSwitchStalled", 1),
    // the zone-disruption configuration fails.
    ("LokiZoneOperatorWebhookFailing", 1),
    // logs (not Ready) and fresh (no Ready condition yet).
    ("LokistackComponentsNotReadyWarning", 2),
    // logs (v12).
    ("LokistackSchemaUpgradesRequired", 1),
];

/// The exposition of [`populated`] as promtool input series, as Prometheus scrapes them.
fn input_series(minutes: u32) -> Vec<Value> {
    samples(&populated().encode())
        .into_iter()
        .filter(|s| s.value.is_finite())
        .map(|s| {
            let mut labels = s.labels;
            for (k, v) in SCRAPE_LABELS {
                let clash = labels.insert(k.to_string(), v.to_string());
                assert!(
                    clash.is_none(),
                    "{}: a {k} label clashes with the scrape's",
                    s.name
                );
            }
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
                .collect();
            json!({
                "series": format!("{}{{{}}}", s.name, labels.join(", ")),
                "values": format!("{}x{minutes}", s.value),
            })
        })
        .collect()
}

/// The Go operator's two alerts on LokiStack conditions, verbatim from its file (with no
/// annotations: ours are not under test here), fire on the series our exporter writes;
/// and each of our alerts selects what it should there.
#[test]
fn the_go_operators_alerts_and_ours_fire_on_the_series_we_export() {
    let Some(promtool) = promtool("the Go operator's alerts on our series") else {
        return;
    };
    let dir = work_dir("our-series");
    let go_rules: Vec<Value> = GO_ALERTS
        .iter()
        .filter(|a| a.0.starts_with("Lokistack"))
        .map(|(name, expr, for_, severity)| {
            json!({"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity}})
        })
        .collect();
    assert_eq!(go_rules.len(), 2);
    write(
        &dir.join("go-alerts.yaml"),
        &serde_yaml_ng::to_string(
            &json!({"groups": [{"name": "logging_loki.alerts", "rules": go_rules}]}),
        )
        .expect("yaml"),
    );
    let not_ready = |stack: &str| json!({"exp_labels": {"severity": "warning", "namespace": "logging", "stack_name": stack}});
    let ours = rules(&prometheus_rule());
    let expr_tests: Vec<Value> = EXPECTED_ON_OUR_SERIES
        .iter()
        .map(|(name, n)| {
            let (_, r) = ours
                .iter()
                .find(|(_, r)| r["alert"] == *name)
                .unwrap_or_else(|| panic!("no alert {name}"));
            let expr = r["expr"].as_str().expect("expr");
            json!({
                "expr": format!("count({expr})"),
                "eval_time": "15m",
                "exp_samples": [{"labels": "{}", "value": n}],
            })
        })
        .collect();
    let test = json!({
        "rule_files": ["go-alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series(30),
            "alert_rule_test": [
                {"eval_time": "14m", "alertname": "LokistackComponentsNotReadyWarning"},
                {"eval_time": "16m", "alertname": "LokistackComponentsNotReadyWarning",
                 "exp_alerts": [not_ready("fresh"), not_ready("logs")]},
                {"eval_time": "0m", "alertname": "LokistackSchemaUpgradesRequired"},
                {"eval_time": "2m", "alertname": "LokistackSchemaUpgradesRequired",
                 "exp_alerts": [{"exp_labels": {"severity": "warning",
                     "stack_namespace": "logging", "stack_name": "logs"}}]},
            ],
            "promql_expr_test": expr_tests,
        }],
    });
    write(
        &dir.join("on-our-series.yaml"),
        &serde_yaml_ng::to_string(&test).expect("yaml"),
    );
    run_promtool(&promtool, &dir, &["check", "rules", "go-alerts.yaml"]);
    let out = run_promtool(&promtool, &dir, &["test", "rules", "on-our-series.yaml"]);
    println!("promtool, the Go operator's alerts on our series: {out}");
}
