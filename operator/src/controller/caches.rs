//! The reflector caches every reconcile reads, and the triggers they send.
//!
//! Each cache strips what the operator never reads before it is stored, so memory stays
//! flat: nodes keep labels, taints, cordon and readiness; pods keep metadata, node and
//! phase; Secrets keep their key names, never their values; children keep metadata only.
//! Every change maps to the stacks it concerns and goes into one trigger stream.
//!
//! Namespaced kinds are watched in the namespaces of the [`Scope`] only (one store per
//! kind, fed by one watch per namespace: see `scope.rs`); Secrets are not watched at
//! all but read by name (`secrets.rs`).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    Node, NodeSpec, NodeStatus, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    PersistentVolumeStatus, Pod, PodSpec, PodStatus, Secret,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::ByteString;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::controller::scope::{self, Scope};
use crate::controller::secrets::SecretReader;
use crate::controller::stacks::{
    is_zone_aware as is_stack_zone_aware, resource, stack_ref, StackRef,
};
use crate::controller::takeover;
use crate::kinds::ChildKind;
use crate::names;
use crate::render::ServerCapabilities;
use crate::storage;

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

/// The caches a reconcile reads. Each object is cached once: the pod annotator and the
/// status step read the same pod cache, the zone check and the annotator the same nodes.
#[derive(Clone)]
pub struct Caches {
    /// LokiStacks as stored, decoded one by one in the reconcile (see `stacks.rs`).
    pub stacks: Store<DynamicObject>,
    pub nodes: Store<Node>,
    /// The storage Secrets stacks name, read by name (`secrets.rs`), stripped.
    pub secrets: Store<Secret>,
    /// StorageClasses: name, default annotation and binding mode.
    pub storage_classes: Store<StorageClass>,
    /// PersistentVolumes: the claim each is bound to and the zone it is pinned to.
    pub volumes: Store<PersistentVolume>,
    /// Pods labelled `loki.grafana.com/zone-aware=enabled`.
    pub zone_aware_pods: Store<Pod>,
    /// The other pods of stacks (label `app.kubernetes.io/name=lokistack`).
    pub other_pods: Store<Pod>,
    /// The StatefulSets the operator created: replicas, update strategy and revisions,
    /// which the zone-by-zone rollout reads (the children caches keep metadata only).
    pub statefulsets: Store<StatefulSet>,
    /// Metadata of what the operator created, per kind, as this server serves it.
    pub children: Vec<(ChildKind, ApiResource, ChildStore)>,
}

impl Caches {
    /// The pods of one stack, by its instance label, from both pod stores.
    pub fn stack_pods(&self, namespace: &str, stack: &str) -> Vec<Arc<Pod>> {
        let of_stack = |p: &Pod| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.labels().get(names::LABEL_INSTANCE).map(String::as_str) == Some(stack)
                && p.labels().get(names::LABEL_NAME).map(String::as_str)
                    == Some(names::LABEL_NAME_VALUE)
        };
        let mut pods = self.zone_aware_pods.state_filter(of_stack);
        pods.extend(self.other_pods.state_filter(of_stack));
        pods
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
        for (kind, _, s) in &self.children {
            ok &= synced(kind.as_str(), s).await;
        }
        ok
    }
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

fn strip_meta(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
}

/// Keeps what eligibility and zones need: labels, taints, cordon, readiness.
pub fn strip_node(n: &mut Node) {
    strip_meta(&mut n.metadata);
    n.metadata.annotations = None;
    let spec = n.spec.take().unwrap_or_default();
    n.spec = Some(NodeSpec {
        taints: spec.taints,
        unschedulable: spec.unschedulable,
        ..Default::default()
    });
    let ready = n.status.take().and_then(|s| s.conditions).map(|cs| {
        cs.into_iter()
            .filter(|c| c.type_ == "Ready")
            .collect::<Vec<_>>()
    });
    n.status = Some(NodeStatus {
        conditions: ready,
        ..Default::default()
    });
}

