//! The ruler's objects, checked in the reconciler: which rules a stack picks, and what
//! is wrong with a rule or a RulerConfig, field by field.
//!
//! The CRDs refuse most of it at admission (patterns, list maps, CEL); this checks it
//! all again, because objects may predate a rule and no CRD can parse LogQL. A rule
//! found wrong is not loaded (one bad rule must not keep a tenant's other rules from
//! loading) and its status names the field.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::checks::validate::FieldError;
use crate::logql::check_metric_expr;
use crate::logql::duration::parse_prometheus_duration;
use crate::model::api::RulesSpec;
use crate::ruler::api::{
    AlertManagerSpec, AlertingRuleSpec, RecordingRuleSpec, RelabelAction, RelabelConfig,
    RemoteWriteSpec, RulerConfigSpec, RULE_HEADER_AUTH_EXCLUSIVE_MSG, RULE_TENANT_NOT_DOTS_MSG,
    TENANT_ID_MAX_LEN,
};

fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether a stack's `spec.rules` picks a rule, as the Go Loki Operator decides: the
/// rule's labels match `selector` (unset picks no rule, `{}` every rule), and the rule
/// is in the stack's namespace or in one whose labels match `namespaceSelector` (unset:
/// the stack's own namespace only). `namespace_labels` is `None` when the rule's
/// namespace is not known (yet): then only the stack's namespace counts. An invalid
/// selector picks nothing; the stack's validation reports it.
pub fn selects(
    rules: &RulesSpec,
    stack_namespace: &str,
    rule_namespace: &str,
    rule_labels: &BTreeMap<String, String>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(selector) = rules.selector.as_ref().and_then(to_selector) else {
        return false;
    };
    if !rules.enabled || !selector.matches(rule_labels) {
        return false;
    }
    if rule_namespace == stack_namespace {
        return true;
    }
    match (
        rules.namespace_selector.as_ref().and_then(to_selector),
        namespace_labels,
    ) {
        (Some(ns), Some(labels)) => ns.matches(labels),
        _ => false,
    }
}

/// Why a stack does not load a rule it picks for its tenant, if it does not: a rule of
/// another namespace than the stack's may name only a tenant `spec.rules.allowedTenants`
/// grants its namespace. The stack's owner decides whose logs each namespace's rules may
/// read; writing a rule there is not enough.
pub fn tenant_refusal(
    rules: &RulesSpec,
    stack_namespace: &str,
    rule_namespace: &str,
    tenant: &str,
) -> Option<String> {
    let granted = rule_namespace == stack_namespace
        || rules.allowed_tenants.iter().any(|g| {
            g.namespaces.iter().any(|n| n == rule_namespace)
                && g.tenants.iter().any(|t| t == tenant)
        });
    (!granted).then(|| {
        format!(
            "tenant {tenant:?} is not granted to the rules of namespace {rule_namespace:?}: the LokiStack's owner may allow it in spec.rules.allowedTenants (namespaces: [{rule_namespace}], tenants: [{tenant}])"
        )
    })
}

fn to_selector(s: &LabelSelector) -> Option<Selector> {
    Selector::try_from(s.clone()).ok()
}

/// Loki's tenant IDs: at most 150 of `a-zA-Z0-9!._*'()-`, never `.` or `..`.
pub fn tenant_error(tenant: &str) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "!._*'()-".contains(c);
    if tenant.is_empty() || tenant.len() > TENANT_ID_MAX_LEN || !tenant.chars().all(ok_char) {
        Some(format!(
            "{tenant:?} is not a Loki tenant ID: 1 to {TENANT_ID_MAX_LEN} of the characters a-z A-Z 0-9 ! . _ * ' ( ) -"
        ))
    } else if tenant == "." || tenant == ".." {
        Some(RULE_TENANT_NOT_DOTS_MSG.to_string())
    } else {
        None
    }
}

