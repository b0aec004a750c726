//! The bodies of the ruler's objects that some stack picks now, and only those.
//!
//! The rule kinds are watched metadata only (`rules.rs`): labels, namespace and name are
//! all that picking reads, so an AlertingRule no stack picks costs its metadata however
//! large it is. A body is read (one GET) when a stack picks its object and the body held
//! is not of the object's current resourceVersion, and let go as soon as no stack picks
//! it: after a change of the object (labels, deletion), of a stack (`spec.rules`, its
//! management state) or of a namespace's labels. A body that arrives or changes re-runs
//! the stacks that pick it (and those that picked it before), and the rules' status pass.
//!
//! "Picks" is the reconciler's: an AlertingRule or RecordingRule that a managed stack's
//! `spec.rules` selects (`ruler::check::selects`), the RulerConfig named like a managed
//! stack with rules enabled. Stacks that are Unmanaged or being deleted are not
//! reconciled, so they pick nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ObjectMeta};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::caches::rule_kinds::{namespace_labels, strip, NamespaceStore, RuleKind, RuleMeta};
use crate::caches::scope::synced;
use crate::caches::stacks::stack_ref;
use crate::caches::taps::Taps;
use crate::model::api::{ManagementState, RulesSpec};
use crate::model::text::shorten;
use crate::ruler::check::selects;

/// The metadata caches of the served rule kinds.
pub type RuleStores = BTreeMap<RuleKind, Store<RuleMeta>>;

/// A stack, `(namespace, name)`.
pub type StackId = (String, String);

/// Changes this close together make one round of reads.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// How soon a round runs again after a read failed, when no change comes first.
const RETRY: Duration = Duration::from_secs(5);
/// Bodies read at once.
const READS: usize = 8;

/// Where a rule object lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BodyKey {
    pub kind: RuleKind,
    pub namespace: String,
    pub name: String,
}

