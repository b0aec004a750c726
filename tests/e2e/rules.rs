//! AlertingRules, RecordingRules and a RulerConfig acted on: a stack with
//! `spec.rules.selector` and `namespaceSelector` loads the rules it picks into one
//! ConfigMap per tenant, mounted into its ruler; a rule elsewhere is ignored and never
//! written to; an invalid rule is refused at admission or left out and named in its
//! status and the stack's; a rule changed for a known tenant restarts nothing; a rule
//! deleted or unselected leaves the files; a rule of another namespace loads only for a
//! tenant the stack grants that namespace; the RulerConfig reaches Loki's `ruler` block.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::ResourceExt;
use loki_zone_operator_tests::nodesim::eventually;
use serde_json::{json, Value};

use super::{condition, create_stack, get_stack, namespace, stack_json, wait_condition, Env, WAIT};

const NS: &str = "e2e-rules";
/// Picked through the namespace selector.
const TEAM_NS: &str = "e2e-rules-team";
/// Not picked: no matching namespace label.
const OTHER_NS: &str = "e2e-rules-other";
const STACK: &str = "rules";
const PICK: (&str, &str) = ("loki-rules", "e2e");

fn resource(kind: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("loki.grafana.com", "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()))
}

fn api(env: &Env, kind: &str, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(env.admin.clone(), ns, &resource(kind))
}

fn alerting(name: &str, tenant: &str, expr: &str, labelled: bool) -> Value {
    let labels = if labelled {
        json!({(PICK.0): PICK.1})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
        "metadata": {"name": name, "labels": labels},
        "spec": {"tenantID": tenant, "groups": [{"name": name, "rules": [
            {"alert": "HighErrors", "expr": expr, "for": "5m", "labels": {"severity": "warning"},
             "annotations": {"summary": "{{ $labels.app }} logs errors"}}]}]},
    })
}

async fn create(env: &Env, kind: &str, ns: &str, body: &Value) -> Result<DynamicObject> {
    Ok(api(env, kind, ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(body.clone())?,
        )
        .await?)
}

/// The data of a ConfigMap of the stack's namespace, or `None` while it does not exist.
async fn config_map(
    env: &Env,
    name: &str,
) -> Result<Option<std::collections::BTreeMap<String, String>>> {
    Ok(Api::<ConfigMap>::namespaced(env.admin.clone(), NS)
        .get_opt(name)
        .await?
        .map(|cm| cm.data.unwrap_or_default()))
}

fn file_key(obj: &DynamicObject) -> String {
    format!(
        "{}-{}-{}.yaml",
        obj.namespace().unwrap_or_default(),
        obj.name_any(),
        obj.uid().unwrap_or_default()
    )
}

/// Waits until `obj`'s file is (or is no longer) in ConfigMap `cm`; returns how long.
async fn wait_file(env: &Env, cm: &str, key: &str, present: bool) -> Result<Duration> {
    let t = Instant::now();
    eventually(
        &format!("{key} {} {cm}", if present { "in" } else { "out of" }),
        WAIT,
        || async {
            let has = config_map(env, cm)
                .await?
                .is_some_and(|d| d.contains_key(key));
            Ok((has == present).then_some(()))
        },
    )
    .await?;
    Ok(t.elapsed())
}

/// The `Ready` condition of a rule object: (status, reason, message).
async fn ready(
    env: &Env,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Option<(String, String, String)>> {
    let obj = api(env, kind, ns).get(name).await?;
    Ok(obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        }))
}

