//! The status of the ruler's objects, kept by the leader: after any change that can alter
//! it (a rule, a RulerConfig, a namespace's labels, a stack's `spec.rules`, a body read),
//! every AlertingRule, RecordingRule and RulerConfig in the caches is looked at once, and
//! the `Ready` condition of those whose verdict changed is written (`status/rules.rs`).
//!
//! The caches hold the metadata of every object and the bodies of the picked ones only
//! (`caches/rule_bodies.rs`). A picked object is judged on its body once the body of its
//! current version is held (its arrival runs a pass). An object no stack picks needs no
//! body for its verdict, and is written to only if this operator marked it before
//! (its managed fields say so): such an object is read once, to compare its condition,
//! and not again until it changes.
//!
//! A pass reads only the caches (and those few objects) and is linear in rules times
//! stacks with rules enabled; changes within [`DEBOUNCE`] of each other make one pass,
//! and an idle cluster makes none.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::warn;

use crate::act::report::write_rule_status;
use crate::caches::reflectors::Caches;
use crate::caches::rule_bodies::{picked_by, pickers, read_body, BodyKey, Picker};
use crate::caches::rules::{decode, marked, RuleKind, RuleMeta};
use crate::observe::PickedRule;
use crate::plan::rules::check;
use crate::ruler::api::RulerConfig;
use crate::ruler::check::{check_ruler_config, tenant_refusal};
use crate::status::rules::{conditions, Verdict};
use crate::telemetry::metrics::Metrics;

/// Changes this close together make one pass.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// The status pass's name in the controller metrics.
pub const CONTROLLER: &str = "rule-status";

/// How soon a pass runs again when a write failed and no change comes.
pub const RETRY: Duration = Duration::from_secs(10);

/// Per object no stack picks that this operator marked, the resourceVersion at which a
/// pass found its condition right: not read again until it changes.
type Settled = HashMap<BodyKey, String>;

/// Runs until the term ends (its task is aborted) or the tap is dropped.
pub async fn run(
    client: Client,
    caches: Caches,
    metrics: Arc<Metrics>,
    mut changes: UnboundedReceiver<()>,
) {
    let mut settled = Settled::new();
    loop {
        let started = std::time::Instant::now();
        let written = {
            let _running = metrics.worker(CONTROLLER);
            pass(&client, &caches, &mut settled).await
        };
        metrics.reconciled(CONTROLLER, written, started.elapsed());
        let next = async {
            if written {
                changes.recv().await
            } else {
                tokio::time::timeout(RETRY, changes.recv())
                    .await
                    .unwrap_or(Some(()))
            }
        };
        if next.await.is_none() {
            return;
        }
        tokio::time::sleep(DEBOUNCE).await;
        while changes.try_recv().is_ok() {}
    }
}

fn named(stacks: Vec<(String, String)>) -> Vec<String> {
    stacks
        .into_iter()
        .map(|(ns, name)| format!("{ns}/{name}"))
        .collect()
}

/// The verdict on a picked AlertingRule or RecordingRule, from its body: its own errors,
/// else the stacks among `by` that do not grant its namespace its tenant.
fn rule_verdict(
    kind: RuleKind,
    stacks: &[Picker],
    by: &[(String, String)],
    rule: &PickedRule,
) -> Verdict {
    let errors = match check(rule) {
        Err(errors) => errors,
        Ok(file) => stacks
            .iter()
            .filter(|s| {
                by.iter()
                    .any(|(ns, name)| *ns == s.namespace && *name == s.name)
            })
            .filter_map(|s| {
                tenant_refusal(&s.rules, &s.namespace, &rule.namespace, &file.tenant)
                    .map(|why| format!("LokiStack {}/{}: {why}", s.namespace, s.name))
            })
            .collect(),
    };
    Verdict {
        picked_by: named(by.to_vec()),
        errors,
        kind: kind.kind(),
    }
}

/// The verdict on a picked RulerConfig (by the stack of its name), from its body.
fn config_verdict(picked_by: Vec<String>, body: &DynamicObject) -> Verdict {
    let errors = match decode::<RulerConfig>(body) {
        Ok(c) => check_ruler_config(&c.spec)
            .iter()
            .map(ToString::to_string)
            .collect(),
        Err(e) => vec![format!("the stored object cannot be read: {e}")],
    };
    Verdict {
        picked_by,
        errors,
        kind: RuleKind::RulerConfig.kind(),
    }
}

