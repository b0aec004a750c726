//! The reflector caches of the process, and what their changes trigger.
//!
//! They start once, before any leadership term, and outlive every term: the webhooks
//! of every replica, the annotator and the reconciler of the leader all read the same
//! stores, so each object is cached once per process, and a standby that takes over
//! has a warm view at once. Each cache strips what the operator never reads before it
//! is stored (`keep.rs`). Every change maps to the stacks it concerns and goes to the
//! taps a term attaches to (`taps.rs`).
//!
//! Namespaced kinds are watched in the namespaces of the [`Scope`] only (one store per
//! kind, fed by one watch per namespace: see `scope.rs`); Secrets are not watched at
//! all but read by name (`secrets.rs`).

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::caches::rule_bodies::{Bodies, Judge};
use crate::caches::rules::{self as rule_caches, RuleCaches, RuleKind};
pub use crate::caches::scope::synced;
use crate::caches::scope::{self, Scope};
use crate::caches::secrets::SecretReader;
use crate::caches::stacks::{is_zone_aware as is_stack_zone_aware, resource, stack_ref, StackRef};
use crate::caches::taps::{PodChange, Tap, Taps};
use crate::heartbeats::{self, NodeLeases};
use crate::model::names;
use crate::model::writers::keep_markers;
use crate::render::kinds::ChildKind;
use crate::stores::index::{self, Index, KeyOf, StackKey};
use crate::stores::keep::{
    node_fingerprint, strip_node, strip_pod, strip_statefulset, strip_storage_class, strip_volume,
};

/// The label selector of everything the operator creates.
pub fn managed_selector() -> String {
    format!(
        "{}={},{}={}",
        names::LABEL_NAME,
        names::LABEL_NAME_VALUE,
        names::LABEL_MANAGED_BY,
        names::LABEL_CONTROLLER_VALUE
    )
}

pub type ChildStore = Store<PartialObjectMeta<DynamicObject>>;

/// The metadata of what the operator created of one kind, as this server serves it.
#[derive(Clone)]
pub struct ChildCache {
    pub kind: ChildKind,
    pub resource: ApiResource,
    pub store: ChildStore,
    /// By stack (namespace and instance label).
    pub by_stack: Index,
}

/// The indexes by stack of the stores a reconcile reads its own objects from
/// (`index.rs`); the children's are in [`ChildCache`].
#[derive(Clone)]
pub struct ByStack {
    pub zone_aware_pods: Index,
    pub other_pods: Index,
    /// By the LokiStack that controls them.
    pub statefulsets: Index,
    /// By their claim's namespace.
    pub volumes: Index,
}

/// The caches a reconcile reads. Each object is cached once: the pod annotator and the
/// status step read the same pod cache, the zone check and the annotator the same nodes.
#[derive(Clone)]
pub struct Caches {
    /// LokiStacks as stored, decoded one by one in the reconcile (see `stacks.rs`).
    pub stacks: Store<DynamicObject>,
    pub nodes: Store<Node>,
    /// The storage Secrets stacks name, read by name (`secrets.rs`), stripped.
    pub secrets: Store<Secret>,
    /// What reads them: on a stack's first trigger, and on every poll of the leader.
    pub secret_reader: SecretReader,
    /// StorageClasses: name, default annotation and binding mode.
    pub storage_classes: Store<StorageClass>,
    /// PersistentVolumes: the claim each is bound to and the zone it is pinned to.
    pub volumes: Store<PersistentVolume>,
    /// Pods labelled `loki.grafana.com/zone-aware=enabled`.
    pub zone_aware_pods: Store<Pod>,
    /// The other pods of stacks (label `app.kubernetes.io/name=lokistack`).
    pub other_pods: Store<Pod>,
    /// The StatefulSets the operator created: their metadata (as every child's), and the
    /// replicas, update strategy and revisions the zone-by-zone rollout reads.
    pub statefulsets: Store<StatefulSet>,
    /// Metadata of what the operator created, per kind, as this server serves it; all
    /// kinds but StatefulSets, which are in `statefulsets`.
    pub children: Vec<ChildCache>,
    pub by_stack: ByStack,
    /// AlertingRules, RecordingRules, RulerConfigs and namespace labels.
    pub rules: RuleCaches,
    /// When each node's Lease was last seen renewed (`heartbeats/`). Not waited on before
    /// a term: until it is listed (or when it cannot be read), no zone is silent.
    pub node_leases: NodeLeases,
}

