//! Observe, the first step of a reconcile: one finished, immutable snapshot of what one
//! stack's reconcile reads ([`observe`]): what the caches hold for it, the two objects no
//! cache holds (the CA ConfigMap and the remote-write Secret it names), what the webhook
//! configurations cover, and the one clock of the reconcile. The plan reads this
//! snapshot, never the caches, so a reconcile decides on one consistent picture and the
//! pure steps can be tested with a hand-made one. (The executor reads the caches while it
//! works in one place: the rollout, whether its deletes show.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolume, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use kube::ResourceExt;

use crate::caches::coverage::WebhookCoverage;
use crate::caches::reflectors::Caches;
use crate::caches::rule_bodies::Loaded;
use crate::caches::rules::{decode as decode_rule, RuleKind};
use crate::caches::stacks::DecodeError;
use crate::checks::podzone::node_name;
use crate::checks::silence::LeaseView;
use crate::checks::validate::stack_reads_zone_label;
use crate::model::api::{LokiStack, RulesSpec};
use crate::model::defaults::{zone_aware, Component};
use crate::model::names;
use crate::model::writers::{foreign_fields, writers};
use crate::render::kinds::ChildKind;
use crate::ruler::api::{AlertingRule, RecordingRule, RulerConfig, RulerConfigSpec};
use crate::ruler::check::selects;
use crate::ruler::names as rulernames;

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("LokiStack {0} has no namespace; LokiStack is a namespaced resource")]
    NoNamespace(String),
    #[error("cannot read the CA ConfigMap {name} (spec.storage.tls): {source}")]
    ReadCa { name: String, source: kube::Error },
    #[error("cannot read the remote-write Secret {name} (RulerConfig spec.remoteWrite.client.authorizationSecretName): {source}")]
    ReadRulerSecret { name: String, source: kube::Error },
}

/// An AlertingRule or RecordingRule a stack picks, decoded if it can be.
#[derive(Clone, Debug)]
pub struct PickedRule {
    pub kind: RuleKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub spec: Result<PickedSpec, Unloadable>,
}

/// Why a picked rule's spec is not there to load.
#[derive(Clone, Debug)]
pub enum Unloadable {
    /// The stored object does not decode.
    Decode(DecodeError),
    /// Refused when its body was read (`rule_bodies::Judge`): only these reasons are kept.
    Refused(Arc<Vec<String>>),
}

#[derive(Clone, Debug)]
pub enum PickedSpec {
    Alerting(crate::ruler::api::AlertingRuleSpec),
    Recording(crate::ruler::api::RecordingRuleSpec),
}

impl PickedRule {
    /// An AlertingRule or RecordingRule as the caches (or a file) hold it, decoded.
    pub fn from_object(kind: RuleKind, obj: &kube::api::DynamicObject) -> PickedRule {
        PickedRule {
            kind,
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
            uid: obj.metadata.uid.clone().unwrap_or_default(),
            spec: match kind {
                RuleKind::AlertingRule => {
                    decode_rule::<AlertingRule>(obj).map(|r| PickedSpec::Alerting(r.spec))
                }
                _ => decode_rule::<RecordingRule>(obj).map(|r| PickedSpec::Recording(r.spec)),
            }
            .map_err(Unloadable::Decode),
        }
    }

    /// A rule as the bodies' cache holds it: decoded, or refused on arrival.
    pub fn from_loaded(kind: RuleKind, loaded: &Loaded) -> PickedRule {
        match &loaded.refused {
            None => PickedRule::from_object(kind, &loaded.body),
            Some(reasons) => PickedRule {
                kind,
                namespace: loaded.body.namespace().unwrap_or_default(),
                name: loaded.body.name_any(),
                uid: loaded.body.metadata.uid.clone().unwrap_or_default(),
                spec: Err(Unloadable::Refused(reasons.clone())),
            },
        }
    }

    /// `AlertingRule ns/name`, as messages name it.
    pub fn label(&self) -> String {
        format!("{} {}/{}", self.kind.kind(), self.namespace, self.name)
    }
}

