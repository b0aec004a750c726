//! LokiStacks as the API server stores them.
//!
//! The controller lists and watches LokiStacks as untyped objects and decodes each one
//! on its own. A typed list fails as a whole when one object does not decode (a value
//! stored before the CRD bounded it, or written by another operator's schema), and then
//! no stack in the cluster would reconcile. Here such an object is reported on its own
//! status and every other stack goes on.

use std::collections::BTreeSet;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::model::api::{LokiStack, ReplicationSpec};
use crate::model::conditions::{status_str, ConditionType, Reason};
use crate::model::defaults;
use crate::model::names;

/// The node labels a zone-aware stack's pods may have copied onto them: the topology
/// keys of `spec.replication.zones`, and those its write path still spreads over while
/// zones are turned off (`status.zoneAwareness.zones`).
pub fn topology_keys(obj: &DynamicObject) -> BTreeSet<String> {
    ["/spec/replication/zones", "/status/zoneAwareness/zones"]
        .iter()
        .filter_map(|p| obj.data.pointer(p).and_then(Value::as_array))
        .flatten()
        .filter_map(|z| z.get("topologyKey").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// The topology keys ([`topology_keys`]) of the stack a pod belongs to (by its
/// instance label, in its namespace); empty when that stack is not in the cache.
pub fn keys_for_pod(
    stacks: &kube::runtime::reflector::Store<DynamicObject>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> BTreeSet<String> {
    let stack = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_INSTANCE));
    match (stack, pod.metadata.namespace.as_deref()) {
        (Some(stack), Some(ns)) => stacks
            .get(&ObjectRef::new_with(stack, resource()).within(ns))
            .map(|s| topology_keys(&s))
            .unwrap_or_default(),
        _ => BTreeSet::new(),
    }
}

pub fn resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(names::GROUP, names::VERSION, names::KIND);
    ApiResource::from_gvk_with_plural(&gvk, "lokistacks")
}

pub type StackRef = ObjectRef<DynamicObject>;

pub fn stack_ref(namespace: &str, name: &str) -> StackRef {
    ObjectRef::new_with(name, resource()).within(namespace)
}

/// A stored LokiStack that this operator cannot read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DecodeError {
    /// Where in the object, e.g. `spec.replication.factor`.
    pub path: String,
    pub message: String,
}

