//! Observe: the reflector caches every reconcile reads, and the triggers they send.
//!
//! Each cache strips what the operator never reads before it is stored, so memory stays
//! flat: nodes keep labels, taints, cordon and readiness; pods keep metadata, node and
//! phase; Secrets keep their key names, never their values; children keep metadata only.
//! Every change maps to the stacks it concerns and goes into one trigger stream.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Secret, Service, ServiceAccount,
};
use k8s_openapi::ByteString;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::api::LokiStack;
use crate::names;
use crate::render::ServerCapabilities;

/// A child kind the operator renders, and the API resource it is served as.
#[derive(Clone, Debug)]
pub struct ChildKind {
    pub kind: &'static str,
    pub resource: ApiResource,
}

/// The kinds `render` produces, as this server serves them: `policy/v1beta1`
/// PodDisruptionBudgets on servers older than 1.21.
pub fn child_kinds(caps: &ServerCapabilities) -> Vec<ChildKind> {
    let pdb = if caps.pdb_v1 {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "policy",
            "v1",
            "PodDisruptionBudget",
        ))
    } else {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "policy",
            "v1beta1",
            "PodDisruptionBudget",
        ))
    };
    vec![
        ChildKind {
            kind: "ServiceAccount",
            resource: ApiResource::erase::<ServiceAccount>(&()),
        },
        ChildKind {
            kind: "ConfigMap",
            resource: ApiResource::erase::<ConfigMap>(&()),
        },
        ChildKind {
            kind: "Service",
            resource: ApiResource::erase::<Service>(&()),
        },
        ChildKind {
            kind: "Deployment",
            resource: ApiResource::erase::<Deployment>(&()),
        },
        ChildKind {
            kind: "StatefulSet",
            resource: ApiResource::erase::<StatefulSet>(&()),
        },
        ChildKind {
            kind: "PodDisruptionBudget",
            resource: pdb,
        },
    ]
}

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

/// The caches a reconcile reads.
#[derive(Clone)]
pub struct Caches {
    pub stacks: Store<LokiStack>,
    pub nodes: Store<Node>,
    pub secrets: Store<Secret>,
    /// Pods of stacks (label `app.kubernetes.io/name=lokistack`), for status.
    pub pods: Store<Pod>,
    pub children: Vec<(ChildKind, ChildStore)>,
}

impl Caches {
    pub fn child_store(&self, kind: &str) -> Option<&ChildStore> {
        self.children
            .iter()
            .find(|(k, _)| k.kind == kind)
            .map(|(_, s)| s)
    }

    pub async fn wait_until_ready(&self) -> bool {
        let mut ok = synced("lokistacks", &self.stacks).await
            & synced("nodes", &self.nodes).await
            & synced("secrets", &self.secrets).await
            & synced("pods", &self.pods).await;
        for (kind, s) in &self.children {
            ok &= synced(kind.kind, s).await;
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
        ..Default::default()
    });
}

/// Keeps key names only: an empty value stays empty, any other becomes one byte, which is
/// all the storage check needs. Credentials never sit in the operator's memory.
pub fn strip_secret(s: &mut Secret) {
    strip_meta(&mut s.metadata);
    s.metadata.annotations = None;
    s.string_data = None;
    if let Some(data) = s.data.as_mut() {
        for v in data.values_mut() {
            *v = ByteString(if v.0.is_empty() { vec![] } else { vec![1] });
        }
    }
}

fn stack_ref(ns: &str, name: &str) -> ObjectRef<LokiStack> {
    ObjectRef::new(name).within(ns)
}

/// Stacks (zone-aware ones only, when `zone_aware_only`) as trigger refs.
fn stack_refs(
    stacks: &Store<LokiStack>,
    filter: impl Fn(&LokiStack) -> bool,
) -> Vec<ObjectRef<LokiStack>> {
    stacks
        .state()
        .iter()
        .filter(|s| filter(s))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn spawn_typed<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer);
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

