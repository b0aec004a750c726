//! Where the operator acts: every namespace, or only the ones `--watch-namespaces`
//! names; and one cache store fed by one watch per namespace.
//!
//! Namespaced kinds (LokiStacks, pods, children) are watched in each namespace of the
//! scope, so the operator needs only Roles there. Cluster-scoped kinds (nodes,
//! PersistentVolumes, StorageClasses) are one watch of the whole cluster in either mode.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;

use futures::stream::{self, BoxStream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::stores::index::{id_of, Index, KeyOf};

/// The namespaces the operator watches and writes in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace: one cluster-wide watch per kind (ClusterRoles).
    #[default]
    All,
    /// Only these, never empty: one watch per namespace and kind (Roles in each).
    Namespaces(BTreeSet<String>),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters")]
pub struct ScopeError(String);

impl Scope {
    /// `a,b` as `--watch-namespaces` takes it and OLM's `olm.targetNamespaces`
    /// annotation holds it; empty (OLM's AllNamespaces) is every namespace.
    pub fn parse(list: &str) -> Result<Scope, ScopeError> {
        let names: BTreeSet<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if let Some(bad) = names.iter().find(|n| !is_dns_label(n)) {
            return Err(ScopeError(bad.clone()));
        }
        Ok(if names.is_empty() {
            Scope::All
        } else {
            Scope::Namespaces(names)
        })
    }

    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(names) => names.contains(namespace),
        }
    }

    /// One `Api` per watch of a namespaced kind: the whole cluster, or each namespace
    /// (keyed by it).
    pub fn watches<K>(
        &self,
        all: impl Fn() -> Api<K>,
        namespaced: impl Fn(&str) -> Api<K>,
    ) -> Vec<(Option<String>, Api<K>)> {
        match self {
            Scope::All => vec![(None, all())],
            Scope::Namespaces(names) => names
                .iter()
                .map(|n| (Some(n.clone()), namespaced(n)))
                .collect(),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::All => f.write_str("all namespaces"),
            Scope::Namespaces(names) => {
                f.write_str(&names.iter().cloned().collect::<Vec<_>>().join(","))
            }
        }
    }
}

fn is_dns_label(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    s.len() <= 63 && s.chars().all(ok_char) && !s.starts_with('-') && !s.ends_with('-')
}

/// One store fed by one watch per namespace (`None`: one watch of every namespace).
///
/// kube's `Writer` alone is wrong here twice. With several watches, each watch's
/// re-list (`Init` … `InitDone`, after a restart or an expired resourceVersion) would
/// replace the whole store and drop the other namespaces' objects until their own next
/// event. And it holds a re-list back until `InitDone`, then swaps it in whole, while
/// the stream passes each `InitApply` on at once: a reconcile triggered by an object of
/// the list found the store without it, and kube drops a trigger for an object not in
/// the store. At 1,000 stacks, a LokiStack watch that expired while the stacks were
/// being created re-listed them 100 a page; the 200 stacks of the first two pages were
/// never reconciled (docs/performance.md).
///
/// Here every object of a re-list is stored as it comes, before the stream passes it
/// on, and a re-list's `InitDone` removes only the objects of its own watch that the list
/// did not name, which [`reflect`] passes on as `Delete`s: an object deleted while the
/// watch was down is news to whoever reacts to deletions (a stack whose child is gone
/// re-applies it), not something to wait a resync for. The store reports ready once
/// every watch has been listed (a lone cluster-wide watch's first list still goes
/// through kube's swap: nothing reads the store before it is ready). Beside the store
/// it keeps an [`Index`] of the objects by stack, changed in the same calls.
pub struct ScopedWriter<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    reader: Store<K>,
    dyntype: K::DynamicType,
    /// Watches whose first list has not ended yet.
    unlisted: HashSet<Option<String>>,
    /// Per watch re-listing now, the objects its list has named so far.
    relisting: HashMap<Option<String>, HashSet<ObjectRef<K>>>,
    index: Index,
    key_of: KeyOf<K>,
}