/// What of a node can change a zone check or a pod's zone.
pub fn node_fingerprint(n: &Node) -> u64 {
    let mut h = DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    let spec = n.spec.as_ref();
    spec.and_then(|s| s.unschedulable).hash(&mut h);
    for t in spec.and_then(|s| s.taints.as_ref()).into_iter().flatten() {
        (&t.key, &t.value, &t.effect).hash(&mut h);
    }
    crate::zones::node_ready(n).hash(&mut h);
    h.finish()
}

/// Keeps metadata, node and phase; a pod's containers are never read.
pub fn strip_pod(p: &mut Pod) {
    strip_meta(&mut p.metadata);
    let node_name = p.spec.take().and_then(|s| s.node_name);
    p.spec = Some(PodSpec {
        node_name,
        ..Default::default()
    });
    let status = p.status.take().unwrap_or_default();
    p.status = Some(PodStatus {
        phase: status.phase,
        conditions: status
            .conditions
            .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()),
        // Where a leaving ingester is asked to leave the ring (rollout/scale_down.rs).
        pod_ip: status.pod_ip,
        ..Default::default()
    });
}

/// Keeps key names, and values only of the keys that are addresses, not credentials
/// (`storage::PLAIN_KEYS`). Any other value becomes one byte: empty stays empty, else
/// whether it could be expanded into YAML safely, which is all the storage check needs.
/// Credentials never sit in the operator's memory.
pub fn strip_secret(s: &mut Secret) {
    strip_meta(&mut s.metadata);
    s.metadata.annotations = None;
    s.string_data = None;
    for (k, v) in s.data.iter_mut().flatten() {
        if v.0.is_empty() || storage::PLAIN_KEYS.contains(&k.as_str()) {
            continue;
        }
        let marker = if storage::unsafe_in_yaml(&v.0) {
            storage::VALUE_UNSAFE
        } else {
            storage::VALUE_SAFE
        };
        *v = ByteString(vec![marker]);
    }
}

/// The stacks that pass `filter`, as trigger refs.
fn stack_refs(
    stacks: &Store<DynamicObject>,
    filter: impl Fn(&DynamicObject) -> bool,
) -> Vec<StackRef> {
    stacks
        .state()
        .iter()
        .filter(|s| filter(s))
        .map(|s| ObjectRef::from_obj_with(s.as_ref(), resource()))
        .collect()
}

pub(crate) fn spawn_typed<K>(
    watches: Vec<(Option<String>, Api<K>)>,
    config: watcher::Config,
    strip: fn(&mut K),
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, stream) = scope::reflect(watches, config, strip, ());
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
    (reader, handle)
}

/// The one watch of a cluster-scoped kind.
fn cluster<K>(client: &Client) -> Vec<(Option<String>, Api<K>)>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>,
{
    vec![(None, Api::all(client.clone()))]
}

/// Where cache changes go: stacks to reconcile, node names whose zone inputs changed,
/// and zone-aware pods, both for the pod annotator.
pub struct Triggers {
    pub stacks: UnboundedSender<StackRef>,
    pub nodes: UnboundedSender<String>,
    pub zone_aware_pods: UnboundedSender<PodChange>,
}

/// A zone-aware pod as the pod cache just saw it.
#[derive(Debug)]
pub enum PodChange {
    Changed(Pod),
    Deleted(Pod),
}

pub fn is_zone_aware(pod: &Pod) -> bool {
    pod.labels()
        .get(names::LABEL_ZONE_AWARE)
        .map(String::as_str)
        == Some(names::LABEL_ZONE_AWARE_VALUE)
}

/// What the caches are built from: the server, the LokiStack store (which the
/// controller fills), what this server serves, where the operator acts, and the Secrets
/// read by name.
pub struct Sources<'a> {
    pub client: &'a Client,
    pub stacks: Store<DynamicObject>,
    pub capabilities: &'a ServerCapabilities,
    pub scope: &'a Scope,
    pub secrets: &'a SecretReader,
}