/// The objects of `store` that `index` lists under `key`.
fn indexed<K>(
    store: &Store<K>,
    index: &Index,
    key: &StackKey,
    dyntype: &K::DynamicType,
) -> Vec<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    index
        .ids(key)
        .into_iter()
        .filter_map(|(ns, name)| {
            let r = ObjectRef::new_with(&name, dyntype.clone());
            store.get(&match ns {
                Some(ns) => r.within(&ns),
                None => r,
            })
        })
        .collect()
}

impl Caches {
    /// The pods of one stack, by its instance label, from both pod stores.
    pub fn stack_pods(&self, namespace: &str, stack: &str) -> Vec<Arc<Pod>> {
        let key = (namespace.to_string(), stack.to_string());
        let mut pods = indexed(
            &self.zone_aware_pods,
            &self.by_stack.zone_aware_pods,
            &key,
            &(),
        );
        pods.extend(indexed(
            &self.other_pods,
            &self.by_stack.other_pods,
            &key,
            &(),
        ));
        pods
    }

    /// The children of every kind labelled as one stack's (but StatefulSets).
    pub fn stack_children(
        &self,
        namespace: &str,
        stack: &str,
    ) -> Vec<(ChildKind, Arc<PartialObjectMeta<DynamicObject>>)> {
        let key = (namespace.to_string(), stack.to_string());
        self.children
            .iter()
            .flat_map(|c| {
                indexed(&c.store, &c.by_stack, &key, &c.resource)
                    .into_iter()
                    .map(|m| (c.kind, m))
            })
            .collect()
    }

    /// The StatefulSets a stack controls (by its name; the caller checks the uid).
    pub fn stack_statefulsets(&self, namespace: &str, stack: &str) -> Vec<Arc<StatefulSet>> {
        let key = (namespace.to_string(), stack.to_string());
        indexed(&self.statefulsets, &self.by_stack.statefulsets, &key, &())
    }

    /// The volumes whose claim is in `namespace`.
    pub fn namespace_volumes(&self, namespace: &str) -> Vec<Arc<PersistentVolume>> {
        let key = (namespace.to_string(), String::new());
        indexed(&self.volumes, &self.by_stack.volumes, &key, &())
    }

    /// One pod of a stack by name, from either pod store.
    pub fn stack_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let r = ObjectRef::new(name).within(namespace);
        self.zone_aware_pods
            .get(&r)
            .or_else(|| self.other_pods.get(&r))
    }

    pub async fn wait_until_ready(&self) -> bool {
        let mut ok = synced("lokistacks", &self.stacks).await
            & synced("nodes", &self.nodes).await
            & synced("secrets", &self.secrets).await
            & synced("storage classes", &self.storage_classes).await
            & synced("persistent volumes", &self.volumes).await
            & synced("zone-aware pods", &self.zone_aware_pods).await
            & synced("pods", &self.other_pods).await
            & synced("statefulsets", &self.statefulsets).await;
        for c in &self.children {
            ok &= synced(c.kind.as_str(), &c.store).await;
        }
        for (kind, s) in &self.rules.stores {
            ok &= synced(kind.kind(), s).await;
        }
        if let Some(ns) = &self.rules.namespaces {
            ok &= synced("namespaces", ns).await;
        }
        ok && self.rules.bodies_read().await
    }
}

