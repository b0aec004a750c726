//! Carries out the zone-outage recovery moves the plan decided: deletes the
//! claims of a pod stranded in a lost zone and force-deletes it, or deletes a pod left
//! waiting on claims that were deleted. Each delete is guarded by the object's UID, so a
//! successor of the same name is never touched.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::Client;

use crate::intent::{Move, Recovered, Step};

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Runs the moves that are due; returns what happened to each.
pub async fn run(client: &Client, namespace: &str, due: &[Move]) -> Recovered {
    let mut report = Recovered::default();
    for m in due {
        let result = match m.step {
            Step::MoveOut => move_out(client, namespace, m).await.map(|()| true),
            Step::Recreate => recreate(client, namespace, m).await,
        };
        match result {
            Ok(true) => report.moved.push(m.clone()),
            Ok(false) => {}
            Err(RecoveryError::Api(kube::Error::Api(e))) if e.code == 403 => {
                let why = "the operator may not delete pods or claims here: add manifests/components/zone-outage-recovery (cluster-wide mode) or manifests/watched-namespace/zone-outage-recovery in this namespace (namespaced mode), or run the commands".to_string();
                report.failed.push((m.clone(), why));
            }
            // Already gone (deleted by someone, or recreated under a new UID): next pass.
            Err(RecoveryError::Api(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                let why = e.to_string();
                report.failed.push((m.clone(), why));
            }
        }
    }
    report
}

/// Deletes only the object with this UID, never a successor of the same name.
fn only(uid: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Steps 1 and 2: the claims first, so the recreated pod cannot bind them again; then
/// the pod, at once, as no kubelet in the lost zone will confirm it stopped.
async fn move_out(client: &Client, namespace: &str, m: &Move) -> Result<(), RecoveryError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for claim in &m.claims {
        if let Some(c) = claims.get_opt(claim).await? {
            if c.metadata.deletion_timestamp.is_none() {
                claims
                    .delete(claim, &only(c.metadata.uid.as_deref().unwrap_or_default()))
                    .await?;
            }
        }
    }
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..only(&m.uid)
    };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .delete(&m.pod, &force)
        .await?;
    Ok(())
}

/// Step 3: deletes the waiting pod when one of its claims is gone or going, so its
/// StatefulSet creates it again with new claims; `false` when its claims are fine.
async fn recreate(client: &Client, namespace: &str, m: &Move) -> Result<bool, RecoveryError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut lost = false;
    for claim in &m.claims {
        lost |= claims
            .get_opt(claim)
            .await?
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
    }
    if lost {
        Api::<Pod>::namespaced(client.clone(), namespace)
            .delete(&m.pod, &only(&m.uid))
            .await?;
    }
    Ok(lost)
}