/// Starts every cache. Changes are sent as stack refs on `triggers`; node names whose
/// zone-relevant fields changed go to `node_changes` (the pod annotator).
pub fn start(
    client: &Client,
    stacks: Store<LokiStack>,
    caps: &ServerCapabilities,
    triggers: UnboundedSender<ObjectRef<LokiStack>>,
    node_changes: UnboundedSender<String>,
) -> (Caches, Vec<JoinHandle<()>>) {
    let mut tasks = Vec::new();

    let node_stacks = stacks.clone();
    let node_triggers = triggers.clone();
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    let (nodes, t) = spawn_typed(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        strip_node,
        move |ev| {
            let mut changed: Vec<String> = Vec::new();
            match ev {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    let fp = node_fingerprint(n);
                    if fingerprints.insert(n.name_any(), fp) != Some(fp) {
                        changed.push(n.name_any());
                    }
                }
                watcher::Event::Delete(n) => {
                    fingerprints.remove(&n.name_any());
                    changed.push(n.name_any());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            if changed.is_empty() {
                return;
            }
            for name in changed {
                let _ = node_changes.send(name);
            }
            for r in stack_refs(&node_stacks, |s| {
                s.spec
                    .replication
                    .as_ref()
                    .is_some_and(|r| !r.zones.is_empty())
            }) {
                let _ = node_triggers.send(r);
            }
        },
    );
    tasks.push(t);

    let secret_stacks = stacks.clone();
    let secret_triggers = triggers.clone();
    let (secrets, t) = spawn_typed(
        Api::<Secret>::all(client.clone()),
        watcher::Config::default(),
        strip_secret,
        move |ev| {
            let (watcher::Event::Apply(s)
            | watcher::Event::Delete(s)
            | watcher::Event::InitApply(s)) = ev
            else {
                return;
            };
            let (ns, name) = (s.namespace().unwrap_or_default(), s.name_any());
            for r in stack_refs(&secret_stacks, |st| {
                st.namespace().as_deref() == Some(ns.as_str())
                    && st.spec.storage.secret.name == name
            }) {
                let _ = secret_triggers.send(r);
            }
        },
    );
    tasks.push(t);

    let pod_triggers = triggers.clone();
    let pod_config = watcher::Config::default().labels(&format!(
        "{}={}",
        names::LABEL_NAME,
        names::LABEL_NAME_VALUE
    ));
    let (pods, t) = spawn_typed(
        Api::<Pod>::all(client.clone()),
        pod_config,
        strip_pod,
        move |ev| {
            let (watcher::Event::Apply(p) | watcher::Event::Delete(p)) = ev else {
                return;
            };
            if let Some(instance) = p.labels().get(names::LABEL_INSTANCE) {
                let _ = pod_triggers.send(stack_ref(&p.namespace().unwrap_or_default(), instance));
            }
        },
    );
    tasks.push(t);

    let mut children = Vec::new();
    for kind in child_kinds(caps) {
        let writer = reflector::store::Writer::new(kind.resource.clone());
        let reader = writer.as_reader();
        // Metadata only: the skip check and pruning need nothing else.
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &kind.resource);
        let child_triggers = triggers.clone();
        let label = kind.kind;
        let stream = watcher(api, watcher::Config::default().labels(&managed_selector()))
            .default_backoff()
            .modify(|m: &mut PartialObjectMeta<DynamicObject>| m.metadata.managed_fields = None)
            .reflect(writer);
        tasks.push(tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Apply(m) | watcher::Event::Delete(m)) => {
                        let owner = m
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .find(|o| o.kind == "LokiStack" && o.controller == Some(true));
                        if let (Some(o), Some(ns)) = (owner, m.metadata.namespace.as_deref()) {
                            let _ = child_triggers.send(stack_ref(ns, &o.name));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(kind = label, error = %e, "watch error; retrying with backoff"),
                }
            }
        }));
        children.push((kind, reader));
    }

    (
        Caches {
            stacks,
            nodes,
            secrets,
            pods,
            children,
        },
        tasks,
    )
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
                ]
                .into(),
            ),
            string_data: Some([("c".to_string(), "x".to_string())].into()),
            ..Default::default()
        };
        strip_secret(&mut s);
        let data = s.data.expect("data");
        assert_eq!(data["a"].0, vec![1]);
        assert!(data["b"].0.is_empty());
        assert!(s.string_data.is_none());
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
