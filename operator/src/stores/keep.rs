//! What the caches keep of each object: only what the operator reads, so memory stays
//! flat. Nodes keep labels, taints, cordon and readiness; pods keep metadata, node and
//! phase; Secrets keep their key names, and values only of the keys that are addresses
//! (endpoint, region), never credentials; the operator's children keep
//! metadata and the field-manager entries that say who wrote them
//! ([`crate::model::writers::keep_markers`]).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    Node, NodeSpec, NodeStatus, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    PersistentVolumeStatus, Pod, PodSpec, PodStatus, Secret, Toleration,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::ByteString;

use crate::model::names;
use crate::model::storage;
use crate::model::writers::keep_markers;

fn strip_meta(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
}

/// Keeps what eligibility and zones need: labels, taints, cordon, readiness.
pub fn strip_node(n: &mut Node) {
    strip_meta(&mut n.metadata);
    n.metadata.annotations = None;
    let spec = n.spec.take().unwrap_or_default();
    n.spec = Some(NodeSpec {
        taints: spec.taints,
        unschedulable: spec.unschedulable,
        ..Default::default()
    });
    let ready = n.status.take().and_then(|s| s.conditions).map(|cs| {
        cs.into_iter()
            .filter(|c| c.type_ == "Ready")
            .collect::<Vec<_>>()
    });
    n.status = Some(NodeStatus {
        conditions: ready,
        ..Default::default()
    });
}

/// An object's labels, to tell a label change from any other update without a copy.
pub fn labels_fingerprint(labels: &std::collections::BTreeMap<String, String>) -> u64 {
    let mut h = DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

/// What of a node can change a zone check or a pod's zone.
pub fn node_fingerprint(n: &Node) -> u64 {
    let mut h = DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    let spec = n.spec.as_ref();
    spec.and_then(|s| s.unschedulable).hash(&mut h);
    for t in spec.and_then(|s| s.taints.as_ref()).into_iter().flatten() {
        (&t.key, &t.value, &t.effect).hash(&mut h);
    }
    crate::checks::zones::node_ready(n).hash(&mut h);
    h.finish()
}

/// The pod conditions the operator reads.
const POD_CONDITIONS: [&str; 3] = [
    "Ready",
    names::POD_CONDITION_ZONE_AVAILABLE,
    names::POD_CONDITION_DISRUPTION_TARGET,
];

/// Keeps metadata, node, phase and the tolerations that can evict (effect `NoExecute`
/// or any: `checks/taint_evictions.rs`); a pod's containers are never read.
pub fn strip_pod(p: &mut Pod) {
    strip_meta(&mut p.metadata);
    let spec = p.spec.take().unwrap_or_default();
    let evicting = |t: &Toleration| {
        t.effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == "NoExecute")
    };
    p.spec = Some(PodSpec {
        node_name: spec.node_name,
        tolerations: spec
            .tolerations
            .map(|ts| ts.into_iter().filter(evicting).collect::<Vec<_>>())
            .filter(|ts| !ts.is_empty()),
        ..Default::default()
    });
    let status = p.status.take().unwrap_or_default();
    p.status = Some(PodStatus {
        phase: status.phase,
        conditions: status.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| POD_CONDITIONS.contains(&c.type_.as_str()))
                .collect()
        }),
        // Where a leaving ingester is asked to leave the ring (`act/scale_down.rs`).
        pod_ip: status.pod_ip,
        ..Default::default()
    });
}

/// Keeps key names, and values only of the keys that are addresses, not credentials
/// (`storage::PLAIN_KEYS`). Any other value becomes one byte: empty stays empty, else
/// whether it could be expanded into YAML safely, which is all the storage check needs.
/// Credentials never sit in the operator's memory.
pub fn strip_secret(s: &mut Secret) {
    strip_meta(&mut s.metadata);
    s.metadata.annotations = None;
    s.string_data = None;
    for (k, v) in s.data.iter_mut().flatten() {
        if v.0.is_empty() || storage::PLAIN_KEYS.contains(&k.as_str()) {
            continue;
        }
        let marker = if storage::unsafe_in_yaml(&v.0) {
            storage::VALUE_UNSAFE
        } else {
            storage::VALUE_SAFE
        };
        *v = ByteString(vec![marker]);
    }
}

/// Keeps the name, the default-class annotations and the binding mode.
pub fn strip_storage_class(c: &mut StorageClass) {
    strip_meta(&mut c.metadata);
    c.metadata.labels = None;
    c.parameters = None;
    c.mount_options = None;
    c.allowed_topologies = None;
    if let Some(a) = c.metadata.annotations.as_mut() {
        a.retain(|k, _| k.contains("is-default-class"));
    }
}

/// Keeps the labels, the claim reference, the node affinity and the phase: what places
/// the volume and whether a claim still holds it.
pub fn strip_volume(pv: &mut PersistentVolume) {
    strip_meta(&mut pv.metadata);
    pv.metadata.annotations = None;
    let spec = pv.spec.take().unwrap_or_default();
    pv.spec = Some(PersistentVolumeSpec {
        claim_ref: spec.claim_ref.map(|c| ObjectReference {
            namespace: c.namespace,
            name: c.name,
            ..Default::default()
        }),
        node_affinity: spec.node_affinity,
        ..Default::default()
    });
    pv.status = pv.status.take().map(|s| PersistentVolumeStatus {
        phase: s.phase,
        ..Default::default()
    });
}

