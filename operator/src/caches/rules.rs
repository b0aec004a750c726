//! The ruler's objects: AlertingRules, RecordingRules and RulerConfigs in the scope's
//! namespaces, and the labels of every namespace (for `spec.rules.namespaceSelector`;
//! in the namespaced mode it picks among the watched namespaces, whose rules alone are
//! read).
//!
//! The rule kinds are watched metadata only: any namespace's editor may create them, as
//! many and as large as etcd takes, and the operator's memory is bounded. Picking reads
//! labels, namespace and name; the bodies of the objects some stack picks are read and
//! held beside (`rule_bodies.rs`), and nothing else of an object no stack picks is ever
//! read. Like LokiStacks, a body is decoded when it is used, so a stored object that does
//! not decode is reported on its own and never stops the others. A kind whose CRD the
//! server does not serve is not watched at all (an install that predates it); stacks
//! that would pick its objects say so in a Warning.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::caches::rule_bodies::{self, Bodies};
pub use crate::caches::rule_kinds::{decode, marked, served, RuleKind, RuleMeta};
use crate::caches::rule_kinds::{namespace_labels, strip_meta, NamespaceStore};
use crate::caches::scope::{self, Scope};
use crate::caches::taps::Taps;
use crate::stores::index;

/// The ruler's caches. A kind the server does not serve has no store.
#[derive(Clone, Default)]
pub struct RuleCaches {
    /// The metadata of every object of each served kind ([`strip_meta`]).
    pub stores: BTreeMap<RuleKind, Store<RuleMeta>>,
    /// Namespace labels, metadata only; `None` when no rule kind is served.
    pub namespaces: Option<NamespaceStore>,
    /// The bodies of the objects some stack picks now.
    pub bodies: Bodies,
}

impl RuleCaches {
    pub fn store(&self, kind: RuleKind) -> Option<&Store<RuleMeta>> {
        self.stores.get(&kind)
    }

    /// The metadata of one object, if it exists.
    pub fn meta(
        &self,
        kind: RuleKind,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<RuleMeta>> {
        self.store(kind)?
            .get(&ObjectRef::new_with(name, kind.resource()).within(namespace))
    }

    /// Once the stores have listed: whether the bodies picked then have been read (or
    /// tried), so that a leader that starts finds every body a stack loaded before.
    /// True at once when no kind is served (nothing is read).
    pub async fn bodies_read(&self) -> bool {
        self.stores.is_empty() || self.bodies.wait_until_ready().await
    }

    /// One round of the bodies' task now (`rule_bodies::round`).
    #[cfg(test)]
    pub async fn read_bodies(
        &self,
        client: &Client,
        stacks: &Store<DynamicObject>,
        taps: &Taps,
    ) -> bool {
        rule_bodies::round(
            client,
            &self.stores,
            self.namespaces.as_ref(),
            &self.bodies,
            stacks,
            taps,
        )
        .await
    }

    pub fn unserved(&self) -> Vec<RuleKind> {
        RuleKind::ALL
            .into_iter()
            .filter(|k| !self.stores.contains_key(k))
            .collect()
    }

    /// The labels of a namespace; `None` when namespaces are not read or it is gone.
    pub fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        namespace_labels(self.namespaces.as_ref(), namespace)
    }
}

/// Starts the caches of the served kinds and of namespaces, and the task that keeps
/// `bodies` (which the LokiStack watch wakes too) in step with what the stacks pick.
/// A change of an object or of a namespace's labels wakes that task and the rules'
/// status pass; the task re-runs the stacks a body that comes, changes or goes concerns.
pub fn start(
    client: &Client,
    scope: &Scope,
    served: &[RuleKind],
    stacks: Store<DynamicObject>,
    bodies: Bodies,
    taps: &Taps,
) -> (RuleCaches, Vec<JoinHandle<()>>) {
    let mut caches = RuleCaches {
        bodies,
        ..RuleCaches::default()
    };
    let mut tasks = Vec::new();
    for kind in served {
        let (store, task) = watch_kind(client, scope, *kind, &caches.bodies, taps);
        caches.stores.insert(*kind, store);
        tasks.push(task);
    }
    if !served.is_empty() {
        let (store, task) = watch_namespaces(client, &caches.bodies, taps);
        caches.namespaces = Some(store);
        tasks.push(task);
        tasks.push(rule_bodies::spawn(
            client.clone(),
            caches.stores.clone(),
            caches.namespaces.clone(),
            caches.bodies.clone(),
            stacks,
            taps.clone(),
        ));
    }
    info!(kinds = ?served, namespaces = caches.namespaces.is_some(), "watching the ruler's objects (metadata; the bodies of picked objects only)");
    (caches, tasks)
}

fn watch_kind(
    client: &Client,
    scope: &Scope,
    kind: RuleKind,
    bodies: &Bodies,
    taps: &Taps,
) -> (Store<RuleMeta>, JoinHandle<()>) {
    let resource = kind.resource();
    // `Api<PartialObjectMeta<_>>` asks the server for metadata only: a body never
    // reaches this watch.
    let watches = scope.watches(
        || Api::<RuleMeta>::all_with(client.clone(), &resource),
        |ns| Api::namespaced_with(client.clone(), ns, &resource),
    );
    let (store, _, events) = scope::reflect(
        watches,
        watcher::Config::default(),
        strip_meta,
        resource,
        index::unindexed,
    );
    let (bodies, rules_tx) = (bodies.clone(), taps.rules.clone());
    let task = tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            match ev {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => {
                    bodies.wake();
                    rules_tx.send(());
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(kind = kind.kind(), error = %e, "watch error; retrying with backoff");
                }
            }
        }
    });
    (store, task)
}

/// Namespaces, metadata only: a change of labels may change what the stacks with a
/// namespace selector pick (the bodies' task re-runs them if it does), and the rules'
/// status.
fn watch_namespaces(
    client: &Client,
    bodies: &Bodies,
    taps: &Taps,
) -> (Store<PartialObjectMeta<Namespace>>, JoinHandle<()>) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let (store, _, events) = scope::reflect(
        vec![(None, api)],
        watcher::Config::default(),
        |m: &mut PartialObjectMeta<Namespace>| {
            m.metadata.managed_fields = None;
            m.metadata.annotations = None;
        },
        (),
        index::unindexed,
    );
    let (bodies, rules_tx) = (bodies.clone(), taps.rules.clone());
    let task = tokio::spawn(async move {
        // A fingerprint of each namespace's labels, to tell a label change from any
        // other update; the labels themselves are in the store.
        let mut seen: HashMap<String, u64> = HashMap::new();
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            let (m, deleted) = match ev {
                Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => (m, false),
                Ok(watcher::Event::Delete(m)) => (m, true),
                Ok(_) => continue,
                Err(e) => {
                    warn!(kind = "Namespace", error = %e, "watch error; retrying with backoff");
                    continue;
                }
            };
            let name = m.name_any();
            let changed = if deleted {
                seen.remove(&name).is_some()
            } else {
                let print = crate::stores::keep::labels_fingerprint(m.labels());
                seen.insert(name, print) != Some(print)
            };
            if !changed {
                continue;
            }
            bodies.wake();
            rules_tx.send(());
        }
    });
    (store, task)
}
