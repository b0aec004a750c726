//! Which cached objects belong to which stack, kept beside the stores.
//!
//! A reconcile reads its own pods, children, StatefulSets and volumes through these
//! indexes instead of walking every store. A walk per reconcile made every reconcile
//! cost as much as the whole cluster: at 1,000 stacks, 27,000 children, 6,000 pods and
//! 4,000 volumes looked at for each of the tens of thousands of reconciles that turning
//! 1,000 stacks Ready takes (docs/performance.md).
//!
//! `scope::ScopedWriter` changes an index in the same call that changes its store, so
//! the two agree but for the instant between them: a reader may find a name whose object
//! has just gone (it is skipped) or miss one just added, as it could by reading the
//! store a moment earlier.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::{Resource, ResourceExt};

use crate::model::names;

/// The stack an object belongs to: (namespace, stack name). Volumes are indexed by their
/// claim's namespace alone, with an empty stack name: their claim's name tells the rest.
pub type StackKey = (String, String);
/// An object: its namespace (`None` when cluster-scoped) and name.
pub type Id = (Option<String>, String);
/// How a store's objects are indexed: the key of one, or `None` for none.
pub type KeyOf<K> = fn(&K) -> Option<StackKey>;

type Map = HashMap<StackKey, HashSet<Id>>;

#[derive(Default)]
struct State {
    live: Map,
}

/// The names of the objects of one store, by stack.
#[derive(Clone, Default)]
pub struct Index(Arc<RwLock<State>>);

impl Index {
    fn read(&self) -> RwLockReadGuard<'_, State> {
        // Every change is one insert or remove, so a poisoned lock is still consistent.
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The objects indexed under `key`.
    pub fn ids(&self, key: &StackKey) -> Vec<Id> {
        self.read()
            .live
            .get(key)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn insert(&self, key: Option<StackKey>, id: Id) {
        if let Some(key) = key {
            self.write().live.entry(key).or_default().insert(id);
        }
    }

    /// Forgets everything (a first list starting again).
    pub(crate) fn clear(&self) {
        self.write().live.clear();
    }

    pub(crate) fn remove(&self, key: Option<StackKey>, id: &Id) {
        let Some(key) = key else {
            return;
        };
        let mut st = self.write();
        if let Some(ids) = st.live.get_mut(&key) {
            ids.remove(id);
            if ids.is_empty() {
                st.live.remove(&key);
            }
        }
    }
}

impl Index {
    /// Everything indexed, to compare with a store.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Map {
        self.read().live.clone()
    }
}

pub fn id_of<K: Resource>(o: &K) -> Id {
    (o.meta().namespace.clone(), o.name_any())
}

/// Not indexed.
pub fn unindexed<K>(_: &K) -> Option<StackKey> {
    None
}

/// A stack's pods and children: by namespace and the stack's instance label, for objects
/// labelled as a LokiStack's.
pub fn by_instance<K: Resource>(o: &K) -> Option<StackKey> {
    let labels = o.labels();
    if labels.get(names::LABEL_NAME).map(String::as_str) != Some(names::LABEL_NAME_VALUE) {
        return None;
    }
    let stack = labels.get(names::LABEL_INSTANCE)?;
    Some((o.meta().namespace.clone()?, stack.clone()))
}

/// StatefulSets: by namespace and the LokiStack that controls them.
pub fn by_controller<K: Resource>(o: &K) -> Option<StackKey> {
    let owner = o
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == names::KIND && r.controller == Some(true))?;
    Some((o.meta().namespace.clone()?, owner.name.clone()))
}

/// Volumes: by their claim's namespace.
pub fn by_claim_namespace(pv: &PersistentVolume) -> Option<StackKey> {
    let ns = pv.spec.as_ref()?.claim_ref.as_ref()?.namespace.clone()?;
    Some((ns, String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, stack: &str) -> Option<StackKey> {
        Some((ns.into(), stack.into()))
    }

    fn id(ns: &str, name: &str) -> Id {
        (Some(ns.into()), name.into())
    }

    #[test]
    fn objects_are_indexed_by_stack_and_empty_sets_are_not_kept() {
        let index = Index::default();
        index.insert(key("a", "s"), id("a", "p1"));
        index.insert(key("a", "s"), id("a", "p2"));
        index.insert(None, id("a", "other"));
        index.remove(key("a", "s"), &id("a", "p1"));
        assert_eq!(index.ids(&("a".into(), "s".into())), [id("a", "p2")]);
        index.remove(key("a", "s"), &id("a", "p2"));
        assert!(
            index.0.read().unwrap().live.is_empty(),
            "no empty sets kept"
        );
    }
}