/// The ruler's objects a stack with rules enabled picks.
#[derive(Clone, Debug, Default)]
pub struct RulesObserved {
    /// The AlertingRules and RecordingRules `spec.rules` selects, by kind, namespace and
    /// name.
    pub picked: Vec<PickedRule>,
    /// The RulerConfig of the stack's name and namespace.
    pub ruler_config: Option<Result<RulerConfigSpec, DecodeError>>,
    /// The remote-write Secret the RulerConfig names: `None` when it does not exist or
    /// none is named (see [`ruler_secret`]).
    pub remote_write_secret: Option<RulerSecretSeen>,
    /// Rule kinds the API server does not serve.
    pub unserved: Vec<RuleKind>,
    /// The objects the stack picks whose body has not been read yet (`rule_bodies.rs`),
    /// even after a short wait ([`BODY_WAIT`]): not in `picked`, nor, for its
    /// RulerConfig, in `ruler_config`. Empty unless a read failed or is slow (a stack
    /// that starts picking hundreds of objects at once); a body that arrives re-runs
    /// the stack. Whatever the ruler loaded of them before is not known to this
    /// snapshot: the plan must not take their absence for their deletion.
    pub pending: Vec<PendingRule>,
}

/// An object a stack picks whose body is not held yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRule {
    pub kind: RuleKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PendingRule {
    /// `AlertingRule ns/name`, as messages name it.
    pub fn label(&self) -> String {
        format!("{} {}/{}", self.kind.kind(), self.namespace, self.name)
    }
}

/// How long a reconcile waits for the bodies of objects its stack picks that are not
/// read yet (a stack that just started picking them, a leader that just started).
pub const BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Of the remote-write Secret a RulerConfig names, what the plan needs: never its values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulerSecretSeen {
    /// The keys with a non-empty value.
    pub keys: BTreeSet<String>,
    /// Whether the Secret says it may be sent to a remote-write endpoint
    /// ([`rulernames::ANNOTATION_REMOTE_WRITE_SECRET`] is `"true"`).
    pub opted_in: bool,
}

/// What the caches hold for one stack, at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The object storage Secret, with key names only.
    pub secret: Option<Arc<Secret>>,
    /// Why the storage Secret could not be read, when no copy of it is held.
    pub secret_unreadable: Option<String>,
    /// The key names of the CA ConfigMap `spec.storage.tls` names: `None` when it does
    /// not exist or the stack sets no CA (see [`storage_ca_keys`]).
    pub storage_ca_keys: Option<BTreeSet<String>>,
    /// The StorageClass the stack's claims get: the one it names, else the default.
    pub storage_class: Option<Arc<StorageClass>>,
    /// Every node, for a zone-aware stack (its zone check counts them all); else empty.
    pub nodes: Vec<Arc<Node>>,
    /// The volumes bound to the stack's claims, for a zone-aware stack; else empty.
    pub volumes: Vec<Arc<PersistentVolume>>,
    /// What the operator saw of each node's Lease, on its monotonic clock, for a
    /// zone-aware stack (the fast failover's evidence); else empty.
    pub node_leases: LeaseView,
    /// The stack's pods (by instance label), sorted by name.
    pub pods: Vec<Arc<Pod>>,
    /// The nodes the stack's pods are bound to, by name.
    pub pod_nodes: HashMap<String, Arc<Node>>,
    /// The stack's children (instance label and this stack's controller owner), by kind
    /// and name: what this operator applied, and what the Go Loki Operator left.
    pub children: BTreeMap<(ChildKind, String), ChildState>,
    /// The stack's StatefulSets (this stack's controller owner), typed and stripped, by
    /// name: what the zone-by-zone rollout reads.
    pub statefulsets: Vec<Arc<StatefulSet>>,
    /// The zone-disruption webhook decides the evictions of this stack's ingesters (its
    /// configuration covers the stack's namespace).
    pub disruptions_by_zone: bool,
    /// The ruler's objects the stack picks; empty unless rules are enabled.
    pub rules: RulesObserved,
    /// When the snapshot was taken: the clock the pure steps read.
    pub now: Timestamp,
}

/// What the cache says of one existing child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildState {
    /// [`version_of`] the server's copy.
    pub version: String,
    /// This operator has applied it, so it is this operator's to remove when no longer
    /// rendered. Anything else owned by the stack (the Go operator's gateway) is left.
    pub applied_by_us: bool,
    /// The Go Loki Operator's fields are on it: the next apply takes them over first.
    pub written_by_go: bool,
    /// The top-level fields (`spec`, `secrets`) someone else owns on it (`kubectl edit`,
    /// a controller), but metadata and status.
    pub foreign_fields: std::collections::BTreeSet<String>,
    /// [`names::ANNOTATION_APPLIED_HASH`]: the hash of what this operator last applied.
    pub applied_hash: Option<String>,
}