/// Triggers the stacks that pass `filter`; nothing is looked at while no term listens
/// (a term starts by triggering every stack anyway).
fn trigger_stacks(
    tap: &Tap<StackRef>,
    stacks: &Store<DynamicObject>,
    filter: impl Fn(&DynamicObject) -> bool,
) {
    if !tap.is_attached() {
        return;
    }
    for s in stacks.state().iter().filter(|s| filter(s)) {
        tap.send(ObjectRef::from_obj_with(s.as_ref(), resource()));
    }
}

pub(crate) fn spawn_typed<K>(
    watches: Vec<(Option<String>, Api<K>)>,
    config: watcher::Config,
    (strip, key_of): (fn(&mut K), KeyOf<K>),
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, Index, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, index, stream) = scope::reflect(watches, config, strip, (), key_of);
    let handle = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => {
                    if matches!(ev, watcher::Event::InitDone) {
                        tracing::debug!(kind = K::kind(&()).as_ref(), "listed");
                    }
                    on_event(&ev)
                }
                Err(e) => {
                    warn!(kind = K::kind(&()).as_ref(), error = %e, "watch error; retrying with backoff")
                }
            }
        }
    });
    (reader, index, handle)
}

/// The one watch of a cluster-scoped kind.
fn cluster<K>(client: &Client) -> Vec<(Option<String>, Api<K>)>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>,
{
    vec![(None, Api::all(client.clone()))]
}

/// What the caches are built from: the server, what it serves, and where the operator
/// acts.
pub struct Sources<'a> {
    pub client: &'a Client,
    pub scope: &'a Scope,
    /// The ruler's kinds the server serves (`rules::served`).
    pub rule_kinds: &'a [RuleKind],
    /// Judges each rule body as it is read (`rule_bodies::Judge`).
    pub judge: Judge,
}

/// Starts every cache, once per process; their changes go to `taps`, to whichever term
/// listens. Namespaced kinds are watched in the scope's namespaces only; nodes, volumes
/// and classes cluster-wide (read-only). The tasks run until the process ends.
pub fn start(src: Sources<'_>, taps: &Taps) -> (Caches, Vec<JoinHandle<()>>) {
    let (client, scope) = (src.client, src.scope);
    // Woken by a stack's `spec.rules` changing: what the stacks pick, whose bodies it
    // holds (`rule_bodies.rs`).
    let rule_bodies = Bodies::judged_by(src.judge.clone());
    let (stacks, stack_task) = watch_stacks(client, scope, rule_bodies.clone(), taps);
    let (nodes, _, node_task) = watch_nodes(client, stacks.clone(), taps);
    let (storage_classes, _, class_task) = watch_storage_classes(client, stacks.clone(), taps);
    let (volumes, volumes_by_ns, volume_task) = watch_volumes(client, stacks.clone(), taps);
    let (zone_aware_pods, zone_aware_by_stack, zone_aware_task) =
        watch_pods(client, scope, taps, true);
    let (other_pods, other_by_stack, other_task) = watch_pods(client, scope, taps, false);
    let (statefulsets, statefulsets_by_stack, statefulset_task) =
        watch_statefulsets(client, scope, taps);
    let mut tasks = vec![
        stack_task,
        node_task,
        class_task,
        volume_task,
        zone_aware_task,
        other_task,
        statefulset_task,
    ];
    let (children, child_tasks) = watch_every_child_kind(&src, taps);
    tasks.extend(child_tasks);
    let node_leases = NodeLeases::default();
    tasks.push(watch_node_leases(client, node_leases.clone()));
    let (late_tap, late_stacks) = (taps.stacks.clone(), stacks.clone());
    tasks.push(heartbeats::start_clock(node_leases.clone(), move || {
        trigger_stacks(&late_tap, &late_stacks, is_stack_zone_aware)
    }));
    let (rules, rule_tasks) = rule_caches::start(
        client,
        scope,
        src.rule_kinds,
        stacks.clone(),
        rule_bodies,
        taps,
    );
    tasks.extend(rule_tasks);
    let secret_reader = SecretReader::new(client.clone());
    let caches = Caches {
        stacks,
        nodes,
        secrets: secret_reader.store(),
        secret_reader,
        storage_classes,
        volumes,
        zone_aware_pods,
        other_pods,
        statefulsets,
        children,
        rules,
        by_stack: ByStack {
            zone_aware_pods: zone_aware_by_stack,
            other_pods: other_by_stack,
            statefulsets: statefulsets_by_stack,
            volumes: volumes_by_ns,
        },
        node_leases,
    };
    (caches, tasks)
}

