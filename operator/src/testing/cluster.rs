//! A fake API server for testing the glue without a cluster: objects in memory, every
//! request the operator sends recorded, and the process's caches ([`Caches`]) kept in
//! step with the objects, as their watches would keep them, before each answer goes
//! back. So a test needs no waiting: once a call returns, the caches show its writes.
//!
//! It serves what the operator sends: reads, creates, server-side apply (of objects and
//! of the status subresource), JSON merge patches, deletes with preconditions and
//! evictions. It is a stand-in, not an API server: it validates nothing, and a
//! server-side apply replaces the fields the applied object names, which is what an
//! apply by the one field manager that owns them does. Writes the test makes itself
//! ([`FakeCluster::put`], [`FakeCluster::edit`], [`FakeCluster::remove`]) are not
//! recorded, as a user's or a controller's are not the operator's.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::client::Body;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::caches::reflectors::{managed_selector, pod_selector, ByStack, Caches, ChildCache};
use crate::caches::rules::RuleCaches;
use crate::caches::scope::ScopedWriter;
use crate::caches::secrets::SecretReader;
use crate::caches::stacks;
use crate::caches::taps::{PodChange, Taps};
use crate::checks::podzone::{self, PodZone};
use crate::model::writers::keep_markers;
use crate::render::kinds::ChildKind;
use crate::stores::index::{self, KeyOf};
use crate::stores::keep::{
    strip_node, strip_pod, strip_statefulset, strip_storage_class, strip_volume,
};

/// Where an object lives: API group (empty for the core group), resource (plural),
/// namespace (`None` when cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    /// An object of the core API group (`pods`, `nodes`, ...); `namespace` `None` when
    /// cluster-scoped.
    pub fn core(plural: &str, namespace: Option<&str>, name: &str) -> Key {
        Key {
            group: String::new(),
            plural: plural.into(),
            namespace: namespace.map(String::from),
            name: name.into(),
        }
    }

    pub fn node(name: &str) -> Key {
        Key::core("nodes", None, name)
    }
}

/// One request the operator sent.
#[derive(Clone, Debug)]
pub struct Call {
    /// `get`, `list`, `create`, `apply`, `merge`, `delete` or `evict`.
    pub verb: &'static str,
    /// `namespace/plural/name[/subresource]`, or `plural/name` when cluster-scoped.
    pub target: String,
    pub body: Option<Value>,
}

impl Call {
    /// `verb target`, as the assertions spell a request.
    pub fn line(&self) -> String {
        format!("{} {}", self.verb, self.target)
    }

    pub fn is_write(&self) -> bool {
        !matches!(self.verb, "get" | "list")
    }
}

/// What the next matching request gets instead of the normal answer.
struct Fault {
    verb: &'static str,
    target: String,
    kind: FaultKind,
}

enum FaultKind {
    /// An error status.
    Fail { code: u16, reason: String },
    /// No answer, ever: a stalled connection.
    Stall,
    /// The normal answer, this much later.
    Delay(std::time::Duration),
}

struct State {
    objects: BTreeMap<Key, Value>,
    /// The last resourceVersion given out; uids are numbered with it too.
    version: u64,
    calls: Vec<Call>,
    faults: Vec<Fault>,
    feeds: Feeds,
    taps: Taps,
}

/// The write halves of the caches' stores.
struct Feeds {
    stacks: ScopedWriter<DynamicObject>,
    nodes: ScopedWriter<Node>,
    classes: ScopedWriter<StorageClass>,
    volumes: ScopedWriter<PersistentVolume>,
    zone_aware_pods: ScopedWriter<Pod>,
    other_pods: ScopedWriter<Pod>,
    statefulsets: ScopedWriter<StatefulSet>,
    children: Vec<(ApiResource, ScopedWriter<PartialObjectMeta<DynamicObject>>)>,
}

/// A store that has listed an empty cluster: ready, and fed one change at a time.
fn ready<K>(dyntype: K::DynamicType, key_of: KeyOf<K>) -> ScopedWriter<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut w = ScopedWriter::new(dyntype, [None], key_of);
    w.apply(None, &Event::Init);
    w.apply(None, &Event::InitDone);
    w
}

