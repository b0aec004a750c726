//! The pod zone annotator.
//!
//! It looks only at pods labelled `loki.grafana.com/zone-aware=enabled`, which the shared
//! pod cache sends it, and reads nodes from the shared node cache: it caches nothing of
//! its own. Once a
//! pod is bound, it writes `loki.grafana.com/availability-zone` once, with a merge patch
//! carrying the pod's resourceVersion: a pod that changed in between is looked at again
//! rather than overwritten, and a zone already set is never rewritten. It runs apart from
//! the stack reconcile, so pods of a Degraded stack, and pods created while the operator
//! was down or did not lead (swept at the start of each term), get their zone too.
//!
//! It runs in the leader's term only. Its writes run in a `JoinSet` it owns, so ending
//! the term (aborting the annotator) aborts every write in flight with it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::act::report::Notifier;
use crate::caches::reflectors::synced;
use crate::caches::stacks;
use crate::caches::taps::PodChange;
use crate::checks::podzone::{decide, keys_not_allowed, node_name, reads_pod_label, PodZone};
use crate::model::conditions::{EventReason, Happening, Reason};
use crate::model::names;
use crate::model::pods::is_zone_aware;
use crate::telemetry::metrics::Metrics;

/// Patches in flight at once. Binds arrive at the scheduler's pace, so this bounds only
/// a backlog (the sweep at the start of a term): at 32, a burst of 300 binds waited up
/// to 200 ms for a slot whenever a few patches stalled on the API server (the `permit`
/// step), which was most of the annotator's tail over a bare client's. 128 stays well
/// under the API server's own limit on mutating requests in flight (200 by default),
/// behind which API Priority and Fairness queues the rest.
const CONCURRENCY: usize = 128;
const RETRY_AFTER: Duration = Duration::from_secs(1);

enum Outcome {
    Written,
    /// The pod changed since it was read (409): look again once the cache has the change.
    Conflict,
    /// The write failed for another reason (RBAC, an admission policy, the server);
    /// retried after a pause. The message goes into an Event on the pod.
    Failed(String),
    Gone,
}

/// The action of the annotator's Events.
const ACTION: &str = "AnnotateZone";

struct Annotator {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    /// Whose topology keys alone are copied onto a stack's pods.
    stacks: Store<DynamicObject>,
    notify: Notifier,
    metrics: Arc<Metrics>,
    permits: Arc<Semaphore>,
    /// Each write's result, with when its answer came.
    done: UnboundedSender<(ObjectRef<Pod>, Outcome, Instant)>,
    /// The writes in flight; dropped (so aborted) with the annotator.
    writes: JoinSet<()>,
    /// Pods with a patch in flight, with the resourceVersion the patch is conditional on.
    in_flight: HashMap<ObjectRef<Pod>, Option<String>>,
    /// When each pod was first seen bound without a zone: the start of its latency.
    bound_at: HashMap<ObjectRef<Pod>, Instant>,
    /// (pod uid, reason) pairs already reported with an Event.
    reported: HashSet<(String, String)>,
}

/// The annotator's inputs: the shared caches, and the changes the caches report.
pub struct Inputs {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub stacks: Store<DynamicObject>,
    pub pod_changes: UnboundedReceiver<PodChange>,
    pub node_changes: UnboundedReceiver<String>,
}

impl Inputs {
    pub fn from_caches(
        caches: &crate::caches::reflectors::Caches,
        pod_changes: UnboundedReceiver<PodChange>,
        node_changes: UnboundedReceiver<String>,
    ) -> Inputs {
        Inputs {
            pods: caches.zone_aware_pods.clone(),
            nodes: caches.nodes.clone(),
            stacks: caches.stacks.clone(),
            pod_changes,
            node_changes,
        }
    }
}

