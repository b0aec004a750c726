//! The ruler's objects: AlertingRules, RecordingRules and RulerConfigs in the scope's
//! namespaces, and the labels of every namespace (for `spec.rules.namespaceSelector`;
//! in the namespaced mode it picks among the watched namespaces, whose rules alone are
//! read).
//!
//! Like LokiStacks, the rule kinds are cached untyped and decoded one by one, so a stored
//! object that does not decode is reported on its own and never stops the others. A kind
//! whose CRD the server does not serve is not watched at all (an install that predates
//! it); stacks that would pick its objects say so in a Warning.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::caches::index;
use crate::caches::scope::{self, Scope};
use crate::caches::stacks::{self, stack_ref};
use crate::caches::taps::Taps;
use crate::model::names;
use crate::ruler::names as rulernames;

/// One of the ruler's kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    AlertingRule,
    RecordingRule,
    RulerConfig,
}

impl RuleKind {
    pub const ALL: [RuleKind; 3] = [
        RuleKind::AlertingRule,
        RuleKind::RecordingRule,
        RuleKind::RulerConfig,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            RuleKind::AlertingRule => rulernames::KIND_ALERTING_RULE,
            RuleKind::RecordingRule => rulernames::KIND_RECORDING_RULE,
            RuleKind::RulerConfig => rulernames::KIND_RULER_CONFIG,
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            RuleKind::AlertingRule => "alertingrules",
            RuleKind::RecordingRule => "recordingrules",
            RuleKind::RulerConfig => "rulerconfigs",
        }
    }

    pub fn crd_name(self) -> &'static str {
        match self {
            RuleKind::AlertingRule => rulernames::CRD_ALERTING_RULES,
            RuleKind::RecordingRule => rulernames::CRD_RECORDING_RULES,
            RuleKind::RulerConfig => rulernames::CRD_RULER_CONFIGS,
        }
    }

    pub fn resource(self) -> ApiResource {
        let gvk = GroupVersionKind::gvk(names::GROUP, names::VERSION, self.kind());
        ApiResource::from_gvk_with_plural(&gvk, self.plural())
    }
}

/// The rule kinds the API server serves.
pub async fn served(client: &Client) -> Vec<RuleKind> {
    let gv = format!("{}/{}", names::GROUP, names::VERSION);
    match client.list_api_group_resources(&gv).await {
        Ok(list) => {
            let served: Vec<RuleKind> = RuleKind::ALL
                .into_iter()
                .filter(|k| list.resources.iter().any(|r| r.name == k.plural()))
                .collect();
            for k in RuleKind::ALL.iter().filter(|k| !served.contains(k)) {
                warn!(crd = k.crd_name(), "the CRD is not installed: {} objects are not read until it is and the operator restarts (make deploy installs every CRD)", k.kind());
            }
            served
        }
        Err(e) => {
            warn!(error = %e, "cannot list the resources of {gv}; the ruler's kinds are not read");
            Vec::new()
        }
    }
}

/// The ruler's caches. A kind the server does not serve has no store.
#[derive(Clone, Default)]
pub struct RuleCaches {
    pub stores: BTreeMap<RuleKind, Store<DynamicObject>>,
    /// Namespace labels, metadata only; `None` when no rule kind is served.
    pub namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
}

impl RuleCaches {
    pub fn store(&self, kind: RuleKind) -> Option<&Store<DynamicObject>> {
        self.stores.get(&kind)
    }

    pub fn unserved(&self) -> Vec<RuleKind> {
        RuleKind::ALL
            .into_iter()
            .filter(|k| !self.stores.contains_key(k))
            .collect()
    }

    /// The labels of a namespace; `None` when namespaces are not read or it is gone.
    pub fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        let store = self.namespaces.as_ref()?;
        let ns = store.get(&ObjectRef::new(namespace))?;
        Some(ns.labels().clone())
    }
}