impl ChildState {
    /// A child this operator applied and nobody else wrote, as tests and a steady state
    /// have it.
    pub fn ours(version: &str) -> ChildState {
        ChildState {
            version: version.to_string(),
            applied_by_us: true,
            written_by_go: false,
            foreign_fields: Default::default(),
            applied_hash: None,
        }
    }
}

/// Everything one reconcile of `stack` reads, at one instant. A zone-aware stack waits
/// first (briefly, [`crate::caches::coverage::COVERAGE_WAIT`]) for the webhook
/// configurations to cover its namespace, so that its first apply is zoned at bind and
/// its ingester budget may allow a zone's share; the caches are read after that wait.
/// `zone_labels_at_binding`: the server copies the zone label at binding, so a stack whose
/// pods read it waits for no zone-at-bind webhook (which leaves it out).
pub async fn observe(
    client: &Client,
    caches: &Caches,
    coverage: &WebhookCoverage,
    stack: &LokiStack,
    zone_labels_at_binding: bool,
) -> Result<Snapshot, ObserveError> {
    let name = stack.name_any();
    let namespace = stack
        .namespace()
        .ok_or_else(|| ObserveError::NoNamespace(name.clone()))?;
    let bind = zoned_at_bind(stack, zone_labels_at_binding);
    let disruptions_by_zone = disruptions_by_zone(coverage, stack, &namespace, bind).await;
    let storage_ca_keys = storage_ca_keys(client, stack, &namespace).await?;
    let picked = match stack.spec.rules.as_ref().filter(|r| r.enabled) {
        Some(spec) => observe_rules(caches, spec, &namespace, &name).await,
        None => RulesObserved::default(),
    };
    let rules = RulesObserved {
        remote_write_secret: ruler_secret(client, &picked, &namespace).await?,
        ..picked
    };
    Ok(Snapshot {
        storage_ca_keys,
        disruptions_by_zone,
        rules,
        ..Snapshot::of_caches(caches, stack, namespace)
    })
}

/// Whether the zone-disruption webhook decides the evictions of this zone-aware stack's
/// ingesters, so their PodDisruptionBudget can allow a whole zone. The first reconcile
/// of a new stack waits (briefly) for the configuration to cover its namespace; until it
/// does, the budget stays at one ingester.
async fn disruptions_by_zone(
    coverage: &WebhookCoverage,
    stack: &LokiStack,
    namespace: &str,
    zoned_at_bind: bool,
) -> bool {
    if !zone_aware(&stack.spec) {
        return false;
    }
    // Both keepers are woken at once: the zone-at-bind wait before the apply then finds
    // its namespace covered already, instead of adding a second wait after this one.
    let bind = async {
        if let Some(c) = coverage.bind.as_ref().filter(|_| zoned_at_bind) {
            c.wait_for(namespace).await;
        }
    };
    let disruptions = async {
        match &coverage.disruptions {
            Some(c) => c.wait_for(namespace).await,
            None => false,
        }
    };
    tokio::join!(bind, disruptions).1
}

/// The zone-at-bind webhook zones this stack's pods: they do not read the label the
/// server copies at binding ([`stack_reads_zone_label`]).
fn zoned_at_bind(stack: &LokiStack, zone_labels_at_binding: bool) -> bool {
    let zones = stack.spec.replication.as_ref().map(|r| r.zones.as_slice());
    let keys: Vec<&str> = zones
        .unwrap_or_default()
        .iter()
        .map(|z| z.topology_key.as_str())
        .collect();
    let annotations = stack.metadata.annotations.as_ref();
    !stack_reads_zone_label(&keys, annotations, zone_labels_at_binding)
}

