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
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams};
use serde_json::{json, Value};
use tracing::info;

use crate::controller::apply::ApplyError;
use crate::kinds::ChildKind;
use crate::names;

/// A field manager entry the cache keeps (without its field set): who wrote the object.
pub fn is_marker(e: &ManagedFieldsEntry) -> bool {
    let manager = e.manager.as_deref();
    manager == Some(names::FIELD_MANAGER) || is_go_entry(e)
}

fn is_go_entry(e: &ManagedFieldsEntry) -> bool {
    e.manager.as_deref() == Some(names::GO_OPERATOR_FIELD_MANAGER)
        && e.operation.as_deref() == Some("Update")
        && e.subresource.as_deref().unwrap_or_default().is_empty()
}

/// Keeps only the entries [`is_marker`] selects, without their field sets, which are
/// most of an object's metadata and which nothing but the take-over needs.
pub fn keep_markers(meta: &mut ObjectMeta) {
    if let Some(entries) = meta.managed_fields.take() {
        let kept: Vec<_> = entries
            .into_iter()
            .filter(is_marker)
            .map(|e| ManagedFieldsEntry {
                fields_v1: None,
                ..e
            })
            .collect();
        meta.managed_fields = (!kept.is_empty()).then_some(kept);
    }
}

/// Whether this operator has applied the object, and whether the Go operator's fields are
/// still on it, from the entries [`keep_markers`] left.
pub fn writers(meta: &ObjectMeta) -> (bool, bool) {
    let entries = meta.managed_fields.iter().flatten();
    let ours = entries
        .clone()
        .any(|e| e.manager.as_deref() == Some(names::FIELD_MANAGER));
    let go = entries.clone().any(is_go_entry);
    (ours, go)
}

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

/// Folds the Go operator's entries of one child into ours, guarded by the object's
/// resourceVersion so a concurrent write makes it fail rather than lose an entry.
pub async fn take_over(
    api: &Api<DynamicObject>,
    kind: ChildKind,
    name: &str,
    api_version: &str,
) -> Result<(), ApplyError> {
    let read = |source| ApplyError::Read {
        kind,
        name: name.to_string(),
        source,
    };
    let Some(obj) = api.get_opt(name).await.map_err(read)? else {
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
        .map_err(|source| ApplyError::TakeOver {
            kind,
            name: name.to_string(),
            source,
        })?;
    info!(
        kind = kind.as_str(),
        name, "took over the Go Loki Operator's fields"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
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

    #[test]
    fn the_cache_keeps_who_wrote_an_object_without_field_sets() {
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![
                entry(
                    names::GO_OPERATOR_FIELD_MANAGER,
                    "Update",
                    None,
                    json!({"f:spec": {}}),
                ),
                entry(
                    "kube-controller-manager",
                    "Update",
                    Some("status"),
                    json!({}),
                ),
            ]),
            ..Default::default()
        };
        keep_markers(&mut meta);
        let kept = meta.managed_fields.as_ref().expect("kept");
        assert_eq!(kept.len(), 1);
        assert!(kept[0].fields_v1.is_none());
        assert_eq!(writers(&meta), (false, true));
        meta.managed_fields = Some(vec![entry(names::FIELD_MANAGER, "Apply", None, json!({}))]);
        keep_markers(&mut meta);
        assert_eq!(writers(&meta), (true, false));
        meta.managed_fields = Some(vec![entry("kubectl", "Update", None, json!({}))]);
        keep_markers(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(writers(&meta), (false, false));
    }
}
