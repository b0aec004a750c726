//! Apply: server-side apply of a stack's children under one field manager, and removal of
//! children the stack no longer renders.
//!
//! Idle is free: the applier remembers, per object, the hash of what it last applied and
//! the version the server gave back. An object whose desired state is unchanged and whose
//! cached version still matches is not sent again, so a resync in which nothing changed
//! writes nothing. An edit or deletion by someone else changes the cached version (or
//! removes the object), and the next reconcile applies it again.
//!
//! A failover writes nothing either: the hash also goes onto the object, as
//! [`names::ANNOTATION_APPLIED_HASH`]. A new leader, which remembers nothing, skips an
//! object whose annotation matches what it renders, unless someone else owns fields of
//! it beyond metadata and status (their edit may have changed what was applied), or the
//! object as it is live no longer holds what it renders ([`holds`]): an edit that only
//! removes a field, or clears `managedFields`, leaves no other owner behind, so the
//! first reconcile of a term reads each child once and compares.
//!
//! So is an upgrade, as far as the hash goes: it is SHA-256 of the object's canonical
//! JSON ([`applied_hash`]), which depends on the rendered object alone, not on the Rust
//! release or the process that computed it. A new operator version whose render of a
//! child is unchanged writes nothing to it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::stream::{self, StreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GetParams, Patch, PatchParams, PropagationPolicy,
};
use kube::Client;
use serde_json::Value;

use crate::act::takeover::{self, TakeOverError};
use crate::intent::ApplyReport;
use crate::model::conditions::Reason;
use crate::model::names;
use crate::observe::{version_of, ChildState, Snapshot};
use crate::render::kinds::ChildKind;
use crate::render::Child;

/// Applies of one stack in flight at once: a new 1x.demo stack has 25 children after
/// its ServiceAccount and ConfigMap. Bounded so that one stack's apply cannot crowd out
/// the API server's other clients.
pub const APPLY_IN_FLIGHT: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot serialise {kind} {name}: {source}")]
    Serialize {
        kind: ChildKind,
        name: String,
        source: serde_json::Error,
    },
    #[error("server-side apply of {kind} {name} failed: {source}")]
    Apply {
        kind: ChildKind,
        name: String,
        source: kube::Error,
    },
    #[error("{kind} {name} already exists and is not this stack's ({owner}); the operator leaves it untouched. Rename or delete that {kind}, or rename the LokiStack")]
    NameConflict {
        kind: ChildKind,
        name: String,
        /// Who controls it, as far as its metadata says.
        owner: String,
    },
    #[error("cannot read {kind} {name} to check who owns it: {source}")]
    Read {
        kind: ChildKind,
        name: String,
        source: kube::Error,
    },
    #[error(
        "taking over {kind} {name} from the Go Loki Operator's field manager failed: {source}"
    )]
    TakeOver {
        kind: ChildKind,
        name: String,
        source: kube::Error,
    },
    #[error("removing {kind} {name}, which the stack no longer renders, failed: {source}")]
    Delete {
        kind: ChildKind,
        name: String,
        source: kube::Error,
    },
}

impl ApplyError {
    fn taking_over(kind: ChildKind, name: &str, e: TakeOverError) -> ApplyError {
        let name = name.to_string();
        match e {
            TakeOverError::Read(source) => ApplyError::Read { kind, name, source },
            TakeOverError::Write(source) => ApplyError::TakeOver { kind, name, source },
        }
    }