pub async fn run(client: Client, inputs: Inputs, notify: Notifier, metrics: Arc<Metrics>) {
    let Inputs {
        pods,
        nodes,
        stacks,
        mut pod_changes,
        mut node_changes,
    } = inputs;
    let (done, mut done_rx) = mpsc::unbounded_channel();
    let mut a = Annotator {
        client,
        pods,
        nodes,
        stacks,
        notify,
        metrics,
        permits: Arc::new(Semaphore::new(CONCURRENCY)),
        done,
        writes: JoinSet::new(),
        in_flight: HashMap::new(),
        bound_at: HashMap::new(),
        reported: HashSet::new(),
    };
    // A pod seen before its node would wait for a node event that the node cache's first
    // list does not send; so pods are looked at only once every node is known.
    if !synced("nodes", &a.nodes).await || !synced("stacks", &a.stacks).await {
        warn!("node or stack cache closed before it synced; the annotator stops");
        return;
    }
    info!("pod zone annotator started");
    // Changes seen while no term ran were not delivered: look at every pod once.
    for p in a.pods.state() {
        a.consider(&p).await;
    }
    loop {
        tokio::select! {
            change = pod_changes.recv() => match change {
                Some(PodChange::Changed(p, stored_at)) => {
                    a.metrics.annotator_step("queued", stored_at.elapsed());
                    a.consider(&p).await
                }
                Some(PodChange::Deleted(p)) => a.forget(&p),
                None => break,
            },
            Some(node) = node_changes.recv() => {
                // A node that appeared late, or whose labels were fixed: its waiting pods.
                for p in a.pods.state_filter(|p| is_zone_aware(p) && node_name(p) == Some(node.as_str())) {
                    a.consider(&p).await;
                }
            }
            Some((pod, outcome, answered_at)) = done_rx.recv() => {
                a.metrics.annotator_step("finished", answered_at.elapsed());
                a.finished(pod, outcome).await
            }
            // Reap finished writes, so the set does not grow.
            Some(_) = a.writes.join_next(), if !a.writes.is_empty() => {}
        }
    }
}

/// The write that zones a pod where its Loki reads the zone: the label
/// `topology.kubernetes.io/zone` for a pod rendered to read it (on a server that did not
/// copy it at binding), else the annotation.
fn zone_patch(pod: &Pod, zone: &str) -> serde_json::Value {
    let field = match reads_pod_label(pod) {
        true => json!({"labels": {names::LABEL_TOPOLOGY_ZONE: zone}}),
        false => json!({"annotations": {names::ANNOTATION_ZONE: zone}}),
    };
    let mut meta = field;
    meta["resourceVersion"] = json!(pod.resource_version());
    json!({ "metadata": meta })
}

impl Annotator {
    fn forget(&mut self, pod: &Pod) {
        let r = ObjectRef::from_obj(pod);
        self.bound_at.remove(&r);
        let uid = pod.uid().unwrap_or_default();
        self.reported.retain(|(u, _)| *u != uid);
    }