impl<K> ScopedWriter<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub fn new(
        dyntype: K::DynamicType,
        watches: impl IntoIterator<Item = Option<String>>,
        key_of: KeyOf<K>,
    ) -> Self {
        let writer = Writer::new(dyntype.clone());
        let reader = writer.as_reader();
        let unlisted: HashSet<Option<String>> = watches.into_iter().collect();
        ScopedWriter {
            writer,
            reader,
            dyntype,
            unlisted,
            relisting: HashMap::new(),
            index: Index::default(),
            key_of,
        }
    }

    pub fn reader(&self) -> Store<K> {
        self.reader.clone()
    }

    pub fn index(&self) -> Index {
        self.index.clone()
    }

    /// Indexes `obj`, about to be stored, under its key; out from under the key of the
    /// copy it replaces, if that differs.
    fn track(&self, obj: &K) {
        let id = id_of(obj);
        let key = (self.key_of)(obj);
        let stored = self
            .reader
            .get(&ObjectRef::from_obj_with(obj, self.dyntype.clone()));
        if let Some(old) = stored.map(|o| (self.key_of)(&o)).filter(|k| *k != key) {
            self.index.remove(old, &id);
        }
        self.index.insert(key, id);
    }

    /// Drops `obj`, about to leave the store, from the index (under the key of the copy
    /// stored, which a deletion event's copy should equal).
    fn untrack(&self, obj: &K) {
        let stored = self
            .reader
            .get(&ObjectRef::from_obj_with(obj, self.dyntype.clone()));
        let key = match stored {
            Some(o) => (self.key_of)(&o),
            None => (self.key_of)(obj),
        };
        self.index.remove(key, &id_of(obj));
    }

    /// Applies one event of the watch of `namespace`; returns the objects a re-list's end
    /// removed because the list no longer named them (deleted while the watch was down).
    pub fn apply(&mut self, namespace: Option<&str>, event: &watcher::Event<K>) -> Vec<K> {
        let key = namespace.map(String::from);
        // A watch of every namespace is the only watch, so its first list is the store's.
        if key.is_none() && self.unlisted.contains(&None) {
            self.first_whole_list(event);
            return Vec::new();
        }
        match event {
            watcher::Event::Apply(o) => {
                self.track(o);
                self.writer.apply_watcher_event(event)
            }
            watcher::Event::Delete(o) => {
                self.untrack(o);
                self.writer.apply_watcher_event(event)
            }
            watcher::Event::Init => {
                self.relisting.insert(key, HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                let r = ObjectRef::from_obj_with(obj, self.dyntype.clone());
                self.relisting.entry(key).or_default().insert(r);
                self.track(obj);
                self.writer
                    .apply_watcher_event(&watcher::Event::Apply(obj.clone()));
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.remove(&key).unwrap_or_default();
                let gone = self.reader.state_filter(|o| {
                    let in_watch =
                        namespace.is_none() || o.meta().namespace.as_deref() == namespace;
                    in_watch && !listed.contains(&ObjectRef::from_obj_with(o, self.dyntype.clone()))
                });
                let mut removed = Vec::with_capacity(gone.len());
                for o in gone {
                    self.untrack(&o);
                    let o = (*o).clone();
                    self.writer
                        .apply_watcher_event(&watcher::Event::Delete(o.clone()));
                    removed.push(o);
                }
                if self.unlisted.remove(&key) && self.unlisted.is_empty() {
                    self.mark_ready();
                }
                return removed;
            }
        }
        Vec::new()
    }

    /// The first list of a lone watch of every namespace goes to kube's `Writer` as it
    /// comes: the `Writer` swaps it in whole and turns ready, without the copy of the
    /// store [`Self::mark_ready`] makes (about 40 MiB at 1,000 stacks). Holding the list
    /// back is harmless here: nothing reads a store before it is ready (a term starts
    /// once the caches have synced, and triggers every stack itself).
    fn first_whole_list(&mut self, event: &watcher::Event<K>) {
        match event {
            // A list that restarts (an error part way) starts the index again too.
            watcher::Event::Init => self.index.clear(),
            watcher::Event::InitApply(o) => self.index.insert((self.key_of)(o), id_of(o)),
            watcher::Event::InitDone => {
                self.unlisted.clear();
            }
            // A watcher sends no other event before its first list ends.
            watcher::Event::Apply(o) => self.track(o),
            watcher::Event::Delete(o) => self.untrack(o),
        }
        self.writer.apply_watcher_event(event);
    }

    /// kube's `Writer` turns ready at its first `InitDone`, which swaps in what came
    /// since `Init`: so the whole store goes through as one list, in one swap. That
    /// copies every object once (the `Writer` takes events by reference), a transient
    /// of the store's size, once per process.
    fn mark_ready(&mut self) {
        let all = self.reader.state();
        self.writer.apply_watcher_event(&watcher::Event::Init);
        for o in all {
            self.writer
                .apply_watcher_event(&watcher::Event::InitApply((*o).clone()));
        }
        self.writer.apply_watcher_event(&watcher::Event::InitDone);
    }
}