    /// The Degraded condition's reason.
    pub fn reason(&self) -> Reason {
        match self {
            ApplyError::NameConflict { .. } => Reason::NameConflict,
            _ => Reason::ApplyFailed,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Applied {
    /// [`applied_hash`] of what was applied.
    hash: String,
    /// [`version_of`] the object the server returned.
    version: String,
}

/// Whether the server's copy is what this operator would apply now (`rendered`, whose
/// hash is `hash`), as far as the cache tells: what it applied last in this term (same
/// hash, same version), or, with no memory of it (a new leader), an object whose
/// applied-hash annotation is this hash, that this operator's field manager still owns
/// fields of (someone may have cleared `managedFields`), and of whose rendered fields
/// nobody else owns any (a controller's own fields, such as a ServiceAccount's token
/// `secrets`, are no edit of ours). Another writer's fields on an unchanged object change
/// neither our hash nor its generation: only the cache's marks tell that a take-over is
/// due. With no memory, the live object is read too ([`live_holds`]).
fn unchanged(remembered: Option<&Applied>, now: &ChildState, hash: &str, rendered: &Value) -> bool {
    let same = match remembered {
        Some(last) => last.hash == hash && last.version == now.version,
        None => {
            let edited = now.foreign_fields.iter().any(|f| rendered.get(f).is_some());
            now.applied_hash.as_deref() == Some(hash) && now.applied_by_us && !edited
        }
    };
    same && !now.written_by_go
}

/// Whether the live object (read from the API server's watch cache) still holds
/// `rendered`; see [`holds`].
async fn live_holds(
    api: &Api<DynamicObject>,
    kind: ChildKind,
    name: &str,
    rendered: &Value,
) -> Result<bool, ApplyError> {
    let live = match api.get_with(name, &GetParams::any()).await {
        Ok(live) => live,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(source) => {
            return Err(ApplyError::Read {
                kind,
                name: name.to_string(),
                source,
            })
        }
    };
    let live = serde_json::to_value(&live).map_err(|source| ApplyError::Serialize {
        kind,
        name: name.to_string(),
        source,
    })?;
    let rendered_meta = &rendered["metadata"];
    let meta_held = ["labels", "annotations", "ownerReferences"]
        .iter()
        .all(|k| holds(&live["metadata"][*k], &rendered_meta[*k]));
    let body_held = rendered
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
        .all(|(k, v)| holds(&live[k], v));
    Ok(meta_held && body_held)
}

/// Whether `live` holds every value of `want` as the API server stores it: each key of
/// an object with an equal value (a key the server adds, a default, is no difference),
/// lists item by item, quantities by their value (`0.5` is stored as `500m`). A zero value
/// (`""`, `0`, `false`, `[]`, `{}`, null) may be missing, as the server leaves out
/// empty fields. A field removed from the live object is a difference.
pub fn holds(live: &Value, want: &Value) -> bool {
    match (want, live) {
        (w, Value::Null) => is_zero(w),
        (Value::Object(w), Value::Object(l)) => w
            .iter()
            .all(|(k, v)| holds(l.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(w), Value::Array(l)) => {
            w.len() == l.len() && w.iter().zip(l).all(|(w, l)| holds(l, w))
        }
        (Value::String(w), Value::String(l)) => {
            w == l || quantity(w).is_some_and(|q| quantity(l) == Some(q))
        }
        (Value::Number(w), Value::Number(l)) => w.as_f64() == l.as_f64(),
        (w, l) => w == l,
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// A Kubernetes quantity's value (`500m`, `1Gi`, `2e3`), to compare two spellings.
fn quantity(s: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, f)| s.strip_suffix(suffix).map(|n| (n, *f)))
        .unwrap_or((s, 1.0));
    let starts_numeric = number
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '.' || c == '-' || c == '+');
    if !starts_numeric {
        return None;
    }
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Never adopt: an object of the child's name that exists without this stack's
/// controller owner reference (a user's ConfigMap, another stack's Service) is not ours to
/// take over, and a forced apply would. Only called for names the caches do not show as
/// ours, so a steady state costs no reads; a new stack costs one read per child.
///
/// The read is served from the API server's watch cache (`resourceVersion=0`), not by a
/// quorum read of etcd: a new stack's 27 reads were a quarter of the operator's requests
/// while 1,000 stacks were created (docs/performance.md). The cache can trail etcd by
/// moments, which widens the window between this read and the apply that a quorum read
/// has anyway; the objects this guards against (a user's ConfigMap, another stack's
/// Service) exist long before.
async fn check_not_foreign(
    api: &Api<DynamicObject>,
    kind: ChildKind,
    name: &str,
    stack_uid: &str,
) -> Result<(), ApplyError> {
    let existing = api
        .get_metadata_opt_with(name, &GetParams::any())
        .await
        .map_err(|source| ApplyError::Read {
            kind,
            name: name.to_string(),
            source,
        })?;
    let Some(existing) = existing else {
        return Ok(());
    };
    let owners = existing.metadata.owner_references.unwrap_or_default();
    let controller = owners.iter().find(|o| o.controller == Some(true));
    match controller {
        Some(o) if o.uid == stack_uid => Ok(()),
        Some(o) => Err(ApplyError::NameConflict {
            kind,
            name: name.to_string(),
            owner: format!("controlled by {} {}", o.kind, o.name),
        }),
        None => Err(ApplyError::NameConflict {
            kind,
            name: name.to_string(),
            owner: "no controller owner".into(),
        }),
    }
}

/// What [`names::ANNOTATION_APPLIED_HASH`] holds: `sha256:` and the hex SHA-256 of the
/// object's canonical JSON (object keys sorted at every level, no whitespace), so that
/// it depends on the object alone: not on the order a serializer emits fields in, the
/// Rust release, or the operator version that computed it.
pub fn applied_hash(v: &Value) -> String {
    use sha2::{Digest, Sha256};
    let mut canonical = String::new();
    write_canonical(v, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

type StackKey = (String, String);
/// (namespace, stack) → (kind, name) → what was applied.
type Memory = HashMap<StackKey, HashMap<(ChildKind, String), Applied>>;

pub struct Applier {
    client: Client,
    memory: Mutex<Memory>,
}

impl Applier {
    pub fn new(client: Client) -> Self {
        Applier {
            client,
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A panic while holding the lock leaves the map consistent (every write is one
        // insert or remove), so a poisoned lock is still usable.
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn api(&self, namespace: &str, kind: ChildKind) -> (Api<DynamicObject>, ApiResource) {
        let resource = kind.resource();
        let api = Api::namespaced_with(self.client.clone(), namespace, &resource);
        (api, resource)
    }

    /// Drops what was remembered for a stack (it was deleted or set Unmanaged).
    pub fn forget(&self, namespace: &str, stack: &str) {
        self.memory()
            .remove(&(namespace.to_string(), stack.to_string()));
    }

    /// Drops what was remembered for stacks that no longer exist. A stack deleted without
    /// a finalizer is never reconciled again, so this runs on every reconcile.
    pub fn retain(&self, live: &HashSet<StackKey>) {
        self.memory().retain(|k, _| live.contains(k));
    }

    /// Applies every child, skipping those whose desired state and server version are
    /// unchanged since the last apply; then removes `stale`. The ServiceAccount and the
    /// ConfigMaps go first, since every pod needs them; the other children then go
    /// together, [`APPLY_IN_FLIGHT`] at a time, so a new stack costs a few round trips
    /// instead of two per object. A failure stops before the next wave and before any
    /// removal; the error returned is the first in render order. A rules ConfigMap is
    /// the exception: its failure stops only the removals, so that rule objects, which
    /// others may write, never hold back the stack's workloads (the ruler mounts its
    /// rules ConfigMaps as optional), and is returned once the rest is applied.
    pub async fn apply(
        &self,
        snapshot: &Snapshot,
        children: &[Child],
        stale: &[(ChildKind, String)],
    ) -> Result<ApplyReport, ApplyError> {
        let key = (snapshot.namespace.clone(), snapshot.name.clone());
        let mut report = ApplyReport::default();
        let (first, rest): (Vec<&Child>, Vec<&Child>) = children.iter().partition(|c| {
            matches!(
                ChildKind::of(c),
                ChildKind::ServiceAccount | ChildKind::ConfigMap
            )
        });
        let mut rules_failed = None;
        for wave in [first, rest] {
            // Built before the stream rather than by a closure inside it: a closure over
            // borrowed children there fails the higher-ranked lifetime check that the
            // controller's Send bound brings.
            let pending: Vec<_> = wave
                .iter()
                .map(|child| self.apply_one(&key, snapshot, child))
                .collect();
            let results: Vec<Result<bool, ApplyError>> = stream::iter(pending)
                .buffered(APPLY_IN_FLIGHT)
                .collect()
                .await;
            for (child, sent) in wave.iter().zip(results) {
                match sent {
                    Ok(true) => report.applied += 1,
                    Ok(false) => report.unchanged += 1,
                    Err(e) if child.is_rules() => {
                        rules_failed.get_or_insert(e);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if let Some(e) = rules_failed {
            return Err(e);
        }
        for (kind, name) in stale {
            if self.delete(&key, *kind, name).await? {
                report.pruned += 1;
            }
        }
        Ok(report)
    }

    /// Server-side applies one child unless it is known unchanged; true if it was sent.
    async fn apply_one(
        &self,
        key: &StackKey,
        snapshot: &Snapshot,
        child: &Child,
    ) -> Result<bool, ApplyError> {
        let kind = ChildKind::of(child);
        let name = child.name().to_string();
        let (api, resource) = self.api(&key.0, kind);
        let mut json = child.to_json().map_err(|source| ApplyError::Serialize {
            kind,
            name: name.clone(),
            source,
        })?;
        let hash = applied_hash(&json);
        json["metadata"]["annotations"][names::ANNOTATION_APPLIED_HASH] =
            Value::String(hash.clone());
        let id = (kind, name);
        let server = snapshot.children.get(&id);
        let remembered = self.memory().get(key).and_then(|m| m.get(&id)).cloned();
        if let Some(now) = server.filter(|now| unchanged(remembered.as_ref(), now, &hash, &json)) {
            // Known this term, or read live and found to hold what is rendered.
            if remembered.is_some() || live_holds(&api, kind, &id.1, &json).await? {
                self.remember(key, id, hash, now.version.clone());
                return Ok(false);
            }
        }
        match server {
            None => check_not_foreign(&api, kind, &id.1, &snapshot.uid).await?,
            Some(s) if s.written_by_go => {
                takeover::take_over(&api, kind, &id.1, &resource.api_version)
                    .await
                    .map_err(|e| ApplyError::taking_over(kind, &id.1, e))?
            }
            Some(_) => {}
        }
        let params = PatchParams::apply(names::FIELD_MANAGER).force();
        let result = api
            .patch(&id.1, &params, &Patch::Apply(&json))
            .await
            .map_err(|source| ApplyError::Apply {
                kind,
                name: id.1.clone(),
                source,
            })?;
        self.remember(key, id, hash, version_of(&result.metadata));
        Ok(true)
    }

    fn remember(&self, key: &StackKey, id: (ChildKind, String), hash: String, version: String) {
        self.memory()
            .entry(key.clone())
            .or_default()
            .insert(id, Applied { hash, version });
    }

    /// Deletes a child the stack no longer renders (such as the ruler after it is
    /// disabled); true if it was there. Only kinds `render` produces ever get here, so
    /// PersistentVolumeClaims are never touched.
    async fn delete(
        &self,
        key: &StackKey,
        kind: ChildKind,
        name: &str,
    ) -> Result<bool, ApplyError> {
        let (api, _) = self.api(&key.0, kind);
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        let deleted = match api.delete(name, &dp).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 => false,
            Err(source) => {
                return Err(ApplyError::Delete {
                    kind,
                    name: name.to_string(),
                    source,
                })
            }
        };
        if let Some(m) = self.memory().get_mut(key) {
            m.remove(&(kind, name.to_string()));
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cluster::FakeCluster;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A rules ConfigMap the server refuses (its content comes from rule objects, which
    /// others write) holds back neither the stack's workloads nor its error: the next
    /// wave is applied, nothing stale is removed, and the refusal is returned.
    #[tokio::test]
    async fn a_refused_rules_config_map_holds_back_only_the_removals() {
        let cluster = FakeCluster::new();
        let applier = Applier::new(cluster.client.clone());
        let snapshot = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            uid: "uid-s".into(),
            ..Default::default()
        };
        let rules: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {
            "name": "s-rules-t-0", "namespace": "ns",
            "annotations": {(crate::ruler::names::ANNOTATION_RULES_TENANT): "t"}}}))
        .expect("config map");
        let config: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "s-config", "namespace": "ns"}}),
        )
        .expect("config map");
        let querier: Deployment = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "s-querier", "namespace": "ns"}}),
        )
        .expect("deployment");
        let children = [
            Child::ConfigMap(config),
            Child::ConfigMap(rules),
            Child::Deployment(querier),
        ];
        assert!(children[1].is_rules() && !children[0].is_rules());
        cluster.fail_next("apply", "ns/configmaps/s-rules-t-0", 422, "Invalid");
        let stale = [(ChildKind::ConfigMap, "s-rules-old-0".to_string())];
        let result = applier.apply(&snapshot, &children, &stale).await;
        assert!(
            matches!(&result, Err(ApplyError::Apply { name, .. }) if name == "s-rules-t-0"),
            "{result:?}"
        );
        let mut sent: Vec<String> = cluster
            .take_calls()
            .iter()
            .filter(|c| c.is_write())
            .map(|c| c.line())
            .collect();
        sent.sort();
        assert_eq!(
            sent,
            [
                "apply ns/configmaps/s-config",
                "apply ns/configmaps/s-rules-t-0",
                "apply ns/deployments/s-querier",
            ],
            "the workloads go on, the stale rules ConfigMap stays"
        );
    }

    /// What the server does to an applied object is no difference (defaults added,
    /// empty fields left out, quantities respelled); a field removed or changed is.
    #[test]
    fn a_live_object_holds_what_was_rendered_unless_a_field_went() {
        let rendered = serde_json::json!({"spec": {
            "replicas": 2,
            "template": {"spec": {
                "containers": [{"name": "loki", "args": ["-target=ingester"], "env": [{"name": "A", "value": ""}],
                                "resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
                "securityContext": {},
            }},
        }});
        let live = serde_json::json!({"spec": {
            "replicas": 2,
            "revisionHistoryLimit": 10,
            "template": {"spec": {
                "containers": [{"name": "loki", "args": ["-target=ingester"], "env": [{"name": "A"}],
                                "imagePullPolicy": "IfNotPresent",
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
                "dnsPolicy": "ClusterFirst",
            }},
        }});
        assert!(holds(&live, &rendered));
        let mut removed = live.clone();
        removed["spec"]["template"]["spec"]
            .as_object_mut()
            .map(|s| s.remove("topologySpreadConstraints"));
        assert!(!holds(&removed, &rendered), "a removed field is drift");
        let mut changed = live.clone();
        changed["spec"]["replicas"] = serde_json::json!(3);
        assert!(!holds(&changed, &rendered), "a changed value is drift");
        let mut cpu = live;
        cpu["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            serde_json::json!("600m");
        assert!(!holds(&cpu, &rendered), "another quantity is drift");
        assert_eq!(quantity("2e3"), Some(2000.0));
        assert_eq!(quantity("ingester"), None);
    }

    #[test]
    fn equal_json_hashes_equal() {
        let a = serde_json::json!({"a": 1, "b": [1, 2]});
        assert_eq!(applied_hash(&a), applied_hash(&a.clone()));
        assert_ne!(
            applied_hash(&a),
            applied_hash(&serde_json::json!({"a": 2, "b": [1, 2]}))
        );
        assert_ne!(
            applied_hash(&serde_json::json!({"b": [1, 2]})),
            applied_hash(&serde_json::json!({"b": [2, 1]})),
            "a list's order is content"
        );
    }

    /// The hash is a fixed function of the object, whatever the toolchain: an upgrade
    /// of the operator or of Rust that renders a child the same way finds its annotation
    /// equal and writes nothing. The expected value is `sha256sum` of the canonical text
    /// `{"a":"x\"y","b":[1,2.5,null,true],"c":{"d":{},"e":[]}}`, computed outside Rust.
    #[test]
    fn the_applied_hash_is_sha256_of_the_canonical_json() {
        let reordered = serde_json::json!({
            "c": {"e": [], "d": {}},
            "b": [1, 2.5, null, true],
            "a": "x\"y",
        });
        assert_eq!(
            applied_hash(&reordered),
            "sha256:220dc8af4d1ed7bb6b49207d1b6cec1b0e64fa28112835c278353de07841a88a"
        );
    }

    /// In a term, memory decides; a new leader trusts the object's applied-hash unless
    /// someone else edited it; the Go operator's fields always mean a take-over.
    #[test]
    fn unchanged_in_a_term_or_by_the_annotation_after_a_failover() {
        let spec = serde_json::json!({"kind": "Deployment", "spec": {"replicas": 2}});
        let hash = applied_hash(&spec);
        let hash = hash.as_str();
        let other = applied_hash(&serde_json::json!({"kind": "Deployment"}));
        let other = other.as_str();
        let tagged = ChildState {
            applied_hash: Some(hash.to_string()),
            ..ChildState::ours("g3")
        };
        let last = Applied {
            hash: hash.to_string(),
            version: "g3".into(),
        };
        assert!(unchanged(Some(&last), &tagged, hash, &spec));
        assert!(
            !unchanged(Some(&last), &tagged, other, &spec),
            "the spec changed"
        );
        let edited = ChildState {
            version: "g4".into(),
            ..tagged.clone()
        };
        assert!(
            !unchanged(Some(&last), &edited, hash, &spec),
            "someone edited it"
        );
        assert!(
            unchanged(None, &tagged, hash, &spec),
            "a new leader, nothing changed"
        );
        assert!(!unchanged(None, &tagged, other, &spec));
        assert!(
            !unchanged(None, &ChildState::ours("g3"), hash, &spec),
            "never applied with the annotation"
        );
        let foreign = ChildState {
            foreign_fields: ["spec".to_string()].into(),
            ..tagged.clone()
        };
        let token = ChildState {
            foreign_fields: ["secrets".to_string()].into(),
            ..tagged.clone()
        };
        assert!(
            unchanged(None, &token, hash, &spec),
            "a field we never render"
        );
        assert!(
            !unchanged(None, &foreign, hash, &spec),
            "kubectl edit: apply again"
        );
        let go = ChildState {
            written_by_go: true,
            ..tagged
        };
        assert!(!unchanged(Some(&last), &go, hash, &spec));
    }
}