/// The metadata of every kind the operator creates but StatefulSets, which are cached
/// once, typed (`Caches::statefulsets`): the rollout needs more than their metadata, and
/// the apply step reads that store for them.
fn watch_every_child_kind(
    src: &Sources<'_>,
    taps: &Taps,
) -> (Vec<ChildCache>, Vec<JoinHandle<()>>) {
    ChildKind::ALL
        .into_iter()
        .filter(|k| *k != ChildKind::StatefulSet)
        .map(|kind| {
            let resource = kind.resource();
            let (store, by_stack, task) =
                watch_children(src.client, src.scope, kind, resource.clone(), taps);
            let cache = ChildCache {
                kind,
                resource,
                store,
                by_stack,
            };
            (cache, task)
        })
        .unzip()
}

/// LokiStacks, untyped (so that one stored object that does not decode stops only
/// itself), one watch per namespace of the scope. A stack's change re-runs it.
fn watch_stacks(
    client: &Client,
    scope: &Scope,
    rule_bodies: Bodies,
    taps: &Taps,
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let api_resource = resource();
    let watches = scope.watches(
        || Api::all_with(client.clone(), &api_resource),
        |ns| Api::namespaced_with(client.clone(), ns, &api_resource),
    );
    let config = watcher::Config::default();
    let (store, _, events) = scope::reflect(
        watches,
        config,
        |_: &mut DynamicObject| {},
        api_resource,
        index::unindexed,
    );
    let (tap, rules_tap) = (taps.stacks.clone(), taps.rules.clone());
    let task = tokio::spawn(async move {
        // Per stack, its `spec.rules` and `managementState` as last seen: the rules'
        // status depends on them.
        let mut rules_seen: HashMap<(String, String), [Option<serde_json::Value>; 2]> =
            HashMap::new();
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    let key = (s.namespace().unwrap_or_default(), s.name_any());
                    let rules = ["/spec/rules", "/spec/managementState"]
                        .map(|p| s.data.pointer(p).cloned());
                    if rules_seen.get(&key) != Some(&rules) {
                        rules_seen.insert(key, rules);
                        rules_tap.send(());
                        rule_bodies.wake();
                    }
                    tap.send(ObjectRef::from_obj_with(&s, resource()));
                }
                Ok(watcher::Event::Delete(s)) => {
                    if rules_seen
                        .remove(&(s.namespace().unwrap_or_default(), s.name_any()))
                        .is_some()
                    {
                        rules_tap.send(());
                        rule_bodies.wake();
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(kind = names::KIND, error = %e, "watch error; retrying with backoff")
                }
            }
        }
    });
    (store, task)
}

