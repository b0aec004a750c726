//! Taking over children the Go Loki Operator created, for stacks migrated from it.
//!
//! Its children have the names ours have and carry the same stack's controller owner
//! reference, so the never-adopt rule lets them through. But a server-side apply only
//! becomes co-owner of the fields both write: whatever the Go operator set and we do
//! not render (an env var, a volume, an annotation) would stay on the object for ever.
//! So before the first apply, the Go operator's field manager entries are folded into
//! ours (as client-go's `csaupgrade` does for kubectl); the apply that follows then
//! removes every field we no longer set, and leaves the fields we set with the same
//! values alone, so a pod template that does not change restarts nothing.
//!
//! Only entries of [`names::GO_OPERATOR_FIELD_MANAGER`] with operation Update on the main
//! resource are taken: another applier's fields and the controllers' status stay theirs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use tracing::info;

use crate::model::names;
use crate::model::writers::is_go_entry;
use crate::render::kinds::ChildKind;

/// The object's managed fields with every Go-operator entry folded into one Apply entry
/// of ours (merged with ours if there is one). `None` when there is nothing to fold.
pub fn folded(
    entries: &[ManagedFieldsEntry],
    api_version: &str,
    now: Time,
) -> Option<Vec<ManagedFieldsEntry>> {
    if !entries.iter().any(is_go_entry) {
        return None;
    }
    let ours = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(names::FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
    };
    let mut fields = json!({});
    let mut kept = Vec::new();
    for e in entries {
        if is_go_entry(e) || ours(e) {
            if let Some(FieldsV1(f)) = &e.fields_v1 {
                union(&mut fields, f);
            }
        } else {
            kept.push(e.clone());
        }
    }
    kept.push(ManagedFieldsEntry {
        manager: Some(names::FIELD_MANAGER.into()),
        operation: Some("Apply".into()),
        api_version: Some(api_version.into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        time: Some(now),
        subresource: None,
    });
    Some(kept)
}

/// `a ∪= b` for FieldsV1 sets, which are trees of objects whose leaves are `{}`.
fn union(a: &mut Value, b: &Value) {
    if let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object()) {
        for (k, v) in b {
            union(a.entry(k.clone()).or_insert_with(|| json!({})), v);
        }
    }
}

/// Why a take-over failed; the apply step (`apply.rs`) names the object.
#[derive(Debug)]
pub enum TakeOverError {
    /// The object could not be read.
    Read(kube::Error),
    /// The folded entries could not be written (a concurrent write included).
    Write(kube::Error),
}

/// Folds the Go operator's entries of one child into ours, guarded by the object's
/// resourceVersion so a concurrent write makes it fail rather than lose an entry.
pub async fn take_over(
    api: &Api<DynamicObject>,
    kind: ChildKind,
    name: &str,
    api_version: &str,
) -> Result<(), TakeOverError> {
    let Some(obj) = api.get_opt(name).await.map_err(TakeOverError::Read)? else {
        return Ok(());
    };
    let entries = obj.metadata.managed_fields.clone().unwrap_or_default();
    let Some(entries) = folded(&entries, api_version, Time(Timestamp::now())) else {
        return Ok(());
    };
    let patch = json!({"metadata": {
        "resourceVersion": obj.metadata.resource_version,
        "managedFields": entries,
    }});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(TakeOverError::Write)?;
    info!(
        kind = kind.as_str(),
        name, "took over the Go Loki Operator's fields"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::field_manager_entry as entry;

    #[test]
    fn go_entries_fold_into_one_apply_entry_of_ours() {
        let go = entry(
            names::GO_OPERATOR_FIELD_MANAGER,
            "Update",
            None,
            json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"loki\"}": {"f:env": {}}}}}}}),
        );
        let status = entry(
            "kube-controller-manager",
            "Update",
            Some("status"),
            json!({"f:status": {"f:replicas": {}}}),
        );
        let other_applier = entry(
            "kubectl",
            "Apply",
            None,
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        let ours = entry(
            names::FIELD_MANAGER,
            "Apply",
            None,
            json!({"f:spec": {"f:selector": {}}}),
        );
        let now = Time(Timestamp::now());
        let out = folded(
            &[go, status.clone(), other_applier.clone(), ours],
            "apps/v1",
            now,
        )
        .expect("folds");
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], status, "status stays the controller's");
        assert_eq!(out[1], other_applier, "another applier keeps its fields");
        let mine = &out[2];
        assert_eq!(mine.manager.as_deref(), Some(names::FIELD_MANAGER));
        assert_eq!(mine.operation.as_deref(), Some("Apply"));
        assert_eq!(
            mine.fields_v1.as_ref().map(|f| &f.0),
            Some(
                &json!({"f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"loki\"}": {"f:env": {}}}}}}})
            )
        );
    }

    #[test]
    fn nothing_to_fold_without_go_entries() {
        let ours = entry(names::FIELD_MANAGER, "Apply", None, json!({}));
        let go_apply = entry(names::GO_OPERATOR_FIELD_MANAGER, "Apply", None, json!({}));
        let go_status = entry(
            names::GO_OPERATOR_FIELD_MANAGER,
            "Update",
            Some("status"),
            json!({}),
        );
        assert!(folded(
            &[ours, go_apply, go_status],
            "apps/v1",
            Time(Timestamp::now())
        )
        .is_none());
    }
}