pub type EventStream<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// Objects per page of a list (kube's default is 500). A replica starting on a full
/// cluster lists every cached kind at once, and each list holds its current page fully
/// decoded (whole pods and StatefulSets, before `strip` keeps what the operator reads)
/// while it is taken apart; the allocator keeps that peak afterwards. With 500 a replica
/// started beside 200 stacks held 152–160 MiB against 42 MiB of live heap; with 100, 81
/// MiB (docs/performance.md). The peak depends on this number, not on the number of
/// stacks; more pages cost one request each, once per list.
pub const LIST_PAGE: u32 = 100;

/// Watches `watches` into one store, indexed by `key_of`; the stream yields every event
/// after the store has taken it (as kube's `reflect` does), and a `Delete` for each
/// object a re-list found gone, just before that re-list's `InitDone`. It must be polled
/// for the store to fill.
pub fn reflect<K>(
    watches: Vec<(Option<String>, Api<K>)>,
    config: watcher::Config,
    strip: fn(&mut K),
    dyntype: K::DynamicType,
    key_of: KeyOf<K>,
) -> (Store<K>, Index, EventStream<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut writer = ScopedWriter::new(dyntype, watches.iter().map(|(ns, _)| ns.clone()), key_of);
    let (reader, index) = (writer.reader(), writer.index());
    let config = config.page_size(LIST_PAGE);
    let streams = watches.into_iter().map(|(ns, api)| {
        watcher(api, config.clone())
            .default_backoff()
            .modify(strip)
            .map(move |ev| (ns.clone(), ev))
            .boxed()
    });
    let merged = stream::select_all(streams)
        .flat_map(move |(ns, ev)| stream::iter(pass_on(&mut writer, ns.as_deref(), ev)))
        .boxed();
    (reader, index, merged)
}

/// Stores one event of the watch of `namespace`; what the stream then passes on: the
/// event, after a `Delete` of each object it removed. Every watch event goes through
/// here, and but for a re-list's end nothing is removed: the empty `Vec` and the chain
/// allocate nothing.
fn pass_on<K, E>(
    writer: &mut ScopedWriter<K>,
    namespace: Option<&str>,
    event: Result<watcher::Event<K>, E>,
) -> impl Iterator<Item = Result<watcher::Event<K>, E>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let gone = match &event {
        Ok(e) => writer.apply(namespace, e),
        Err(_) => Vec::new(),
    };
    gone.into_iter()
        .map(|o| Ok(watcher::Event::Delete(o)))
        .chain(std::iter::once(event))
}