impl Snapshot {
    /// What the caches hold for `stack` now; the rest of [`observe`] left empty.
    fn of_caches(caches: &Caches, stack: &LokiStack, namespace: String) -> Snapshot {
        let name = stack.name_any();
        let uid = stack.metadata.uid.clone().unwrap_or_default();
        let secret = caches
            .secrets
            .get(&ObjectRef::new(&stack.spec.storage.secret.name).within(&namespace));
        let secret_unreadable = secret.is_none().then(|| {
            caches
                .secret_reader
                .unreadable(&namespace, &stack.spec.storage.secret.name)
        });
        let storage_class = storage_class(caches, stack);
        let (nodes, volumes, node_leases) = if zone_aware(&stack.spec) {
            (
                caches.nodes.state(),
                stack_volumes(caches, &namespace, &name),
                caches.node_leases.view(),
            )
        } else {
            (Vec::new(), Vec::new(), LeaseView::default())
        };
        let mut pods = caches.stack_pods(&namespace, &name);
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let pod_nodes = pod_nodes(caches, &pods);
        let children = owned_children(caches, &namespace, &name, &uid);
        let statefulsets = owned_statefulsets(caches, &namespace, &name, &uid);
        Snapshot {
            namespace,
            name,
            uid,
            secret,
            secret_unreadable: secret_unreadable.flatten(),
            storage_ca_keys: None,
            storage_class,
            nodes,
            volumes,
            node_leases,
            pods,
            pod_nodes,
            children,
            statefulsets,
            disruptions_by_zone: false,
            rules: RulesObserved::default(),
            now: Timestamp::now(),
        }
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.pod_nodes.get(name).map(AsRef::as_ref)
    }

    pub fn pod_refs(&self) -> Vec<&Pod> {
        self.pods.iter().map(AsRef::as_ref).collect()
    }
}

