//! What the webhook answers for one `pods/binding` CREATE: pure, so it is tested offline
//! and agrees with the annotator (both read the zone with [`zones::zone_of`] from the
//! keys the pod names in its own annotation).
//!
//! kube-apiserver's binding storage copies the Binding's annotations onto the pod in the
//! same update that sets `spec.nodeName`; adding the zone to the Binding therefore zones
//! the pod in the very event that binds it. Every answer allows the Binding: when
//! anything is unknown the Binding goes through unchanged and the annotator zones the pod
//! afterwards, as it did before the webhook existed.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use serde_json::Value;

use crate::checks::podzone::{pod_keys, zone_as_read};
use crate::checks::zones::{zone_of, ZoneLabelError};
use crate::model::names;
use crate::model::pods::is_zone_aware;

/// Why a Binding got, or did not get, the zone. The label values of the webhook's
/// `bindings` metric are [`BindDecision::result`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindDecision {
    /// Add this zone to the Binding.
    Zone(String),
    /// The pod is not labelled zone-aware: none of ours.
    NotZoneAware,
    /// Neither the cache nor the API server knows the pod.
    PodUnknown,
    /// The pod, or the Binding, already carries a zone; a zone is never replaced.
    AlreadyZoned,
    /// The target node is not in the node cache (a node that just joined).
    NodeUnknown,
    /// The node lacks a topology key or has it empty: the annotator reports it.
    NodeLabel(ZoneLabelError),
    /// The pod does not say which keys make its zone.
    NoKeys,
    /// Not a Binding to a Node.
    NotANodeBinding,
}

impl BindDecision {
    pub fn result(&self) -> &'static str {
        match self {
            BindDecision::Zone(_) => "zoned",
            BindDecision::NotZoneAware => "not_zone_aware",
            BindDecision::PodUnknown => "pod_unknown",
            BindDecision::AlreadyZoned => "already_zoned",
            BindDecision::NodeUnknown => "node_unknown",
            BindDecision::NodeLabel(_) => "node_label",
            BindDecision::NoKeys => "no_keys",
            BindDecision::NotANodeBinding => "not_a_node_binding",
        }
    }
}

/// The node a Binding targets; the kind may be left empty, as the scheduler does.
pub fn target_node(binding: &Binding) -> Option<&str> {
    let t = &binding.target;
    let kind_ok = t
        .kind
        .as_deref()
        .is_none_or(|k| k.is_empty() || k == "Node");
    t.name.as_deref().filter(|n| kind_ok && !n.is_empty())
}

fn binding_zone(binding: &Binding) -> Option<&str> {
    binding
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ZONE))
        .map(String::as_str)
}

pub fn decide(binding: &Binding, pod: Option<&Pod>, node: Option<&Node>) -> BindDecision {
    if target_node(binding).is_none() {
        return BindDecision::NotANodeBinding;
    }
    let Some(pod) = pod else {
        return BindDecision::PodUnknown;
    };
    if !is_zone_aware(pod) {
        return BindDecision::NotZoneAware;
    }
    if zone_as_read(pod).is_some() || binding_zone(binding).is_some() {
        return BindDecision::AlreadyZoned;
    }
    let keys = pod_keys(pod);
    if keys.is_empty() {
        return BindDecision::NoKeys;
    }
    let Some(node) = node else {
        return BindDecision::NodeUnknown;
    };
    match zone_of(node.metadata.labels.as_ref(), keys.iter().copied()) {
        Ok(zone) => BindDecision::Zone(zone),
        Err(e) => BindDecision::NodeLabel(e),
    }
}

/// The JSON patch that adds `zone` to the Binding's annotations: the whole map when the
/// Binding has none (the scheduler sends none), else the one key.
pub fn zone_patch(binding: &Binding, zone: &str) -> Patch {
    let op = match &binding.metadata.annotations {
        Some(_) => AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", names::ANNOTATION_ZONE]),
            value: Value::String(zone.to_string()),
        },
        None => AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::json!(BTreeMap::from([(names::ANNOTATION_ZONE, zone)])),
        },
    };
    Patch(vec![PatchOperation::Add(op)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use crate::testing::{node, ZONE};
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::api::ObjectMeta;

    const RACK: &str = "example.com/rack";

    fn binding(node: &str, annotations: Option<&[(&str, &str)]>) -> Binding {
        Binding {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                annotations: annotations.map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        }
    }

    fn pod(zone_aware: bool, keys: Option<&str>, zone: Option<&str>) -> Pod {
        let mut p = testing::pod("p");
        if zone_aware {
            p = p.zone_aware();
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
        let b = binding("n1", None);
        let two = format!("{ZONE},{RACK}");
        let zoned = |p: &Pod| decide(&b, Some(p), Some(&n));
        assert_eq!(
            zoned(&pod(true, Some(ZONE), None)),
            BindDecision::Zone("a".into())
        );
        assert_eq!(
            zoned(&pod(true, Some(&two), None)),
            BindDecision::Zone("a_r1".into())
        );
        assert_eq!(
            zoned(&pod(false, Some(ZONE), None)),
            BindDecision::NotZoneAware
        );
        assert_eq!(
            zoned(&pod(true, Some(ZONE), Some("b"))),
            BindDecision::AlreadyZoned
        );
        assert_eq!(zoned(&pod(true, None, None)), BindDecision::NoKeys);
        assert_eq!(decide(&b, None, Some(&n)), BindDecision::PodUnknown);
        let p = pod(true, Some(ZONE), None);
        assert_eq!(decide(&b, Some(&p), None), BindDecision::NodeUnknown);
        let bare = node("n1", &[]);
        assert_eq!(
            decide(&b, Some(&p), Some(&bare)),
            BindDecision::NodeLabel(ZoneLabelError::Missing(ZONE.into()))
        );
        let preset = binding("n1", Some(&[(names::ANNOTATION_ZONE, "c")]));
        assert_eq!(
            decide(&preset, Some(&p), Some(&n)),
            BindDecision::AlreadyZoned
        );
        let mut to_pod = binding("n1", None);
        to_pod.target.kind = Some("Pod".into());
        assert_eq!(
            decide(&to_pod, Some(&p), Some(&n)),
            BindDecision::NotANodeBinding
        );
    }

    /// The patch, applied to the Binding as the API server would, gives the annotation
    /// with its `/` escaped correctly, and keeps annotations already there.
    #[test]
    fn the_patch_adds_the_zone_and_keeps_the_rest() {
        for existing in [None, Some(&[("other", "x")][..])] {
            let b = binding("n1", existing);
            let mut doc = serde_json::to_value(&b).expect("binding serialises");
            json_patch::patch(&mut doc, &zone_patch(&b, "a_r1")).expect("patch applies");
            let patched: Binding = serde_json::from_value(doc).expect("still a binding");
            let ann = patched.metadata.annotations.expect("annotations");
            assert_eq!(
                ann.get(names::ANNOTATION_ZONE).map(String::as_str),
                Some("a_r1")
            );
            assert_eq!(ann.len(), 1 + existing.map_or(0, <[_]>::len));
        }
    }
}