fn duration(errors: &mut Vec<FieldError>, field: String, value: &str) {
    if let Err(e) = parse_prometheus_duration(value) {
        errors.push(err(field, e));
    }
}

/// One rule of a group, as both kinds have it.
struct RuleView<'a> {
    /// `alert` or `record`, and its value.
    name_field: &'static str,
    name: Option<&'a str>,
    expr: &'a str,
    for_: Option<&'a str>,
    labels: &'a BTreeMap<String, String>,
    /// An alert's; recording rules have none.
    annotations: Option<&'a BTreeMap<String, String>>,
    /// Compared for duplicates: the rule's serialized form.
    identity: String,
}

/// Prometheus' legacy metric name, which Loki's ruler requires of a record.
fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Prometheus' legacy label name, which Loki's ruler requires of label and annotation
/// names.
fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What Loki's ruler refuses in a rule's names (its `validateRule`): one refused rule
/// keeps its whole file from loading.
fn check_names(errors: &mut Vec<FieldError>, at: &str, rule: &RuleView<'_>) {
    if rule.name_field == "record" {
        if let Some(name) = rule.name.filter(|n| !n.is_empty() && !is_metric_name(n)) {
            errors.push(err(
                format!("{at}.record"),
                format!("{name:?} is not a metric name: letters, digits, '_' and ':', not starting with a digit"),
            ));
        }
    }
    for name in rule.labels.keys() {
        if !is_label_name(name) || name == "__name__" {
            errors.push(err(
                format!("{at}.labels"),
                format!("{name:?} is not a label name: letters, digits and '_', not starting with a digit, and not __name__"),
            ));
        }
    }
    for name in rule.annotations.into_iter().flat_map(BTreeMap::keys) {
        if !is_label_name(name) {
            errors.push(err(
                format!("{at}.annotations"),
                format!("{name:?} is not an annotation name: letters, digits and '_', not starting with a digit"),
            ));
        }
    }
}

struct GroupView<'a> {
    name: &'a str,
    interval: &'a str,
    rules: Vec<RuleView<'a>>,
}

fn check_groups(tenant: &str, groups: &[GroupView<'_>]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(e) = tenant_error(tenant) {
        errors.push(err("spec.tenantID", e));
    }
    let mut names = BTreeSet::new();
    for (g, group) in groups.iter().enumerate() {
        let at = format!("spec.groups[{g}]");
        if group.name.is_empty() {
            errors.push(err(format!("{at}.name"), "a group needs a name"));
        } else if !names.insert(group.name) {
            errors.push(err(
                format!("{at}.name"),
                format!(
                    "the group name {:?} is used twice in this object; rename one",
                    group.name
                ),
            ));
        }
        duration(&mut errors, format!("{at}.interval"), group.interval);
        let mut seen = BTreeSet::new();
        for (r, rule) in group.rules.iter().enumerate() {
            let at = format!("{at}.rules[{r}]");
            if rule.name.is_none_or(str::is_empty) {
                errors.push(err(
                    format!("{at}.{}", rule.name_field),
                    format!("every rule needs its {}", rule.name_field),
                ));
            }
            if let Some(f) = rule.for_ {
                duration(&mut errors, format!("{at}.for"), f);
            }
            check_names(&mut errors, &at, rule);
            if let Err(e) = check_metric_expr(rule.expr) {
                errors.push(err(format!("{at}.expr"), e.to_string()));
            }
            // Two identical rules of one group evaluate twice and write the same series
            // or alerts twice; rules that only share a name are fine (a warning and a
            // critical threshold of one alert).
            if !seen.insert(rule.identity.as_str()) {
                errors.push(err(
                    at,
                    "this rule repeats an earlier rule of the group exactly; remove one",
                ));
            }
        }
    }
    errors
}