impl BodyKey {
    pub fn of(kind: RuleKind, meta: &ObjectMeta) -> BodyKey {
        BodyKey {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// A stack that picks rules: managed, not being deleted, rules enabled.
#[derive(Clone, Debug)]
pub struct Picker {
    pub namespace: String,
    pub name: String,
    pub rules: RulesSpec,
}

/// The stacks that pick rules, as the caches hold them.
pub fn pickers(stacks: &Store<DynamicObject>) -> Vec<Picker> {
    stacks
        .state()
        .iter()
        .filter_map(|s| {
            // An Unmanaged stack has nothing written for it, a stack being deleted
            // picks nothing any more.
            let unmanaged = s
                .data
                .pointer("/spec/managementState")
                .and_then(|m| serde_json::from_value(m.clone()).ok())
                == Some(ManagementState::Unmanaged);
            if unmanaged || s.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let rules: RulesSpec =
                serde_json::from_value(s.data.pointer("/spec/rules")?.clone()).ok()?;
            rules.enabled.then(|| Picker {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
                rules,
            })
        })
        .collect()
}

/// The stacks among `pickers` that pick one object now, sorted. `ns_labels` is asked for
/// the labels of the object's namespace only when a stack of another namespace might
/// pick it by them.
pub fn picked_by(
    pickers: &[Picker],
    kind: RuleKind,
    meta: &ObjectMeta,
    ns_labels: impl FnOnce() -> Option<BTreeMap<String, String>>,
) -> Vec<StackId> {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let name = meta.name.as_deref().unwrap_or_default();
    let mut out: Vec<StackId> = if kind == RuleKind::RulerConfig {
        pickers
            .iter()
            .filter(|s| s.namespace == ns && s.name == name)
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .collect()
    } else {
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let needs_ns = pickers
            .iter()
            .any(|s| s.namespace != ns && s.rules.namespace_selector.is_some());
        let ns_labels = if needs_ns { ns_labels() } else { None };
        pickers
            .iter()
            .filter(|s| selects(&s.rules, &s.namespace, ns, labels, ns_labels.as_ref()))
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .collect()
    };
    out.sort();
    out.dedup();
    out
}

/// Decides, from a body just read, whether no stack can load it, and why (one reason a
/// line). Given by the planning layer (`plan::rules::check`): the caches decide nothing,
/// they only keep less of what was refused.
pub type Judge = Arc<dyn Fn(RuleKind, &DynamicObject) -> Result<(), Vec<String>> + Send + Sync>;

/// Of a refused body's reasons, the first few, each cut short: a refused object costs
/// about what its metadata does, however large it is.
const MAX_REASONS: usize = 8;
const MAX_REASON_BYTES: usize = 1000;
/// A refused body's stored conditions (what the status pass compares with) are kept up to
/// this size; larger, they are dropped and the pass writes its condition afresh.
const MAX_CONDITIONS_BYTES: usize = 16 * 1024;

/// One body held.
#[derive(Clone, Debug)]
pub struct Held {
    /// As the server returned it, less what is never read (`rule_kinds::strip`); of a
    /// refused one, its identity and stored conditions only ([`refused_stub`]).
    pub body: Arc<DynamicObject>,
    /// Why no stack can load it, if the judge refused it.
    pub refused: Option<Arc<Vec<String>>>,
    /// The metadata's resourceVersion it was read for (the body's own may be newer).
    asked: String,
    /// The stacks that picked it when last looked at: re-run when it changes or goes.
    picked_by: Vec<StackId>,
}

impl Held {
    fn loaded(&self) -> Loaded {
        Loaded {
            body: self.body.clone(),
            refused: self.refused.clone(),
        }
    }

    fn uid(&self) -> Option<&str> {
        self.body.metadata.uid.as_deref()
    }

    fn version(&self) -> Option<&str> {
        self.body.metadata.resource_version.as_deref()
    }

    /// Whether the body is of the object `meta` describes, as it is now: the same object
    /// (uid), and the version the metadata names or a newer one.
    fn is_current_for(&self, meta: &ObjectMeta) -> bool {
        let rv = meta.resource_version.as_deref();
        self.uid() == meta.uid.as_deref() && (self.version() == rv || Some(&*self.asked) == rv)
    }
}

/// A body as the caches hold it: the object, and why it was refused if it was (then the
/// object is its stub).
#[derive(Clone, Debug)]
pub struct Loaded {
    pub body: Arc<DynamicObject>,
    pub refused: Option<Arc<Vec<String>>>,
}

/// What is kept of a refused body: its name, uid, versions and stored conditions, and its
/// reasons cut to [`MAX_REASONS`] of [`MAX_REASON_BYTES`].
fn refused_stub(body: DynamicObject, reasons: Vec<String>) -> (DynamicObject, Vec<String>) {
    let m = body.metadata;
    let meta = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        ..ObjectMeta::default()
    };
    let conditions = body
        .data
        .pointer("/status/conditions")
        .filter(|c| serde_json::to_vec(c).map_or(0, |v| v.len()) <= MAX_CONDITIONS_BYTES)
        .cloned();
    let mut stub = DynamicObject {
        types: body.types,
        metadata: meta,
        data: serde_json::json!({}),
    };
    if let Some(c) = conditions {
        stub.data = serde_json::json!({"status": {"conditions": c}});
    }
    let more = reasons.len().saturating_sub(MAX_REASONS);
    let mut kept: Vec<String> = reasons
        .into_iter()
        .take(MAX_REASONS)
        .map(|r| shorten(r, MAX_REASON_BYTES))
        .collect();
    if more > 0 {
        kept.push(format!("and {more} more"));
    }
    (stub, kept)
}

/// The bodies held, shared by the task that reads them, the reconciles and the rules'
/// status pass.
#[derive(Clone)]
pub struct Bodies {
    held: Arc<RwLock<HashMap<BodyKey, Held>>>,
    /// Refuses bodies on arrival; none: every body is held whole.
    judge: Option<Judge>,
    /// Counts the changes of `held`, for a reconcile waiting for a body.
    changes: watch::Sender<u64>,
    /// Set once the first round has read every body picked then (or tried to).
    ready: watch::Sender<bool>,
    /// Starts a round: a rule, a stack or a namespace changed.
    wake: Arc<Notify>,
}

impl Default for Bodies {
    fn default() -> Self {
        Bodies {
            held: Arc::default(),
            judge: None,
            changes: watch::Sender::new(0),
            ready: watch::Sender::new(false),
            wake: Arc::default(),
        }
    }
}

impl Bodies {
    /// Bodies that `judge` looks at as they arrive: of a refused one only a stub is kept.
    pub fn judged_by(judge: Judge) -> Bodies {
        Bodies {
            judge: Some(judge),
            ..Bodies::default()
        }
    }

    /// What is held of `body`, just read.
    fn to_hold(&self, kind: RuleKind, body: DynamicObject) -> Loaded {
        let verdict = self.judge.as_ref().map(|judge| judge(kind, &body));
        match verdict {
            Some(Err(reasons)) => {
                let (stub, reasons) = refused_stub(body, reasons);
                Loaded {
                    body: Arc::new(stub),
                    refused: Some(Arc::new(reasons)),
                }
            }
            _ => Loaded {
                body: Arc::new(body),
                refused: None,
            },
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<BodyKey, Held>> {
        self.held.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<BodyKey, Held>> {
        self.held.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Something that decides what is picked changed: a round of reads follows.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The body held for the object `meta` describes (the same uid), of its current
    /// version or an older one: what a stack loaded last.
    pub fn body(&self, kind: RuleKind, meta: &ObjectMeta) -> Option<Loaded> {
        let held = self.read();
        let h = held.get(&BodyKey::of(kind, meta))?;
        (h.uid() == meta.uid.as_deref()).then(|| h.loaded())
    }

    /// The body held for the object `meta` describes, if it is of its current version.
    pub fn current(&self, kind: RuleKind, meta: &ObjectMeta) -> Option<Loaded> {
        let held = self.read();
        let h = held.get(&BodyKey::of(kind, meta))?;
        h.is_current_for(meta).then(|| h.loaded())
    }

    /// How many bodies are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes on every change of the bodies held after this call.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Waits for the first round: every body picked then has been read (or tried).
    pub async fn wait_until_ready(&self) -> bool {
        let mut rx = self.ready.subscribe();
        let ready = rx.wait_for(|r| *r).await.is_ok();
        ready
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// What an object some stack picks needs of its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    pub uid: Option<String>,
    pub version: Option<String>,
    pub picked_by: Vec<StackId>,
}

/// The objects some stack picks now, from the metadata caches.
pub fn wanted(
    stores: &RuleStores,
    namespaces: Option<&NamespaceStore>,
    pickers: &[Picker],
) -> BTreeMap<BodyKey, Want> {
    let mut out = BTreeMap::new();
    if pickers.is_empty() {
        return out;
    }
    for (kind, store) in stores {
        for meta in store.state() {
            let m = &meta.metadata;
            let ns = m.namespace.clone().unwrap_or_default();
            let picked_by = picked_by(pickers, *kind, m, || namespace_labels(namespaces, &ns));
            if picked_by.is_empty() {
                continue;
            }
            out.insert(
                BodyKey::of(*kind, m),
                Want {
                    uid: m.uid.clone(),
                    version: m.resource_version.clone(),
                    picked_by,
                },
            );
        }
    }
    out
}

/// What one round does to the bodies held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Held, and no longer picked (or another object of the same name now).
    pub drop: Vec<BodyKey>,
    /// Picked, and no body of its current version held.
    pub read: Vec<BodyKey>,
    /// Held and current, picked by other stacks than before.
    pub repick: Vec<(BodyKey, Vec<StackId>)>,
}

/// The round that brings the bodies `held` to what `wanted` says. Pure.
pub fn plan_round(held: &HashMap<BodyKey, Held>, wanted: &BTreeMap<BodyKey, Want>) -> Round {
    let mut round = Round::default();
    for (key, h) in held {
        let keep = wanted.get(key).is_some_and(|w| w.uid.as_deref() == h.uid());
        if !keep {
            round.drop.push(key.clone());
        }
    }
    for (key, w) in wanted {
        match held.get(key) {
            Some(h) if h.uid() == w.uid.as_deref() => {
                let current = h.version() == w.version.as_deref()
                    || Some(h.asked.as_str()) == w.version.as_deref();
                if !current {
                    round.read.push(key.clone());
                } else if h.picked_by != w.picked_by {
                    round.repick.push((key.clone(), w.picked_by.clone()));
                }
            }
            _ => round.read.push(key.clone()),
        }
    }
    round.drop.sort();
    round
}

/// The stacks to re-run when `new` replaces `old`: every stack that picks it or did,
/// when its content (uid, generation) changed; else those that started or stopped
/// picking it. A body read again after a status write re-runs nothing.
fn rerun_on_store(old: Option<&Held>, new: &Held) -> Vec<StackId> {
    let Some(old) = old else {
        return new.picked_by.clone();
    };
    let same_content =
        old.uid() == new.uid() && old.body.metadata.generation == new.body.metadata.generation;
    let (a, b): (BTreeSet<&StackId>, BTreeSet<&StackId>) = (
        old.picked_by.iter().collect(),
        new.picked_by.iter().collect(),
    );
    if same_content {
        a.symmetric_difference(&b).map(|s| (*s).clone()).collect()
    } else {
        a.union(&b).map(|s| (*s).clone()).collect()
    }
}

/// One object's body, as the caches keep it; `None` when it is gone.
pub async fn read_body(
    client: &Client,
    key: &BodyKey,
) -> Result<Option<DynamicObject>, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &key.namespace, &key.kind.resource());
    let found = api.get_opt(&key.name).await?;
    Ok(found.map(|mut o| {
        strip(&mut o);
        o
    }))
}

/// One round: lets go of the bodies no longer picked, reads the ones missing or stale,
/// and re-runs whom that concerns. False when a read failed.
pub async fn round(
    client: &Client,
    stores: &RuleStores,
    namespaces: Option<&NamespaceStore>,
    bodies: &Bodies,
    stacks: &Store<DynamicObject>,
    taps: &Taps,
) -> bool {
    let pickers = pickers(stacks);
    let wanted = wanted(stores, namespaces, &pickers);
    let plan = plan_round(&bodies.read(), &wanted);
    let mut rerun: BTreeSet<StackId> = BTreeSet::new();
    let let_go = let_go_and_repick(bodies, plan.drop, plan.repick, &mut rerun);
    let (ok, read) = read_all(client, bodies, plan.read, &wanted, &mut rerun).await;
    if let_go || read {
        debug!(held = bodies.len(), "rule bodies changed");
        taps.rules.send(());
    }
    for (ns, name) in rerun {
        taps.stacks.send(stack_ref(&ns, &name));
    }
    ok
}

/// Lets go of the bodies in `drop` and records who picks each of `repick` now; adds the
/// stacks to re-run to `rerun`. Whether a body was let go.
fn let_go_and_repick(
    bodies: &Bodies,
    drop: Vec<BodyKey>,
    repick: Vec<(BodyKey, Vec<StackId>)>,
    rerun: &mut BTreeSet<StackId>,
) -> bool {
    let mut changed = false;
    {
        let mut held = bodies.write();
        for key in &drop {
            if let Some(h) = held.remove(key) {
                rerun.extend(h.picked_by);
                changed = true;
            }
        }
        for (key, picked_by) in repick {
            if let Some(h) = held.get_mut(&key) {
                let new = Held {
                    picked_by,
                    ..h.clone()
                };
                rerun.extend(rerun_on_store(Some(h), &new));
                *h = new;
            }
        }
    }
    if changed {
        bodies.changed();
    }
    changed
}

/// Reads the bodies of `keys`, [`READS`] at a time, and holds what the judge leaves of
/// each; adds the stacks to re-run to `rerun`. Whether every read succeeded, and whether
/// a body was stored.
async fn read_all(
    client: &Client,
    bodies: &Bodies,
    keys: Vec<BodyKey>,
    wanted: &BTreeMap<BodyKey, Want>,
    rerun: &mut BTreeSet<StackId>,
) -> (bool, bool) {
    let (mut ok, mut changed) = (true, false);
    // Each body is judged as soon as it arrives, inside its read: of a refused one only
    // its stub outlives the read, however many reads complete together.
    let reads = futures::stream::iter(keys)
        .map(|key| async move {
            let got = read_body(client, &key).await;
            let got = got.map(|body| body.map(|b| bodies.to_hold(key.kind, b)));
            (key, got)
        })
        .buffer_unordered(READS);
    futures::pin_mut!(reads);
    while let Some((key, got)) = reads.next().await {
        let loaded = match got {
            Ok(Some(loaded)) => loaded,
            // Deleted meanwhile: its deletion comes next.
            Ok(None) => continue,
            Err(e) => {
                warn!(kind = key.kind.kind(), namespace = %key.namespace, name = %key.name, error = %e, "cannot read a picked object; it is not loaded until it can be; trying again");
                ok = false;
                continue;
            }
        };
        let Some(want) = wanted.get(&key) else {
            continue;
        };
        let new = Held {
            body: loaded.body,
            refused: loaded.refused,
            asked: want.version.clone().unwrap_or_default(),
            picked_by: want.picked_by.clone(),
        };
        let old = bodies.write().insert(key, new.clone());
        rerun.extend(rerun_on_store(old.as_ref(), &new));
        changed = true;
        bodies.changed();
    }
    (ok, changed)
}

/// Keeps `bodies` in step with what is picked, for the life of the process. The first
/// round waits for the metadata caches and the stacks to be listed.
pub fn spawn(
    client: Client,
    stores: RuleStores,
    namespaces: Option<NamespaceStore>,
    bodies: Bodies,
    stacks: Store<DynamicObject>,
    taps: Taps,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut listed = synced("lokistacks", &stacks).await;
        for (kind, store) in &stores {
            listed &= synced(kind.kind(), store).await;
        }
        if let Some(ns) = &namespaces {
            listed &= synced("namespaces", ns).await;
        }
        if !listed {
            return;
        }
        loop {
            let ok = round(
                &client,
                &stores,
                namespaces.as_ref(),
                &bodies,
                &stacks,
                &taps,
            )
            .await;
            bodies.ready.send_replace(true);
            if ok {
                bodies.wake.notified().await;
            } else {
                let _ = tokio::time::timeout(RETRY, bodies.wake.notified()).await;
            }
            tokio::time::sleep(DEBOUNCE).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caches::scope::ScopedWriter;
    use crate::stores::index;
    use crate::testing::cluster::{key, FakeCluster};
    use crate::testing::rules::RuleFeeds;
    use kube::runtime::watcher::Event;
    use serde_json::{json, Value};

    fn stack(ns: &str, name: &str, rules: Value) -> DynamicObject {
        let mut s = DynamicObject::new(name, &crate::caches::stacks::resource()).within(ns);
        s.data = json!({"spec": {"rules": rules}});
        s
    }

    fn meta(kind: RuleKind, ns: &str, name: &str, uid: &str, rv: &str, labels: Value) -> RuleMeta {
        let mut m: RuleMeta = serde_json::from_value(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": kind.kind(),
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": rv,
                         "labels": labels},
        }))
        .expect("metadata");
        m.types = None;
        m
    }

    fn holding(uid: &str, rv: &str, generation: i64, picked_by: &[&str]) -> Held {
        let mut body = DynamicObject::new("r", &RuleKind::AlertingRule.resource()).within("ns");
        body.metadata.uid = Some(uid.into());
        body.metadata.resource_version = Some(rv.into());
        body.metadata.generation = Some(generation);
        Held {
            body: Arc::new(body),
            refused: None,
            asked: rv.into(),
            picked_by: picked_by
                .iter()
                .map(|s| ("ns".to_string(), s.to_string()))
                .collect(),
        }
    }

    fn k(name: &str) -> BodyKey {
        BodyKey {
            kind: RuleKind::AlertingRule,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn want(uid: &str, rv: &str, picked_by: &[&str]) -> Want {
        Want {
            uid: Some(uid.into()),
            version: Some(rv.into()),
            picked_by: picked_by
                .iter()
                .map(|s| ("ns".to_string(), s.to_string()))
                .collect(),
        }
    }

    #[test]
    fn picked_objects_are_read_unpicked_ones_let_go_and_stale_ones_read_again() {
        let held: HashMap<BodyKey, Held> = [
            (k("kept"), holding("u1", "5", 1, &["s"])),
            (k("unpicked"), holding("u2", "5", 1, &["s"])),
            (k("stale"), holding("u3", "5", 1, &["s"])),
            (k("recreated"), holding("u4", "5", 1, &["s"])),
            (k("repicked"), holding("u5", "5", 1, &["s"])),
        ]
        .into();
        let wanted: BTreeMap<BodyKey, Want> = [
            (k("kept"), want("u1", "5", &["s"])),
            (k("new"), want("u6", "9", &["s"])),
            (k("stale"), want("u3", "7", &["s"])),
            (k("recreated"), want("u9", "8", &["s"])),
            (k("repicked"), want("u5", "5", &["s", "t"])),
        ]
        .into();
        let round = plan_round(&held, &wanted);
        assert_eq!(round.drop, [k("recreated"), k("unpicked")]);
        assert_eq!(round.read, [k("new"), k("recreated"), k("stale")]);
        assert_eq!(
            round.repick,
            [(
                k("repicked"),
                vec![("ns".into(), "s".into()), ("ns".into(), "t".into())]
            )]
        );
        // Everything in step: nothing to do.
        let done: BTreeMap<BodyKey, Want> = [(k("kept"), want("u1", "5", &["s"]))].into();
        let only: HashMap<BodyKey, Held> = [(k("kept"), holding("u1", "5", 1, &["s"]))].into();
        assert_eq!(plan_round(&only, &done), Round::default());
    }

    #[test]
    fn a_body_read_newer_than_the_metadata_is_not_read_again_until_the_metadata_moves() {
        // Asked for at version 5, the server had 6 already.
        let mut h = holding("u1", "6", 1, &["s"]);
        h.asked = "5".into();
        let held: HashMap<BodyKey, Held> = [(k("r"), h.clone())].into();
        for (rv, read) in [("5", false), ("6", false), ("7", true)] {
            let wanted: BTreeMap<BodyKey, Want> = [(k("r"), want("u1", rv, &["s"]))].into();
            assert_eq!(
                plan_round(&held, &wanted).read.len(),
                usize::from(read),
                "{rv}"
            );
        }
        let m = |rv: &str| ObjectMeta {
            uid: Some("u1".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        };
        assert!(h.is_current_for(&m("5")) && h.is_current_for(&m("6")));
        assert!(!h.is_current_for(&m("7")));
    }

    #[test]
    fn a_new_or_changed_body_reruns_its_stacks_a_status_write_reruns_none() {
        let old = holding("u1", "5", 1, &["a", "b"]);
        let id = |s: &str| ("ns".to_string(), s.to_string());
        assert_eq!(rerun_on_store(None, &old), [id("a"), id("b")]);
        // Read again after a status write: same generation, same stacks.
        assert!(rerun_on_store(Some(&old), &holding("u1", "6", 1, &["a", "b"])).is_empty());
        // Its spec changed: everyone that picks it, or did.
        assert_eq!(
            rerun_on_store(Some(&old), &holding("u1", "7", 2, &["b", "c"])),
            [id("a"), id("b"), id("c")]
        );
        // Only who picks it changed.
        assert_eq!(
            rerun_on_store(Some(&old), &holding("u1", "7", 1, &["b", "c"])),
            [id("a"), id("c")]
        );
    }

    #[test]
    fn picking_follows_the_stacks_selectors_and_the_ruler_config_its_stack() {
        let stores = ready_stacks(&[
            stack(
                "ns",
                "s",
                json!({"enabled": true, "selector": {"matchLabels": {"pick": "yes"}}}),
            ),
            stack("ns", "off", json!({"enabled": false, "selector": {}})),
            stack(
                "other",
                "wide",
                json!({"enabled": true, "selector": {}, "namespaceSelector": {"matchLabels": {"team": "a"}}}),
            ),
        ]);
        let p = pickers(&stores);
        assert_eq!(p.len(), 2);
        let m = |kind, ns, name, labels| meta(kind, ns, name, "u", "1", labels).metadata;
        let id = |ns: &str, s: &str| (ns.to_string(), s.to_string());
        let team_a = || Some(BTreeMap::from([("team".to_string(), "a".to_string())]));
        assert_eq!(
            picked_by(
                &p,
                RuleKind::AlertingRule,
                &m(RuleKind::AlertingRule, "ns", "r", json!({"pick": "yes"})),
                || None
            ),
            [id("ns", "s")]
        );
        assert!(picked_by(
            &p,
            RuleKind::AlertingRule,
            &m(RuleKind::AlertingRule, "ns", "r", json!({})),
            || None
        )
        .is_empty());
        assert_eq!(
            picked_by(
                &p,
                RuleKind::RecordingRule,
                &m(RuleKind::RecordingRule, "team", "r", json!({})),
                team_a
            ),
            [id("other", "wide")]
        );
        assert_eq!(
            picked_by(
                &p,
                RuleKind::RulerConfig,
                &m(RuleKind::RulerConfig, "ns", "s", json!({})),
                || None
            ),
            [id("ns", "s")]
        );
        assert!(picked_by(
            &p,
            RuleKind::RulerConfig,
            &m(RuleKind::RulerConfig, "ns", "off", json!({})),
            || None
        )
        .is_empty());
    }

    fn ready_stacks(stacks: &[DynamicObject]) -> Store<DynamicObject> {
        let mut w = ScopedWriter::new(crate::caches::stacks::resource(), [None], index::unindexed);
        w.apply(None, &Event::Init);
        for s in stacks {
            w.apply(None, &Event::InitApply(s.clone()));
        }
        w.apply(None, &Event::InitDone);
        w.reader()
    }

    fn rule(ns: &str, name: &str, labels: Value, expr: &str) -> Value {
        json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"tenantID": "t", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]},
        })
    }

    fn gets(fake: &FakeCluster) -> Vec<String> {
        fake.take_calls()
            .iter()
            .map(|c| c.line())
            .filter(|l| l.starts_with("get "))
            .collect()
    }

    /// A body the judge refuses costs its identity, its stored conditions and a few short
    /// reasons, however large it is; one it accepts is held whole.
    #[tokio::test]
    async fn a_refused_body_is_kept_as_its_reasons_and_identity_only() {
        let fake = FakeCluster::new();
        let (mut metas, mut rules) = RuleFeeds::new();
        rules.bodies = Bodies::judged_by(Arc::new(|_, body: &DynamicObject| {
            let expr = body.data.pointer("/spec/groups/0/rules/0/expr");
            match expr.and_then(Value::as_str).unwrap_or_default() {
                e if e.starts_with("bad") => Err((0..20)
                    .map(|i| format!("reason {i}: {}", "é".repeat(5000)))
                    .collect()),
                _ => Ok(()),
            }
        }));
        let stacks = ready_stacks(&[stack("ns", "s", json!({"enabled": true, "selector": {}}))]);
        let taps = Taps::default();
        let mut bad = rule(
            "ns",
            "bad",
            json!({}),
            &format!("bad{}", "x".repeat(500_000)),
        );
        let conditions = json!([{"type": "Ready", "status": "False", "reason": "InvalidRule"}]);
        bad["status"] = json!({ "conditions": conditions });
        fake.put(bad);
        fake.put(rule("ns", "good", json!({}), "1"));
        for name in ["bad", "good"] {
            metas.sync(&fake, RuleKind::AlertingRule, "ns", name);
        }
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        let meta = |name: &str| {
            let store = rules.store(RuleKind::AlertingRule).expect("store");
            let found = store.state().into_iter().find(|m| m.name_any() == name);
            found.expect("cached").metadata.clone()
        };
        let bad = meta("bad");
        let held = rules.bodies.current(RuleKind::AlertingRule, &bad);
        let held = held.expect("the refused body is held, as its stub");
        let reasons = held.refused.expect("refused");
        assert_eq!(reasons.len(), MAX_REASONS + 1);
        assert_eq!(reasons[MAX_REASONS], "and 12 more");
        assert!(reasons.iter().all(|r| r.len() <= MAX_REASON_BYTES));
        let stub = serde_json::to_vec(&*held.body).expect("json");
        assert!(stub.len() < 1000, "{}", String::from_utf8_lossy(&stub));
        assert_eq!(held.body.data["status"]["conditions"], conditions);
        assert_eq!(held.body.metadata.uid, bad.uid);
        assert_eq!(held.body.metadata.generation, bad.generation);
        let good = rules.bodies.current(RuleKind::AlertingRule, &meta("good"));
        let good = good.expect("held");
        assert!(good.refused.is_none());
        assert_eq!(good.body.data["spec"]["groups"][0]["rules"][0]["expr"], "1");
    }

    #[tokio::test]
    async fn only_picked_bodies_are_read_and_held() {
        let fake = FakeCluster::new();
        let (mut metas, rules) = RuleFeeds::new();
        let stacks = ready_stacks(&[stack(
            "ns",
            "s",
            json!({"enabled": true, "selector": {"matchLabels": {"pick": "yes"}}}),
        )]);
        let taps = Taps::default();
        let mut to_stacks = taps.stacks.attach();
        let mut to_status = taps.rules.attach();
        let big = "x".repeat(100_000);
        fake.put(rule("ns", "picked", json!({"pick": "yes"}), "1"));
        fake.put(rule("ns", "unpicked", json!({}), &big));
        for name in ["picked", "unpicked"] {
            metas.sync(&fake, RuleKind::AlertingRule, "ns", name);
        }
        fake.take_calls();
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert_eq!(gets(&fake), ["get ns/alertingrules/picked"]);
        assert_eq!(
            rules.bodies.len(),
            1,
            "the unpicked rule's body is never read"
        );
        let m = |name: &str| {
            rules
                .store(RuleKind::AlertingRule)
                .expect("store")
                .state()
                .into_iter()
                .find(|m| m.name_any() == name)
                .expect("cached")
        };
        let picked = m("picked");
        let body = rules
            .bodies
            .current(RuleKind::AlertingRule, &picked.metadata)
            .expect("held");
        assert_eq!(body.body.data["spec"]["groups"][0]["rules"][0]["expr"], "1");
        assert_eq!(
            to_stacks.try_recv().ok(),
            Some(stack_ref("ns", "s")),
            "its stack re-runs"
        );
        assert!(to_status.try_recv().is_ok(), "and the status pass");

        // Nothing changed: no read, nothing re-run.
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert!(gets(&fake).is_empty());
        assert!(to_stacks.try_recv().is_err());

        // Changed: read again; the stale body serves until then.
        fake.edit(
            &key(&RuleKind::AlertingRule.resource(), Some("ns"), "picked"),
            |r| r["spec"]["groups"][0]["rules"][0]["expr"] = json!("2"),
        );
        metas.sync(&fake, RuleKind::AlertingRule, "ns", "picked");
        let picked = m("picked");
        assert!(rules
            .bodies
            .current(RuleKind::AlertingRule, &picked.metadata)
            .is_none());
        assert!(rules
            .bodies
            .body(RuleKind::AlertingRule, &picked.metadata)
            .is_some());
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert_eq!(gets(&fake), ["get ns/alertingrules/picked"]);
        let body = rules
            .bodies
            .current(RuleKind::AlertingRule, &picked.metadata)
            .expect("read again");
        assert_eq!(body.body.data["spec"]["groups"][0]["rules"][0]["expr"], "2");
        assert_eq!(to_stacks.try_recv().ok(), Some(stack_ref("ns", "s")));

        // Unselected (its label removed): let go, and its stack re-runs.
        fake.edit(
            &key(&RuleKind::AlertingRule.resource(), Some("ns"), "picked"),
            |r| r["metadata"]["labels"] = json!({}),
        );
        metas.sync(&fake, RuleKind::AlertingRule, "ns", "picked");
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert!(gets(&fake).is_empty());
        assert!(rules.bodies.is_empty());
        assert_eq!(to_stacks.try_recv().ok(), Some(stack_ref("ns", "s")));

        // Picked again, by a stack selecting every rule: read again.
        let wide = ready_stacks(&[stack("ns", "s", json!({"enabled": true, "selector": {}}))]);
        assert!(rules.read_bodies(&fake.client, &wide, &taps).await);
        assert_eq!(
            gets(&fake),
            [
                "get ns/alertingrules/picked",
                "get ns/alertingrules/unpicked"
            ]
        );
        assert_eq!(rules.bodies.len(), 2);
        // No stack picks rules any more: everything let go, nothing read.
        let none = ready_stacks(&[stack("ns", "s", json!({"enabled": false}))]);
        assert!(rules.read_bodies(&fake.client, &none, &taps).await);
        assert!(gets(&fake).is_empty());
        assert!(rules.bodies.is_empty());
    }

    #[tokio::test]
    async fn a_failed_read_is_tried_again_and_a_ruler_config_follows_its_stack() {
        let fake = FakeCluster::new();
        let (mut metas, rules) = RuleFeeds::new();
        let stacks = ready_stacks(&[stack("ns", "s", json!({"enabled": true}))]);
        let taps = Taps::default();
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "RulerConfig",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"evaluationInterval": "1m"},
        }));
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "RulerConfig",
            "metadata": {"name": "other", "namespace": "ns"},
            "spec": {"evaluationInterval": "1m"},
        }));
        metas.sync(&fake, RuleKind::RulerConfig, "ns", "s");
        metas.sync(&fake, RuleKind::RulerConfig, "ns", "other");
        fake.fail_next("get", "ns/rulerconfigs/s", 500, "InternalError");
        assert!(!rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert!(rules.bodies.is_empty());
        assert!(rules.read_bodies(&fake.client, &stacks, &taps).await);
        assert_eq!(rules.bodies.len(), 1);
        let s = rules
            .store(RuleKind::RulerConfig)
            .expect("store")
            .state()
            .into_iter()
            .find(|m| m.name_any() == "s")
            .expect("cached");
        assert!(rules
            .bodies
            .current(RuleKind::RulerConfig, &s.metadata)
            .is_some());
    }
}
