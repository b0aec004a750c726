//! Storage Secrets, read one at a time by name: the operator's RBAC has `get` on Secrets
//! and neither `list` nor `watch`, so it cannot enumerate the Secrets of a namespace, let
//! alone of the cluster. (A metadata-only watch would not help: it needs the same `list`
//! and `watch` rights, and key names are not metadata.)
//!
//! When a Secret is read:
//! - before the first reconcile of a stack that names it, and at once when that stack's
//!   spec or annotations change (an edit, or `kubectl annotate`, re-reads it);
//! - every [`Schedule::every`] while any stack names it (default 2 min), each Secret at
//!   its own offset, so a thousand Secrets are read a few per second rather than in a
//!   burst: idle, that is well under one request per stack per minute;
//! - every [`Schedule::waiting`] (10 s) while a stack waits on it (its Degraded condition
//!   says the Secret is missing or invalid) or the last read failed, so a user fixing a
//!   Secret sees the stack recover in seconds.
//!
//! A changed Secret (created, edited, deleted) re-runs the stacks naming it. What is kept
//! is what `strip_secret` leaves: key names, never credential values.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::time::Instant;
use tracing::warn;

use crate::caches::stacks::{resource, storage_secret_name, StackRef};
use crate::caches::taps::Tap;
use crate::model::conditions::{ConditionType, Reason};
use crate::stores::keep::strip_secret;

/// How often a Secret a stack waits on is read: short, because a user is fixing it now.
pub const WAITING_POLL: Duration = Duration::from_secs(10);
/// The poll loop never sleeps less than this, however many Secrets fall due together.
const MIN_TICK: Duration = Duration::from_millis(200);

/// How a Secret looked when last read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Present {
        resource_version: String,
    },
    Absent,
    /// Never read successfully (no rights, API server down): why.
    Failed(String),
}

/// One named Secret: what was seen, when, and what is still to be done about it.
#[derive(Clone, Debug)]
struct Entry {
    seen: Seen,
    read_at: Instant,
    /// Why the last read failed, if it did: what was stored before stays, and it is
    /// read again soon.
    failed: Option<String>,
    /// Read by a term that no longer leads: read again before this term relies on it.
    stale: bool,
    /// Changed when read for one stack's reconcile: the other stacks naming it still
    /// have to be re-run, at the next tick.
    unannounced: bool,
}

type Key = (String, String);

/// When Secrets are read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Mean time between two reads of a Secret nothing waits on; each Secret's own
    /// period is within ±25% of it, fixed by its name, so reads stay spread out.
    pub every: Duration,
    /// Time between two reads of a Secret a stack waits on, or whose last read failed.
    pub waiting: Duration,
}

impl Schedule {
    pub fn new(every: Duration) -> Self {
        Schedule {
            every,
            waiting: WAITING_POLL.min(every),
        }
    }