/// The key names of the stack's CA ConfigMap, if it sets one and it exists. ConfigMaps are
/// not cached (nothing else needs them, and a watch would hold every ConfigMap of the
/// cluster), so this is one read per reconcile of a stack that sets a CA.
async fn storage_ca_keys(
    client: &Client,
    stack: &LokiStack,
    namespace: &str,
) -> Result<Option<BTreeSet<String>>, ObserveError> {
    let Some(tls) = &stack.spec.storage.tls else {
        return Ok(None);
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let found = api
        .get_opt(&tls.ca_name)
        .await
        .map_err(|source| ObserveError::ReadCa {
            name: tls.ca_name.clone(),
            source,
        })?;
    Ok(found.map(|cm| {
        let text = cm.data.into_iter().flat_map(|d| d.into_keys());
        let binary = cm.binary_data.into_iter().flat_map(|d| d.into_keys());
        text.chain(binary).collect()
    }))
}

/// The StorageClass the stack's claims get: the one it names, else the default.
fn storage_class(caches: &Caches, stack: &LokiStack) -> Option<Arc<StorageClass>> {
    match stack.spec.storage_class_name.as_deref() {
        Some(name) => caches.storage_classes.get(&ObjectRef::new(name)),
        None => caches
            .storage_classes
            .state()
            .into_iter()
            .find(|c| crate::checks::volumes::is_default(c)),
    }
}

/// The nodes `pods` are bound to, by name.
fn pod_nodes(caches: &Caches, pods: &[Arc<Pod>]) -> HashMap<String, Arc<Node>> {
    pods.iter()
        .filter_map(|p| node_name(p))
        .filter_map(|n| {
            let node = caches.nodes.get(&ObjectRef::new(n))?;
            Some((n.to_string(), node))
        })
        .collect()
}

/// The rules `spec` picks, and the stack's RulerConfig: picked by their metadata, read
/// from the bodies held. Waits up to [`BODY_WAIT`] for bodies not held yet.
async fn observe_rules(
    caches: &Caches,
    spec: &RulesSpec,
    namespace: &str,
    name: &str,
) -> RulesObserved {
    // Subscribed before looking, so that a body that arrives in between wakes the wait.
    let mut arrived = caches.rules.bodies.subscribe();
    let deadline = tokio::time::Instant::now() + BODY_WAIT;
    loop {
        let observed = rules_now(caches, spec, namespace, name);
        if observed.pending.is_empty() {
            return observed;
        }
        let wait = tokio::time::timeout_at(deadline, arrived.changed()).await;
        if !matches!(wait, Ok(Ok(()))) {
            let pending: Vec<String> = observed.pending.iter().map(PendingRule::label).collect();
            tracing::info!(
                namespace,
                stack = name,
                ?pending,
                "picked objects not read yet; they are not loaded in this reconcile"
            );
            return observed;
        }
    }
}

/// [`observe_rules`] of the caches as they are now.
fn rules_now(caches: &Caches, spec: &RulesSpec, namespace: &str, name: &str) -> RulesObserved {
    let rc = &caches.rules;
    let mut picked = Vec::new();
    let mut pending = Vec::new();
    let mut pend = |kind: RuleKind, m: &ObjectMeta| {
        pending.push(PendingRule {
            kind,
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
        })
    };
    for kind in [RuleKind::AlertingRule, RuleKind::RecordingRule] {
        let Some(store) = rc.store(kind) else {
            continue;
        };
        for meta in store.state() {
            let rule_ns = meta.namespace().unwrap_or_default();
            let ns_labels = rc.namespace_labels(&rule_ns);
            if !selects(spec, namespace, &rule_ns, meta.labels(), ns_labels.as_ref()) {
                continue;
            }
            match rc.bodies.body(kind, &meta.metadata) {
                Some(loaded) => picked.push(PickedRule::from_loaded(kind, &loaded)),
                None => pend(kind, &meta.metadata),
            }
        }
    }
    picked.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    let ruler_config = match rc.meta(RuleKind::RulerConfig, namespace, name) {
        None => None,
        Some(meta) => match rc.bodies.body(RuleKind::RulerConfig, &meta.metadata) {
            Some(loaded) => Some(decode_rule::<RulerConfig>(&loaded.body).map(|c| c.spec)),
            None => {
                pend(RuleKind::RulerConfig, &meta.metadata);
                None
            }
        },
    };
    pending.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    RulesObserved {
        picked,
        ruler_config,
        remote_write_secret: None,
        unserved: rc.unserved(),
        pending,
    }
}

/// The remote-write Secret a stack's RulerConfig names, if it exists: its key names and
/// whether it opted in. Like the CA ConfigMap, one read per reconcile of a stack that sets
/// one: nothing else needs these Secrets, and a watch would need `list` on every Secret.
async fn ruler_secret(
    client: &Client,
    rules: &RulesObserved,
    namespace: &str,
) -> Result<Option<RulerSecretSeen>, ObserveError> {
    let Some(Ok(config)) = &rules.ruler_config else {
        return Ok(None);
    };
    let Some(name) = config
        .remote_write
        .as_ref()
        .and_then(|rw| rw.client.as_ref())
        .map(|c| c.authorization_secret_name.clone())
    else {
        return Ok(None);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = api
        .get_opt(&name)
        .await
        .map_err(|source| ObserveError::ReadRulerSecret { name, source })?;
    Ok(found.map(|s| {
        let opted_in = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(rulernames::ANNOTATION_REMOTE_WRITE_SECRET))
            .is_some_and(|v| v == "true");
        let data = s.data.into_iter().flat_map(|d| {
            d.into_iter()
                .filter(|(_, v)| !v.0.is_empty())
                .map(|(k, _)| k)
        });
        let text = s
            .string_data
            .into_iter()
            .flat_map(|d| d.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k));
        RulerSecretSeen {
            keys: data.chain(text).collect(),
            opted_in,
        }
    }))
}

/// The volumes bound to claims of the stack's StatefulSets, found by the claim each
/// volume names (volumes carry no labels of their claim). A Released volume, whose claim
/// was deleted, holds nothing of the stack any more.
fn stack_volumes(caches: &Caches, namespace: &str, stack: &str) -> Vec<Arc<PersistentVolume>> {
    let mut out = caches.namespace_volumes(namespace);
    out.retain(|pv| {
        let bound = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        bound
            && pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .filter(|c| c.namespace.as_deref() == Some(namespace))
                .and_then(|c| c.name.as_deref())
                .is_some_and(|claim| Component::ALL.iter().any(|c| c.owns_claim(stack, claim)))
    });
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

fn owned_children(
    caches: &Caches,
    namespace: &str,
    stack: &str,
    uid: &str,
) -> BTreeMap<(ChildKind, String), ChildState> {
    let mut out = BTreeMap::new();
    let mut visit = |kind: ChildKind, meta: &ObjectMeta| {
        let ours = meta.namespace.as_deref() == Some(namespace)
            && meta
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_INSTANCE))
                .map(String::as_str)
                == Some(stack)
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid);
        if let (true, Some(name)) = (ours, meta.name.clone()) {
            let w = writers(meta);
            let state = ChildState {
                version: version_of(meta),
                applied_by_us: w.ours,
                written_by_go: w.go,
                foreign_fields: foreign_fields(meta),
                applied_hash: meta
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(names::ANNOTATION_APPLIED_HASH))
                    .cloned(),
            };
            out.insert((kind, name), state);
        }
    };
    for (kind, m) in caches.stack_children(namespace, stack) {
        visit(kind, &m.metadata);
    }
    // StatefulSets are cached once, typed.
    for s in caches.stack_statefulsets(namespace, stack) {
        visit(ChildKind::StatefulSet, &s.metadata);
    }
    out
}

