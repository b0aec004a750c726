//! Plan, the second step of a reconcile: a pure function of the stack and its snapshot
//! that decides what the cluster should hold.
//!
//! A Degraded finding (invalid spec, storage Secret, zone check) holds the new spec back:
//! nothing is applied, nothing is removed or scaled down, `observedGeneration` stays
//! behind, and the next trigger (a node or Secret change) plans again by itself. What runs
//! keeps running on the last good spec.

use std::collections::BTreeSet;

use crate::api::LokiStack;
use crate::conditions::Reason;
use crate::controller::observe::Snapshot;
use crate::defaults::{effective, EffectiveStack};
use crate::kinds::ChildKind;
use crate::render::{render, Child, RenderError, ServerCapabilities, Settings};
use crate::storage::{check_secret, StorageSecretError};
use crate::validate::{validate_stack, InvalidSpec};
use crate::zones::{self, ZoneCheck};

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("rendering the stack's objects failed: {0}")]
    Render(#[from] RenderError),
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub invalid: Option<InvalidSpec>,
    pub secret: Option<StorageSecretError>,
    /// `None` for a stack that is not zone-aware.
    pub zone: Option<ZoneCheck>,
}

impl Findings {
    /// The Degraded reason and message when the spec must be held back; the first finding
    /// in this order wins, since fixing it may change the others.
    pub fn degraded(&self) -> Option<(Reason, String)> {
        if let Some(e) = &self.invalid {
            return Some((Reason::InvalidSpec, format!("{e}. Fix the LokiStack spec")));
        }
        if let Some(e) = &self.secret {
            return Some((e.reason(), e.to_string()));
        }
        self.zone
            .as_ref()
            .filter(|z| z.verdict.is_degraded())
            .map(|z| (z.verdict.reason(), z.message()))
    }
}

#[derive(Debug)]
pub enum Action {
    /// Leave every object as it is (see the module comment).
    HoldBack,
    /// Apply `children` in order, then remove `stale`: objects this stack created that it
    /// no longer renders (a disabled ruler). PersistentVolumeClaims are never in it.
    Apply {
        children: Vec<Child>,
        stale: Vec<(ChildKind, String)>,
    },
}

#[derive(Debug)]
pub struct Plan {
    pub eff: EffectiveStack,
    pub findings: Findings,
    pub action: Action,
}

pub fn plan(
    stack: &LokiStack,
    snapshot: &Snapshot,
    settings: &Settings,
    caps: &ServerCapabilities,
) -> Result<Plan, PlanError> {
    let eff = effective(&stack.spec);
    let findings = Findings {
        invalid: validate_stack(stack).err(),
        secret: check_secret(
            stack.spec.storage.secret.type_,
            &stack.spec.storage.secret.name,
            &snapshot.namespace,
            snapshot.secret.as_deref(),
        )
        .err(),
        zone: eff
            .zone_aware()
            .then(|| zones::check(&eff, snapshot.nodes.iter().map(AsRef::as_ref))),
    };
    let action = if findings.degraded().is_some() {
        Action::HoldBack
    } else {
        let children = render(stack, &eff, settings, caps)?;
        let stale = stale(snapshot, &children);
        Action::Apply { children, stale }
    };
    Ok(Plan {
        eff,
        findings,
        action,
    })
}

/// Children in the snapshot that the plan no longer renders.
fn stale(snapshot: &Snapshot, children: &[Child]) -> Vec<(ChildKind, String)> {
    let wanted: BTreeSet<(ChildKind, &str)> = children
        .iter()
        .map(|c| (ChildKind::of(c), c.name()))
        .collect();
    snapshot
        .children
        .keys()
        .filter(|(k, n)| !wanted.contains(&(*k, n.as_str())))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LokiStackSize;
    use crate::testing::{node, stack, stack_spec, zoned_spec, ZONE};
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    use std::sync::Arc;

    fn secret_with(keys: &[&str]) -> Arc<Secret> {
        Arc::new(Secret {
            data: Some(
                keys.iter()
                    .map(|k| (k.to_string(), ByteString(vec![1])))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    fn snapshot_for(s: &LokiStack) -> Snapshot {
        let keys = crate::storage::required_keys(s.spec.storage.secret.type_);
        Snapshot {
            namespace: "ns".into(),
            name: s.metadata.name.clone().unwrap_or_default(),
            secret: Some(secret_with(&keys)),
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_stack_is_applied_and_a_disabled_ruler_is_stale() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        snap.children
            .insert((ChildKind::StatefulSet, "s-ruler".into()), "g1".into());
        snap.children
            .insert((ChildKind::StatefulSet, "s-ingester".into()), "g1".into());
        let p = plan(&s, &snap, &Settings::default(), &ServerCapabilities::MODERN).expect("plan");
        let Action::Apply { children, stale } = p.action else {
            panic!("held back: {:?}", p.findings.degraded())
        };
        assert!(children.iter().any(|c| c.name() == "s-ingester"));
        assert_eq!(stale, vec![(ChildKind::StatefulSet, "s-ruler".to_string())]);
    }

    #[test]
    fn too_few_zones_hold_the_spec_back() {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let mut snap = snapshot_for(&s);
        snap.nodes = ["a", "b"]
            .iter()
            .map(|z| Arc::new(node(z, &[(ZONE, z)])))
            .collect();
        let p = plan(&s, &snap, &Settings::default(), &ServerCapabilities::MODERN).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        assert_eq!(
            p.findings.degraded().map(|d| d.0),
            Some(Reason::ZonesInsufficient)
        );
    }

    #[test]
    fn a_missing_secret_holds_the_spec_back() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        snap.secret = None;
        let p = plan(&s, &snap, &Settings::default(), &ServerCapabilities::MODERN).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        assert_eq!(
            p.findings.degraded().map(|d| d.0),
            Some(Reason::MissingObjectStorageSecret)
        );
    }
}