#[derive(Clone)]
pub struct FakeCluster {
    state: Arc<Mutex<State>>,
    pub client: Client,
    pub caches: Caches,
    /// Where the changes of zone-aware pods and of nodes go, as the pod and node caches
    /// send them (to the annotator of the term attached). Stacks are triggered by the
    /// test itself.
    pub taps: Taps,
}

impl FakeCluster {
    pub fn new() -> FakeCluster {
        let stack_resource = stacks::resource();
        let children: Vec<(ChildKind, ApiResource, ScopedWriter<_>)> = ChildKind::ALL
            .into_iter()
            .filter(|k| *k != ChildKind::StatefulSet)
            .map(|k| {
                let r = k.resource();
                (k, r.clone(), ready(r, index::by_instance))
            })
            .collect();
        let feeds = Feeds {
            stacks: ready(stack_resource, index::unindexed),
            nodes: ready((), index::unindexed),
            classes: ready((), index::unindexed),
            volumes: ready((), index::by_claim_namespace),
            zone_aware_pods: ready((), index::by_instance),
            other_pods: ready((), index::by_instance),
            statefulsets: ready((), index::by_controller),
            children: Vec::new(),
        };
        let caches_children = children
            .iter()
            .map(|(kind, resource, w)| ChildCache {
                kind: *kind,
                resource: resource.clone(),
                store: w.reader(),
                by_stack: w.index(),
            })
            .collect();
        let by_stack = ByStack {
            zone_aware_pods: feeds.zone_aware_pods.index(),
            other_pods: feeds.other_pods.index(),
            statefulsets: feeds.statefulsets.index(),
            volumes: feeds.volumes.index(),
        };
        let (stacks, nodes, storage_classes, volumes) = (
            feeds.stacks.reader(),
            feeds.nodes.reader(),
            feeds.classes.reader(),
            feeds.volumes.reader(),
        );
        let (zone_aware_pods, other_pods, statefulsets) = (
            feeds.zone_aware_pods.reader(),
            feeds.other_pods.reader(),
            feeds.statefulsets.reader(),
        );
        let taps = Taps::default();
        let state = Arc::new(Mutex::new(State {
            taps: taps.clone(),
            objects: BTreeMap::new(),
            version: 0,
            calls: Vec::new(),
            faults: Vec::new(),
            feeds: Feeds {
                children: children.into_iter().map(|(_, r, w)| (r, w)).collect(),
                ..feeds
            },
        }));
        let served = state.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let state = served.clone();
            async move { Ok::<_, Infallible>(answer(&state, req).await) }
        });
        let client = Client::new(service, "default");
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
            children: caches_children,
            by_stack,
            rules: RuleCaches::default(),
            node_leases: Default::default(),
        };
        FakeCluster {
            state,
            client,
            caches,
            taps,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Creates or replaces an object as someone else would (not recorded): it gets a
    /// uid, a resourceVersion and a generation as the server gives them, unless it has
    /// them already.
    pub fn put(&self, object: impl serde::Serialize) {
        let object = serde_json::to_value(object).expect("serialisable");
        let key = key_of(&object).expect("an object with apiVersion, kind and name");
        let mut st = self.lock();
        let old = st.objects.get(&key).cloned();
        let stored = st.stamp(old.as_ref(), object);
        st.store(&key, old.as_ref(), Some(stored));
    }

    /// Changes a stored object as someone else would (not recorded).
    pub fn edit(&self, key: &Key, change: impl FnOnce(&mut Value)) {
        let mut st = self.lock();
        let old = st.objects.get(key).cloned().expect("the object exists");
        let mut new = old.clone();
        change(&mut new);
        let stored = st.stamp(Some(&old), new);
        st.store(key, Some(&old), Some(stored));
    }

    /// Deletes an object as someone else would (not recorded).
    pub fn remove(&self, key: &Key) {
        let mut st = self.lock();
        let old = st.objects.get(key).cloned();
        st.store(key, old.as_ref(), None);
    }

    pub fn get(&self, key: &Key) -> Option<Value> {
        self.lock().objects.get(key).cloned()
    }

    /// The stored objects of one resource (plural) in one namespace.
    pub fn list(&self, plural: &str, namespace: &str) -> Vec<Value> {
        self.lock()
            .objects
            .iter()
            .filter(|(k, _)| k.plural == plural && k.namespace.as_deref() == Some(namespace))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// What the test stacks (`testing::stack_spec`) name in `namespace`: the
    /// StorageClass `standard` and the S3 Secret `loki-s3` with every key it needs.
    pub fn put_storage(&self, namespace: &str) {
        self.put(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "standard"},
            "provisioner": "example.com/disk",
            "volumeBindingMode": "WaitForFirstConsumer",
        }));
        let keys = [
            "endpoint",
            "bucketnames",
            "access_key_id",
            "access_key_secret",
        ];
        // "eA==" is "x".
        let data: Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), json!("eA==")))
            .collect();
        self.put(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "loki-s3", "namespace": namespace},
            "data": data,
        }));
    }

    /// The one Event publisher of a process talking to this cluster.
    pub fn notifier(&self) -> crate::act::report::Notifier {
        let reporter = kube::runtime::events::Reporter {
            controller: crate::model::names::CONTROLLER_NAME.into(),
            instance: None,
        };
        let recorder = kube::runtime::events::Recorder::new(self.client.clone(), reporter);
        crate::act::report::Notifier::new(recorder)
    }

    /// The stack as the caches hold it: what the controller hands to a reconcile.
    pub fn stack(&self, namespace: &str, name: &str) -> Arc<DynamicObject> {
        self.caches
            .stacks
            .get(&stacks::stack_ref(namespace, name))
            .expect("the stack is cached")
    }

    /// Every request since the last call, and forgets them.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().calls)
    }

    /// The next request `verb target` gets `code` instead.
    pub fn fail_next(&self, verb: &'static str, target: &str, code: u16, reason: &str) {
        let kind = FaultKind::Fail {
            code,
            reason: reason.to_string(),
        };
        self.fault(verb, target, kind);
    }

    /// The next request `verb target` is never answered.
    pub fn stall_next(&self, verb: &'static str, target: &str) {
        self.fault(verb, target, FaultKind::Stall);
    }

    /// The next request `verb target` is answered `by` later (by the runtime's clock).
    pub fn delay_next(&self, verb: &'static str, target: &str, by: std::time::Duration) {
        self.fault(verb, target, FaultKind::Delay(by));
    }

    fn fault(&self, verb: &'static str, target: &str, kind: FaultKind) {
        self.lock().faults.push(Fault {
            verb,
            target: target.to_string(),
            kind,
        });
    }
}