/// Waits for a store's first full list. kube-runtime's readiness signal wakes only one
/// waiter, and the controller's runner already waits on the LokiStack store, so this
/// polls again every 200 ms rather than relying on being woken.
pub async fn synced<K>(name: &str, store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    loop {
        if let Ok(result) = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            store.wait_until_ready(),
        )
        .await
        {
            tracing::debug!(cache = name, ok = result.is_ok(), "cache synced");
            return result.is_ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::names;
    use crate::stores::index;
    use crate::testing;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;

    /// A pod of the stack named by its name's first letter (`p1` is stack `p`'s).
    fn pod(ns: &str, name: &str, rv: &str) -> Pod {
        testing::pod(name)
            .namespace(ns)
            .resource_version(rv)
            .label(names::LABEL_NAME, names::LABEL_NAME_VALUE)
            .stack(&name[..1])
            .build()
    }

    /// The index holds exactly what the store holds, each object under its key.
    fn assert_indexed(w: &ScopedWriter<Pod>) {
        let mut want: std::collections::HashMap<index::StackKey, HashSet<index::Id>> =
            Default::default();
        for p in w.reader().state() {
            let key = index::by_instance(p.as_ref()).expect("labelled");
            want.entry(key)
                .or_default()
                .insert(index::id_of(p.as_ref()));
        }
        assert_eq!(w.index().all(), want);
    }

    fn names(store: &Store<Pod>) -> Vec<String> {
        let mut v: Vec<String> = store
            .state()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}@{}",
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    p.resource_version().unwrap_or_default()
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Lists `pods` as the watch of `watch`; the names of the objects the list's end
    /// removed.
    fn list(w: &mut ScopedWriter<Pod>, watch: Option<&str>, pods: &[Pod]) -> Vec<String> {
        w.apply(watch, &watcher::Event::Init);
        for p in pods {
            w.apply(watch, &watcher::Event::InitApply(p.clone()));
        }
        let gone = w.apply(watch, &watcher::Event::InitDone);
        gone.iter().map(|p| p.name_any()).collect()
    }

    fn ready(store: &Store<Pod>) -> bool {
        store.wait_until_ready().now_or_never().is_some()
    }

    #[test]
    fn a_relist_of_one_namespace_keeps_the_others() {
        let mut w =
            ScopedWriter::<Pod>::new((), [Some("a".into()), Some("b".into())], index::by_instance);
        let store = w.reader();
        list(
            &mut w,
            Some("a"),
            &[pod("a", "p1", "1"), pod("a", "p2", "1")],
        );
        assert!(!ready(&store), "ready before namespace b was listed");
        list(&mut w, Some("b"), &[pod("b", "q1", "1")]);
        assert!(ready(&store));
        assert_eq!(names(&store), ["a/p1@1", "a/p2@1", "b/q1@1"]);
        assert_indexed(&w);
        // a's watch restarts: p2 went away and p1 changed meanwhile. b's pod stays, and
        // p2's deletion is passed on.
        let gone = list(
            &mut w,
            Some("a"),
            &[pod("a", "p1", "2"), pod("a", "p3", "1")],
        );
        assert_eq!(gone, ["p2"]);
        assert_eq!(names(&store), ["a/p1@2", "a/p3@1", "b/q1@1"]);
        assert_indexed(&w);
        // Live events of either namespace go straight through.
        w.apply(Some("b"), &watcher::Event::Apply(pod("b", "q2", "1")));
        w.apply(Some("a"), &watcher::Event::Delete(pod("a", "p1", "2")));
        assert_eq!(names(&store), ["a/p3@1", "b/q1@1", "b/q2@1"]);
        assert_indexed(&w);
        // An empty re-list of b empties b only.
        list(&mut w, Some("b"), &[]);
        assert_eq!(names(&store), ["a/p3@1"]);
        assert_indexed(&w);
    }

    #[test]
    fn kube_writer_alone_drops_other_namespaces_on_a_relist() {
        // Why ScopedWriter exists: the same events into one plain Writer lose a's pods.
        let mut w = Writer::<Pod>::new(());
        let store = w.as_reader();
        for (ns, pods) in [
            ("a", vec![pod("a", "p1", "1")]),
            ("b", vec![pod("b", "q1", "1")]),
        ] {
            w.apply_watcher_event(&watcher::Event::Init);
            for p in pods {
                w.apply_watcher_event(&watcher::Event::InitApply(p));
            }
            w.apply_watcher_event(&watcher::Event::InitDone);
            assert!(names(&store).iter().all(|n| n.starts_with(ns)));
        }
    }

    #[test]
    fn one_cluster_wide_watch_is_ready_after_its_list() {
        let mut w = ScopedWriter::<Pod>::new((), [None], index::by_instance);
        let store = w.reader();
        w.apply(None, &watcher::Event::Init);
        w.apply(None, &watcher::Event::InitApply(pod("a", "p", "1")));
        w.apply(None, &watcher::Event::InitApply(pod("b", "q", "1")));
        assert!(!ready(&store));
        w.apply(None, &watcher::Event::InitDone);
        assert!(ready(&store));
        assert_eq!(names(&store), ["a/p@1", "b/q@1"]);
        assert_indexed(&w);
    }

    #[test]
    fn a_first_list_that_restarts_leaves_nothing_of_the_first_attempt() {
        let mut w = ScopedWriter::<Pod>::new((), [None], index::by_instance);
        let store = w.reader();
        w.apply(None, &watcher::Event::Init);
        w.apply(None, &watcher::Event::InitApply(pod("a", "p", "1")));
        list(&mut w, None, &[pod("b", "q", "1")]);
        assert!(ready(&store));
        assert_eq!(names(&store), ["b/q@1"]);
        assert_indexed(&w);
    }

    /// What a trigger sent for an object of a re-list finds: the object as listed, at
    /// once, not at the list's end (kube drops a trigger for an object not in the store).
    #[test]
    fn a_relisted_object_is_in_the_store_when_the_stream_passes_it_on() {
        for watch in [None, Some("b")] {
            let mut w = ScopedWriter::<Pod>::new((), [watch.map(String::from)], index::by_instance);
            let store = w.reader();
            list(&mut w, watch, &[pod("b", "q", "1"), pod("b", "r", "1")]);
            // The watch expires; meanwhile q changed, r went away and s was created.
            w.apply(watch, &watcher::Event::Init);
            w.apply(watch, &watcher::Event::InitApply(pod("b", "s", "1")));
            assert!(
                names(&store).contains(&"b/s@1".to_string()),
                "{watch:?}: a new object of the re-list is stored before its InitApply is passed on"
            );
            w.apply(watch, &watcher::Event::InitApply(pod("b", "q", "2")));
            assert_eq!(names(&store), ["b/q@2", "b/r@1", "b/s@1"], "{watch:?}");
            assert_indexed(&w);
            // What the list did not name leaves at its end, and the stream says so first.
            let passed: Vec<String> = pass_on::<_, ()>(&mut w, watch, Ok(watcher::Event::InitDone))
                .map(|e| match e {
                    Ok(watcher::Event::Delete(p)) => format!("Delete {}", p.name_any()),
                    Ok(watcher::Event::InitDone) => "InitDone".to_string(),
                    other => format!("{other:?}"),
                })
                .collect();
            assert_eq!(passed, ["Delete r", "InitDone"], "{watch:?}");
            assert_eq!(names(&store), ["b/q@2", "b/s@1"], "{watch:?}");
            assert_indexed(&w);
        }
    }

    #[test]
    fn an_object_moves_in_the_index_when_its_stack_changes() {
        for watches in [vec![None], vec![Some("a".to_string())]] {
            let mut w = ScopedWriter::<Pod>::new((), watches.clone(), index::by_instance);
            let ns = watches[0].as_deref();
            w.apply(ns, &watcher::Event::Init);
            w.apply(ns, &watcher::Event::InitApply(pod("a", "p1", "1")));
            w.apply(ns, &watcher::Event::InitDone);
            let mut moved = pod("a", "p1", "2");
            moved
                .metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(names::LABEL_INSTANCE.into(), "q".into());
            w.apply(ns, &watcher::Event::Apply(moved.clone()));
            assert_indexed(&w);
            assert!(w.index().ids(&("a".into(), "p".into())).is_empty());
            assert_eq!(w.index().ids(&("a".into(), "q".into())).len(), 1);
            w.apply(ns, &watcher::Event::Delete(moved));
            assert_indexed(&w);
            assert!(w.index().all().is_empty());
        }
    }

    #[test]
    fn scopes_parse_as_olm_writes_them() {
        assert_eq!(Scope::parse(""), Ok(Scope::All));
        assert_eq!(Scope::parse(" , "), Ok(Scope::All));
        let s = Scope::parse("team-b, team-a,team-b").expect("scope");
        assert_eq!(
            s,
            Scope::Namespaces(["team-a".to_string(), "team-b".to_string()].into())
        );
        assert!(s.contains("team-a") && !s.contains("team-c"));
        assert!(Scope::All.contains("anything"));
        assert_eq!(s.to_string(), "team-a,team-b");
        for bad in ["Team", "a_b", "-a", "a-", &"x".repeat(64)] {
            assert!(Scope::parse(bad).is_err(), "{bad}");
        }
    }
}
