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
    /// Scheduled, no zone yet: write this one, where the pod reads it
    /// ([`reads_pod_label`]).
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

/// The pod's zone, wherever it was written: the operator's annotation, else, for a pod
/// whose only topology key is `topology.kubernetes.io/zone`, that label on the pod
/// (Kubernetes copies it from the node at binding from 1.35 on, or the annotator wrote
/// it). The one reading of a pod's zone: the rollout, the failover, the webhooks and the
/// status all take it from here.
pub fn pod_zone(pod: &Pod) -> Option<&str> {
    pod_zone_annotation(pod)
        .or_else(|| zone_label(pod).filter(|_| pod_keys(pod) == [names::LABEL_TOPOLOGY_ZONE]))
}

/// The zone where the pod's Loki reads it: the label for a pod rendered to read the label
/// ([`reads_pod_label`]), else the annotation. What the annotator and the webhook check
/// before they write: a pod reading the annotation needs it even where the label is.
pub fn zone_as_read(pod: &Pod) -> Option<&str> {
    match reads_pod_label(pod) {
        true => zone_label(pod),
        false => pod_zone_annotation(pod),
    }
}

/// The pod's `topology.kubernetes.io/zone` label, when set.
fn zone_label(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(names::LABEL_TOPOLOGY_ZONE)
        .map(String::as_str)
        .filter(|z| !z.is_empty())
}

/// Loki reads this pod's zone from its `topology.kubernetes.io/zone` label (it was
/// rendered so: [`names::ANNOTATION_ZONE_SOURCE`]), so that is where a missing zone is
/// written; else from the annotation.
pub fn reads_pod_label(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ZONE_SOURCE))
        .is_some_and(|s| s == names::ZONE_SOURCE_POD_LABEL)
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
    match (zone_as_read(pod), current) {
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

    /// The zone is the annotation, else, for a pod whose only key is the zone label,
    /// that label on the pod (Kubernetes copies it at binding). What is written is where
    /// the pod reads it: a pod rendered to read the label and carrying it is done; one
    /// reading the annotation gets it whatever labels it has.
    #[test]
    fn the_zone_label_on_the_pod_is_its_zone_when_it_is_the_only_key() {
        let n = node("n1", &[(ZONE, "a"), (RACK, "r1")]);
        let labelled = testing::pod("p").on("n1").zone_keys(ZONE).label(ZONE, "a");
        let reads = labelled
            .clone()
            .annotation(names::ANNOTATION_ZONE_SOURCE, names::ZONE_SOURCE_POD_LABEL)
            .build();
        let labelled = labelled.build();
        assert_eq!(pod_zone(&labelled), Some("a"));
        assert_eq!(decide(&labelled, Some(&n)), PodZone::Annotate("a".into()));
        assert!(!reads_pod_label(&labelled) && reads_pod_label(&reads));
        assert_eq!(zone_as_read(&reads), Some("a"));
        assert_eq!(decide(&reads, Some(&n)), PodZone::Done);
        let two = format!("{ZONE},{RACK}");
        let other = testing::pod("p")
            .on("n1")
            .zone_keys(&two)
            .label(ZONE, "a")
            .build();
        assert_eq!(pod_zone(&other), None);
        assert_eq!(decide(&other, Some(&n)), PodZone::Annotate("a_r1".into()));
        // The annotation wins where both are (the webhook zoned it on 1.35).
        let both = testing::pod("p")
            .zone_keys(ZONE)
            .label(ZONE, "a")
            .zone("b")
            .build();
        assert_eq!(pod_zone(&both), Some("b"));
        let empty = testing::pod("p").zone_keys(ZONE).label(ZONE, "").build();
        assert_eq!(pod_zone(&empty), None);
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