/// Keeps the metadata (without annotations, with the writers [`keep_markers`] keeps),
/// replicas, the update strategy and the status: what decides which pods are outdated
/// and how many there should be, and what the apply step reads of every child (this one
/// store is the StatefulSets' child cache too).
pub fn strip_statefulset(s: &mut StatefulSet) {
    keep_markers(&mut s.metadata);
    s.metadata.annotations = s
        .metadata
        .annotations
        .take()
        .map(|mut a| {
            a.retain(|k, _| k == names::ANNOTATION_APPLIED_HASH);
            a
        })
        .filter(|a| !a.is_empty());
    s.spec = s.spec.take().map(|spec| StatefulSetSpec {
        replicas: spec.replicas,
        update_strategy: spec.update_strategy,
        ..Default::default()
    });
    s.status = s.status.take().map(|st| StatefulSetStatus {
        observed_generation: st.observed_generation,
        replicas: st.replicas,
        update_revision: st.update_revision,
        current_revision: st.current_revision,
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, ZONE};
    use k8s_openapi::api::core::v1::{NodeCondition, Taint};

    #[test]
    fn node_fingerprint_ignores_heartbeats_but_not_zone_inputs() {
        let mut a = node("n", &[(ZONE, "a")]);
        let base = node_fingerprint(&a);
        // A heartbeat changes timestamps only.
        a.status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .expect("conditions")[0]
            .last_heartbeat_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        a.metadata.resource_version = Some("42".into());
        assert_eq!(node_fingerprint(&a), base);
        let mut relabelled = a.clone();
        relabelled
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(ZONE.into(), "b".into());
        assert_ne!(node_fingerprint(&relabelled), base);
        let mut tainted = a.clone();
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                effect: "NoExecute".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(node_fingerprint(&tainted), base);
        let mut not_ready = a.clone();
        not_ready.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(node_fingerprint(&not_ready), base);
    }

    /// A rollout reads whether Kubernetes may still evict a pod: the tolerations that can
    /// evict and the `DisruptionTarget` condition stay; the rest of the spec goes.
    #[test]
    fn stripped_pods_keep_what_a_taint_eviction_reads() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ing-0"},
            "spec": {
                "nodeName": "n",
                "containers": [{"name": "loki", "image": "loki"}],
                "tolerations": [
                    {"key": names::TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "example.com/batch", "operator": "Exists", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                ],
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
                {"type": names::POD_CONDITION_DISRUPTION_TARGET, "status": "True"},
            ]},
        }))
        .expect("a pod");
        strip_pod(&mut p);
        let spec = p.spec.expect("a spec");
        assert!(spec.containers.is_empty());
        assert_eq!(spec.node_name.as_deref(), Some("n"));
        let kept: Vec<Option<&str>> = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| t.key.as_deref())
            .collect();
        assert_eq!(kept, [Some(names::TAINT_UNREACHABLE), None]);
        let conditions: Vec<String> = p
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .map(|c| c.type_)
            .collect();
        assert_eq!(
            conditions,
            ["Ready", names::POD_CONDITION_DISRUPTION_TARGET]
        );
    }

    #[test]
    fn secrets_are_stored_without_values() {
        let mut s = Secret {
            data: Some(
                [
                    ("a".to_string(), ByteString(b"hunter2".to_vec())),
                    ("b".to_string(), ByteString(vec![])),
                    ("q".to_string(), ByteString(b"pass\"word".to_vec())),
                    (
                        "endpoint".to_string(),
                        ByteString(b"https://s3.amazonaws.com".to_vec()),
                    ),
                ]
                .into(),
            ),
            string_data: Some([("c".to_string(), "x".to_string())].into()),
            ..Default::default()
        };
        strip_secret(&mut s);
        let data = s.data.expect("data");
        assert_eq!(data["a"].0, vec![storage::VALUE_SAFE]);
        assert!(data["b"].0.is_empty());
        assert_eq!(data["q"].0, vec![storage::VALUE_UNSAFE]);
        assert_eq!(data["endpoint"].0, b"https://s3.amazonaws.com".to_vec());
        assert!(s.string_data.is_none());
    }

    #[test]
    fn stripped_statefulsets_keep_what_a_rollout_reads() {
        use k8s_openapi::api::apps::v1::StatefulSetUpdateStrategy;
        let mut s = StatefulSet {
            metadata: kube::api::ObjectMeta {
                name: Some("s-ingester".into()),
                generation: Some(4),
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(6),
                service_name: Some("s-ingester-grpc".into()),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("OnDelete".into()),
                    ..Default::default()
                }),
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    spec: Some(PodSpec::default()),
                    ..Default::default()
                },
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(4),
                replicas: 6,
                ready_replicas: Some(5),
                update_revision: Some("s-ingester-abc".into()),
                ..Default::default()
            }),
        };
        strip_statefulset(&mut s);
        let spec = s.spec.as_ref().expect("spec");
        assert_eq!(spec.replicas, Some(6));
        assert_eq!(
            spec.update_strategy
                .as_ref()
                .and_then(|u| u.type_.as_deref()),
            Some("OnDelete")
        );
        assert!(spec.template.spec.is_none() && spec.service_name.is_none());
        let status = s.status.as_ref().expect("status");
        assert_eq!(status.update_revision.as_deref(), Some("s-ingester-abc"));
        assert_eq!(status.observed_generation, Some(4));
        assert!(status.ready_replicas.is_none());
        assert!(s.metadata.annotations.is_none());
        assert_eq!(s.metadata.generation, Some(4));
    }

    #[test]
    fn stripped_nodes_keep_only_zone_inputs() {
        let mut n = node("n", &[(ZONE, "a")]);
        n.status.as_mut().expect("status").capacity = Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
            )]
            .into(),
        );
        strip_node(&mut n);
        assert!(n.status.as_ref().expect("status").capacity.is_none());
        assert!(crate::checks::zones::node_ready(&n));
        assert_eq!(n.metadata.labels.as_ref().expect("labels")[ZONE], "a");
    }
}
