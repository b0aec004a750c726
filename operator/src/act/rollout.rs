//! The thin part of a rollout: delete the pods the plan chose, wait until the pod cache
//! shows it (so the next step never counts a deleted pod as Ready), and tell the user.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use tracing::{info, warn};

use crate::act::report::Notifier;
use crate::caches::reflectors::Caches;
use crate::model::api::{LokiStack, RolloutStatus};
use crate::observe::Snapshot;
use crate::plan::rollout::{inputs, plan as decide, Decision, Victim, NO_ZONE};
use crate::plan::{self, Plan};

/// How long a step waits for the pod cache to show its deletions.
const SEEN_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("cannot delete pod {pod}: {source}")]
    Delete {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// One rollout step of the stack: decides, deletes, and returns the status to show.
/// A held-back spec deletes nothing: the stack is Degraded, and a failed check never
/// deletes a running pod.
pub async fn step(
    client: &Client,
    caches: &Caches,
    notify: &Notifier,
    stack: &LokiStack,
    snapshot: &Snapshot,
    plan: &Plan,
) -> Option<RolloutStatus> {
    let Decision { delete, mut status } = decide(&inputs(stack, snapshot, plan));
    if matches!(plan.action, plan::Action::HoldBack) {
        if let Some(s) = status.as_mut() {
            let held = "the spec is held back (see the Degraded condition)".to_string();
            s.waiting_for = Some(held);
        }
        return status;
    }
    let previous = stack.status.as_ref().and_then(|s| s.rollout.as_ref());
    let object = stack.object_ref(&());
    if !delete.is_empty() {
        let zone = delete[0].zone.clone();
        let deleted = delete_pods(client, notify, &snapshot.namespace, &delete).await;
        if !deleted.is_empty() && (zone.is_none() || previous.and_then(|p| p.zone.clone()) != zone)
        {
            let (reason, note) = started_note(zone.as_deref(), &deleted);
            info!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
            let action = format!("Roll {}", zone.as_deref().unwrap_or(NO_ZONE));
            notify
                .event_for(&object, EventType::Normal, reason, &action, note)
                .await;
        }
        wait_seen(caches, &snapshot.namespace, &deleted).await;
    }
    if previous.is_some() && status.is_none() {
        let note = "rollout complete: every pod of the ring members is updated and Ready";
        info!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
        notify
            .event(
                &object,
                EventType::Normal,
                "RolloutCompleted",
                note.to_string(),
            )
            .await;
    }
    status
}

fn started_note(zone: Option<&str>, deleted: &[&Victim]) -> (&'static str, String) {
    let names: Vec<&str> = deleted.iter().map(|v| v.name.as_str()).collect();
    match zone {
        Some(z) => (
            "RolloutZoneStarted",
            format!(
                "zone {z}: restarting its outdated pods at once ({}); the next zone starts once they are Ready",
                names.join(", ")
            ),
        ),
        None => (
            "RolloutPodRestarted",
            format!(
                "restarting {}, which has no zone (it started before the stack had zones)",
                names.join(", ")
            ),
        ),
    }
}

/// Deletes each pod only if it is still the object the plan saw (UID and
/// resourceVersion): a pod that changed since is decided again on the next step.
/// Returns the pods deleted; failures get a Warning Event.
async fn delete_pods<'v>(
    client: &Client,
    notify: &Notifier,
    namespace: &str,
    victims: &'v [Victim],
) -> Vec<&'v Victim> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut deleted = Vec::new();
    for v in victims {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(v.uid.clone()),
                resource_version: Some(v.resource_version.clone()),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&v.name, &params).await {
            Ok(_) => deleted.push(v),
            // Gone, or changed since the snapshot: the next step sees what it is now.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(source) => {
                let e = RolloutError::Delete {
                    pod: v.name.clone(),
                    source,
                };
                warn!(namespace, error = %e, "rollout step failed");
                let pod = ObjectRef::<Pod>::new(&v.name).within(namespace);
                let object = k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    api_version: Some("v1".into()),
                    name: Some(pod.name.clone()),
                    namespace: pod.namespace.clone(),
                    uid: Some(v.uid.clone()),
                    ..Default::default()
                };
                notify
                    .event(&object, EventType::Warning, "RolloutFailed", e.to_string())
                    .await;
            }
        }
    }
    deleted
}

/// Waits until the pod cache shows every deleted pod terminating or gone, so that the
/// next step, which may start at once on another trigger, does not take it for Ready
/// and go past the per-zone maximum or into the next zone.
async fn wait_seen(caches: &Caches, namespace: &str, deleted: &[&Victim]) {
    let started = Instant::now();
    let seen = |v: &Victim| {
        caches.stack_pod(namespace, &v.name).is_none_or(|p| {
            p.metadata.uid.as_deref() != Some(&v.uid) || p.metadata.deletion_timestamp.is_some()
        })
    };
    while !deleted.iter().all(|v| seen(v)) {
        if started.elapsed() > SEEN_TIMEOUT {
            warn!(
                namespace,
                "the pod cache has not shown the rollout's deletions yet"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
