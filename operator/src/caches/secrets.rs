//! Storage Secrets, read one at a time by name: the operator's RBAC has `get` on Secrets
//! and neither `list` nor `watch`, so it cannot enumerate the Secrets of a namespace, let
//! alone of the cluster. (A metadata-only watch would not help: it needs the same `list`
//! and `watch` rights, and key names are not metadata.)
//!
//! A Secret is read before the first reconcile of a stack that names it, and again every
//! poll interval while any stack names it; a changed one re-runs those stacks. What is
//! kept is what `strip_secret` leaves: key names, never credential values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::warn;

use crate::caches::stacks::{resource, storage_secret_name, StackRef};
use crate::caches::strip::strip_secret;
use crate::caches::taps::Tap;

/// How a Secret looked when last read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Present {
        resource_version: String,
    },
    Absent,
    /// Not readable (no rights, API server down): what was stored before stays.
    Failed,
}

type Key = (String, String);

/// The Secrets stacks name, read by name and polled.
#[derive(Clone)]
pub struct SecretReader {
    client: Client,
    writer: Arc<Mutex<Writer<Secret>>>,
    store: Store<Secret>,
    seen: Arc<Mutex<HashMap<Key, Seen>>>,
}

impl SecretReader {
    pub fn new(client: Client) -> Self {
        let mut writer = Writer::default();
        let store = writer.as_reader();
        // There is no list to wait for: a Secret is read before a stack needs it.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        SecretReader {
            client,
            writer: Arc::new(Mutex::new(writer)),
            store,
            seen: Arc::default(),
        }
    }

    /// The stripped Secrets, for `Snapshot::take`.
    pub fn store(&self) -> Store<Secret> {
        self.store.clone()
    }

    /// Reads the Secret a stack names unless it has been read before: a stack's
    /// reconcile never runs on a Secret not read yet.
    pub async fn ensure_for(&self, stack: &DynamicObject) {
        let (Some(ns), Some(name)) = (stack.namespace(), storage_secret_name(stack)) else {
            return;
        };
        let key = (ns, name.to_string());
        if self.lock_seen().contains_key(&key) {
            return;
        }
        let seen = self.read(&key).await;
        self.lock_seen().insert(key, seen);
    }

    /// Reads again every Secret a stack in `stacks` names, and forgets the others. A
    /// Secret that changed (created, edited, deleted) re-runs the stacks naming it.
    pub async fn refresh(&self, stacks: &Store<DynamicObject>, tx: &Tap<StackRef>) {
        let mut named: HashMap<Key, Vec<StackRef>> = HashMap::new();
        for s in stacks.state() {
            if let (Some(ns), Some(name)) = (s.namespace(), storage_secret_name(&s)) {
                named
                    .entry((ns, name.to_string()))
                    .or_default()
                    .push(ObjectRef::from_obj_with(s.as_ref(), resource()));
            }
        }
        let forgotten: Vec<Key> = {
            let mut seen = self.lock_seen();
            let gone = seen
                .keys()
                .filter(|k| !named.contains_key(*k))
                .cloned()
                .collect();
            seen.retain(|k, _| named.contains_key(k));
            gone
        };
        for key in forgotten {
            self.remove(&key);
        }
        for (key, refs) in named {
            let now = self.read(&key).await;
            if now == Seen::Failed {
                continue;
            }
            let before = self.lock_seen().insert(key, now.clone());
            if before.as_ref() != Some(&now) {
                for r in refs {
                    tx.send(r);
                }
            }
        }
    }

    /// One `get`; the value is stripped before it is stored.
    async fn read(&self, (ns, name): &Key) -> Seen {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        match api.get_opt(name).await {
            Ok(Some(mut secret)) => {
                strip_secret(&mut secret);
                let resource_version = secret.resource_version().unwrap_or_default();
                self.lock_writer()
                    .apply_watcher_event(&watcher::Event::Apply(secret));
                Seen::Present { resource_version }
            }
            Ok(None) => {
                self.remove(&(ns.clone(), name.clone()));
                Seen::Absent
            }
            Err(e) => {
                warn!(namespace = %ns, secret = %name, error = %e, "cannot read the storage Secret; trying again at the next poll");
                Seen::Failed
            }
        }
    }

    fn remove(&self, (ns, name): &Key) {
        let mut gone = Secret::default();
        gone.metadata.namespace = Some(ns.clone());
        gone.metadata.name = Some(name.clone());
        self.lock_writer()
            .apply_watcher_event(&watcher::Event::Delete(gone));
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Seen>> {
        // A panic elsewhere while holding the map leaves it usable: it is a cache.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer<Secret>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Polls the named Secrets every `every`, for as long as the term that runs it leads.
pub async fn poll(
    reader: SecretReader,
    stacks: Store<DynamicObject>,
    tx: Tap<StackRef>,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        reader.refresh(&stacks, &tx).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::json;

    /// Secrets by (namespace, name): resourceVersion and data; and the paths asked for.
    #[derive(Clone, Default)]
    struct FakeServer {
        secrets: Arc<Mutex<HashMap<Key, (String, serde_json::Value)>>>,
        gets: Arc<Mutex<Vec<String>>>,
    }

    impl FakeServer {
        fn client(&self) -> Client {
            let server = self.clone();
            let service = tower::service_fn(move |req: Request<Body>| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(req.method(), req.uri().path())) }
            });
            Client::new(service, "default")
        }

        fn answer(&self, method: &http::Method, path: &str) -> Response<Body> {
            self.gets
                .lock()
                .expect("gets")
                .push(format!("{method} {path}"));
            // /api/v1/namespaces/{ns}/secrets/{name}
            let parts: Vec<&str> = path.split('/').collect();
            let key = (parts[4].to_string(), parts[6].to_string());
            let found = self.secrets.lock().expect("secrets").get(&key).cloned();
            let (status, body) = match found {
                Some((rv, data)) => (
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": key.1, "namespace": key.0, "resourceVersion": rv}, "data": data}),
                ),
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
                ),
            };
            let mut resp = Response::new(Body::from(body.to_string().into_bytes()));
            *resp.status_mut() = status;
            resp
        }

        fn put(&self, ns: &str, name: &str, rv: &str) {
            // "aHVudGVyMg==" is "hunter2": a credential that must not be kept.
            let data = json!({"access_key_secret": "aHVudGVyMg==", "endpoint": "aHR0cDovL3Mz"});
            self.secrets
                .lock()
                .expect("secrets")
                .insert((ns.into(), name.into()), (rv.into(), data));
        }

        fn gets(&self) -> usize {
            self.gets.lock().expect("gets").len()
        }
    }

    fn stack(ns: &str, name: &str, secret: &str) -> DynamicObject {
        let mut s = DynamicObject::new(name, &resource()).within(ns);
        s.data = json!({"spec": {"storage": {"secret": {"name": secret}}}});
        s
    }

    fn stored(reader: &SecretReader, ns: &str, name: &str) -> Option<Arc<Secret>> {
        reader.store().get(&ObjectRef::new(name).within(ns))
    }

    fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<StackRef>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            out.push(format!("{}/{}", r.namespace.unwrap_or_default(), r.name));
        }
        out
    }

    #[tokio::test]
    async fn secrets_are_read_by_name_once_then_polled_and_changes_rerun_their_stacks() {
        let server = FakeServer::default();
        server.put("a", "s3", "1");
        let reader = SecretReader::new(server.client());
        let mut writer = Writer::<DynamicObject>::new(resource());
        let stacks = writer.as_reader();
        let (one, two) = (stack("a", "one", "s3"), stack("a", "two", "s3"));
        for s in [&one, &two] {
            writer.apply_watcher_event(&watcher::Event::Apply(s.clone()));
        }
        let tx = Tap::default();
        let mut rx = tx.attach();

        // Read before the first reconcile, once however often it is asked for.
        reader.ensure_for(&one).await;
        reader.ensure_for(&two).await;
        assert_eq!(server.gets(), 1);
        let secret = stored(&reader, "a", "s3").expect("stored");
        let data = secret.data.as_ref().expect("data");
        assert_eq!(
            data["access_key_secret"].0,
            vec![crate::model::storage::VALUE_SAFE]
        );
        assert_eq!(data["endpoint"].0, b"http://s3".to_vec());

        // Unchanged: read again, nothing re-run.
        reader.refresh(&stacks, &tx).await;
        assert_eq!(server.gets(), 2);
        assert!(drain(&mut rx).is_empty());

        // Changed, then deleted: both stacks naming it re-run each time.
        server.put("a", "s3", "2");
        reader.refresh(&stacks, &tx).await;
        let mut rerun = drain(&mut rx);
        rerun.sort();
        assert_eq!(rerun, ["a/one", "a/two"]);
        server.secrets.lock().expect("secrets").clear();
        reader.refresh(&stacks, &tx).await;
        assert_eq!(drain(&mut rx).len(), 2);
        assert!(stored(&reader, "a", "s3").is_none());

        // A Secret missing at first is seen when it is created.
        let late = stack("b", "late", "later");
        writer.apply_watcher_event(&watcher::Event::Apply(late.clone()));
        reader.ensure_for(&late).await;
        assert!(stored(&reader, "b", "later").is_none());
        server.put("b", "later", "7");
        reader.refresh(&stacks, &tx).await;
        assert!(drain(&mut rx).contains(&"b/late".to_string()));
        assert!(stored(&reader, "b", "later").is_some());

        // No stack names it any more: forgotten, and never read again.
        for s in [&one, &two, &late] {
            writer.apply_watcher_event(&watcher::Event::Delete(s.clone()));
        }
        reader.refresh(&stacks, &tx).await;
        let before = server.gets();
        reader.refresh(&stacks, &tx).await;
        assert_eq!(server.gets(), before);
        assert!(stored(&reader, "b", "later").is_none());
        let paths = server.gets.lock().expect("gets").clone();
        assert!(
            paths
                .iter()
                .all(|p| p.starts_with("GET /api/v1/namespaces/") && p.split('/').count() == 7),
            "only gets by name: {paths:?}"
        );
    }
}