/// Where the emulated scheduler puts a pod, by its name: its node and its IP.
pub type Placement<'a> = &'a dyn Fn(&str) -> (String, String);

impl FakeCluster {
    /// Does, at once, what the StatefulSet controller, the scheduler with the zone-at-bind
    /// webhook, and the kubelets would do for every StatefulSet: its status observes
    /// its spec, with an update revision that follows its pod template; each missing pod
    /// is created from the template at that revision, placed by `place`, zoned as the
    /// webhook zones it (`podzone::decide`), running and Ready; pods beyond the replicas
    /// go. Pods of a set with `updateStrategy: OnDelete` keep their revision until
    /// deleted; the others are replaced at once. Each pod gets the claims of the set's
    /// claim templates (with the protection finalizer of a claim in use). Deployments get
    /// no pods.
    pub fn run_statefulsets(&self, place: Placement<'_>) {
        let sets: Vec<(Key, Value)> = self
            .lock()
            .objects
            .iter()
            .filter(|(k, _)| k.group == "apps" && k.plural == "statefulsets")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, set) in sets {
            self.run_statefulset(&key, &set, place);
        }
    }

    fn run_statefulset(&self, key: &Key, set: &Value, place: Placement<'_>) {
        let name = &key.name;
        let template = &set["spec"]["template"];
        let digest = crate::act::apply::applied_hash(template);
        let revision = format!("{name}-{}", &digest["sha256:".len()..][..10]);
        let replicas = set["spec"]["replicas"].as_i64().unwrap_or(1);
        let on_delete =
            set["spec"]["updateStrategy"]["type"] == crate::model::names::UPDATE_STRATEGY_ON_DELETE;
        let pod_key = |i: i64| Key {
            group: String::new(),
            plural: "pods".into(),
            namespace: key.namespace.clone(),
            name: format!("{name}-{i}"),
        };
        let existing: Vec<(Key, Value)> = self
            .lock()
            .objects
            .iter()
            .filter(|(k, v)| {
                k.plural == "pods"
                    && k.namespace == key.namespace
                    && v["metadata"]["ownerReferences"][0]["name"] == json!(name)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, pod) in &existing {
            let index = k
                .name
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<i64>().ok());
            let outdated =
                pod["metadata"]["labels"][crate::model::names::LABEL_REVISION] != json!(revision);
            if index.is_none_or(|i| i >= replicas) || (outdated && !on_delete) {
                self.remove(k);
            }
        }
        for i in 0..replicas {
            let k = pod_key(i);
            if self.get(&k).is_some() {
                continue;
            }
            // Its claims, from the claim templates, kept from an earlier pod of the
            // same name unless they were deleted; in use, so protected.
            for t in set["spec"]["volumeClaimTemplates"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let claim = format!(
                    "{}-{}",
                    t["metadata"]["name"].as_str().unwrap_or_default(),
                    k.name
                );
                let claim_key = Key {
                    plural: "persistentvolumeclaims".into(),
                    name: claim.clone(),
                    ..k.clone()
                };
                if self.get(&claim_key).is_none() {
                    self.put(json!({
                        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim, "namespace": key.namespace,
                                     "labels": t["metadata"]["labels"],
                                     "finalizers": ["kubernetes.io/pvc-protection"]},
                        "spec": t["spec"],
                        "status": {"phase": "Bound"},
                    }));
                }
            }
            let (node, ip) = place(&k.name);
            let mut pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": template["metadata"].clone(),
                "spec": template["spec"].clone(),
                "status": {"phase": "Running", "podIP": ip,
                           "conditions": [{"type": "Ready", "status": "True"}]},
            });
            let meta = &mut pod["metadata"];
            meta["name"] = json!(k.name);
            meta["namespace"] = json!(key.namespace);
            meta["labels"][crate::model::names::LABEL_REVISION] = json!(revision);
            meta["ownerReferences"] = json!([{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                "uid": set["metadata"]["uid"], "controller": true,
            }]);
            pod["spec"]["nodeName"] = json!(node);
            let typed: Pod = serde_json::from_value(pod.clone()).expect("a pod");
            let node: Option<Node> = self
                .get(&Key {
                    group: String::new(),
                    plural: "nodes".into(),
                    namespace: None,
                    name: node,
                })
                .and_then(|n| serde_json::from_value(n).ok());
            if crate::model::pods::is_zone_aware(&typed) {
                if let PodZone::Annotate(zone) = podzone::decide(&typed, node.as_ref()) {
                    pod["metadata"]["annotations"][crate::model::names::ANNOTATION_ZONE] =
                        json!(zone);
                }
            }
            self.put(pod);
        }
        let ready = (0..replicas)
            .filter(|i| self.get(&pod_key(*i)).is_some())
            .count();
        self.edit(key, |s| {
            s["status"] = json!({
                "observedGeneration": s["metadata"]["generation"],
                "replicas": replicas,
                "readyReplicas": ready,
                "updateRevision": revision,
            });
        });
    }
}

