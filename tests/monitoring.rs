//! The optional monitoring component: its alerts and dashboard parse as PromQL, use only
//! metrics the operator exports, and point at runbooks that exist.

use std::collections::BTreeSet;

use loki_zone_operator::model::api::LokiStackStatus;
use loki_zone_operator::telemetry::metrics::{Metrics, StackView};
use loki_zone_operator_tests::bundle::{kustomize, write_overlay};
use loki_zone_operator_tests::repo_root;
use serde_json::{json, Value};

const DIR: &str = "manifests/components/monitoring";
const REPO_DOCS: &str = "https://github.com/loki-zone-operator/loki-zone-operator/blob/main/";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Metric families the operator exports, by their `# TYPE` lines, once a zone-aware
/// stack and some work have given every family a series.
fn exported() -> BTreeSet<String> {
    let m = Metrics::default();
    let status: LokiStackStatus = serde_json::from_value(json!({
        "conditions": [{"type": "Ready", "status": "True", "reason": "ReadyComponents",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "replication": {"factor": 3, "writeQuorum": 2, "zones": ["a", "b", "c"],
                        "zonesAvailable": ["a", "b"], "zoneFailuresTolerated": 0,
                        "writeQuorumMet": true},
        "zoneAwareness": {"stage": "Enabling", "readPathAt": "2026-01-01T03:00:00Z"},
    }))
    .expect("status");
    m.set_stack(
        "ns",
        "s",
        Some(StackView {
            size: "1x.small",
            status: &status,
        }),
    );
    Metrics::count(&m.reconciles, "ok", 1);
    Metrics::count(&m.annotations, "written", 1);
    Metrics::count(&m.applies, "applied", 1);
    m.webhook_configuration("zone-disruption", true);
    m.encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// The operator's metric names an expression uses, with the suffixes Prometheus adds to
/// counters and histograms taken off.
fn used(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_alphabetic() || bytes[i] == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            if word.starts_with("loki_zone_operator_") || word.starts_with("lokistack_") {
                let base = ["_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(&word)
                    .to_string();
                out.push(base);
            }
        } else {
            i += 1;
        }
    }
    out
}

fn check_expr(what: &str, expr: &str, exported: &BTreeSet<String>) {
    promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{what}: {expr}: {e}"));
    let metrics = used(expr);
    assert!(
        !metrics.is_empty(),
        "{what} uses none of the operator's metrics: {expr}"
    );
    for m in metrics {
        assert!(
            exported.contains(&m),
            "{what} uses {m}, which the operator does not export"
        );
    }
}

#[test]
fn alerts_parse_use_exported_metrics_and_link_existing_runbooks() {
    let exported = exported();
    let rule: Value =
        serde_yaml_ng::from_str(&read(&format!("{DIR}/prometheus_rule.yaml"))).expect("yaml");
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_array().expect("groups") {
        for r in group["rules"].as_array().expect("rules") {
            let name = r["alert"].as_str().expect("alert name");
            alerts.push(name.to_string());
            check_expr(name, r["expr"].as_str().expect("expr"), &exported);
            assert!(
                ["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap_or("")),
                "{name}: severity"
            );
            let url = r["annotations"]["runbook_url"]
                .as_str()
                .expect("runbook_url");
            let path = url
                .strip_prefix(REPO_DOCS)
                .unwrap_or_else(|| panic!("{name}: {url}"));
            let file = path.split('#').next().unwrap_or(path);
            assert!(
                repo_root().join(file).is_file(),
                "{name}: {file} does not exist"
            );
            if let Some(anchor) = path.split('#').nth(1) {
                let heading = format!("## {}", anchor.replace('-', " "));
                assert!(
                    read(file).lines().any(|l| l.eq_ignore_ascii_case(&heading)),
                    "{name}: {file} has no heading for #{anchor}"
                );
            }
        }
    }
    for want in [
        "LokiStackZoneUnavailable",
        "LokiStackWriteQuorumLost",
        "LokiStackZoneFailureToleranceLost",
        "LokiStackDegraded",
        "LokiStackPodsWithoutZone",
        "LokiZoneAnnotatorFailing",
        "LokiZoneOperatorWebhookFailing",
        "LokiStackZoneSwitchStalled",
    ] {
        assert!(alerts.iter().any(|a| a == want), "no alert {want}");
    }
}

#[test]
fn dashboard_queries_parse_and_use_exported_metrics() {
    let exported = exported();
    let dashboard: Value =
        serde_json::from_str(&read(&format!("{DIR}/zone-health.json"))).expect("json");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for p in panels {
        for t in p["targets"].as_array().expect("targets") {
            // Grafana variables are substituted before Prometheus sees the query.
            let expr = t["expr"].as_str().expect("expr").replace("$stack", ".*");
            check_expr(p["title"].as_str().unwrap_or("panel"), &expr, &exported);
        }
    }
}

#[test]
fn the_component_renders_with_the_install() {
    let dir = repo_root().join("target/monitoring-overlay");
    write_overlay(&dir, &["monitoring"], "").expect("overlay");
    let objects = kustomize(&dir).expect("kubectl kustomize");
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in ["ServiceMonitor", "PodMonitor", "PrometheusRule"] {
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