    async fn report_once(&mut self, pod: &Pod, reason: impl Into<EventReason>, note: String) {
        let reason = reason.into();
        let key = (pod.uid().unwrap_or_default(), reason.as_str().to_string());
        if !self.reported.insert(key) {
            return;
        }
        warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), %reason, "{note}");
        self.notify
            .event_for(
                &pod.object_ref(&()),
                EventType::Warning,
                reason,
                ACTION,
                note,
            )
            .await;
    }

    async fn consider(&mut self, pod: &Pod) {
        let started = Instant::now();
        let r = ObjectRef::from_obj(pod);
        if self.in_flight.contains_key(&r) {
            return;
        }
        let foreign = keys_not_allowed(pod, &stacks::keys_for_pod(&self.stacks, pod));
        if !foreign.is_empty() && node_name(pod).is_some() {
            let note = format!(
                "the pod's {} annotation names {}, which are not topology keys of its LokiStack's spec.replication.zones; the operator copies no other node labels, so the pod gets no zone",
                names::ANNOTATION_ZONE_LABELS,
                foreign.join(", ")
            );
            self.report_once(pod, Happening::ZoneKeysNotAllowed, note)
                .await;
            return;
        }
        let node = node_name(pod).and_then(|n| self.nodes.get(&ObjectRef::new(n)));
        match decide(pod, node.as_deref()) {
            PodZone::Annotate(zone) => {
                self.metrics.annotator_step("decided", started.elapsed());
                self.write(pod, r, zone)
            }
            PodZone::NodeLabel(e) => {
                let node = node_name(pod).unwrap_or_default().to_string();
                let reason = match e {
                    crate::checks::zones::ZoneLabelError::Missing(_) => Reason::ZoneLabelMissing,
                    crate::checks::zones::ZoneLabelError::Empty(_) => Reason::ZoneLabelEmpty,
                };
                let note = format!("node {node}: {e}; the pod waits in Init until the node is labelled, then gets its zone");
                self.report_once(pod, reason, note).await;
            }
            PodZone::Drift { annotated, node } => {
                let note = format!("the node's topology labels now give zone {node}, but the pod runs as {annotated} (Loki read it at start); restart the pod to move it");
                self.report_once(pod, Reason::ZoneLabelChanged, note).await;
            }
            PodZone::NoKeys => {
                let note = format!(
                    "zone-aware pod has no {} annotation, so its zone cannot be known",
                    names::ANNOTATION_ZONE_LABELS
                );
                self.report_once(pod, Happening::ZoneKeysMissing, note)
                    .await;
            }
            // A node not (yet) in the cache: its appearance re-runs this pod.
            PodZone::NodeGone => debug!(pod = %pod.name_any(), "node not in cache"),
            PodZone::Unscheduled | PodZone::Done => {
                self.bound_at.remove(&r);
            }
        }
    }

    fn write(&mut self, pod: &Pod, r: ObjectRef<Pod>, zone: String) {
        self.bound_at.entry(r.clone()).or_insert_with(Instant::now);
        self.in_flight.insert(r.clone(), pod.resource_version());
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.namespace().as_deref().unwrap_or("default"),
        );
        let name = pod.name_any();
        // The resourceVersion makes the write conditional: a pod changed since we read it
        // fails with 409 and is looked at again, so a zone set meanwhile is never replaced.
        let patch = zone_patch(pod, &zone);
        let permits = self.permits.clone();
        let done = self.done.clone();
        let metrics = self.metrics.clone();
        self.writes.spawn(async move {
            let spawned = Instant::now();
            let _permit = permits.acquire_owned().await;
            metrics.annotator_step("permit", spawned.elapsed());
            let sent = Instant::now();
            let answer = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            metrics.annotator_step("patch", sent.elapsed());
            let outcome = match answer {
                Ok(_) => Outcome::Written,
                Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Gone,
                Err(kube::Error::Api(e)) if e.code == 409 => Outcome::Conflict,
                Err(e) => {
                    tokio::time::sleep(RETRY_AFTER).await;
                    Outcome::Failed(e.to_string())
                }
            };
            let _ = done.send((r, outcome, Instant::now()));
        });
    }

    async fn finished(&mut self, r: ObjectRef<Pod>, outcome: Outcome) {
        let used_version = self.in_flight.remove(&r).flatten();
        match outcome {
            Outcome::Written => {
                Metrics::count(&self.metrics.annotations, "written", 1);
                self.metrics.zoned("annotator");
                if let Some(t) = self.bound_at.remove(&r) {
                    self.metrics
                        .bind_to_annotated
                        .observe(t.elapsed().as_secs_f64());
                }
            }
            Outcome::Gone => {
                Metrics::count(&self.metrics.annotations, "pod_gone", 1);
                self.bound_at.remove(&r);
            }
            Outcome::Conflict => {
                Metrics::count(&self.metrics.annotations, "conflict", 1);
                // If the cache still holds the version that conflicted, the newer one is on
                // its way as a watch event, which will bring the pod back here.
                if let Some(p) = self
                    .pods
                    .get(&r)
                    .filter(|p| p.resource_version() != used_version)
                {
                    self.consider(&p).await;
                }
            }
            Outcome::Failed(error) => {
                Metrics::count(&self.metrics.annotations, "failed", 1);
                if let Some(p) = self.pods.get(&r) {
                    // Once per pod: the retries go on every second until the cause is fixed.
                    let field = match reads_pod_label(&p) {
                        true => names::LABEL_TOPOLOGY_ZONE,
                        false => names::ANNOTATION_ZONE,
                    };
                    let note = format!(
                        "cannot write {field}: {error}; the pod waits in Init until it can. Check the operator's RBAC (patch on pods) and admission policies"
                    );
                    self.report_once(&p, Happening::ZoneAnnotationFailed, note)
                        .await;
                    self.consider(&p).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
