//! What the pod annotator does for one zone-aware pod, given its node.
//! Pure, so the annotator and the status computation agree and both are tested offline.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::checks::zones::{zone_of, ZoneLabelError};
use crate::model::names;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodZone {
    /// Not scheduled yet: nothing to do until `spec.nodeName` appears.
    Unscheduled,
    /// Scheduled, no zone yet: write this one.
    Annotate(String),
    /// Annotated, and the node still gives the same zone.
    Done,
    /// Annotated, but the node's labels now give another zone. The pod keeps its zone
    /// (Loki read it at start); the operator reports the drift.
    Drift { annotated: String, node: String },
    /// The node is gone: the pod will go with it; the work for this pod ends.
    NodeGone,
    /// The node lacks a topology label or has it empty: retried when the node changes.
    NodeLabel(ZoneLabelError),
    /// The pod does not say which keys to read (no zone-labels annotation).
    NoKeys,
}

/// The topology keys a pod's zone is made of, from its own annotation, so the annotator
/// needs nothing but the pod and its node.
pub fn pod_keys(pod: &Pod) -> Vec<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ZONE_LABELS))
        .map(|s| {
            s.split(names::ZONE_KEYS_SEPARATOR)
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The pod's topology keys that are not among `allowed` (its stack's): a pod may name any
/// node labels in its annotation, but only the stack's topology keys are ever copied
/// onto it, so no pod reads other node labels through the operator.
pub fn keys_not_allowed<'a>(pod: &'a Pod, allowed: &BTreeSet<String>) -> Vec<&'a str> {
    pod_keys(pod)
        .into_iter()
        .filter(|k| !allowed.contains(*k))
        .collect()
}

pub fn pod_zone_annotation(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ZONE))
        .map(String::as_str)
        .filter(|z| !z.is_empty())
}

pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

pub fn decide(pod: &Pod, node: Option<&Node>) -> PodZone {
    if node_name(pod).is_none() {
        return PodZone::Unscheduled;
    }
    let keys = pod_keys(pod);
    let Some(node) = node else {
        return PodZone::NodeGone;
    };
    if keys.is_empty() {
        return PodZone::NoKeys;
    }
    let current = zone_of(node.metadata.labels.as_ref(), keys.iter().copied());
    match (pod_zone_annotation(pod), current) {
        (Some(annotated), Ok(zone)) if annotated == zone => PodZone::Done,
        (Some(annotated), Ok(zone)) => PodZone::Drift {
            annotated: annotated.to_string(),
            node: zone,
        },
        // An annotated pod whose node lost a label keeps its zone; nothing to report
        // beyond the node check of the stack.
        (Some(_), Err(_)) => PodZone::Done,
        (None, Ok(zone)) => PodZone::Annotate(zone),
        (None, Err(e)) => PodZone::NodeLabel(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use crate::testing::{node, ZONE};

    const RACK: &str = "example.com/rack";

    fn pod(node: Option<&str>, keys: Option<&str>, zone: Option<&str>) -> Pod {
        let mut p = testing::pod("p");
        if let Some(n) = node {
            p = p.on(n);
        }
        if let Some(k) = keys {
            p = p.zone_keys(k);
        }
        if let Some(z) = zone {
            p = p.zone(z);
        }
        p.build()
    }

    #[test]
    fn decisions() {
        let n = node("n1", &[(ZONE, "a"), (RACK, "r1")]);
        let two = format!("{ZONE},{RACK}");
        assert_eq!(
            decide(&pod(None, Some(ZONE), None), Some(&n)),
            PodZone::Unscheduled
        );
        assert_eq!(
            decide(&pod(Some("n1"), Some(ZONE), None), Some(&n)),
            PodZone::Annotate("a".into())
        );
        assert_eq!(
            decide(&pod(Some("n1"), Some(&two), None), Some(&n)),
            PodZone::Annotate("a_r1".into())
        );
        assert_eq!(
            decide(&pod(Some("n1"), Some(ZONE), Some("a")), Some(&n)),
            PodZone::Done
        );
        assert_eq!(
            decide(&pod(Some("n1"), Some(ZONE), Some("old")), Some(&n)),
            PodZone::Drift {
                annotated: "old".into(),
                node: "a".into()
            }
        );
        assert_eq!(
            decide(&pod(Some("n1"), Some(ZONE), None), None),
            PodZone::NodeGone
        );
        assert_eq!(
            decide(&pod(Some("n1"), None, None), Some(&n)),
            PodZone::NoKeys
        );
        let bare = node("n1", &[(ZONE, "")]);
        assert_eq!(
            decide(&pod(Some("n1"), Some(ZONE), None), Some(&bare)),
            PodZone::NodeLabel(ZoneLabelError::Empty(ZONE.into()))
        );
        let none = node("n1", &[]);
        assert_eq!(
            decide(&pod(Some("n1"), Some(&two), None), Some(&none)),
            PodZone::NodeLabel(ZoneLabelError::Missing(ZONE.into()))
        );
    }

    /// Only the stack's keys are ever copied: a pod naming another node label is told so.
    #[test]
    fn keys_outside_the_stack_s_are_named() {
        let two = format!("{ZONE},{RACK}");
        let p = pod(Some("n1"), Some(&two), None);
        let stack: BTreeSet<String> = [ZONE.to_string()].into();
        assert_eq!(keys_not_allowed(&p, &stack), [RACK]);
        let both: BTreeSet<String> = [ZONE.to_string(), RACK.to_string()].into();
        assert!(keys_not_allowed(&p, &both).is_empty());
        assert_eq!(keys_not_allowed(&p, &BTreeSet::new()), [ZONE, RACK]);
    }
}