/// Starts every cache; their changes go to `triggers`. Namespaced kinds are watched
/// in the scope's namespaces only; nodes, volumes and classes cluster-wide (read-only).
pub fn start(src: Sources<'_>, triggers: Triggers) -> (Caches, Vec<JoinHandle<()>>) {
    let (client, stacks, scope) = (src.client, src.stacks, src.scope);
    let (nodes, node_task) = watch_nodes(client, stacks.clone(), &triggers);
    let (storage_classes, class_task) = watch_storage_classes(client, stacks.clone(), &triggers);
    let (volumes, volume_task) = watch_volumes(client, stacks.clone(), &triggers);
    let (zone_aware_pods, zone_aware_task) = watch_pods(client, scope, &triggers, true);
    let (other_pods, other_task) = watch_pods(client, scope, &triggers, false);
    let (statefulsets, statefulset_task) = watch_statefulsets(client, scope, &triggers);
    let mut tasks = vec![
        node_task,
        class_task,
        volume_task,
        zone_aware_task,
        other_task,
        statefulset_task,
    ];
    let mut children = Vec::new();
    for kind in ChildKind::ALL {
        let resource = kind.resource(src.capabilities);
        let (store, task) = watch_children(client, scope, kind, resource.clone(), &triggers);
        tasks.push(task);
        children.push((kind, resource, store));
    }
    let caches = Caches {
        stacks,
        nodes,
        secrets: src.secrets.store(),
        storage_classes,
        volumes,
        zone_aware_pods,
        other_pods,
        statefulsets,
        children,
    };
    (caches, tasks)
}

/// Nodes: a change of zone inputs (labels, taints, cordon, readiness; not heartbeats)
/// re-checks every zone-aware stack and re-runs the annotator for the node's pods.
fn watch_nodes(
    client: &Client,
    stacks: Store<DynamicObject>,
    triggers: &Triggers,
) -> (Store<Node>, JoinHandle<()>) {
    let (stack_tx, node_tx) = (triggers.stacks.clone(), triggers.nodes.clone());
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    spawn_typed(
        cluster::<Node>(client),
        watcher::Config::default(),
        strip_node,
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
            let _ = node_tx.send(n.name_any());
            for r in stack_refs(&stacks, is_stack_zone_aware) {
                let _ = stack_tx.send(r);
            }
        },
    )
}

/// StorageClasses: a change (one created, deleted, made default) re-runs every stack;
/// classes change rarely and every stack's claims may use any of them.
fn watch_storage_classes(
    client: &Client,
    stacks: Store<DynamicObject>,
    triggers: &Triggers,
) -> (Store<StorageClass>, JoinHandle<()>) {
    let stack_tx = triggers.stacks.clone();
    spawn_typed(
        cluster::<StorageClass>(client),
        watcher::Config::default(),
        strip_storage_class,
        move |ev| {
            if let watcher::Event::Apply(_) | watcher::Event::Delete(_) = ev {
                for r in stack_refs(&stacks, |_| true) {
                    let _ = stack_tx.send(r);
                }
            }
        },
    )
}

/// Keeps the name, the default-class annotations and the binding mode.
pub fn strip_storage_class(c: &mut StorageClass) {
    strip_meta(&mut c.metadata);
    c.metadata.labels = None;
    c.parameters = None;
    c.mount_options = None;
    c.allowed_topologies = None;
    if let Some(a) = c.metadata.annotations.as_mut() {
        a.retain(|k, _| k.contains("is-default-class"));
    }
}

/// PersistentVolumes: a volume bound, released or deleted re-runs the zone-aware stacks
/// of its claim's namespace (a volume keeps its zone known to the stack).
fn watch_volumes(
    client: &Client,
    stacks: Store<DynamicObject>,
    triggers: &Triggers,
) -> (Store<PersistentVolume>, JoinHandle<()>) {
    let stack_tx = triggers.stacks.clone();
    spawn_typed(
        cluster::<PersistentVolume>(client),
        watcher::Config::default(),
        strip_volume,
        move |ev| {
            let (watcher::Event::Apply(pv) | watcher::Event::Delete(pv)) = ev else {
                return;
            };
            let Some(ns) = pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|c| c.namespace.clone())
            else {
                return;
            };
            let of_ns = |s: &DynamicObject| s.metadata.namespace.as_deref() == Some(ns.as_str());
            for r in stack_refs(&stacks, of_ns) {
                let _ = stack_tx.send(r);
            }
        },
    )
}