async fn wait_ready(
    env: &Env,
    kind: &str,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<String> {
    eventually(
        &format!("{kind} {ns}/{name} Ready={status} {reason}"),
        WAIT,
        || async {
            Ok(ready(env, kind, ns, name)
                .await?
                .filter(|(s, r, _)| s == status && r == reason)
                .map(|(_, _, m)| m))
        },
    )
    .await
}

async fn ruler_generation(env: &Env) -> Result<Option<i64>> {
    Ok(Api::<StatefulSet>::namespaced(env.admin.clone(), NS)
        .get(&format!("{STACK}-ruler"))
        .await?
        .metadata
        .generation)
}

async fn label_namespace(env: &Env, ns: &str, labels: Value) -> Result<()> {
    Api::<Namespace>::all(env.admin.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": labels}})),
        )
        .await?;
    Ok(())
}

pub async fn rules_are_loaded_per_tenant_reported_and_removed(env: &mut Env) -> Result<()> {
    for ns in [NS, TEAM_NS, OTHER_NS] {
        namespace(env, ns).await?;
    }
    label_namespace(env, TEAM_NS, json!({"logging": "enabled"})).await?;
    let mut body = stack_json(STACK, "1x.demo", Value::Null);
    body["spec"]["rules"] = json!({
        "enabled": true,
        "selector": {"matchLabels": {(PICK.0): PICK.1}},
        "namespaceSelector": {"matchLabels": {"logging": "enabled"}},
        // The team's namespace may read the audit tenant, and no other.
        "allowedTenants": [{"namespaces": [TEAM_NS], "tenants": ["audit"]}],
    });
    create_stack(env, NS, body).await?;
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    let app_cm = format!("{STACK}-rules-application-0");
    let audit_cm = format!("{STACK}-rules-audit-0");
    let expr = r#"sum by (app) (rate({app=~".+"} |= "error" [5m])) > 1"#;

    // Picked in the stack's namespace and through the namespace selector.
    let errors = create(
        env,
        "AlertingRule",
        NS,
        &alerting("errors", "application", expr, true),
    )
    .await?;
    let took = wait_file(env, &app_cm, &file_key(&errors), true).await?;
    println!("    an AlertingRule reached its tenant's rule file {took:.1?} after it was created");
    let recording = json!({
        "apiVersion": "loki.grafana.com/v1", "kind": "RecordingRule",
        "metadata": {"name": "rates", "labels": {(PICK.0): PICK.1}},
        "spec": {"tenantID": "audit", "groups": [{"name": "rates", "interval": "2m", "rules": [
            {"record": "app:lines:rate5m", "expr": r#"sum by (app) (rate({app=~".+"}[5m]))"#}]}]},
    });
    let rates = create(env, "RecordingRule", TEAM_NS, &recording).await?;
    let took = wait_file(env, &audit_cm, &file_key(&rates), true).await?;
    println!("    a RecordingRule of another namespace reached its rule file {took:.1?} after it was created");
    let data = config_map(env, &app_cm).await?.context("rules ConfigMap")?;
    let file: Value = serde_yaml_ng::from_str(&data[&file_key(&errors)])?;
    let rule = &file["groups"][0]["rules"][0];
    ensure!(
        rule["labels"]["tenantId"] == "application" && rule["expr"] == expr,
        "rule file: {file}"
    );
    ensure!(
        rule["annotations"]["summary"] == "{{ $labels.app }} logs errors",
        "a template in an annotation must reach the file as written: {file}"
    );
    let msg = wait_ready(env, "AlertingRule", NS, "errors", "True", "Selected").await?;
    ensure!(msg.contains(&format!("LokiStack {NS}/{STACK}")), "{msg}");
    wait_ready(env, "RecordingRule", TEAM_NS, "rates", "True", "Selected").await?;

    // Picked, but for a tenant the stack's owner did not grant the team's namespace:
    // never loaded, and named in its status and the stack's.
    let foreign = create(
        env,
        "AlertingRule",
        TEAM_NS,
        &alerting("foreign", "application", expr, true),
    )
    .await?;
    let msg = wait_ready(
        env,
        "AlertingRule",
        TEAM_NS,
        "foreign",
        "False",
        "InvalidRule",
    )
    .await?;
    ensure!(
        msg.contains("tenant \"application\" is not granted")
            && msg.contains("spec.rules.allowedTenants"),
        "{msg}"
    );
    eventually("the stack names the refused rule", WAIT, || async {
        let s = get_stack(env, NS, STACK).await?;
        Ok(condition(&s, "Warning")
            .filter(|c| {
                c.message
                    .contains(&format!("AlertingRule {TEAM_NS}/foreign"))
            })
            .map(|_| ()))
    })
    .await?;
    ensure!(
        !config_map(env, &app_cm)
            .await?
            .unwrap_or_default()
            .contains_key(&file_key(&foreign)),
        "a rule of an ungranted tenant was loaded"
    );
    api(env, "AlertingRule", TEAM_NS)
        .delete("foreign", &DeleteParams::default())
        .await?;

    // The ruler mounts each tenant's directory; the config reads them from there.
    let sts = Api::<StatefulSet>::namespaced(env.admin.clone(), NS)
        .get(&format!("{STACK}-ruler"))
        .await?;
    let pod = sts
        .spec
        .context("spec")?
        .template
        .spec
        .context("pod spec")?;
    let mounts: Vec<String> = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect();
    for dir in ["/tmp/rules/application", "/tmp/rules/audit"] {
        ensure!(
            mounts.iter().any(|m| m == dir),
            "{dir} not mounted: {mounts:?}"
        );
    }
    let config = config_map(env, &format!("{STACK}-config"))
        .await?
        .context("config")?;
    ensure!(
        config["config.yaml"].contains("backend: local"),
        "the ruler does not read rule files"
    );

    // Not picked: a rule in a namespace the selector does not match, and an unlabelled
    // rule in the stack's namespace. Neither is loaded, neither is written to.
    let elsewhere = create(
        env,
        "AlertingRule",
        OTHER_NS,
        &alerting("elsewhere", "application", expr, true),
    )
    .await?;
    let unlabelled = create(
        env,
        "AlertingRule",
        NS,
        &alerting("unlabelled", "application", expr, false),
    )
    .await?;

    // Invalid: refused at admission where the schema can tell (every server enforces
    // patterns), otherwise left out and named.
    let mut bad_interval = alerting("bad-interval", "application", expr, true);
    bad_interval["spec"]["groups"][0]["interval"] = json!("1 minute");
    let refused = create(env, "AlertingRule", NS, &bad_interval).await;
    let refusal = format!(
        "{:#}",
        refused
            .err()
            .context("an interval of \"1 minute\" was accepted")?
    );
    ensure!(
        loki_zone_operator_tests::admission::names_field(&refusal, "spec.groups[0].interval"),
        "the refusal does not name the field: {refusal}"
    );
    let log_query = create(
        env,
        "AlertingRule",
        NS,
        &alerting("log-query", "application", r#"{app="x"} |= "error""#, true),
    )
    .await?;
    let msg = wait_ready(env, "AlertingRule", NS, "log-query", "False", "InvalidRule").await?;
    ensure!(
        msg.contains("spec.groups[0].rules[0].expr") && msg.contains("log query"),
        "{msg}"
    );
    let s = eventually("the stack's RulesNotLoaded warning", WAIT, || async {
        let s = get_stack(env, NS, STACK).await?;
        Ok(condition(&s, "Warning")
            .filter(|c| {
                c.status == "True" && c.message.contains(&format!("AlertingRule {NS}/log-query"))
            })
            .map(|c| c.message.clone()))
    })
    .await?;
    ensure!(s.contains("spec.groups[0].rules[0].expr"), "{s}");
    let data = config_map(env, &app_cm).await?.context("rules ConfigMap")?;
    ensure!(
        !data.contains_key(&file_key(&log_query)),
        "an invalid rule was loaded"
    );
    for (obj, what) in [
        (&elsewhere, "a rule in an unselected namespace"),
        (&unlabelled, "an unlabelled rule"),
    ] {
        ensure!(!data.contains_key(&file_key(obj)), "{what} was loaded");
        ensure!(
            ready(
                env,
                "AlertingRule",
                &obj.namespace().unwrap_or_default(),
                &obj.name_any()
            )
            .await?
            .is_none(),
            "{what} was written to"
        );
    }

    // A rule added and one changed for a tenant with rules already: files only.
    let generation = ruler_generation(env).await?;
    let second = create(
        env,
        "AlertingRule",
        NS,
        &alerting("second", "application", expr, true),
    )
    .await?;
    wait_file(env, &app_cm, &file_key(&second), true).await?;
    api(env, "AlertingRule", NS)
        .patch("errors", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"groups": [{"name": "errors", "rules": [{"alert": "HighErrors", "expr": expr.replace("> 1", "> 5")}]}]}})))
        .await?;
    eventually("the changed rule in its file", WAIT, || async {
        let d = config_map(env, &app_cm).await?.unwrap_or_default();
        Ok(d.get(&file_key(&errors))
            .is_some_and(|f| f.contains("> 5"))
            .then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        ruler_generation(env).await? == generation,
        "a rule change of a known tenant changed the ruler's pods"
    );

    // Deleted: its file goes; the tenant's last rule deleted: its ConfigMap and volume go.
    api(env, "AlertingRule", NS)
        .delete("second", &DeleteParams::default())
        .await?;
    wait_file(env, &app_cm, &file_key(&second), false).await?;
    api(env, "RecordingRule", TEAM_NS)
        .delete("rates", &DeleteParams::default())
        .await?;
    eventually("the audit tenant's ConfigMap removed", WAIT, || async {
        Ok(config_map(env, &audit_cm).await?.is_none().then_some(()))
    })
    .await?;
    // Unselected (its label removed): its file goes, and its status says so.
    api(env, "AlertingRule", NS)
        .patch(
            "errors",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {(PICK.0): null}}})),
        )
        .await?;
    wait_file(env, &app_cm, &file_key(&errors), false).await?;
    wait_ready(env, "AlertingRule", NS, "errors", "False", "NotSelected").await?;

    // The RulerConfig of the stack's name reaches Loki's ruler block; a wrong one holds
    // the stack back, naming the field, until it is fixed.
    let rc = json!({
        "apiVersion": "loki.grafana.com/v1", "kind": "RulerConfig", "metadata": {"name": STACK},
        "spec": {"evaluationInterval": "30s", "alertmanager": {"endpoints": ["http://alertmanager.monitoring.svc:9093"],
            "relabelConfigs": [{"sourceLabels": ["app"], "targetLabel": "service", "replacement": "$1"}]}},
    });
    create(env, "RulerConfig", NS, &rc).await?;
    eventually("the RulerConfig in config.yaml", WAIT, || async {
        let c = config_map(env, &format!("{STACK}-config"))
            .await?
            .unwrap_or_default();
        let text = c.get("config.yaml").cloned().unwrap_or_default();
        Ok(
            (text.contains("alertmanager_url: http://alertmanager.monitoring.svc:9093")
                && text.contains("replacement: $$1")
                && text.contains("evaluation_interval: 30s"))
            .then_some(()),
        )
    })
    .await?;
    wait_ready(env, "RulerConfig", NS, STACK, "True", "Selected").await?;
    api(env, "RulerConfig", NS)
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"alertmanager": {"endpoints": ["alertmanager:9093"]}}})),
        )
        .await?;
    let s = wait_condition(env, NS, STACK, "Degraded", Some("InvalidRulerConfig")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(msg.contains("spec.alertmanager.endpoints[0]"), "{msg}");
    wait_ready(env, "RulerConfig", NS, STACK, "False", "InvalidRule").await?;
    let config = config_map(env, &format!("{STACK}-config"))
        .await?
        .context("config")?;
    ensure!(
        config["config.yaml"].contains("alertmanager_url: http://alertmanager.monitoring.svc:9093"),
        "a held-back stack changed its ruler's settings"
    );
    api(env, "RulerConfig", NS)
        .patch(STACK, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"alertmanager": {"endpoints": ["http://am.monitoring.svc:9093"]}}})))
        .await?;
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    eventually("the fixed RulerConfig applied", WAIT, || async {
        let c = config_map(env, &format!("{STACK}-config"))
            .await?
            .unwrap_or_default();
        Ok(c.get("config.yaml")
            .is_some_and(|t| t.contains("http://am.monitoring.svc:9093"))
            .then_some(()))
    })
    .await?;
    Ok(())
}

