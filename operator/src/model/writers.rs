//! Who wrote an object, from its `managedFields`: this operator (its one field manager),
//! the Go Loki Operator (whose fields the first apply takes over), or someone else whose
//! edit of a field beyond metadata and status means the object may differ from what was
//! applied. The caches keep only the entries that say so ([`keep_markers`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::ObjectMeta;

use crate::model::names;

/// A field manager entry the cache keeps (without its field set): who wrote the object.
pub fn is_marker(e: &ManagedFieldsEntry) -> bool {
    let manager = e.manager.as_deref();
    manager == Some(names::FIELD_MANAGER) || is_go_entry(e) || is_foreign_edit(e)
}

/// Someone else (a `kubectl edit`, `kubectl scale`, another controller) owns fields of
/// the object beyond its metadata and status: the object may differ from what this
/// operator applied even where its applied-hash says otherwise. Status writers and
/// metadata-only writers (the deployment controller's revision annotation) do not count.
pub fn is_foreign_edit(e: &ManagedFieldsEntry) -> bool {
    let ours = e.manager.as_deref() == Some(names::FIELD_MANAGER);
    let status = e.subresource.as_deref() == Some("status");
    let marked = e.operation.as_deref() == Some(FOREIGN_EDIT);
    marked || (!ours && !status && !is_go_entry(e) && !top_fields(e).is_empty())
}

/// The top-level fields an entry owns, but metadata and status: `f:spec` as `spec`.
fn top_fields(e: &ManagedFieldsEntry) -> Vec<String> {
    e.fields_v1
        .as_ref()
        .and_then(|f| f.0.as_object())
        .into_iter()
        .flat_map(|f| f.keys())
        .filter_map(|k| k.strip_prefix("f:"))
        .filter(|k| *k != "metadata" && *k != "status")
        .map(str::to_string)
        .collect()
}

pub fn is_go_entry(e: &ManagedFieldsEntry) -> bool {
    e.manager.as_deref() == Some(names::GO_OPERATOR_FIELD_MANAGER)
        && e.operation.as_deref() == Some("Update")
        && e.subresource.as_deref().unwrap_or_default().is_empty()
}

/// Keeps only the entries [`is_marker`] selects, without their field sets, which are
/// most of an object's metadata and which nothing but the take-over needs. A foreign
/// edit keeps the top-level fields it owns (`{"f:spec": {}}`), marked so that stripping
/// again keeps it.
pub fn keep_markers(meta: &mut ObjectMeta) {
    if let Some(entries) = meta.managed_fields.take() {
        let kept: Vec<_> = entries
            .into_iter()
            .filter(is_marker)
            .map(|e| {
                let foreign = is_foreign_edit(&e);
                let fields: serde_json::Map<String, serde_json::Value> = top_fields(&e)
                    .into_iter()
                    .map(|f| (format!("f:{f}"), serde_json::json!({})))
                    .collect();
                ManagedFieldsEntry {
                    fields_v1: foreign.then_some(FieldsV1(serde_json::Value::Object(fields))),
                    operation: if foreign {
                        Some(FOREIGN_EDIT.into())
                    } else {
                        e.operation
                    },
                    ..e
                }
            })
            .collect();
        meta.managed_fields = (!kept.is_empty()).then_some(kept);
    }
}

/// The top-level fields (`spec`, `secrets`, ...) that someone else owns on the object,
/// from the entries [`keep_markers`] left.
pub fn foreign_fields(meta: &ObjectMeta) -> std::collections::BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| e.operation.as_deref() == Some(FOREIGN_EDIT))
        .flat_map(top_fields)
        .collect()
}

/// The operation a kept [`is_foreign_edit`] entry carries in the cache.
const FOREIGN_EDIT: &str = "ForeignEdit";

/// Who wrote a child, from the entries [`keep_markers`] left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Writers {
    /// This operator has applied it.
    pub ours: bool,
    /// The Go operator's fields are still on it.
    pub go: bool,
}

pub fn writers(meta: &ObjectMeta) -> Writers {
    let entries = meta.managed_fields.iter().flatten();
    Writers {
        ours: entries
            .clone()
            .any(|e| e.manager.as_deref() == Some(names::FIELD_MANAGER)),
        go: entries.clone().any(is_go_entry),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::field_manager_entry as entry;

    #[test]
    fn the_cache_keeps_who_wrote_an_object_without_field_sets() {
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![
                entry(
                    names::GO_OPERATOR_FIELD_MANAGER,
                    "Update",
                    None,
                    serde_json::json!({"f:spec": {}}),
                ),
                entry(
                    "kube-controller-manager",
                    "Update",
                    Some("status"),
                    serde_json::json!({}),
                ),
            ]),
            ..Default::default()
        };
        keep_markers(&mut meta);
        let kept = meta.managed_fields.as_ref().expect("kept");
        assert_eq!(kept.len(), 1);
        assert!(kept[0].fields_v1.is_none());
        let w = |ours, go| Writers { ours, go };
        assert_eq!(writers(&meta), w(false, true));
        meta.managed_fields = Some(vec![entry(
            names::FIELD_MANAGER,
            "Apply",
            None,
            serde_json::json!({}),
        )]);
        keep_markers(&mut meta);
        assert_eq!(writers(&meta), w(true, false));
        // A metadata-only writer (the deployment controller's revision annotation) is
        // not an edit of what we applied.
        meta.managed_fields = Some(vec![entry(
            "kube-controller-manager",
            "Update",
            None,
            serde_json::json!({"f:metadata": {"f:annotations": {}}}),
        )]);
        keep_markers(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(writers(&meta), w(false, false));
    }

    /// `kubectl edit` of the spec is an edit by someone else, and the mark (with the
    /// top-level fields it owns) outlives the stripping of the field sets.
    #[test]
    fn the_cache_marks_a_foreign_edit_of_the_spec() {
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![
                entry(
                    names::FIELD_MANAGER,
                    "Apply",
                    None,
                    serde_json::json!({"f:spec": {}}),
                ),
                entry(
                    "kubectl-edit",
                    "Update",
                    None,
                    serde_json::json!({"f:spec": {"f:replicas": {}}}),
                ),
                entry(
                    "token-controller",
                    "Update",
                    None,
                    serde_json::json!({"f:secrets": {}}),
                ),
            ]),
            ..Default::default()
        };
        let fields = |m: &ObjectMeta| foreign_fields(m).into_iter().collect::<Vec<_>>();
        keep_markers(&mut meta);
        assert_eq!(fields(&meta), ["secrets", "spec"]);
        keep_markers(&mut meta);
        assert_eq!(
            fields(&meta),
            ["secrets", "spec"],
            "stripping twice keeps them"
        );
        assert!(writers(&meta).ours);
    }
}