/// The key of a stack's object: `namespace/plural/name` of the resource `resource`.
pub fn key(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Key {
    Key {
        group: resource.group.clone(),
        plural: resource.plural.clone(),
        namespace: namespace.map(String::from),
        name: name.to_string(),
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The key of an object, from its `apiVersion`, `kind` and metadata: the plural is the
/// kind's, lowercased with an `s` (or `ies`), which holds for every kind used here.
fn key_of(object: &Value) -> Option<Key> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let group = api_version
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
        .to_string();
    let lower = kind.to_ascii_lowercase();
    let plural = match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None if lower.ends_with('s') => format!("{lower}es"),
        None => format!("{lower}s"),
    };
    Some(Key {
        group,
        plural,
        namespace: object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(String::from),
        name: object.pointer("/metadata/name")?.as_str()?.to_string(),
    })
}

/// `/api/v1/...` or `/apis/{group}/{version}/...`, then `[namespaces/{ns}/]{plural}`,
/// then `[{name}[/{subresource}]]`.
fn parse_path(path: &str) -> Option<(Key, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match *parts.first()? {
        "api" => (String::new(), parts.get(2..)?),
        "apis" => (parts.get(1)?.to_string(), parts.get(3..)?),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (plural, "", None),
        [plural, name] => (plural, *name, None),
        [plural, name, sub] => (plural, *name, Some(sub.to_string())),
        _ => return None,
    };
    Some((
        Key {
            group,
            plural: plural.to_string(),
            namespace,
            name: name.to_string(),
        },
        sub,
    ))
}

fn target(key: &Key, sub: Option<&str>) -> String {
    let mut t = match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.plural),
        None => key.plural.clone(),
    };
    if !key.name.is_empty() {
        t = format!("{t}/{}", key.name);
    }
    if let Some(sub) = sub {
        t = format!("{t}/{sub}");
    }
    t
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
               "reason": reason, "code": code, "message": message}),
    )
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