/// Rule objects, which anyone who may write them in a picked namespace controls, never
/// hold back the stack: a rule of a 240-character name (whose Go-style file key,
/// `<namespace>-<name>-<uid>.yaml`, is longer than a ConfigMap key may be) loads under a
/// shortened key, and a rule of 1 MB (more than one ConfigMap holds) is left out and
/// named; with both there, a spec change still reaches the workloads. Before, either
/// made the tenant's rules ConfigMap one the server refused, in the first apply wave,
/// and nothing after it was applied again.
pub async fn rule_objects_never_hold_back_the_workloads(env: &mut Env) -> Result<()> {
    let app_cm = format!("{STACK}-rules-application-0");
    let expr = r#"sum by (app) (rate({app=~".+"} |= "error" [5m])) > 1"#;
    let long_name = "r".repeat(240);
    let long = create(
        env,
        "AlertingRule",
        NS,
        &alerting(&long_name, "application", expr, true),
    )
    .await?;
    let mut huge = alerting("huge", "application", expr, true);
    huge["spec"]["groups"][0]["rules"][0]["annotations"]["runbook"] = json!("x".repeat(1_000_000));
    create(env, "AlertingRule", NS, &huge).await?;
    let key = loki_zone_operator::ruler::names::rule_file_key(
        NS,
        &long_name,
        &long.uid().unwrap_or_default(),
    );
    ensure!(key.len() <= 253, "{}", key.len());
    wait_file(env, &app_cm, &key, true).await?;
    let msg = wait_ready(env, "AlertingRule", NS, "huge", "False", "InvalidRule").await?;
    ensure!(msg.contains("split its groups"), "{msg}");

    Api::<loki_zone_operator::model::api::LokiStack>::namespaced(env.admin.clone(), NS)
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"querier": {"replicas": 2}}}})),
        )
        .await?;
    eventually(
        "the spec change rolled out beside the two rules",
        WAIT,
        || async {
            let d =
                Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(env.admin.clone(), NS)
                    .get(&format!("{STACK}-querier"))
                    .await?;
            Ok((d.spec.and_then(|s| s.replicas) == Some(2)).then_some(()))
        },
    )
    .await?;
    let s = get_stack(env, NS, STACK).await?;
    ensure!(
        condition(&s, "Degraded").is_none_or(|c| c.status == "False"),
        "the stack is Degraded: {:?}",
        condition(&s, "Degraded")
    );
    for name in [long_name.as_str(), "huge"] {
        api(env, "AlertingRule", NS)
            .delete(name, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// `spec.networkPolicies.ruleSet: RestrictIngressEgress` applies the stack's
/// NetworkPolicies (the ruler's egress to its RulerConfig's Alertmanager among them);
/// `None` removes them. Whether they are enforced is the CNI's business: the test
/// cluster has none that enforces them, so what is checked is what the API server holds.
pub async fn network_policies_are_applied_and_removed(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let stacks: Api<loki_zone_operator::model::api::LokiStack> =
        Api::namespaced(env.admin.clone(), NS);
    let policies: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), NS);
    stacks
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"networkPolicies": {"ruleSet": "RestrictIngressEgress"}}}),
            ),
        )
        .await?;
    let want = [
        "default-deny",
        "loki-allow",
        "loki-allow-bucket-egress",
        "loki-allow-clients",
        "loki-allow-operator",
        "ruler-allow-alert-egress",
    ]
    .map(|p| format!("{STACK}-{p}"));
    let t = Instant::now();
    let got = eventually("the stack's NetworkPolicies", WAIT, || async {
        let names: Vec<String> = policies
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        Ok(want.iter().all(|w| names.contains(w)).then_some(names))
    })
    .await?;
    println!(
        "    {} NetworkPolicies applied {:.1?} after the edit",
        got.len(),
        t.elapsed()
    );
    let deny = policies.get(&format!("{STACK}-default-deny")).await?;
    let spec = serde_json::to_value(deny.spec.context("spec")?)?;
    ensure!(
        spec["policyTypes"] == json!(["Ingress", "Egress"]) && spec.get("ingress").is_none(),
        "{spec}"
    );
    ensure!(
        deny.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "LokiStack" && o.controller == Some(true)),
        "not owned by the stack"
    );
    let egress = serde_json::to_value(
        policies
            .get(&format!("{STACK}-ruler-allow-alert-egress"))
            .await?
            .spec,
    )?;
    ensure!(
        egress["egress"][0]["ports"] == json!([{"port": 9093, "protocol": "TCP"}]),
        "{egress}"
    );
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;

    stacks
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"networkPolicies": {"ruleSet": "None"}}})),
        )
        .await?;
    eventually("the NetworkPolicies removed", WAIT, || async {
        Ok(policies
            .list(&Default::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    Ok(())
}
