//! The deletes of a rollout step the plan decided: each pod only if it is still the
//! object the plan saw, then a wait until the pod cache shows it (so the next step never
//! counts a deleted pod as Ready).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::Client;
use tracing::warn;

use crate::caches::reflectors::Caches;
use crate::intent::Victim;

/// How long a step waits for the pod cache to show its deletions.
const SEEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Deletes each pod only if it is still the object the plan saw (UID and
/// resourceVersion): a pod that changed since is decided again on the next step.
/// Returns the pods deleted, and those that could not be, with why.
pub async fn delete(
    client: &Client,
    caches: &Caches,
    namespace: &str,
    victims: &[Victim],
) -> (Vec<Victim>, Vec<(Victim, String)>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let (mut deleted, mut failed) = (Vec::new(), Vec::new());
    for v in victims {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(v.uid.clone()),
                resource_version: Some(v.resource_version.clone()),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&v.name, &params).await {
            Ok(_) => deleted.push(v.clone()),
            // Gone, or changed since the snapshot: the next step sees what it is now.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                let why = format!("cannot delete pod {}: {e}", v.name);
                warn!(namespace, "rollout step failed: {why}");
                failed.push((v.clone(), why));
            }
        }
    }
    wait_seen(caches, namespace, &deleted).await;
    (deleted, failed)
}

/// Waits until the pod cache shows every deleted pod terminating or gone, so that the
/// next step, which may start at once on another trigger, does not take it for Ready
/// and go past the per-zone maximum or into the next zone.
async fn wait_seen(caches: &Caches, namespace: &str, deleted: &[Victim]) {
    let started = Instant::now();
    let seen = |v: &Victim| {
        caches.stack_pod(namespace, &v.name).is_none_or(|p| {
            p.metadata.uid.as_deref() != Some(&v.uid) || p.metadata.deletion_timestamp.is_some()
        })
    };
    while !deleted.iter().all(seen) {
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