/// A stored object of a rule kind, decoded; the field that does not decode otherwise.
pub fn decode<T: DeserializeOwned>(obj: &DynamicObject) -> Result<T, stacks::DecodeError> {
    let value = serde_json::to_value(obj).map_err(|e| stacks::DecodeError {
        path: ".".into(),
        message: e.to_string(),
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| stacks::DecodeError {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Whether a stack may pick rules of `namespace`: rules enabled, and the rule in its
/// namespace or a namespace selector set. Cheap reads of the stored JSON, for routing.
fn may_pick(stack: &DynamicObject, namespace: &str) -> bool {
    let rules = stack.data.pointer("/spec/rules");
    let enabled = rules
        .and_then(|r| r.get("enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    enabled
        && (stack.metadata.namespace.as_deref() == Some(namespace)
            || rules.and_then(|r| r.get("namespaceSelector")).is_some())
}

/// Drops what is never read: managed fields and the last-applied annotation.
fn strip(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Starts the caches of the served kinds and of namespaces.
/// A change re-runs the stacks that may pick the object, and the rules' status.
pub fn start(
    client: &Client,
    scope: &Scope,
    served: &[RuleKind],
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (RuleCaches, Vec<JoinHandle<()>>) {
    let mut caches = RuleCaches::default();
    let mut tasks = Vec::new();
    for kind in served {
        let (store, task) = watch_kind(client, scope, *kind, stacks.clone(), taps);
        caches.stores.insert(*kind, store);
        tasks.push(task);
    }
    if !served.is_empty() {
        let (store, task) = watch_namespaces(client, stacks, taps);
        caches.namespaces = Some(store);
        tasks.push(task);
    }
    info!(kinds = ?served, namespaces = caches.namespaces.is_some(), "watching the ruler's objects");
    (caches, tasks)
}

fn watch_kind(
    client: &Client,
    scope: &Scope,
    kind: RuleKind,
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let resource = kind.resource();
    let watches = scope.watches(
        || Api::all_with(client.clone(), &resource),
        |ns| Api::namespaced_with(client.clone(), ns, &resource),
    );
    let (store, _, events) = scope::reflect(
        watches,
        watcher::Config::default(),
        strip,
        resource,
        index::unindexed,
    );
    let (stack_tx, rules_tx) = (taps.stacks.clone(), taps.rules.clone());
    let task = tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            let obj = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => o,
                Ok(watcher::Event::InitDone) => {
                    rules_tx.send(());
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    warn!(kind = kind.kind(), error = %e, "watch error; retrying with backoff");
                    continue;
                }
            };
            rules_tx.send(());
            let ns = obj.namespace().unwrap_or_default();
            if !stack_tx.is_attached() {
                continue;
            }
            match kind {
                RuleKind::RulerConfig => stack_tx.send(stack_ref(&ns, &obj.name_any())),
                _ => {
                    for s in stacks.state().iter().filter(|s| may_pick(s, &ns)) {
                        stack_tx.send(stack_ref(&s.namespace().unwrap_or_default(), &s.name_any()));
                    }
                }
            }
        }
    });
    (store, task)
}

/// Namespaces, metadata only: a change of labels re-runs the stacks with a namespace
/// selector, and the rules' status.
fn watch_namespaces(
    client: &Client,
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (Store<PartialObjectMeta<Namespace>>, JoinHandle<()>) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let (store, _, events) = scope::reflect(
        vec![(None, api)],
        watcher::Config::default(),
        |m: &mut PartialObjectMeta<Namespace>| {
            m.metadata.managed_fields = None;
            m.metadata.annotations = None;
        },
        (),
        index::unindexed,
    );
    let (stack_tx, rules_tx) = (taps.stacks.clone(), taps.rules.clone());
    let task = tokio::spawn(async move {
        // A fingerprint of each namespace's labels, to tell a label change from any
        // other update; the labels themselves are in the store.
        let mut seen: HashMap<String, u64> = HashMap::new();
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            let (m, deleted) = match ev {
                Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => (m, false),
                Ok(watcher::Event::Delete(m)) => (m, true),
                Ok(_) => continue,
                Err(e) => {
                    warn!(kind = "Namespace", error = %e, "watch error; retrying with backoff");
                    continue;
                }
            };
            let name = m.name_any();
            let changed = if deleted {
                seen.remove(&name).is_some()
            } else {
                let print = crate::caches::keep::labels_fingerprint(m.labels());
                seen.insert(name, print) != Some(print)
            };
            if !changed {
                continue;
            }
            rules_tx.send(());
            if stack_tx.is_attached() {
                let selecting = stacks.state();
                for s in selecting
                    .iter()
                    .filter(|s| s.data.pointer("/spec/rules/namespaceSelector").is_some())
                {
                    stack_tx.send(stack_ref(&s.namespace().unwrap_or_default(), &s.name_any()));
                }
            }
        }
    });
    (store, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_stacks_with_rules_enabled_are_rerun_and_beyond_their_namespace_only_with_a_selector() {
        let stack = |rules: Value| {
            let mut s = DynamicObject::new("s", &stacks::resource()).within("ns");
            s.data = json!({"spec": {"rules": rules}});
            s
        };
        assert!(may_pick(&stack(json!({"enabled": true})), "ns"));
        assert!(!may_pick(&stack(json!({"enabled": true})), "other"));
        assert!(may_pick(
            &stack(json!({"enabled": true, "namespaceSelector": {}})),
            "other"
        ));
        assert!(!may_pick(&stack(json!({"enabled": false})), "ns"));
    }

    #[test]
    fn a_rule_that_does_not_decode_names_its_field() {
        let mut obj = DynamicObject::new("r", &RuleKind::AlertingRule.resource()).within("ns");
        obj.data =
            json!({"spec": {"tenantID": "t", "groups": [{"name": "g", "rules": [{"expr": 5}]}]}});
        let e = decode::<crate::ruler::api::AlertingRule>(&obj).expect_err("expr is a number");
        assert_eq!(e.path, "spec.groups[0].rules[0].expr");
    }
}