/// Nodes: a change of zone inputs (labels, taints, cordon, readiness; not heartbeats)
/// re-checks every zone-aware stack and re-runs the annotator for the node's pods.
fn watch_nodes(
    client: &Client,
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (Store<Node>, Index, JoinHandle<()>) {
    let (stack_tx, node_tx) = (taps.stacks.clone(), taps.nodes.clone());
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    spawn_typed(
        cluster::<Node>(client),
        watcher::Config::default(),
        (strip_node, index::unindexed),
        move |ev| {
            let changed = match ev {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    let fp = node_fingerprint(n);
                    fingerprints.insert(n.name_any(), fp) != Some(fp)
                }
                watcher::Event::Delete(n) => fingerprints.remove(&n.name_any()).is_some(),
                watcher::Event::Init | watcher::Event::InitDone => false,
            };
            let (watcher::Event::Apply(n)
            | watcher::Event::InitApply(n)
            | watcher::Event::Delete(n)) = ev
            else {
                return;
            };
            if !changed {
                return;
            }
            node_tx.send(n.name_any());
            trigger_stacks(&stack_tx, &stacks, is_stack_zone_aware);
        },
    )
}

/// The nodes' Leases in `kube-node-lease`, for `heartbeats/`: no store, only when each
/// was seen renewed. Without the right to read them (an install from before the fast
/// failover) the first error is a warning and the failover never acts.
fn watch_node_leases(client: &Client, leases: NodeLeases) -> JoinHandle<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), names::NODE_LEASE_NAMESPACE);
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let (mut relisted, mut warned) = (None, false);
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => heartbeats::on_event(&leases, &mut relisted, &ev),
                Err(e) if !warned => {
                    warned = true;
                    warn!(error = %e, namespace = names::NODE_LEASE_NAMESPACE, "cannot watch the node Leases; the zone fast failover waits for them (retrying with backoff)");
                }
                Err(e) => tracing::debug!(error = %e, "node Lease watch error"),
            }
        }
    })
}