async fn answer(state: &Mutex<State>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let (code, out) = match parse_path(parts.uri.path()) {
        Some((key, sub)) => {
            let verb = verb(&parts.method, &content_type, &key, sub.as_deref());
            let t = target(&key, sub.as_deref());
            let fault = {
                let mut st = lock(state);
                st.calls.push(Call {
                    verb,
                    target: t.clone(),
                    body: body.clone(),
                });
                let at = st
                    .faults
                    .iter()
                    .position(|f| f.verb == verb && f.target == t);
                at.map(|i| st.faults.remove(i).kind)
            };
            match fault {
                Some(FaultKind::Fail { code, reason }) => {
                    status(code, &reason, &format!("{verb} {t}: {reason}"))
                }
                Some(FaultKind::Stall) => std::future::pending().await,
                Some(FaultKind::Delay(by)) => {
                    tokio::time::sleep(by).await;
                    lock(state).serve(verb, &key, sub.as_deref(), &query, body)
                }
                None => lock(state).serve(verb, &key, sub.as_deref(), &query, body),
            }
        }
        None => status(
            404,
            "NotFound",
            &format!("no such path {}", parts.uri.path()),
        ),
    };
    let mut resp = Response::new(Body::from(out.to_string().into_bytes()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

fn verb(method: &Method, content_type: &str, key: &Key, sub: Option<&str>) -> &'static str {
    match *method {
        Method::GET if key.name.is_empty() => "list",
        Method::GET => "get",
        Method::POST if sub == Some("eviction") => "evict",
        Method::POST => "create",
        Method::PATCH if content_type.starts_with("application/apply-patch") => "apply",
        Method::PATCH => "merge",
        Method::DELETE => "delete",
        _ => "other",
    }
}

impl State {
    fn serve(
        &mut self,
        verb: &str,
        key: &Key,
        sub: Option<&str>,
        query: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let old = self.objects.get(key).cloned();
        let missing = || {
            status(
                404,
                "NotFound",
                &format!("{} \"{}\" not found", key.plural, key.name),
            )
        };
        match verb {
            "get" => old.map_or_else(missing, |o| (200, o)),
            "list" => (200, self.list(key, query)),
            "create" => {
                let Some(mut object) = body else {
                    return status(400, "BadRequest", "no body");
                };
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let key = Key {
                    name,
                    ..key.clone()
                };
                if self.objects.contains_key(&key) {
                    return status(409, "AlreadyExists", "already exists");
                }
                if let Some(ns) = &key.namespace {
                    object["metadata"]["namespace"] = json!(ns);
                }
                let stored = self.stamp(None, object);
                self.store(&key, None, Some(stored.clone()));
                (201, stored)
            }
            "evict" => {
                let Some(old) = old else { return missing() };
                let pod = Key {
                    plural: "pods".into(),
                    ..key.clone()
                };
                self.store(&pod, Some(&old), None);
                (
                    201,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                )
            }
            "apply" => {
                let Some(applied) = body else {
                    return status(400, "BadRequest", "no body");
                };
                let manager = query_param(query, "fieldManager").unwrap_or_default();
                let new = match (&old, sub) {
                    (None, Some(_)) => return missing(),
                    (Some(o), Some("status")) => {
                        let mut new = o.clone();
                        new["status"] = applied.get("status").cloned().unwrap_or(Value::Null);
                        own(&mut new, &manager, "Apply", Some("status"), &applied);
                        new
                    }
                    (old, _) => {
                        let mut new = server_side_apply(old.as_ref(), &applied);
                        if let Some(ns) = &key.namespace {
                            new["metadata"]["namespace"] = json!(ns);
                        }
                        own(&mut new, &manager, "Apply", None, &applied);
                        new
                    }
                };
                let stored = self.stamp(old.as_ref(), new);
                self.store(key, old.as_ref(), Some(stored.clone()));
                (200, stored)
            }
            "merge" => {
                let (Some(o), Some(patch)) = (&old, body) else {
                    return missing();
                };
                // A patch that names a resourceVersion applies to that version only.
                let wanted = patch
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                let have = o
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                if wanted.is_some() && wanted != have {
                    return status(409, "Conflict", "the object has been modified");
                }
                let mut new = o.clone();
                merge_patch(&mut new, &patch);
                let manager =
                    query_param(query, "fieldManager").unwrap_or_else(|| "unknown".into());
                own(&mut new, &manager, "Update", sub, &patch);
                let stored = self.stamp(old.as_ref(), new);
                self.store(key, old.as_ref(), Some(stored.clone()));
                (200, stored)
            }
            "delete" => {
                let Some(o) = old else { return missing() };
                let wanted = body.as_ref().and_then(|b| b.get("preconditions"));
                for field in ["uid", "resourceVersion"] {
                    let want = wanted.and_then(|p| p.get(field)).and_then(Value::as_str);
                    let have = o
                        .pointer(&format!("/metadata/{field}"))
                        .and_then(Value::as_str);
                    if want.is_some() && want != have {
                        return status(409, "Conflict", &format!("precondition failed: {field}"));
                    }
                }
                let finalized = o
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|f| !f.is_empty());
                if finalized {
                    // Kept, Terminating, until its finalizers are removed (a claim
                    // in use, say): what the server does.
                    let mut terminating = o.clone();
                    if terminating.pointer("/metadata/deletionTimestamp").is_none() {
                        terminating["metadata"]["deletionTimestamp"] =
                            json!("2026-01-01T00:00:00Z");
                    }
                    let stored = self.stamp(Some(&o), terminating);
                    self.store(key, Some(&o), Some(stored.clone()));
                    return (200, stored);
                }
                self.store(key, Some(&o), None);
                (200, o)
            }
            _ => status(405, "MethodNotAllowed", verb),
        }
    }

    fn list(&self, key: &Key, query: &str) -> Value {
        let selector = query_param(query, "labelSelector")
            .map(|s| {
                s.replace("%3D", "=")
                    .replace("%21", "!")
                    .replace("%2C", ",")
            })
            .unwrap_or_default();
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, _)| {
                k.group == key.group
                    && k.plural == key.plural
                    && (key.namespace.is_none() || k.namespace == key.namespace)
            })
            .map(|(_, v)| v)
            .filter(|v| selects(&selector, v))
            .cloned()
            .collect();
        json!({"apiVersion": "v1", "kind": "List",
               "metadata": {"resourceVersion": self.version.to_string()}, "items": items})
    }

    /// What the server adds to an object it stores: a new resourceVersion; the uid and
    /// creation time of the object it replaces, or new ones; a generation that counts
    /// the changes of `spec`, for objects that have one (but pods).
    fn stamp(&mut self, old: Option<&Value>, mut new: Value) -> Value {
        self.version += 1;
        let meta = &mut new["metadata"];
        meta["resourceVersion"] = json!(self.version.to_string());
        let kept =
            |field: &str| old.and_then(|o| o.pointer(&format!("/metadata/{field}")).cloned());
        if let Some(uid) = kept("uid") {
            meta["uid"] = uid;
        } else if meta.get("uid").is_none() {
            meta["uid"] = json!(format!("uid-{}", self.version));
        }
        if let Some(t) = kept("creationTimestamp") {
            meta["creationTimestamp"] = t;
        } else if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let is_pod = new.get("kind").and_then(Value::as_str) == Some("Pod");
        if new.get("spec").is_some() && !is_pod {
            let generation = match old {
                Some(o) => {
                    let g = o
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    if o.get("spec") == new.get("spec") {
                        g
                    } else {
                        g + 1
                    }
                }
                None => new
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1),
            };
            new["metadata"]["generation"] = json!(generation);
        }
        new
    }

    /// Stores (or, with `None`, removes) one object, and passes the change on to every
    /// cache that holds objects of its kind and labels, as their watches would.
    fn store(&mut self, key: &Key, old: Option<&Value>, new: Option<Value>) {
        match &new {
            Some(v) => self.objects.insert(key.clone(), v.clone()),
            None => self.objects.remove(key),
        };
        let new = new.as_ref();
        let f = &mut self.feeds;
        let all = |_: &Value| true;
        match (key.group.as_str(), key.plural.as_str()) {
            (g, "lokistacks") if g == stacks::resource().group => {
                feed(&mut f.stacks, old, new, all, |_| {})
            }
            ("", "nodes") => {
                feed(&mut f.nodes, old, new, all, strip_node);
                self.taps.nodes.send(key.name.clone());
            }
            ("storage.k8s.io", "storageclasses") => {
                feed(&mut f.classes, old, new, all, strip_storage_class)
            }
            ("", "persistentvolumes") => feed(&mut f.volumes, old, new, all, strip_volume),
            ("", "pods") => {
                let (za, other) = (pod_selector(true), pod_selector(false));
                feed(
                    &mut f.zone_aware_pods,
                    old,
                    new,
                    |v| selects(&za, v),
                    strip_pod,
                );
                feed(
                    &mut f.other_pods,
                    old,
                    new,
                    |v| selects(&other, v),
                    strip_pod,
                );
                let stored = f.zone_aware_pods.reader().get(
                    &ObjectRef::new(&key.name).within(key.namespace.as_deref().unwrap_or_default()),
                );
                match (stored, old.filter(|o| selects(&za, o))) {
                    (Some(p), _) => self
                        .taps
                        .zone_aware_pods
                        .send(PodChange::Changed((*p).clone(), std::time::Instant::now())),
                    (None, Some(o)) => {
                        let mut p: Pod = serde_json::from_value(o.clone()).expect("a pod");
                        strip_pod(&mut p);
                        self.taps.zone_aware_pods.send(PodChange::Deleted(p));
                    }
                    (None, None) => {}
                }
            }
            ("apps", "statefulsets") => {
                let managed = managed_selector();
                feed(
                    &mut f.statefulsets,
                    old,
                    new,
                    |v| selects(&managed, v),
                    strip_statefulset,
                )
            }
            (group, plural) => {
                let managed = managed_selector();
                for (r, w) in &mut f.children {
                    if r.group == group && r.plural == plural {
                        feed(
                            w,
                            old,
                            new,
                            |v| selects(&managed, v),
                            |m: &mut PartialObjectMeta<DynamicObject>| {
                                keep_markers(&mut m.metadata)
                            },
                        );
                    }
                }
            }
        }
    }
}