    fn period(&self, key: &Key, urgent: bool) -> Duration {
        if urgent {
            return self.waiting;
        }
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        let spread = 0.75 + (h.finish() % 1024) as f64 / 2048.0;
        self.every.mul_f64(spread)
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Per stack (namespace, name): its fingerprint when its Secret was last ensured.
    stacks: HashMap<Key, u64>,
}

/// The Secrets stacks name, read by name and polled.
#[derive(Clone)]
pub struct SecretReader {
    client: Client,
    writer: Arc<Mutex<Writer<Secret>>>,
    store: Store<Secret>,
    state: Arc<Mutex<State>>,
}

/// What a stack looks like to its Secret's reads: an edit of its spec (generation) or of
/// its annotations changes it; a status write does not.
fn fingerprint(stack: &DynamicObject) -> u64 {
    let mut h = DefaultHasher::new();
    stack.metadata.generation.hash(&mut h);
    let annotations: Vec<_> = stack.annotations().iter().collect();
    annotations.hash(&mut h);
    h.finish()
}

/// The stack says it waits on its Secret: Degraded because it is missing or invalid.
fn waits_on_secret(stack: &DynamicObject) -> bool {
    let Some(conditions) = stack
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
    else {
        return false;
    };
    conditions.iter().any(|c| {
        c["type"] == ConditionType::Degraded.as_str()
            && c["status"] == "True"
            && (c["reason"] == Reason::MissingObjectStorageSecret.as_str()
                || c["reason"] == Reason::InvalidObjectStorageSecret.as_str())
    })
}

fn stack_key(stack: &DynamicObject) -> Option<(Key, Key)> {
    let ns = stack.namespace()?;
    let secret = storage_secret_name(stack)?.to_string();
    Some(((ns.clone(), secret), (ns, stack.name_any())))
}

/// The Secrets the stacks name: who names each, and whether one of them waits on it.
#[derive(Default)]
struct Named {
    refs: Vec<StackRef>,
    waited_on: bool,
}

fn named(stacks: &Store<DynamicObject>) -> (HashMap<Key, Named>, HashSet<Key>) {
    let mut named: HashMap<Key, Named> = HashMap::new();
    let mut present = HashSet::new();
    for s in stacks.state() {
        let Some((key, stack)) = stack_key(&s) else {
            continue;
        };
        present.insert(stack);
        let n = named.entry(key).or_default();
        n.refs
            .push(ObjectRef::from_obj_with(s.as_ref(), resource()));
        n.waited_on |= waits_on_secret(&s);
    }
    (named, present)
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
            state: Arc::default(),
        }
    }

    /// The stripped Secrets, for `Snapshot::take`.
    pub fn store(&self) -> Store<Secret> {
        self.store.clone()
    }

    /// Reads the Secret a stack names unless it was read for this term already and the
    /// stack is unchanged since: a stack's reconcile never runs on a Secret not read yet,
    /// and an edit of the stack re-reads it at once.
    pub async fn ensure_for(&self, stack: &DynamicObject) {
        let Some((key, stack_key)) = stack_key(stack) else {
            return;
        };
        let fp = fingerprint(stack);
        let needed = {
            let st = self.lock_state();
            match st.entries.get(&key) {
                None => true,
                Some(e) => e.stale || st.stacks.get(&stack_key).is_some_and(|b| *b != fp),
            }
        };
        if needed {
            self.read_into_state(&key).await;
        }
        self.lock_state().stacks.insert(stack_key, fp);
    }

    /// Why the Secret `name` in `ns` could not be read, while no copy of it is stored:
    /// the stack's status says so, rather than calling it missing.
    pub fn unreadable(&self, ns: &str, name: &str) -> Option<String> {
        let st = self.lock_state();
        let e = st.entries.get(&(ns.to_string(), name.to_string()))?;
        match &e.seen {
            Seen::Present { .. } => None,
            _ => e.failed.clone(),
        }
    }

    /// A new term begins: every Secret read before may have changed while this replica
    /// did not lead, so each is read again before the first reconcile relying on it.
    pub fn new_term(&self) {
        let mut st = self.lock_state();
        for e in st.entries.values_mut() {
            e.stale = true;
        }
        st.stacks.clear();
    }

    /// Reads the Secrets that are due, re-runs the stacks naming those that changed, and
    /// forgets the Secrets no stack names. Returns how long until the next one is due.
    pub async fn tick(
        &self,
        stacks: &Store<DynamicObject>,
        tx: &Tap<StackRef>,
        schedule: Schedule,
    ) -> Duration {
        let (named, present) = named(stacks);
        self.forget_unnamed(&named, &present);
        for key in self.due(&named, schedule) {
            let changed = self.read_into_state(&key).await;
            let announce = {
                let mut st = self.lock_state();
                st.entries
                    .get_mut(&key)
                    .is_some_and(|e| std::mem::take(&mut e.unannounced))
            };
            if let (true, Some(n)) = (changed || announce, named.get(&key)) {
                for r in &n.refs {
                    tx.send(r.clone());
                }
            }
        }
        self.next_due(&named, schedule)
    }

    fn forget_unnamed(&self, named: &HashMap<Key, Named>, present: &HashSet<Key>) {
        let forgotten: Vec<Key> = {
            let mut st = self.lock_state();
            st.stacks.retain(|k, _| present.contains(k));
            let gone = st
                .entries
                .keys()
                .filter(|k| !named.contains_key(*k))
                .cloned()
                .collect();
            st.entries.retain(|k, _| named.contains_key(k));
            gone
        };
        for key in forgotten {
            self.remove(&key);
        }
    }

    /// When `key` is due, given what was seen of it and whether a stack waits on it. A
    /// stale entry is not due early: each stack's first reconcile of the term reads it.
    fn due_at(e: &Entry, key: &Key, n: &Named, schedule: Schedule) -> Instant {
        if e.unannounced {
            return e.read_at;
        }
        let urgent = n.waited_on || e.failed.is_some() || !matches!(e.seen, Seen::Present { .. });
        e.read_at + schedule.period(key, urgent)
    }

    /// The Secrets to read now. One never read is not due: the reconcile of a stack
    /// naming it reads it first (`ensure_for`), and every stack is reconciled when a term
    /// starts or the stack appears; reading it here too would read it twice.
    fn due(&self, named: &HashMap<Key, Named>, schedule: Schedule) -> Vec<Key> {
        let now = Instant::now();
        let st = self.lock_state();
        named
            .iter()
            .filter(|(k, n)| {
                st.entries
                    .get(*k)
                    .is_some_and(|e| Self::due_at(e, k, n, schedule) <= now)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn next_due(&self, named: &HashMap<Key, Named>, schedule: Schedule) -> Duration {
        let now = Instant::now();
        let st = self.lock_state();
        let soonest = named
            .iter()
            .filter_map(|(k, n)| Some(Self::due_at(st.entries.get(k)?, k, n, schedule)))
            .min()
            .map_or(schedule.waiting, |at| at.saturating_duration_since(now));
        // Never longer than the waiting period: a stack created meanwhile may wait on a
        // Secret this tick did not know of. Looking costs no request.
        soonest.clamp(MIN_TICK, schedule.waiting.max(MIN_TICK))
    }

    /// Reads `key` and records it; true when it changed since the last successful read.
    async fn read_into_state(&self, key: &Key) -> bool {
        let now = self.read(key).await;
        let mut st = self.lock_state();
        let before = st.entries.get(key).cloned();
        let read_at = Instant::now();
        let entry = match (now, before) {
            (Seen::Failed(why), Some(b)) => Entry {
                read_at,
                failed: Some(why),
                ..b
            },
            (seen, b) => {
                let changed = b.as_ref().is_some_and(|b| b.seen != seen);
                let failed = match &seen {
                    Seen::Failed(why) => Some(why.clone()),
                    _ => None,
                };
                let e = Entry {
                    seen,
                    read_at,
                    failed,
                    stale: false,
                    unannounced: changed || b.is_some_and(|b| b.unannounced),
                };
                st.entries.insert(key.clone(), e);
                return changed;
            }
        };
        st.entries.insert(key.clone(), entry);
        false
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
                warn!(namespace = %ns, secret = %name, error = %e, "cannot read the storage Secret; trying again shortly");
                Seen::Failed(e.to_string())
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

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding the map leaves it usable: it is a cache.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer<Secret>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads the named Secrets as they fall due, for as long as the term that runs it leads.
pub async fn poll(
    reader: SecretReader,
    stacks: Store<DynamicObject>,
    tx: Tap<StackRef>,
    schedule: Schedule,
) {
    loop {
        let wait = reader.tick(&stacks, &tx, schedule).await;
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::LokiStackSize;
    use crate::testing;
    use std::convert::Infallible;

    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::json;

    /// Secrets by (namespace, name): resourceVersion and data; and the paths asked for.
    #[derive(Clone, Default)]
    struct FakeServer {
        secrets: Arc<Mutex<HashMap<Key, (String, serde_json::Value)>>>,
        /// Namespaces whose Secrets this client may not get (403).
        forbidden: Arc<Mutex<Vec<String>>>,
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
            let forbidden = self.forbidden.lock().expect("forbidden").contains(&key.0);
            let (status, body) = match found {
                _ if forbidden => (
                    StatusCode::FORBIDDEN,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message": "secrets is forbidden"}),
                ),
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
        let mut spec = testing::stack_spec(LokiStackSize::Demo);
        spec.storage.secret.name = secret.into();
        let mut s = testing::stack(name, spec);
        s.metadata.namespace = Some(ns.into());
        testing::stored(&s)
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

    fn stacks_of(list: &[&DynamicObject]) -> (Writer<DynamicObject>, Store<DynamicObject>) {
        let mut writer = Writer::<DynamicObject>::new(resource());
        let store = writer.as_reader();
        for s in list {
            writer.apply_watcher_event(&watcher::Event::Apply((*s).clone()));
        }
        (writer, store)
    }

    const EVERY: Duration = Duration::from_secs(120);

    #[tokio::test(start_paused = true)]
    async fn a_secret_is_read_once_per_term_and_again_when_a_stack_naming_it_is_edited() {
        let server = FakeServer::default();
        server.put("a", "s3", "1");
        let reader = SecretReader::new(server.client());
        let (mut one, mut two) = (stack("a", "one", "s3"), stack("a", "two", "s3"));
        let (_w, stacks) = stacks_of(&[&one, &two]);
        let tx = Tap::default();
        let mut rx = tx.attach();

        // Read before the first reconcile, once however often it is asked for.
        reader.ensure_for(&one).await;
        reader.ensure_for(&two).await;
        reader.ensure_for(&one).await;
        assert_eq!(server.gets(), 1);
        let secret = stored(&reader, "a", "s3").expect("stored");
        let data = secret.data.as_ref().expect("data");
        assert_eq!(
            data["access_key_secret"].0,
            vec![crate::model::storage::VALUE_SAFE]
        );
        assert_eq!(data["endpoint"].0, b"http://s3".to_vec());

        // A spec edit re-reads at once; so does an annotation. A status write does not.
        one.metadata.generation = Some(2);
        reader.ensure_for(&one).await;
        assert_eq!(server.gets(), 2);
        two.metadata
            .annotations
            .get_or_insert_default()
            .insert("ping".into(), "1".into());
        server.put("a", "s3", "2");
        reader.ensure_for(&two).await;
        assert_eq!(server.gets(), 3);
        one.data["status"] = json!({"conditions": []});
        reader.ensure_for(&one).await;
        assert_eq!(server.gets(), 3);

        // Changed when read for `two`: `one`, which names it too, re-runs at the next tick.
        reader.tick(&stacks, &tx, Schedule::new(EVERY)).await;
        let mut rerun = drain(&mut rx);
        rerun.sort();
        assert_eq!(rerun, ["a/one", "a/two"]);
        assert_eq!(server.gets(), 4);

        // A new term reads it again, once, before the reconciles: not also in the first
        // tick of the term.
        reader.new_term();
        reader.ensure_for(&one).await;
        reader.tick(&stacks, &tx, Schedule::new(EVERY)).await;
        reader.ensure_for(&two).await;
        assert_eq!(server.gets(), 5);

        // A replica that never read it (a standby's first term): its first tick leaves
        // it to the reconciles, which read it once.
        let standby = SecretReader::new(server.client());
        standby.new_term();
        standby.tick(&stacks, &tx, Schedule::new(EVERY)).await;
        standby.ensure_for(&one).await;
        standby.ensure_for(&two).await;
        assert_eq!(server.gets(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn secrets_are_polled_each_at_its_own_period_around_the_interval() {
        let server = FakeServer::default();
        let names: Vec<String> = (0..40).map(|i| format!("s{i}")).collect();
        let list: Vec<DynamicObject> = names.iter().map(|n| stack("a", n, n)).collect();
        for n in &names {
            server.put("a", n, "1");
        }
        let (_w, stacks) = stacks_of(&list.iter().collect::<Vec<_>>());
        let tx = Tap::default();
        let mut rx = tx.attach();
        let reader = SecretReader::new(server.client());
        for s in &list {
            reader.ensure_for(s).await;
        }
        assert_eq!(server.gets(), 40);

        // Nothing is due before 3/4 of the interval; the loop still looks every 10 s,
        // for Secrets of stacks that appear meanwhile.
        let schedule = Schedule::new(EVERY);
        assert_eq!(reader.tick(&stacks, &tx, schedule).await, WAITING_POLL);
        tokio::time::advance(EVERY / 2).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(server.gets(), 40);

        // Over the next interval, every Secret is read, spread out rather than at once.
        let mut per_step = Vec::new();
        for _ in 0..12 {
            tokio::time::advance(EVERY / 12).await;
            let before = server.gets();
            reader.tick(&stacks, &tx, schedule).await;
            per_step.push(server.gets() - before);
        }
        assert_eq!(per_step.iter().sum::<usize>(), 40, "{per_step:?}");
        assert!(per_step.iter().all(|n| *n < 20), "a burst: {per_step:?}");
        assert!(drain(&mut rx).is_empty(), "unchanged Secrets re-ran stacks");

        // A change is seen within 1.25 intervals, and re-runs the stack naming it.
        server.put("a", "s7", "2");
        tokio::time::advance(EVERY.mul_f64(1.25)).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(drain(&mut rx), ["a/s7"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_secret_that_cannot_be_read_says_why_until_it_can() {
        let server = FakeServer::default();
        server.put("d", "s3", "1");
        server.forbidden.lock().expect("forbidden").push("d".into());
        let reader = SecretReader::new(server.client());
        let one = stack("d", "one", "s3");
        let (_w, stacks) = stacks_of(&[&one]);
        let tx = Tap::default();
        let mut rx = tx.attach();
        reader.ensure_for(&one).await;
        let why = reader.unreadable("d", "s3").expect("unreadable");
        assert!(why.contains("forbidden"), "{why}");

        // Granted: read at the next 10 s poll, the stack re-run, and no reason left.
        server.forbidden.lock().expect("forbidden").clear();
        tokio::time::advance(WAITING_POLL).await;
        reader.tick(&stacks, &tx, Schedule::new(EVERY)).await;
        assert_eq!(drain(&mut rx), ["d/one"]);
        assert_eq!(reader.unreadable("d", "s3"), None);
        assert!(stored(&reader, "d", "s3").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_that_started_with_no_stacks_still_polls_the_secrets_of_new_ones() {
        let server = FakeServer::default();
        let reader = SecretReader::new(server.client());
        let (mut writer, stacks) = stacks_of(&[]);
        let tx = Tap::default();
        let mut rx = tx.attach();
        let schedule = Schedule::new(EVERY);
        let wait = reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(wait, WAITING_POLL);

        // A stack naming a Secret not created yet, then the Secret: seen by the next tick.
        let late = stack("c", "late", "later");
        writer.apply_watcher_event(&watcher::Event::Apply(late.clone()));
        reader.ensure_for(&late).await;
        server.put("c", "later", "1");
        tokio::time::advance(wait).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(drain(&mut rx), ["c/late"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_secret_a_stack_waits_on_is_read_every_ten_seconds_then_forgotten() {
        let server = FakeServer::default();
        let reader = SecretReader::new(server.client());
        let mut late = stack("b", "late", "later");
        late.data["status"] = json!({"conditions": [
            {"type": "Degraded", "status": "True", "reason": "InvalidObjectStorageSecret"},
        ]});
        let (mut writer, stacks) = stacks_of(&[&late]);
        let tx = Tap::default();
        let mut rx = tx.attach();
        let schedule = Schedule::new(EVERY);

        // Missing at first: looked for again every 10 s, and seen when it is created.
        reader.ensure_for(&late).await;
        assert!(stored(&reader, "b", "later").is_none());
        tokio::time::advance(WAITING_POLL).await;
        assert_eq!(reader.tick(&stacks, &tx, schedule).await, WAITING_POLL);
        assert_eq!(server.gets(), 2);
        server.put("b", "later", "7");
        tokio::time::advance(WAITING_POLL).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(drain(&mut rx), ["b/late"]);
        assert!(stored(&reader, "b", "later").is_some());

        // Present but the stack says it is invalid: still every 10 s while it waits.
        tokio::time::advance(WAITING_POLL).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(server.gets(), 4);

        // Deleted: the stack re-runs. No stack names it any more: forgotten, never read.
        server.secrets.lock().expect("secrets").clear();
        tokio::time::advance(WAITING_POLL).await;
        reader.tick(&stacks, &tx, schedule).await;
        assert_eq!(drain(&mut rx), ["b/late"]);
        writer.apply_watcher_event(&watcher::Event::Delete(late.clone()));
        let before = server.gets();
        tokio::time::advance(EVERY * 2).await;
        reader.tick(&stacks, &tx, schedule).await;
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
