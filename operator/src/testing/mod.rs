//! Builders shared by the unit tests, and a fake API server for the glue's
//! (`cluster.rs`).

pub mod cluster;
pub mod rules;

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
/// A node's Lease of 40 s (renewed every 10 s) seen renewed at `at`, promptly.
pub fn lease_seen(at: k8s_openapi::jiff::Timestamp) -> crate::checks::silence::LeaseSeen {
    crate::checks::silence::LeaseSeen {
        renewed: at,
        duration_secs: 40,
        renewal_seen: true,
        prompt_at: Some(at),
        slow_at: None,
        seq: 0,
    }
}

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
        failover: Default::default(),
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
        failed_over: Default::default(),
    }
}

/// A successful apply.
pub fn applied() -> crate::intent::Applied {
    crate::intent::Applied::Done(crate::intent::ApplyReport::default())
}

/// A pod, built up one fact at a time: every unit test builds its pods with this.
///
/// ```ignore
/// let p = pod("s-ingester-0").component(Component::Ingester).zone_aware().on("n1").ready().build();
/// ```
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(serde_json::json!({"metadata": {"name": name}, "spec": {"containers": []}}))
}

#[derive(Clone)]
pub struct PodBuilder(serde_json::Value);

impl PodBuilder {
    fn meta(&mut self, field: &str) -> &mut serde_json::Value {
        &mut self.0["metadata"][field]
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        *self.meta("namespace") = ns.into();
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        *self.meta("uid") = uid.into();
        self
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        *self.meta("resourceVersion") = rv.into();
        self
    }

    pub fn created(mut self, at: &str) -> Self {
        *self.meta("creationTimestamp") = at.into();
        self
    }

    /// Being deleted.
    pub fn deleting(mut self) -> Self {
        *self.meta("deletionTimestamp") = "1970-01-01T00:00:00Z".into();
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.meta("labels")[key] = value.into();
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.meta("annotations")[key] = value.into();
        self
    }

    /// Of a component (`app.kubernetes.io/component`).
    pub fn component(self, c: crate::model::defaults::Component) -> Self {
        self.label(crate::model::names::LABEL_COMPONENT, c.name())
    }

    /// Of a stack (`app.kubernetes.io/instance`).
    pub fn stack(self, stack: &str) -> Self {
        self.label(crate::model::names::LABEL_INSTANCE, stack)
    }

    /// Running a zone-aware template.
    pub fn zone_aware(self) -> Self {
        use crate::model::names::{LABEL_ZONE_AWARE, LABEL_ZONE_AWARE_VALUE};
        self.label(LABEL_ZONE_AWARE, LABEL_ZONE_AWARE_VALUE)
    }

    /// The topology keys its zone is made of (`loki.grafana.com/availability-zone-labels`).
    pub fn zone_keys(self, keys: &str) -> Self {
        self.annotation(crate::model::names::ANNOTATION_ZONE_LABELS, keys)
    }

    /// Zoned (`loki.grafana.com/availability-zone`).
    pub fn zone(self, zone: &str) -> Self {
        self.annotation(crate::model::names::ANNOTATION_ZONE, zone)
    }

    /// Controlled by `kind` `name` (a StatefulSet, say).
    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        *self.meta("ownerReferences") = serde_json::json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": name,
            "uid": format!("uid-{name}"), "controller": true,
        }]);
        self
    }

    /// Bound to `node`.
    pub fn on(mut self, node: &str) -> Self {
        self.0["spec"]["nodeName"] = node.into();
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0["status"]["phase"] = phase.into();
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        self.0["status"]["podIP"] = ip.into();
        self
    }

    /// Running, and its Ready condition `ready`.
    pub fn ready_is(mut self, ready: bool) -> Self {
        self.0["status"]["conditions"] = serde_json::json!([{
            "type": "Ready", "status": if ready { "True" } else { "False" },
        }]);
        if self.0["status"]["phase"].is_null() {
            self.0["status"]["phase"] = "Running".into();
        }
        self
    }

    /// A condition of `type_` with `status` since `at` (RFC 3339), replacing one of that
    /// type.
    pub fn condition_since(mut self, type_: &str, status: &str, at: &str) -> Self {
        let c = serde_json::json!({"type": type_, "status": status, "lastTransitionTime": at});
        match self.0["status"]["conditions"].as_array_mut() {
            Some(cs) => {
                cs.retain(|c| c["type"] != type_);
                cs.push(c);
            }
            None => self.0["status"]["conditions"] = serde_json::json!([c]),
        }
        self
    }

    pub fn build(self) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(self.0).expect("a pod")
    }
}

/// A stack as the caches hold it: the stored JSON object.
pub fn stored(stack: &LokiStack) -> kube::api::DynamicObject {
    serde_json::from_value(serde_json::to_value(stack).expect("json")).expect("object")
}