/// Passes one change of an object on to one store, stripped as its watch strips it: an
/// object the store selects is applied; one it selected before and no longer does (or
/// that is gone) is deleted from it.
fn feed<K>(
    w: &mut ScopedWriter<K>,
    old: Option<&Value>,
    new: Option<&Value>,
    selects: impl Fn(&Value) -> bool,
    strip: impl Fn(&mut K),
) where
    K: Resource + Clone + DeserializeOwned + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let typed =
        |v: &Value| -> K { serde_json::from_value(v.clone()).expect("the fake's object decodes") };
    if let Some(v) = new.filter(|v| selects(v)) {
        let mut k = typed(v);
        strip(&mut k);
        w.apply(None, &Event::Apply(k));
    } else if let Some(v) = old.filter(|v| selects(v)) {
        w.apply(None, &Event::Delete(typed(v)));
    }
}

/// Whether an object's labels match an equality-based selector (`k=v`, `k!=v`, joined
/// by commas), the kind the operator's watches use.
fn selects(selector: &str, object: &Value) -> bool {
    let label = |k: &str| {
        object
            .pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .map(String::from)
    };
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            label(k).as_deref() != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            label(k).as_deref() == Some(v)
        } else {
            label(term).is_some()
        }
    })
}

/// An apply by the manager that owns what it applies: every field the applied object
/// names is replaced; a labelled or annotated key is set, the others kept; the status
/// is the server's.
fn server_side_apply(old: Option<&Value>, applied: &Value) -> Value {
    let mut new = old.cloned().unwrap_or_else(|| json!({"metadata": {}}));
    let Some(fields) = applied.as_object() else {
        return new;
    };
    for (k, v) in fields {
        match k.as_str() {
            "status" => {}
            "metadata" => {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    match mk.as_str() {
                        "labels" | "annotations" => {
                            for (lk, lv) in mv.as_object().into_iter().flatten() {
                                new["metadata"][mk][lk] = lv.clone();
                            }
                        }
                        _ => new["metadata"][mk] = mv.clone(),
                    }
                }
            }
            _ => new[k] = v.clone(),
        }
    }
    // Fields the manager applied before and no longer does are removed: the operator's
    // objects are wholly its own.
    if let Some(o) = old.and_then(Value::as_object) {
        for k in o.keys() {
            let own = !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind");
            if own && fields.get(k).is_none() {
                new.as_object_mut().map(|m| m.remove(k));
            }
        }
    }
    new
}