/// StorageClasses: a change (one created, deleted, made default) re-runs every stack;
/// classes change rarely and every stack's claims may use any of them.
fn watch_storage_classes(
    client: &Client,
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (Store<StorageClass>, Index, JoinHandle<()>) {
    let stack_tx = taps.stacks.clone();
    spawn_typed(
        cluster::<StorageClass>(client),
        watcher::Config::default(),
        (strip_storage_class, index::unindexed),
        move |ev| {
            if let watcher::Event::Apply(_) | watcher::Event::Delete(_) = ev {
                trigger_stacks(&stack_tx, &stacks, |_| true);
            }
        },
    )
}

/// PersistentVolumes: a volume bound, released or deleted re-runs the stacks of its
/// claim's namespace (a volume keeps its zone known to a zone-aware stack; the others
/// look at it once, which costs reads only).
fn watch_volumes(
    client: &Client,
    stacks: Store<DynamicObject>,
    taps: &Taps,
) -> (Store<PersistentVolume>, Index, JoinHandle<()>) {
    let stack_tx = taps.stacks.clone();
    spawn_typed(
        cluster::<PersistentVolume>(client),
        watcher::Config::default(),
        (strip_volume, index::by_claim_namespace),
        move |ev| {
            let (watcher::Event::Apply(pv) | watcher::Event::Delete(pv)) = ev else {
                return;
            };
            let Some((ns, _)) = index::by_claim_namespace(pv) else {
                return;
            };
            let of_ns = |s: &DynamicObject| s.metadata.namespace.as_deref() == Some(ns.as_str());
            trigger_stacks(&stack_tx, &stacks, of_ns);
        },
    )
}

/// The label selector of the pod store of zone-aware pods, or of the other pods of
/// stacks: the two select no pod in common.
pub fn pod_selector(zone_aware: bool) -> String {
    if zone_aware {
        format!(
            "{}={}",
            names::LABEL_ZONE_AWARE,
            names::LABEL_ZONE_AWARE_VALUE
        )
    } else {
        format!(
            "{}={},{}!={}",
            names::LABEL_NAME,
            names::LABEL_NAME_VALUE,
            names::LABEL_ZONE_AWARE,
            names::LABEL_ZONE_AWARE_VALUE
        )
    }
}

/// Pods are cached once, in one of two stores split by label: zone-aware pods (every pod
/// labelled `loki.grafana.com/zone-aware=enabled`, a stack's or not: the annotator serves
/// them all) and the other pods of stacks. A change re-runs the pod's stack (status), and
/// a zone-aware pod also goes to the annotator.
fn watch_pods(
    client: &Client,
    scope: &Scope,
    taps: &Taps,
    zone_aware: bool,
) -> (Store<Pod>, Index, JoinHandle<()>) {
    let stack_tx = taps.stacks.clone();
    let pod_tx = zone_aware.then(|| taps.zone_aware_pods.clone());
    let selector = pod_selector(zone_aware);
    spawn_typed(
        scope.watches(
            || Api::all(client.clone()),
            |ns| Api::namespaced(client.clone(), ns),
        ),
        watcher::Config::default().labels(&selector),
        (strip_pod, index::by_instance),
        move |ev| {
            let (pod, deleted, initial) = match ev {
                watcher::Event::Apply(p) => (p, false, false),
                watcher::Event::InitApply(p) => (p, false, true),
                watcher::Event::Delete(p) => (p, true, false),
                watcher::Event::Init | watcher::Event::InitDone => return,
            };
            if let Some(tx) = &pod_tx {
                let change = if deleted {
                    PodChange::Deleted(pod.clone())
                } else {
                    PodChange::Changed(pod.clone(), std::time::Instant::now())
                };
                tx.send(change);
            }
            // The first list triggers nothing: every stack is reconciled at start anyway.
            if let (false, Some(instance)) = (initial, pod.labels().get(names::LABEL_INSTANCE)) {
                stack_tx.send(stack_ref(&pod.namespace().unwrap_or_default(), instance));
            }
        },
    )
}

/// StatefulSets the operator created, typed but stripped to what a rollout and the apply
/// step read (the one cache of StatefulSets). A change (a new update revision, a pod
/// recreated, an edit by someone else) re-runs the owning stack.
fn watch_statefulsets(
    client: &Client,
    scope: &Scope,
    taps: &Taps,
) -> (Store<StatefulSet>, Index, JoinHandle<()>) {
    let stack_tx = taps.stacks.clone();
    spawn_typed(
        scope.watches(
            || Api::all(client.clone()),
            |ns| Api::namespaced(client.clone(), ns),
        ),
        watcher::Config::default().labels(&managed_selector()),
        (strip_statefulset, index::by_controller),
        move |ev| {
            let (watcher::Event::Apply(s) | watcher::Event::Delete(s)) = ev else {
                return;
            };
            let owner = s
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == names::KIND && o.controller == Some(true));
            if let (Some(o), Some(ns)) = (owner, s.metadata.namespace.as_deref()) {
                stack_tx.send(stack_ref(ns, &o.name));
            }
        },
    )
}

/// Children (metadata only: the skip check and pruning need nothing else): a change or
/// deletion by someone else re-runs the owning stack, which applies it again.
fn watch_children(
    client: &Client,
    scope: &Scope,
    kind: ChildKind,
    resource: ApiResource,
    taps: &Taps,
) -> (ChildStore, Index, JoinHandle<()>) {
    let watches = scope.watches(
        || Api::all_with(client.clone(), &resource),
        |ns| Api::namespaced_with(client.clone(), ns, &resource),
    );
    let stack_tx = taps.stacks.clone();
    let (reader, by_stack, stream) = scope::reflect(
        watches,
        watcher::Config::default().labels(&managed_selector()),
        |m: &mut PartialObjectMeta<DynamicObject>| keep_markers(&mut m.metadata),
        resource,
        index::by_instance,
    );
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(m) | watcher::Event::Delete(m)) => {
                    let owner = m
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .find(|o| o.kind == names::KIND && o.controller == Some(true));
                    if let (Some(o), Some(ns)) = (owner, m.metadata.namespace.as_deref()) {
                        stack_tx.send(stack_ref(ns, &o.name));
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "watch error; retrying with backoff")
                }
            }
        }
    });
    (reader, by_stack, task)
}