fn identity(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

pub fn check_alerting_rule(spec: &AlertingRuleSpec) -> Vec<FieldError> {
    let groups: Vec<GroupView<'_>> = spec
        .groups
        .iter()
        .map(|g| GroupView {
            name: &g.name,
            interval: &g.interval,
            rules: g
                .rules
                .iter()
                .map(|r| RuleView {
                    name_field: "alert",
                    name: r.alert.as_deref(),
                    expr: &r.expr,
                    for_: r.for_.as_deref(),
                    labels: &r.labels,
                    annotations: Some(&r.annotations),
                    identity: identity(r),
                })
                .collect(),
        })
        .collect();
    check_groups(&spec.tenant_id, &groups)
}

pub fn check_recording_rule(spec: &RecordingRuleSpec) -> Vec<FieldError> {
    let groups: Vec<GroupView<'_>> = spec
        .groups
        .iter()
        .map(|g| GroupView {
            name: &g.name,
            interval: &g.interval,
            rules: g
                .rules
                .iter()
                .map(|r| RuleView {
                    name_field: "record",
                    name: r.record.as_deref(),
                    expr: &r.expr,
                    for_: None,
                    labels: &r.labels,
                    annotations: None,
                    identity: identity(r),
                })
                .collect(),
        })
        .collect();
    check_groups(&spec.tenant_id, &groups)
}

fn http_url(s: &str) -> bool {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}

/// What Prometheus refuses in a relabel step, so the ruler does not fail to start.
fn check_relabel(errors: &mut Vec<FieldError>, at: &str, c: &RelabelConfig) {
    use RelabelAction::*;
    let needs_target = matches!(c.action, Replace | Hashmod);
    if needs_target && c.target_label.as_deref().is_none_or(str::is_empty) {
        errors.push(err(
            format!("{at}.targetLabel"),
            format!("action {} needs targetLabel", c.action.as_str()),
        ));
    }
    if c.action == Hashmod && c.modulus.unwrap_or(0) == 0 {
        errors.push(err(
            format!("{at}.modulus"),
            "action hashmod needs a modulus above 0",
        ));
    }
    if matches!(c.action, Labeldrop | Labelkeep)
        && (!c.source_labels.is_empty() || c.target_label.is_some() || c.modulus.is_some())
    {
        errors.push(err(
            at.to_string(),
            format!(
                "action {} takes only regex: leave sourceLabels empty and unset targetLabel and modulus",
                c.action.as_str()
            ),
        ));
    }
}

/// A host Loki's Alertmanager discovery takes: an SRV name, `_service._proto.name`
/// (Loki's own test, the regular expression `^_.+._.+`).
fn srv_host(url: &str) -> bool {
    let host = url.split_once("://").map_or(url, |(_, r)| r);
    let host = host.split(['/', '?', '#']).next().unwrap_or_default();
    host.starts_with('_')
        && host
            .char_indices()
            .any(|(i, c)| c == '_' && i >= 3 && i + 1 < host.len())
}

fn check_alertmanager(errors: &mut Vec<FieldError>, at: &str, am: &AlertManagerSpec) {
    let srv = am.discovery.as_ref().is_some_and(|d| d.enable_srv);
    for (i, e) in am.endpoints.iter().enumerate() {
        if !http_url(e) {
            errors.push(err(
                format!("{at}.endpoints[{i}]"),
                format!("{e:?} is not an http:// or https:// URL"),
            ));
        } else if srv && !srv_host(e) {
            // Loki refuses the tenant's whole rule set otherwise ("when
            // alertmanager-discovery is on, host name must be of the form ...").
            errors.push(err(
                format!("{at}.endpoints[{i}]"),
                format!("{e:?}: with discovery.enableSRV the host must be an SRV name such as _http._tcp.alertmanager.monitoring.svc"),
            ));
        }
    }
    if let Some(u) = am.external_url.as_deref().filter(|u| !http_url(u)) {
        errors.push(err(
            format!("{at}.externalUrl"),
            format!("{u:?} is not an http:// or https:// URL"),
        ));
    }
    if let Some(d) = &am.discovery {
        duration(
            errors,
            format!("{at}.discovery.refreshInterval"),
            &d.refresh_interval,
        );
    }
    if let Some(q) = &am.notification_queue {
        for (name, v) in [
            ("timeout", &q.timeout),
            ("forOutageTolerance", &q.for_outage_tolerance),
            ("forGracePeriod", &q.for_grace_period),
            ("resendDelay", &q.resend_delay),
        ] {
            if let Some(v) = v {
                duration(errors, format!("{at}.notificationQueue.{name}"), v);
            }
        }
    }
    for (i, c) in am.relabel_configs.iter().enumerate() {
        check_relabel(errors, &format!("{at}.relabelConfigs[{i}]"), c);
    }
    if let Some(h) = am.client.as_ref().and_then(|c| c.header_auth.as_ref()) {
        if h.credentials.is_some() && h.credentials_file.is_some() {
            errors.push(err(
                format!("{at}.client.headerAuth.credentials"),
                RULE_HEADER_AUTH_EXCLUSIVE_MSG,
            ));
        }
    }
}

pub fn check_ruler_config(spec: &RulerConfigSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    duration(
        &mut errors,
        "spec.evaluationInterval".into(),
        &spec.evaluation_interval,
    );
    duration(&mut errors, "spec.pollInterval".into(), &spec.poll_interval);
    if let Some(am) = &spec.alertmanager {
        check_alertmanager(&mut errors, "spec.alertmanager", am);
    }
    for (tenant, o) in &spec.overrides {
        if let Some(e) = tenant_error(tenant) {
            errors.push(err(format!("spec.overrides[{tenant:?}]"), e));
        }
        if let Some(am) = &o.alertmanager {
            let at = format!("spec.overrides[{tenant:?}].alertmanager");
            check_alertmanager(&mut errors, &at, am);
            // Loki's per-tenant Alertmanager has no such settings, and its runtime
            // config is read strictly: one of them would make Loki refuse it whole.
            if am.external_url.is_some() || !am.external_labels.is_empty() {
                errors.push(err(
                    format!("{at}.externalUrl"),
                    "externalUrl and externalLabels apply to the whole ruler: set them in spec.alertmanager, not per tenant",
                ));
            }
        }
    }
    if let Some(rw) = &spec.remote_write {
        check_remote_write(&mut errors, rw);
    }
    errors
}

fn check_remote_write(errors: &mut Vec<FieldError>, rw: &RemoteWriteSpec) {
    let at = "spec.remoteWrite";
    duration(errors, format!("{at}.refreshPeriod"), &rw.refresh_period);
    match &rw.client {
        Some(c) => {
            if !http_url(&c.url) {
                errors.push(err(
                    format!("{at}.client.url"),
                    format!("{:?} is not an http:// or https:// URL", c.url),
                ));
            }
            duration(errors, format!("{at}.client.timeout"), &c.timeout);
            for (i, r) in c.relabel_configs.iter().enumerate() {
                check_relabel(errors, &format!("{at}.client.relabelConfigs[{i}]"), r);
            }
        }
        None if rw.enabled => errors.push(err(
            format!("{at}.client"),
            "remote write is enabled but names no client (url, authorization)",
        )),
        None => {}
    }
    if let Some(q) = &rw.queue {
        for (name, v) in [
            ("batchSendDeadline", &q.batch_send_deadline),
            ("minBackOffPeriod", &q.min_back_off_period),
            ("maxBackOffPeriod", &q.max_back_off_period),
        ] {
            if let Some(v) = v {
                duration(errors, format!("{at}.queue.{name}"), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alerting(v: serde_json::Value) -> AlertingRuleSpec {
        serde_json::from_value(v).expect("alerting rule spec")
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    const EXPR: &str = r#"sum(rate({app="a"} |= "error" [5m])) > 1"#;

    #[test]
    fn a_valid_alerting_rule_passes_and_shared_names_are_allowed() {
        let spec = alerting(
            json!({"tenantID": "application", "groups": [{"name": "g", "rules": [
                {"alert": "HighErrors", "expr": EXPR, "for": "5m", "labels": {"severity": "warning"}},
                {"alert": "HighErrors", "expr": EXPR.replace("> 1", "> 10"), "labels": {"severity": "critical"}},
            ]}]}),
        );
        assert_eq!(spec.groups[0].interval, "1m", "the Go operator's default");
        assert!(
            check_alerting_rule(&spec).is_empty(),
            "{:?}",
            check_alerting_rule(&spec)
        );
    }

    #[test]
    fn each_wrong_field_is_named() {
        let rule = json!({"alert": "A", "expr": EXPR});
        let spec = alerting(json!({"tenantID": "../etc", "groups": [
            {"name": "g", "interval": "1 minute", "rules": [rule, rule,
                {"expr": "{app=\"a\"} |= \"x\"", "for": "5mins"}]},
            {"name": "g", "rules": []},
        ]}));
        let errors = check_alerting_rule(&spec);
        assert_eq!(
            fields(&errors),
            [
                "spec.tenantID",
                "spec.groups[0].interval",
                "spec.groups[0].rules[1]",
                "spec.groups[0].rules[2].alert",
                "spec.groups[0].rules[2].for",
                "spec.groups[0].rules[2].expr",
                "spec.groups[1].name",
            ],
            "{errors:#?}"
        );
        assert!(errors[5].message.contains("log query"), "{}", errors[5]);
        assert!(tenant_error("..").is_some() && tenant_error("a/b").is_some());
        assert!(tenant_error("team-a_(prod)").is_none());
    }

    /// Names Loki's ruler refuses, which would keep the rule's whole file from loading.
    #[test]
    fn names_loki_refuses_are_named() {
        let spec = alerting(json!({"tenantID": "t", "groups": [{"name": "g", "rules": [
            {"alert": "A", "expr": EXPR, "labels": {"severity": "x", "team-name": "a", "__name__": "b"},
             "annotations": {"summary": "s", "run book": "u"}},
            {"alert": "B", "expr": EXPR, "labels": {"_ok": "1", "ok_2": "2"}, "annotations": {"_x": ""}},
        ]}]}));
        let errors = check_alerting_rule(&spec);
        assert_eq!(
            fields(&errors),
            [
                "spec.groups[0].rules[0].labels",
                "spec.groups[0].rules[0].labels",
                "spec.groups[0].rules[0].annotations",
            ],
            "{errors:#?}"
        );
        assert!(errors[1].message.contains("\"team-name\""), "{}", errors[1]);
        let spec: RecordingRuleSpec = serde_json::from_value(json!({"tenantID": "t", "groups": [
            {"name": "g", "rules": [
                {"record": "job:rate-5m", "expr": "rate({a=\"b\"}[5m])"},
                {"record": "1st", "expr": "rate({a=\"b\"}[5m])"},
                {"record": ":ok:rate5m", "expr": "rate({a=\"b\"}[5m])", "labels": {"9": "x"}},
            ]}
        ]}))
        .expect("spec");
        assert_eq!(
            fields(&check_recording_rule(&spec)),
            [
                "spec.groups[0].rules[0].record",
                "spec.groups[0].rules[1].record",
                "spec.groups[0].rules[2].labels",
            ]
        );
    }

    #[test]
    fn recording_rules_need_their_record() {
        let spec: RecordingRuleSpec = serde_json::from_value(json!({"tenantID": "t", "groups": [
            {"name": "g", "rules": [{"expr": EXPR.replace(" > 1", "")}, {"record": "r:x", "expr": "rate({a=\"b\"}[5m])"}]}
        ]}))
        .expect("spec");
        assert_eq!(
            fields(&check_recording_rule(&spec)),
            ["spec.groups[0].rules[0].record"]
        );
    }

    #[test]
    fn selection_follows_the_go_operator() {
        let spec = |sel: serde_json::Value, ns: serde_json::Value| -> RulesSpec {
            serde_json::from_value(
                json!({"enabled": true, "selector": sel, "namespaceSelector": ns}),
            )
            .expect("rules spec")
        };
        let labels = |l: &[(&str, &str)]| -> BTreeMap<String, String> {
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let rule = labels(&[("team", "a")]);
        let team = labels(&[("loki", "yes")]);
        let s = spec(
            json!({"matchLabels": {"team": "a"}}),
            json!({"matchLabels": {"loki": "yes"}}),
        );
        assert!(selects(&s, "ns", "ns", &rule, None));
        assert!(selects(&s, "ns", "other", &rule, Some(&team)));
        assert!(!selects(&s, "ns", "other", &rule, Some(&labels(&[]))));
        assert!(
            !selects(&s, "ns", "other", &rule, None),
            "an unknown namespace is not picked"
        );
        assert!(!selects(&s, "ns", "ns", &labels(&[("team", "b")]), None));
        let no_selector: RulesSpec =
            serde_json::from_value(json!({"enabled": true})).expect("spec");
        assert!(
            !selects(&no_selector, "ns", "ns", &rule, None),
            "no selector picks no rule"
        );
        let everything = spec(json!({}), serde_json::Value::Null);
        assert!(selects(&everything, "ns", "ns", &labels(&[]), None));
        assert!(!selects(&everything, "ns", "other", &rule, Some(&team)));
        let mut off = everything.clone();
        off.enabled = false;
        assert!(!selects(&off, "ns", "ns", &rule, None));
    }

    #[test]
    fn ruler_config_errors_name_their_field() {
        let spec: RulerConfigSpec = serde_json::from_value(json!({
            "evaluationInterval": "1x",
            "alertmanager": {"endpoints": ["alertmanager:9093"], "relabelConfigs": [
                {"sourceLabels": ["a"]},
                {"sourceLabels": ["a"], "action": "labeldrop", "regex": "tmp_.*"},
                {"sourceLabels": ["a"], "action": "hashmod", "targetLabel": "s"}
            ], "client": {"headerAuth": {"credentials": "x", "credentialsFile": "/f"}}},
            "overrides": {"a/b": {}, "t": {"alertmanager": {"endpoints": [], "externalUrl": "https://x"}}},
            "remoteWrite": {"enabled": true}
        }))
        .expect("spec");
        assert_eq!(
            fields(&check_ruler_config(&spec)),
            [
                "spec.evaluationInterval",
                "spec.alertmanager.endpoints[0]",
                "spec.alertmanager.relabelConfigs[0].targetLabel",
                "spec.alertmanager.relabelConfigs[1]",
                "spec.alertmanager.relabelConfigs[2].modulus",
                "spec.alertmanager.client.headerAuth.credentials",
                "spec.overrides[\"a/b\"]",
                "spec.overrides[\"t\"].alertmanager.externalUrl",
                "spec.remoteWrite.client",
            ]
        );
        let srv: RulerConfigSpec = serde_json::from_value(json!({"alertmanager": {
            "endpoints": ["http://alertmanager:9093", "http://_web._tcp.alertmanager.monitoring.svc"],
            "discovery": {"enableSRV": true}}}))
        .expect("spec");
        assert_eq!(
            fields(&check_ruler_config(&srv)),
            ["spec.alertmanager.endpoints[0]"]
        );
        assert!(
            srv_host("https://_a._tcp.x/y")
                && !srv_host("http://a._tcp.x")
                && !srv_host("http://_ab")
        );
        let fine: RulerConfigSpec = serde_json::from_value(json!({
            "alertmanager": {"endpoints": ["http://am.monitoring.svc:9093"], "relabelConfigs": [
                {"sourceLabels": ["a"], "targetLabel": "b", "replacement": "${1}x"}]}
        }))
        .expect("spec");
        assert!(check_ruler_config(&fine).is_empty());
    }
}