/// Records `manager` as the owner of the top-level fields of `written`, in
/// `managedFields`, in place of its earlier entry for the same operation and subresource.
fn own(object: &mut Value, manager: &str, operation: &str, sub: Option<&str>, written: &Value) {
    let fields: Map<String, Value> = written
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind"))
        .map(|(k, _)| (format!("f:{k}"), json!({})))
        .collect();
    let mut entry = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": object.get("apiVersion").cloned().unwrap_or(Value::Null),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(sub) = sub {
        entry["subresource"] = json!(sub);
    }
    let same = |e: &Value| {
        e.get("manager") == entry.get("manager")
            && e.get("operation") == entry.get("operation")
            && e.get("subresource") == entry.get("subresource")
    };
    let meta = &mut object["metadata"];
    let mut entries: Vec<Value> = meta
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    entries.retain(|e| !same(e));
    entries.push(entry);
    meta["managedFields"] = Value::Array(entries);
}

/// RFC 7386: objects merge, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in p {
        if v.is_null() {
            target.as_object_mut().map(|m| m.remove(k));
        } else {
            merge_patch(&mut target[k], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_object_and_plurals_follow_kinds() {
        let (k, sub) =
            parse_path("/apis/apps/v1/namespaces/ns/statefulsets/s-ingester").expect("parses");
        assert_eq!(target(&k, sub.as_deref()), "ns/statefulsets/s-ingester");
        assert_eq!(k.group, "apps");
        let (k, sub) = parse_path("/api/v1/namespaces/ns/pods/p/eviction").expect("parses");
        assert_eq!(
            (k.plural.as_str(), sub.as_deref()),
            ("pods", Some("eviction"))
        );
        let (k, _) = parse_path("/api/v1/nodes").expect("parses");
        assert_eq!(
            (k.plural.as_str(), k.name.as_str(), k.namespace),
            ("nodes", "", None)
        );
        let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                            "metadata": {"name": "n", "namespace": "ns"}});
        assert_eq!(key_of(&policy).expect("key").plural, "networkpolicies");
        let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "c"}});
        assert_eq!(key_of(&class).expect("key").plural, "storageclasses");
    }

    #[test]
    fn selectors_match_labels_as_the_server_does() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        assert!(selects("a=1,b!=3", &o));
        assert!(!selects("a=1,b!=2", &o));
        assert!(!selects("c", &o));
        assert!(selects("", &o));
    }

    #[test]
    fn a_merge_patch_merges_objects_and_null_removes() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "d": 3});
        merge_patch(&mut t, &json!({"a": {"b": null, "e": 4}, "d": [1]}));
        assert_eq!(t, json!({"a": {"c": 2, "e": 4}, "d": [1]}));
    }

    #[test]
    fn an_apply_replaces_what_it_names_and_drops_what_it_no_longer_names() {
        let old = json!({"metadata": {"labels": {"x": "1"}, "uid": "u"}, "spec": {"a": 1}, "data": {"k": "v"}, "status": {"s": 1}});
        let new = server_side_apply(
            Some(&old),
            &json!({"metadata": {"labels": {"y": "2"}}, "spec": {"b": 2}}),
        );
        assert_eq!(
            new,
            json!({"metadata": {"labels": {"x": "1", "y": "2"}, "uid": "u"}, "spec": {"b": 2}, "status": {"s": 1}})
        );
    }
}
