//! Builders shared by the unit tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use kube::api::ObjectMeta;

use crate::model::api::{
    LokiStack, LokiStackSize, LokiStackSpec, ManagementState, ObjectStorageSecretSpec,
    ObjectStorageSecretType, ObjectStorageSpec, ReplicationSpec, ZoneSpec,
};

pub const ZONE: &str = "topology.kubernetes.io/zone";

pub fn stack_spec(size: LokiStackSize) -> LokiStackSpec {
    LokiStackSpec {
        size,
        storage: ObjectStorageSpec {
            schemas: vec![],
            secret: ObjectStorageSecretSpec {
                type_: ObjectStorageSecretType::S3,
                name: "loki-s3".into(),
                credential_mode: None,
            },
            tls: None,
        },
        storage_class_name: Some("standard".into()),
        replication: None,
        replication_factor: None,
        rules: None,
        template: None,
        limits: None,
        management_state: ManagementState::Managed,
        tenants: None,
        proxy: None,
        hash_ring: None,
        network_policies: None,
    }
}

pub fn zoned_spec(size: LokiStackSize, factor: i32, keys: &[&str]) -> LokiStackSpec {
    let mut spec = stack_spec(size);
    spec.replication = Some(ReplicationSpec {
        factor: Some(factor),
        zones: keys
            .iter()
            .map(|k| ZoneSpec {
                topology_key: k.to_string(),
                max_skew: 1,
            })
            .collect(),
        zone_outage: None,
        max_unavailable_per_zone: None,
    });
    spec
}

pub fn stack(name: &str, spec: LokiStackSpec) -> LokiStack {
    let mut s = LokiStack::new(name, spec);
    s.metadata.namespace = Some("logging".into());
    s.metadata.uid = Some("6f1c1e0e-0000-4000-8000-000000000001".into());
    s.metadata.generation = Some(1);
    s
}

/// A Ready node with the given labels.
pub fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A field manager entry of an object's `managedFields`, as the API server writes it.
pub fn field_manager_entry(
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    fields: serde_json::Value,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(operation.into()),
        api_version: Some("apps/v1".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        subresource: subresource.map(Into::into),
        time: None,
    }
}

/// An Intent that holds `eff`'s stack back with `findings`, deciding nothing else: what
/// a status test starts from before it sets the part it is about.
pub fn intent(
    eff: crate::model::defaults::EffectiveStack,
    findings: crate::intent::Findings,
) -> crate::intent::Intent {
    crate::intent::Intent {
        now: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        eff,
        findings,
        action: crate::intent::Action::HoldBack,
        held: Vec::new(),
        zone_awareness: None,
        wait_for_webhook: false,
        scale_down: None,
        rollout: Default::default(),
        recovery: Default::default(),
        stage_event: None,
        wake_after: None,
    }
}

/// What executing an Intent came to when the apply ended as `applied` and nothing else
/// was done.
pub fn done(applied: crate::intent::Applied) -> crate::intent::Done {
    crate::intent::Done {
        scale_down: None,
        applied,
        deleted: Vec::new(),
        not_deleted: Vec::new(),
        recovered: Default::default(),
    }
}

/// A successful apply.
pub fn applied() -> crate::intent::Applied {
    crate::intent::Applied::Done(crate::intent::ApplyReport::default())
}
