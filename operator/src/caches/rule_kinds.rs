//! The ruler's kinds (AlertingRule, RecordingRule, RulerConfig) as the caches speak of
//! them: which the server serves, what the metadata cache keeps of an object and what a
//! body keeps, and how a body is decoded (one by one, like LokiStacks, so a stored
//! object that does not decode is reported on its own and never stops the others).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::caches::stacks;
use crate::model::names;
use crate::ruler::names as rulernames;

/// A rule object as the caches hold it: its metadata ([`strip_meta`]).
pub type RuleMeta = PartialObjectMeta<DynamicObject>;

/// Namespaces, metadata only: their labels.
pub type NamespaceStore = Store<PartialObjectMeta<Namespace>>;

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

/// The labels of a namespace; `None` when namespaces are not read or it is gone.
pub fn namespace_labels(
    namespaces: Option<&NamespaceStore>,
    namespace: &str,
) -> Option<BTreeMap<String, String>> {
    let ns = namespaces?.get(&ObjectRef::new(namespace))?;
    Some(ns.labels().clone())
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

/// Drops what is never read of a body: managed fields and the last-applied annotation.
pub(crate) fn strip(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// What the metadata cache keeps: name, namespace, uid, versions and labels; of the
/// managed fields only this operator's entry, without its field set ([`marked`]). No
/// annotations (the last-applied one is a copy of the whole object).
pub(crate) fn strip_meta(m: &mut RuleMeta) {
    m.metadata.annotations = None;
    m.metadata.owner_references = None;
    let ours: Vec<_> = m
        .metadata
        .managed_fields
        .take()
        .into_iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some(names::FIELD_MANAGER))
        .map(
            |e| k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                fields_v1: None,
                ..e
            },
        )
        .collect();
    m.metadata.managed_fields = (!ours.is_empty()).then_some(ours);
}

/// Whether this operator has written to the object (its status: the operator writes
/// nothing else of a rule object), from the managed fields [`strip_meta`] keeps.
pub fn marked(meta: &ObjectMeta) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .any(|e| e.manager.as_deref() == Some(names::FIELD_MANAGER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_metadata_cache_keeps_labels_and_whether_this_operator_wrote_and_no_more() {
        let entry = |manager: &str| {
            crate::testing::field_manager_entry(
                manager,
                "Apply",
                Some("status"),
                json!({"f:status": {"f:conditions": {}}}),
            )
        };
        let mut m: RuleMeta = serde_json::from_value(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                         "generation": 2, "labels": {"pick": "yes"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(1000)}},
        }))
        .expect("metadata");
        m.metadata.managed_fields = Some(vec![entry("kubectl-client-side-apply")]);
        strip_meta(&mut m);
        assert!(!marked(&m.metadata));
        assert_eq!(m.metadata.managed_fields, None);
        assert_eq!(m.metadata.annotations, None);
        assert_eq!(m.labels().get("pick").map(String::as_str), Some("yes"));
        assert_eq!(
            (
                m.metadata.generation,
                m.metadata.resource_version.as_deref()
            ),
            (Some(2), Some("3"))
        );
        m.metadata.managed_fields = Some(vec![
            entry("kubectl-client-side-apply"),
            entry(names::FIELD_MANAGER),
        ]);
        strip_meta(&mut m);
        assert!(marked(&m.metadata));
        let kept = m.metadata.managed_fields.as_ref().expect("kept");
        assert_eq!(kept.len(), 1);
        assert!(kept[0].fields_v1.is_none());
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