pub fn decode(obj: &DynamicObject) -> Result<LokiStack, DecodeError> {
    let value = serde_json::to_value(obj).map_err(|e| DecodeError {
        path: ".".into(),
        message: e.to_string(),
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| DecodeError {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Cheap reads of the stored JSON, for routing triggers without decoding every stack.
pub fn storage_secret_name(obj: &DynamicObject) -> Option<&str> {
    obj.data.pointer("/spec/storage/secret/name")?.as_str()
}

/// [`defaults::zone_aware`] of the stored stack, decoding only `spec.replication`. A
/// replication the CRD schema would not admit counts as not zone-aware: its reconcile
/// reports the decode error, and the webhooks then leave its pods and evictions alone.
pub fn is_zone_aware(obj: &DynamicObject) -> bool {
    let replication = obj
        .data
        .pointer("/spec/replication")
        .and_then(|r| ReplicationSpec::deserialize(r).ok());
    defaults::replication_zone_aware(replication.as_ref())
}

/// Whether the stack's status says its current spec was applied (`observedGeneration`
/// is its `generation`): its reconcile then mostly reads and writes a status. A new or
/// edited stack, or one held back, applies (or tries to apply) its children.
pub fn spec_applied(obj: &DynamicObject) -> bool {
    let observed = obj
        .data
        .get("status")
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    observed.is_some() && observed == obj.metadata.generation
}

/// The status to write on a stack that does not decode: what it had, with Degraded
/// `InvalidSpec` and Ready False saying what to fix. `None` when it already says so.
/// The rest of the status is kept: a server-side apply drops what it omits.
pub fn undecodable_status(obj: &DynamicObject, e: &DecodeError, now: &str) -> Option<Value> {
    let message = format!(
        "the stored LokiStack cannot be read: {e}. Fix that field (kubectl edit lokistack {} -n {}); until then this stack is left as it runs",
        obj.name_any(),
        obj.namespace().unwrap_or_default()
    );
    let mut status = obj.data.get("status").cloned().unwrap_or_else(|| json!({}));
    let conditions = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let already = conditions.iter().any(|c| {
        c["type"] == ConditionType::Degraded.as_str()
            && c["status"] == "True"
            && c["message"] == message
    });
    if already {
        return None;
    }
    let set = [
        (
            ConditionType::Degraded,
            true,
            Reason::InvalidSpec,
            message.as_str(),
        ),
        (
            ConditionType::Ready,
            false,
            Reason::ComponentsNotReady,
            "the current spec cannot be read",
        ),
    ];
    let mut kept: Vec<Value> = conditions
        .into_iter()
        .filter(|c| !set.iter().any(|(t, ..)| c["type"] == t.as_str()))
        .collect();
    for (t, s, reason, message) in set {
        kept.push(json!({
            "type": t.as_str(),
            "status": status_str(s),
            "reason": reason.as_str(),
            "message": message,
            "lastTransitionTime": now,
        }));
    }
    status["conditions"] = Value::Array(kept);
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{LokiStackSize, LokiStackStatus};
    use crate::testing;

    fn stack(generation: i64, observed: Option<i64>) -> DynamicObject {
        let mut s = testing::stack("s", testing::stack_spec(LokiStackSize::Demo));
        s.metadata.generation = Some(generation);
        s.status = observed.map(|o| LokiStackStatus {
            observed_generation: Some(o),
            ..Default::default()
        });
        testing::stored(&s)
    }

    #[test]
    fn a_spec_is_applied_once_the_status_observed_its_generation() {
        assert!(spec_applied(&stack(3, Some(3))));
        assert!(!spec_applied(&stack(1, None)), "new");
        assert!(!spec_applied(&stack(4, Some(3))), "edited, or held back");
    }

    fn stored(spec: Value) -> DynamicObject {
        let mut obj = DynamicObject::new("s", &resource()).within("ns");
        obj.data = json!({"spec": spec, "status": {"observedGeneration": 3}});
        obj
    }

    /// A stack's pods may carry the keys of its zones, and while zones are turned off,
    /// those its write path still spreads over.
    #[test]
    fn topology_keys_come_from_the_spec_and_the_zone_switch() {
        let mut obj = stored(json!({"replication": {"zones": [{"topologyKey": "zone"}]}}));
        obj.data["status"]["zoneAwareness"] =
            json!({"stage": "Disabling", "zones": [{"topologyKey": "rack", "maxSkew": 1}]});
        assert_eq!(
            topology_keys(&obj),
            BTreeSet::from(["rack".to_string(), "zone".to_string()])
        );
        assert!(topology_keys(&stored(json!({}))).is_empty());
    }

    #[test]
    fn a_value_out_of_range_names_its_field() {
        let obj = stored(json!({
            "size": "1x.demo",
            "storage": {"secret": {"name": "s", "type": "s3"}},
            "replication": {"factor": 2147483648u64},
        }));
        let e = decode(&obj).expect_err("does not fit an i32");
        assert_eq!(e.path, "spec.replication.factor");
        let status = undecodable_status(&obj, &e, "2026-01-01T00:00:00Z").expect("status");
        assert_eq!(
            status["observedGeneration"], 3,
            "the rest of the status is kept"
        );
        let degraded = &status["conditions"][0];
        assert_eq!(degraded["reason"], "InvalidSpec");
        assert!(degraded["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.replication.factor")));
        let mut again = obj.clone();
        again.data["status"] = status;
        assert!(
            undecodable_status(&again, &e, "later").is_none(),
            "an unchanged finding is not written again"
        );
    }

    #[test]
    fn a_valid_stack_decodes_and_routes() {
        let obj = stored(json!({
            "size": "1x.demo",
            "storage": {"secret": {"name": "loki-s3", "type": "s3"}},
            "replication": {"factor": 2, "zones": [{"topologyKey": "topology.kubernetes.io/zone"}]},
        }));
        let s = decode(&obj).expect("decodes");
        assert_eq!(s.spec.storage.secret.name, "loki-s3");
        assert_eq!(storage_secret_name(&obj), Some("loki-s3"));
        assert!(is_zone_aware(&obj));
    }

    /// The routing answer is the spec's: the same replication gives the same answer
    /// decoded whole or read from the store, and one the schema would not admit is not
    /// zone-aware.
    #[test]
    fn zone_awareness_of_a_stored_stack_is_the_specs() {
        for replication in [
            json!({"zones": [{"topologyKey": "zone"}]}),
            json!({"zones": []}),
            json!({"factor": 2}),
        ] {
            let obj = stored(json!({
                "size": "1x.demo",
                "storage": {"secret": {"name": "s", "type": "s3"}},
                "replication": replication,
            }));
            let spec = decode(&obj).expect("decodes").spec;
            assert_eq!(
                is_zone_aware(&obj),
                defaults::zone_aware(&spec),
                "{replication}"
            );
        }
        assert!(!is_zone_aware(&stored(json!({}))));
        assert!(!is_zone_aware(&stored(
            json!({"replication": {"zones": "zone"}})
        )));
    }
}