/// What identifies the server's copy of an object for the apply skip check:
/// `metadata.generation` where the kind has one (status updates do not change it), else
/// `metadata.resourceVersion`.
pub fn version_of(meta: &ObjectMeta) -> String {
    match meta.generation {
        Some(g) => format!("g{g}"),
        None => format!("rv{}", meta.resource_version.as_deref().unwrap_or_default()),
    }
}

/// The stack's StatefulSets (controller-owned by it), sorted by name.
fn owned_statefulsets(
    caches: &Caches,
    namespace: &str,
    stack: &str,
    uid: &str,
) -> Vec<Arc<StatefulSet>> {
    let mut sets = caches.stack_statefulsets(namespace, stack);
    sets.retain(|s| {
        s.metadata.namespace.as_deref() == Some(namespace)
            && s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
    });
    sets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    sets
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caches::taps::Taps;
    use crate::testing::cluster::FakeCluster;
    use crate::testing::rules::RuleFeeds;
    use serde_json::json;

    /// A stack `ns/s` picking rules labelled `pick: yes`, an AlertingRule it picks and its
    /// RulerConfig, in the caches as metadata; no body read yet.
    fn picking() -> (FakeCluster, Caches, RulesSpec) {
        let fake = FakeCluster::new();
        let (mut feeds, rules) = RuleFeeds::new();
        let mut caches = fake.caches.clone();
        caches.rules = rules;
        let spec = json!({"enabled": true, "selector": {"matchLabels": {"pick": "yes"}}});
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "LokiStack",
            "metadata": {"name": "s", "namespace": "ns"}, "spec": {"rules": spec},
        }));
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
            "metadata": {"name": "r", "namespace": "ns", "labels": {"pick": "yes"}},
            "spec": {"tenantID": "t", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "1"}]}]},
        }));
        fake.put(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "RulerConfig",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"evaluationInterval": "1m"},
        }));
        feeds.sync(&fake, RuleKind::AlertingRule, "ns", "r");
        feeds.sync(&fake, RuleKind::RulerConfig, "ns", "s");
        let spec = serde_json::from_value(spec).expect("rules");
        (fake, caches, spec)
    }

    #[tokio::test(start_paused = true)]
    async fn a_picked_object_not_read_yet_is_waited_for_briefly_then_said_pending() {
        let (_fake, caches, spec) = picking();
        let started = tokio::time::Instant::now();
        let observed = observe_rules(&caches, &spec, "ns", "s").await;
        assert_eq!(started.elapsed(), BODY_WAIT);
        assert!(observed.picked.is_empty());
        assert!(observed.ruler_config.is_none());
        let pending: Vec<String> = observed.pending.iter().map(PendingRule::label).collect();
        assert_eq!(pending, ["AlertingRule ns/r", "RulerConfig ns/s"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_during_the_wait_is_used() {
        let (fake, caches, spec) = picking();
        let reader = caches.clone();
        let client = fake.client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            reader
                .rules
                .read_bodies(&client, &reader.stacks, &Taps::default())
                .await
        });
        let started = tokio::time::Instant::now();
        let observed = observe_rules(&caches, &spec, "ns", "s").await;
        assert!(started.elapsed() < BODY_WAIT);
        assert!(observed.pending.is_empty(), "{:?}", observed.pending);
        assert_eq!(observed.picked.len(), 1);
        assert!(observed.picked[0].spec.is_ok());
        assert!(matches!(observed.ruler_config, Some(Ok(_))));
        // Held now: no wait at all.
        let started = tokio::time::Instant::now();
        let again = observe_rules(&caches, &spec, "ns", "s").await;
        assert_eq!(again.picked.len(), 1);
        assert_eq!(started.elapsed(), std::time::Duration::ZERO);
    }

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
}