/// Keeps the labels, the claim reference, the node affinity and the phase: what places
/// the volume and whether a claim still holds it.
pub fn strip_volume(pv: &mut PersistentVolume) {
    strip_meta(&mut pv.metadata);
    pv.metadata.annotations = None;
    let spec = pv.spec.take().unwrap_or_default();
    pv.spec = Some(PersistentVolumeSpec {
        claim_ref: spec.claim_ref.map(|c| ObjectReference {
            namespace: c.namespace,
            name: c.name,
            ..Default::default()
        }),
        node_affinity: spec.node_affinity,
        ..Default::default()
    });
    pv.status = pv.status.take().map(|s| PersistentVolumeStatus {
        phase: s.phase,
        ..Default::default()
    });
}

/// Pods are cached once, in one of two stores split by label: zone-aware pods (every pod
/// labelled `loki.grafana.com/zone-aware=enabled`, a stack's or not: the annotator serves
/// them all) and the other pods of stacks. A change re-runs the pod's stack (status), and
/// a zone-aware pod also goes to the annotator.
fn watch_pods(
    client: &Client,
    scope: &Scope,
    triggers: &Triggers,
    zone_aware: bool,
) -> (Store<Pod>, JoinHandle<()>) {
    let stack_tx = triggers.stacks.clone();
    let pod_tx = zone_aware.then(|| triggers.zone_aware_pods.clone());
    let selector = if zone_aware {
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
    };
    spawn_typed(
        scope.watches(
            || Api::all(client.clone()),
            |ns| Api::namespaced(client.clone(), ns),
        ),
        watcher::Config::default().labels(&selector),
        strip_pod,
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
                    PodChange::Changed(pod.clone())
                };
                let _ = tx.send(change);
            }
            // The first list triggers nothing: every stack is reconciled at start anyway.
            if let (false, Some(instance)) = (initial, pod.labels().get(names::LABEL_INSTANCE)) {
                let _ = stack_tx.send(stack_ref(&pod.namespace().unwrap_or_default(), instance));
            }
        },
    )
}

/// StatefulSets the operator created, typed but stripped to what a rollout reads. A
/// change (a new update revision, a pod recreated) re-runs the owning stack; the metadata
/// cache of the same objects triggers it too, maybe before this store has the change, so
/// this one triggers again once it has.
fn watch_statefulsets(
    client: &Client,
    scope: &Scope,
    triggers: &Triggers,
) -> (Store<StatefulSet>, JoinHandle<()>) {
    let stack_tx = triggers.stacks.clone();
    spawn_typed(
        scope.watches(
            || Api::all(client.clone()),
            |ns| Api::namespaced(client.clone(), ns),
        ),
        watcher::Config::default().labels(&managed_selector()),
        strip_statefulset,
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
                let _ = stack_tx.send(stack_ref(ns, &o.name));
            }
        },
    )
}

/// Keeps the metadata (without annotations), replicas, the update strategy and the
/// status: what decides which pods are outdated and how many there should be.
pub fn strip_statefulset(s: &mut StatefulSet) {
    strip_meta(&mut s.metadata);
    s.metadata.annotations = None;
    s.spec = s.spec.take().map(|spec| StatefulSetSpec {
        replicas: spec.replicas,
        update_strategy: spec.update_strategy,
        ..Default::default()
    });
    s.status = s.status.take().map(|st| StatefulSetStatus {
        observed_generation: st.observed_generation,
        replicas: st.replicas,
        update_revision: st.update_revision,
        current_revision: st.current_revision,
        ..Default::default()
    });
}

