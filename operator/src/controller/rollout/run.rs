//! The thin part of a rollout: delete the pods the plan chose, wait until the pod cache
//! shows it (so the next step never counts a deleted pod as Ready), and tell the user.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use tracing::{info, warn};

use crate::api::{LokiStack, RolloutStatus};
use crate::controller::caches::Caches;
use crate::controller::observe::Snapshot;
use crate::controller::plan::{self, Plan};
use crate::controller::reconcile::Context;
use crate::controller::report;
use crate::controller::rollout::plan::{plan as decide, Decision, Inputs, Victim, NO_ZONE};

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

/// What one step decides from, out of the snapshot and the plan.
pub fn inputs<'a>(stack: &'a LokiStack, snapshot: &'a Snapshot, plan: &'a Plan) -> Inputs<'a> {
    let replication = stack.spec.replication.as_ref();
    Inputs {
        statefulsets: snapshot.statefulsets.iter().map(AsRef::as_ref).collect(),
        pods: snapshot.pod_refs(),
        unavailable: plan
            .findings
            .zone
            .iter()
            .flat_map(|z| z.unavailable.iter().map(|u| u.zone.clone()))
            .collect(),
        max_per_zone: replication
            .and_then(|r| r.max_unavailable_per_zone)
            .map(|m| usize::try_from(m.max(1)).unwrap_or(1)),
        forced: plan::forced(stack),
        rolling: stack.status.as_ref().is_some_and(|s| s.rollout.is_some()),
    }
}

/// One rollout step of the stack: decides, deletes, and returns the status to show.
/// A held-back spec deletes nothing: the stack is Degraded, and SPEC 3 says nothing is
/// deleted then.
pub async fn step(
    ctx: &Context,
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
        let deleted = delete_pods(ctx, &snapshot.namespace, &delete).await;
        if !deleted.is_empty() && (zone.is_none() || previous.and_then(|p| p.zone.clone()) != zone)
        {
            let (reason, note) = started_note(zone.as_deref(), &deleted);
            info!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
            let action = format!("Roll {}", zone.as_deref().unwrap_or(NO_ZONE));
            report::event_for(ctx, &object, EventType::Normal, reason, &action, note).await;
        }
        wait_seen(&ctx.caches, &snapshot.namespace, &deleted).await;
    }
    if previous.is_some() && status.is_none() {
        let note = "rollout complete: every pod of the ring members is updated and Ready";
        info!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
        report::event(
            ctx,
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
async fn delete_pods<'v>(ctx: &Context, namespace: &str, victims: &'v [Victim]) -> Vec<&'v Victim> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
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
                report::event(
                    ctx,
                    &object,
                    EventType::Warning,
                    "RolloutFailed",
                    e.to_string(),
                )
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
