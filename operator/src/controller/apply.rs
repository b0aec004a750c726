//! Apply: server-side apply of a stack's children under one field manager, and removal of
//! children the stack no longer renders.
//!
//! Idle is free: the applier remembers, per object, the hash of what it last applied and
//! the version the server gave back. An object whose desired state is unchanged and whose
//! cached version still matches is not sent again, so a resync in which nothing changed
//! writes nothing. An edit or deletion by someone else changes the cached version (or
//! removes the object), and the next reconcile applies it again.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use kube::api::{
    Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PropagationPolicy,
};
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use serde_json::Value;

use crate::controller::observe::{Caches, ChildKind};
use crate::names;
use crate::render::Child;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot serialise {kind} {name}: {source}")]
    Serialize {
        kind: &'static str,
        name: String,
        source: serde_json::Error,
    },
    #[error("server-side apply of {kind} {name} failed: {source}")]
    Apply {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("removing {kind} {name}, which the stack no longer renders, failed: {source}")]
    Delete {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error("the server does not serve {0}")]
    UnknownKind(&'static str),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Applied {
    hash: u64,
    /// `metadata.generation` where the kind has one (status updates do not change it),
    /// else `metadata.resourceVersion`.
    version: String,
}

fn version_of(meta: &ObjectMeta) -> String {
    match meta.generation {
        Some(g) => format!("g{g}"),
        None => format!("rv{}", meta.resource_version.as_deref().unwrap_or_default()),
    }
}

fn hash_json(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// (namespace, stack) → (kind, name) → what was applied.
type Memory = HashMap<(String, String), HashMap<(&'static str, String), Applied>>;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub applied: usize,
    pub unchanged: usize,
    pub pruned: usize,
}

pub struct Applier {
    client: Client,
    kinds: Vec<ChildKind>,
    memory: Mutex<Memory>,
}

impl Applier {
    pub fn new(client: Client, kinds: Vec<ChildKind>) -> Self {
        Applier {
            client,
            kinds,
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn kind(&self, kind: &'static str) -> Result<&ChildKind, ApplyError> {
        self.kinds
            .iter()
            .find(|k| k.kind == kind)
            .ok_or(ApplyError::UnknownKind(kind))
    }

    fn remembered(&self, key: &(String, String), obj: &(&'static str, String)) -> Option<Applied> {
        let memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        memory.get(key).and_then(|m| m.get(obj)).cloned()
    }

    fn remember(&self, key: &(String, String), obj: (&'static str, String), applied: Applied) {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        memory.entry(key.clone()).or_default().insert(obj, applied);
    }

    /// Drops what was remembered for a stack (it was deleted or set Unmanaged).
    pub fn forget(&self, namespace: &str, stack: &str) {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        memory.remove(&(namespace.to_string(), stack.to_string()));
    }

    /// Drops what was remembered for stacks that no longer exist. A stack deleted without
    /// a finalizer is never reconciled again, so this runs on every reconcile.
    pub fn retain(&self, live: &HashSet<(String, String)>) {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        memory.retain(|k, _| live.contains(k));
    }

    /// Applies every child, skipping those whose desired state and server version are
    /// unchanged since the last apply; then removes children no longer rendered.
    pub async fn apply(
        &self,
        namespace: &str,
        stack: &str,
        stack_uid: &str,
        children: &[Child],
        caches: &Caches,
    ) -> Result<ApplyReport, ApplyError> {
        let key = (namespace.to_string(), stack.to_string());
        let mut report = ApplyReport::default();
        for child in children {
            let kind = self.kind(child.kind())?;
            let name = child.name().to_string();
            let mut json = child.to_json().map_err(|source| ApplyError::Serialize {
                kind: kind.kind,
                name: name.clone(),
                source,
            })?;
            // The rendered type may be newer than what the server serves (policy/v1beta1
            // PodDisruptionBudgets before 1.21; the fields are the same).
            json["apiVersion"] = Value::String(kind.resource.api_version.clone());
            let hash = hash_json(&json);
            let cached = caches
                .child_store(kind.kind)
                .and_then(|s| {
                    s.get(&ObjectRef::new_with(&name, kind.resource.clone()).within(namespace))
                })
                .map(|m| version_of(&m.metadata));
            if let (Some(last), Some(now)) =
                (self.remembered(&key, &(kind.kind, name.clone())), cached)
            {
                if last.hash == hash && last.version == now {
                    report.unchanged += 1;
                    continue;
                }
            }
            let api = Api::<DynamicObject>::namespaced_with(
                self.client.clone(),
                namespace,
                &kind.resource,
            );
            let params = PatchParams::apply(names::FIELD_MANAGER).force();
            let result = api
                .patch(&name, &params, &Patch::Apply(&json))
                .await
                .map_err(|source| ApplyError::Apply {
                    kind: kind.kind,
                    name: name.clone(),
                    source,
                })?;
            self.remember(
                &key,
                (kind.kind, name),
                Applied {
                    hash,
                    version: version_of(&result.metadata),
                },
            );
            report.applied += 1;
        }
        report.pruned = self
            .prune(namespace, stack, stack_uid, children, caches)
            .await?;
        Ok(report)
    }

    /// Deletes children of this stack (by instance label and controller owner) that are no
    /// longer rendered, such as the ruler after it is disabled. Only the kinds `render`
    /// produces are considered: PersistentVolumeClaims are never touched.
    async fn prune(
        &self,
        namespace: &str,
        stack: &str,
        stack_uid: &str,
        children: &[Child],
        caches: &Caches,
    ) -> Result<usize, ApplyError> {
        let wanted: HashSet<(&str, &str)> = children.iter().map(|c| (c.kind(), c.name())).collect();
        let mut pruned = 0;
        for (kind, store) in &caches.children {
            let stale: Vec<String> = store
                .state()
                .iter()
                .filter(|m| m.metadata.namespace.as_deref() == Some(namespace))
                .filter(|m| {
                    m.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(names::LABEL_INSTANCE))
                        .map(String::as_str)
                        == Some(stack)
                })
                .filter(|m| {
                    m.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.controller == Some(true) && o.uid == stack_uid)
                })
                .filter_map(|m| m.metadata.name.clone())
                .filter(|n| !wanted.contains(&(kind.kind, n.as_str())))
                .collect();
            for name in stale {
                let api = Api::<DynamicObject>::namespaced_with(
                    self.client.clone(),
                    namespace,
                    &kind.resource,
                );
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => pruned += 1,
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(source) => {
                        return Err(ApplyError::Delete {
                            kind: kind.kind,
                            name,
                            source,
                        })
                    }
                }
                let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(m) = memory.get_mut(&(namespace.to_string(), stack.to_string())) {
                    m.retain(|(k, n), _| !(*k == kind.kind && *n == name));
                }
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_prefer_generation() {
        let mut m = ObjectMeta {
            resource_version: Some("7".into()),
            ..Default::default()
        };
        assert_eq!(version_of(&m), "rv7");
        m.generation = Some(3);
        assert_eq!(version_of(&m), "g3");
    }

    #[test]
    fn equal_json_hashes_equal() {
        let a = serde_json::json!({"a": 1, "b": [1, 2]});
        assert_eq!(hash_json(&a), hash_json(&a.clone()));
        assert_ne!(
            hash_json(&a),
            hash_json(&serde_json::json!({"a": 2, "b": [1, 2]}))
        );
    }
}
