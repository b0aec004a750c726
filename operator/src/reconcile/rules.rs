//! The status of the ruler's objects, kept by the leader: after any change that can alter
//! it (a rule, a RulerConfig, a namespace's labels, a stack's `spec.rules`), every
//! AlertingRule, RecordingRule and RulerConfig in the caches is looked at once, and the
//! `Ready` condition of those whose verdict changed is written (`status/rules.rs`).
//!
//! A pass reads only the caches and is linear in rules times stacks with rules enabled;
//! changes within [`DEBOUNCE`] of each other make one pass, and an idle cluster makes
//! none.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::warn;

use crate::act::report::write_rule_status;
use crate::caches::reflectors::Caches;
use crate::caches::rules::{decode, RuleKind};
use crate::model::api::{ManagementState, RulesSpec};
use crate::observe::PickedRule;
use crate::plan::rules::check;
use crate::ruler::api::RulerConfig;
use crate::ruler::check::{check_ruler_config, selects};
use crate::status::rules::{conditions, Verdict};

/// Changes this close together make one pass.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// How soon a pass runs again when a write failed and no change comes.
pub const RETRY: Duration = Duration::from_secs(10);

/// A stack with rules enabled (and managed), as a pass sees it.
struct Picker {
    namespace: String,
    name: String,
    rules: RulesSpec,
}

/// Runs until the term ends (its task is aborted) or the tap is dropped.
pub async fn run(client: Client, caches: Caches, mut changes: UnboundedReceiver<()>) {
    loop {
        let written = pass(&client, &caches).await;
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

fn pickers(caches: &Caches) -> Vec<Picker> {
    caches
        .stacks
        .state()
        .iter()
        .filter_map(|s| {
            // An Unmanaged stack has nothing written for it, a stack being deleted
            // picks nothing any more.
            let unmanaged = s
                .data
                .pointer("/spec/managementState")
                .and_then(|m| serde_json::from_value(m.clone()).ok())
                == Some(ManagementState::Unmanaged);
            if unmanaged || s.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let rules: RulesSpec =
                serde_json::from_value(s.data.pointer("/spec/rules")?.clone()).ok()?;
            rules.enabled.then(|| Picker {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
                rules,
            })
        })
        .collect()
}

/// The verdict on one rule object.
fn rule_verdict(
    caches: &Caches,
    stacks: &[Picker],
    kind: RuleKind,
    obj: &DynamicObject,
) -> Verdict {
    let ns = obj.namespace().unwrap_or_default();
    let ns_labels = caches.rules.namespace_labels(&ns);
    let mut picked_by: Vec<String> = stacks
        .iter()
        .filter(|s| {
            selects(
                &s.rules,
                &s.namespace,
                &ns,
                obj.labels(),
                ns_labels.as_ref(),
            )
        })
        .map(|s| format!("{}/{}", s.namespace, s.name))
        .collect();
    picked_by.sort();
    let errors = if picked_by.is_empty() {
        Vec::new()
    } else {
        check(&PickedRule::from_object(kind, obj))
            .err()
            .unwrap_or_default()
    };
    Verdict {
        picked_by,
        errors,
        kind: kind.kind(),
    }
}

/// The verdict on a RulerConfig: picked by the stack of its name with rules enabled.
fn config_verdict(stacks: &[Picker], obj: &DynamicObject) -> Verdict {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let picked = stacks.iter().any(|s| s.namespace == ns && s.name == name);
    let errors = if picked {
        match decode::<RulerConfig>(obj) {
            Ok(c) => check_ruler_config(&c.spec)
                .iter()
                .map(ToString::to_string)
                .collect(),
            Err(e) => vec![format!("the stored object cannot be read: {e}")],
        }
    } else {
        Vec::new()
    };
    Verdict {
        picked_by: if picked {
            vec![format!("{ns}/{name}")]
        } else {
            Vec::new()
        },
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

/// One look at every object; false when a write failed.
async fn pass(client: &Client, caches: &Caches) -> bool {
    let mut all_written = true;
    let stacks = pickers(caches);
    let now = Timestamp::now();
    for (kind, store) in &caches.rules.stores {
        for obj in store.state() {
            let verdict = match kind {
                RuleKind::RulerConfig => config_verdict(&stacks, &obj),
                _ => rule_verdict(caches, &stacks, *kind, &obj),
            };
            let Some(new) = conditions(&verdict, &previous(&obj), obj.metadata.generation, now)
            else {
                continue;
            };
            let ns = obj.namespace().unwrap_or_default();
            if let Err(e) =
                write_rule_status(client, &kind.resource(), &ns, &obj.name_any(), &new).await
            {
                warn!(kind = kind.kind(), namespace = %ns, name = %obj.name_any(), error = %e, "cannot write the status; trying again");
                all_written = false;
            }
        }
    }
    all_written
}