/// Children (metadata only: the skip check and pruning need nothing else): a change or
/// deletion by someone else re-runs the owning stack, which applies it again.
fn watch_children(
    client: &Client,
    scope: &Scope,
    kind: ChildKind,
    resource: ApiResource,
    triggers: &Triggers,
) -> (ChildStore, JoinHandle<()>) {
    let watches = scope.watches(
        || Api::all_with(client.clone(), &resource),
        |ns| Api::namespaced_with(client.clone(), ns, &resource),
    );
    let stack_tx = triggers.stacks.clone();
    let (reader, stream) = scope::reflect(
        watches,
        watcher::Config::default().labels(&managed_selector()),
        |m: &mut PartialObjectMeta<DynamicObject>| takeover::keep_markers(&mut m.metadata),
        resource,
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
                        let _ = stack_tx.send(stack_ref(ns, &o.name));
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "watch error; retrying with backoff")
                }
            }
        }
    });
    (reader, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, ZONE};
    use k8s_openapi::api::core::v1::{NodeCondition, Taint};

    #[test]
    fn node_fingerprint_ignores_heartbeats_but_not_zone_inputs() {
        let mut a = node("n", &[(ZONE, "a")]);
        let base = node_fingerprint(&a);
        // A heartbeat changes timestamps only.
        a.status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .expect("conditions")[0]
            .last_heartbeat_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        a.metadata.resource_version = Some("42".into());
        assert_eq!(node_fingerprint(&a), base);
        let mut relabelled = a.clone();
        relabelled
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(ZONE.into(), "b".into());
        assert_ne!(node_fingerprint(&relabelled), base);
        let mut tainted = a.clone();
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                effect: "NoExecute".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(node_fingerprint(&tainted), base);
        let mut not_ready = a.clone();
        not_ready.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(node_fingerprint(&not_ready), base);
    }

    #[test]
    fn secrets_are_stored_without_values() {
        let mut s = Secret {
            data: Some(
                [
                    ("a".to_string(), ByteString(b"hunter2".to_vec())),
                    ("b".to_string(), ByteString(vec![])),
                    ("q".to_string(), ByteString(b"pass\"word".to_vec())),
                    (
                        "endpoint".to_string(),
                        ByteString(b"https://s3.amazonaws.com".to_vec()),
                    ),
                ]
                .into(),
            ),
            string_data: Some([("c".to_string(), "x".to_string())].into()),
            ..Default::default()
        };
        strip_secret(&mut s);
        let data = s.data.expect("data");
        assert_eq!(data["a"].0, vec![storage::VALUE_SAFE]);
        assert!(data["b"].0.is_empty());
        assert_eq!(data["q"].0, vec![storage::VALUE_UNSAFE]);
        assert_eq!(data["endpoint"].0, b"https://s3.amazonaws.com".to_vec());
        assert!(s.string_data.is_none());
    }

    #[test]
    fn stripped_statefulsets_keep_what_a_rollout_reads() {
        use k8s_openapi::api::apps::v1::StatefulSetUpdateStrategy;
        let mut s = StatefulSet {
            metadata: kube::api::ObjectMeta {
                name: Some("s-ingester".into()),
                generation: Some(4),
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(6),
                service_name: Some("s-ingester-grpc".into()),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("OnDelete".into()),
                    ..Default::default()
                }),
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    spec: Some(PodSpec::default()),
                    ..Default::default()
                },
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(4),
                replicas: 6,
                ready_replicas: Some(5),
                update_revision: Some("s-ingester-abc".into()),
                ..Default::default()
            }),
        };
        strip_statefulset(&mut s);
        let spec = s.spec.as_ref().expect("spec");
        assert_eq!(spec.replicas, Some(6));
        assert_eq!(
            spec.update_strategy
                .as_ref()
                .and_then(|u| u.type_.as_deref()),
            Some("OnDelete")
        );
        assert!(spec.template.spec.is_none() && spec.service_name.is_none());
        let status = s.status.as_ref().expect("status");
        assert_eq!(status.update_revision.as_deref(), Some("s-ingester-abc"));
        assert_eq!(status.observed_generation, Some(4));
        assert!(status.ready_replicas.is_none());
        assert!(s.metadata.annotations.is_none());
        assert_eq!(s.metadata.generation, Some(4));
    }

    #[test]
    fn stripped_nodes_keep_only_zone_inputs() {
        let mut n = node("n", &[(ZONE, "a")]);
        n.status.as_mut().expect("status").capacity = Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
            )]
            .into(),
        );
        strip_node(&mut n);
        assert!(n.status.as_ref().expect("status").capacity.is_none());
        assert!(crate::zones::node_ready(&n));
        assert_eq!(n.metadata.labels.as_ref().expect("labels")[ZONE], "a");
    }
}