fn previous(obj: &DynamicObject) -> Vec<Condition> {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

/// One object's verdict, and its stored copy (for the conditions it has): from its body
/// if picked; read if it is not but was marked and has changed since a pass last found
/// it right; else nothing to decide now (`Ok(None)`).
async fn judge(
    client: &Client,
    caches: &Caches,
    stacks: &[Picker],
    kind: RuleKind,
    meta: &RuleMeta,
    settled: &Settled,
) -> Result<Option<(Verdict, Arc<DynamicObject>)>, kube::Error> {
    let ns = meta.namespace().unwrap_or_default();
    let by = picked_by(stacks, kind, &meta.metadata, || {
        caches.rules.namespace_labels(&ns)
    });
    if !by.is_empty() {
        // Not held yet (or of an older version): its arrival runs a pass.
        let Some(loaded) = caches.rules.bodies.current(kind, &meta.metadata) else {
            return Ok(None);
        };
        let verdict = match kind {
            RuleKind::RulerConfig => config_verdict(named(by), &loaded.body),
            _ => rule_verdict(kind, stacks, &by, &PickedRule::from_loaded(kind, &loaded)),
        };
        return Ok(Some((verdict, loaded.body)));
    }
    let key = BodyKey::of(kind, &meta.metadata);
    if !marked(&meta.metadata) || settled.get(&key) == meta.metadata.resource_version.as_ref() {
        return Ok(None);
    }
    let Some(obj) = read_body(client, &key).await? else {
        return Ok(None);
    };
    let verdict = Verdict {
        picked_by: Vec::new(),
        errors: Vec::new(),
        kind: kind.kind(),
    };
    Ok(Some((verdict, Arc::new(obj))))
}

/// One look at every object; false when a read or a write failed.
async fn pass(client: &Client, caches: &Caches, settled: &mut Settled) -> bool {
    let mut all_written = true;
    let stacks = pickers(&caches.stacks);
    let now = Timestamp::now();
    let mut present = HashSet::new();
    for (kind, store) in &caches.rules.stores {
        for meta in store.state() {
            let key = BodyKey::of(*kind, &meta.metadata);
            present.insert(key.clone());
            let (verdict, obj) = match judge(client, caches, &stacks, *kind, &meta, settled).await {
                Ok(Some(j)) => j,
                Ok(None) => continue,
                Err(e) => {
                    warn!(kind = kind.kind(), namespace = %key.namespace, name = %key.name, error = %e, "cannot read the object to compare its status; trying again");
                    all_written = false;
                    continue;
                }
            };
            let new = conditions(&verdict, &previous(&obj), obj.metadata.generation, now);
            let Some(new) = new else {
                // Found right, and picked by none: not read again until it changes.
                if let (true, Some(rv)) =
                    (verdict.picked_by.is_empty(), &obj.metadata.resource_version)
                {
                    settled.insert(key, rv.clone());
                }
                continue;
            };
            // What this write changes comes back as a new version: looked at again then.
            settled.remove(&key);
            if let Err(e) =
                write_rule_status(client, &kind.resource(), &key.namespace, &key.name, &new).await
            {
                warn!(kind = kind.kind(), namespace = %key.namespace, name = %key.name, error = %e, "cannot write the status; trying again");
                all_written = false;
            }
        }
    }
    settled.retain(|k, _| present.contains(k));
    all_written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caches::taps::Taps;
    use crate::testing::cluster::{key, FakeCluster};
    use crate::testing::rules::RuleFeeds;
    use serde_json::{json, Value};

    fn rule(name: &str, labels: Value, expr: &str) -> Value {
        json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"tenantID": "t", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]},
        })
    }

    /// A rule's status names each stack that picks it but does not grant its
    /// namespace its tenant, and what would grant it.
    #[test]
    fn a_rule_of_an_ungranted_tenant_is_refused_by_the_stack_that_picks_it() {
        let mut body: DynamicObject =
            serde_json::from_value(rule("r", json!({}), "sum(rate({a=\"b\"}[5m])) > 1"))
                .expect("rule");
        body.metadata.namespace = Some("team".into());
        let picker = |ns: &str, grants: Value| {
            Picker {
            namespace: ns.into(),
            name: "s".into(),
            rules: serde_json::from_value(json!({"enabled": true, "selector": {}, "namespaceSelector": {}, "allowedTenants": grants}))
                .expect("rules"),
        }
        };
        let stacks = [
            picker("ns", json!([])),
            picker("other", json!([{"namespaces": ["team"], "tenants": ["t"]}])),
        ];
        let by = [
            ("ns".to_string(), "s".to_string()),
            ("other".to_string(), "s".to_string()),
        ];
        let rule = PickedRule::from_object(RuleKind::AlertingRule, &body);
        let v = rule_verdict(RuleKind::AlertingRule, &stacks, &by, &rule);
        assert_eq!(v.picked_by, ["ns/s", "other/s"]);
        assert_eq!(v.errors.len(), 1, "{:?}", v.errors);
        assert!(
            v.errors[0].starts_with(
                "LokiStack ns/s: tenant \"t\" is not granted to the rules of namespace \"team\""
            ),
            "{:?}",
            v.errors
        );
        let v = rule_verdict(RuleKind::AlertingRule, &stacks[1..], &by[1..], &rule);
        assert!(v.errors.is_empty(), "{:?}", v.errors);
    }

    fn calls(fake: &FakeCluster) -> Vec<String> {
        fake.take_calls().iter().map(|c| c.line()).collect()
    }

    fn ready(fake: &FakeCluster, name: &str) -> Option<(String, String)> {
        let r = fake.get(&key(&RuleKind::AlertingRule.resource(), Some("ns"), name))?;
        let c = r["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        Some((
            c["status"].as_str()?.to_string(),
            c["reason"].as_str()?.to_string(),
        ))
    }

    /// The status pass on metadata and the bodies of picked objects: a picked rule is
    /// written once; a rule nobody picks and this operator never marked is never read,
    /// however large; one unselected after it was marked is read to be marked
    /// NotSelected, once more after that write, and then no more.
    #[tokio::test]
    async fn unpicked_rules_cost_no_read_and_idle_passes_no_request() {
        let fake = FakeCluster::new();
        let (mut feeds, rules) = RuleFeeds::new();
        let mut caches = fake.caches.clone();
        caches.rules = rules;
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "LokiStack",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"rules": {"enabled": true, "selector": {"matchLabels": {"pick": "yes"}}}},
        }));
        fake.put(rule(
            "picked",
            json!({"pick": "yes"}),
            "sum(rate({a=\"b\"}[5m])) > 1",
        ));
        fake.put(rule("big", json!({}), &"x".repeat(100_000)));
        let sync = |feeds: &mut RuleFeeds| {
            for name in ["picked", "big"] {
                feeds.sync(&fake, RuleKind::AlertingRule, "ns", name);
            }
        };
        sync(&mut feeds);
        let taps = Taps::default();
        let mut settled = Settled::new();

        // A body not read yet: nothing to judge it on.
        fake.take_calls();
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert!(calls(&fake).is_empty());

        assert!(
            caches
                .rules
                .read_bodies(&fake.client, &caches.stacks, &taps)
                .await
        );
        assert_eq!(calls(&fake), ["get ns/alertingrules/picked"]);
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert_eq!(calls(&fake), ["apply ns/alertingrules/picked/status"]);
        assert_eq!(
            ready(&fake, "picked"),
            Some(("True".into(), "Selected".into()))
        );
        assert_eq!(ready(&fake, "big"), None);

        // The write comes back through the watch, and the body is read again: then
        // nothing more to write, or to read, however often a pass runs.
        sync(&mut feeds);
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert!(
            caches
                .rules
                .read_bodies(&fake.client, &caches.stacks, &taps)
                .await
        );
        assert_eq!(calls(&fake), ["get ns/alertingrules/picked"]);
        for _ in 0..2 {
            assert!(pass(&fake.client, &caches, &mut settled).await);
            assert!(
                caches
                    .rules
                    .read_bodies(&fake.client, &caches.stacks, &taps)
                    .await
            );
            assert!(calls(&fake).is_empty());
        }

        // Unselected: its body goes; it is read once to be marked NotSelected.
        fake.edit(
            &key(&RuleKind::AlertingRule.resource(), Some("ns"), "picked"),
            |r| r["metadata"]["labels"] = json!({}),
        );
        sync(&mut feeds);
        assert!(
            caches
                .rules
                .read_bodies(&fake.client, &caches.stacks, &taps)
                .await
        );
        assert!(caches.rules.bodies.is_empty());
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert_eq!(
            calls(&fake),
            [
                "get ns/alertingrules/picked",
                "apply ns/alertingrules/picked/status"
            ]
        );
        assert_eq!(
            ready(&fake, "picked"),
            Some(("False".into(), "NotSelected".into()))
        );
        // Its new version is read once, found right, and not read again.
        sync(&mut feeds);
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert_eq!(calls(&fake), ["get ns/alertingrules/picked"]);
        assert!(pass(&fake.client, &caches, &mut settled).await);
        assert!(calls(&fake).is_empty());
        assert_eq!(ready(&fake, "big"), None, "never written to");
    }
}
