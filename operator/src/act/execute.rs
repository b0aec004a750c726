//! Carries one [`Intent`] out, in the order its decisions depend on: the fast failover's
//! pod conditions first (time counts there), then the scale-down's
//! ingesters asked to leave the ring (the held ingester StatefulSet applied instead while
//! one cannot be asked), the apply, the recovery's due moves, the rollout's deletes.
//! Reports what happened ([`Done`]); decides nothing.

use std::borrow::Cow;
use std::sync::Arc;

use kube::Client;
use tracing::{info, warn};

use crate::act::apply::{Applier, ApplyError};
use crate::act::{failover, recovery, rollout, scale_down};
use crate::caches::coverage::Coverage;
use crate::caches::reflectors::Caches;
use crate::intent::{Action, Applied, Done, FailedOver, Intent, Prepared, Recovered};
use crate::observe::Snapshot;
use crate::render::kinds::ChildKind;
use crate::render::Child;
use crate::telemetry::metrics::Metrics;

/// What carrying an Intent out uses: the term's writers and the caches it waits on.
pub struct Actor<'a> {
    pub client: &'a Client,
    pub caches: &'a Caches,
    pub applier: &'a Applier,
    /// What the zone-at-bind webhook covers; `None` when the operator does not register
    /// it (switched off, or OLM's).
    pub bind_coverage: Option<&'a Coverage>,
    pub metrics: &'a Arc<Metrics>,
}

/// Carries `intent` out. The apply's error, when it failed, comes back beside the report
/// so that the reconcile is retried with a backoff once the status shows it.
pub async fn execute(
    a: &Actor<'_>,
    snapshot: &Snapshot,
    intent: &Intent,
) -> (Done, Result<(), ApplyError>) {
    // First: every second a silent zone's pods stay behind their Services fails a share
    // of every client's requests, and the steps below may wait (on ingesters, on the
    // webhook); none of them depends on it.
    let failed_over = fail_over(a, snapshot, intent).await;
    let prepared = match &intent.scale_down {
        Some(s) => Some(scale_down::prepare(&s.leaving).await),
        None => None,
    };
    let (applied, error) = match &intent.action {
        Action::HoldBack => (Applied::HeldBack, Ok(())),
        Action::Apply {
            children, stale, ..
        } => {
            let children = match (&prepared, &intent.scale_down) {
                (Some(Prepared::Held { .. }), Some(s)) => Cow::Owned(with_held(children, &s.held)),
                _ => Cow::Borrowed(children),
            };
            if intent.wait_for_webhook {
                wait_for_webhook(a, &snapshot.namespace).await;
            }
            apply(a, snapshot, &children, stale).await
        }
    };
    let recovered = if intent.recovery.due.is_empty() {
        Recovered::default()
    } else {
        recovery::run(a.client, &snapshot.namespace, &intent.recovery.due).await
    };
    let (deleted, not_deleted) = if intent.rollout.delete.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        rollout::delete(
            a.client,
            a.caches,
            &snapshot.namespace,
            &intent.rollout.delete,
        )
        .await
    };
    let done = Done {
        scale_down: prepared,
        applied,
        deleted,
        not_deleted,
        recovered,
        failed_over,
    };
    (done, error)
}

/// The fast failover's writes, counted.
async fn fail_over(a: &Actor<'_>, snapshot: &Snapshot, intent: &Intent) -> FailedOver {
    if intent.failover.writes.is_empty() {
        return FailedOver::default();
    }
    let done = failover::run(
        a.client,
        &snapshot.namespace,
        &intent.failover.writes,
        intent.now,
        &a.caches.node_leases,
    )
    .await;
    let (back, out): (Vec<_>, Vec<_>) = done.written.iter().partition(|w| w.available);
    let pods = &a.metrics.failover_pods;
    Metrics::count(pods, "out", out.len() as u64);
    Metrics::count(pods, "back", back.len() as u64);
    Metrics::count(pods, "failed", done.failed.len() as u64);
    done
}

/// `children` with the one of `held`'s kind and name replaced by it.
fn with_held(children: &[Child], held: &Child) -> Vec<Child> {
    children
        .iter()
        .map(|c| {
            if c.name() == held.name() && ChildKind::of(c) == ChildKind::of(held) {
                held.clone()
            } else {
                c.clone()
            }
        })
        .collect()
}

/// A zone-aware stack's workloads wait (briefly) until the zone-at-bind webhook covers
/// their namespace, so that their pods are zoned in the binding from the first one. The
/// wait ends at once when covered, and gives up after a few seconds: the annotator zones
/// what the webhook does not.
async fn wait_for_webhook(a: &Actor<'_>, namespace: &str) {
    let Some(coverage) = a.bind_coverage else {
        return;
    };
    if !coverage.wait_for(namespace).await {
        warn!(namespace, "the zone-at-bind webhook does not cover this namespace yet; applying anyway, the annotator zones the pods");
    }
}

async fn apply(
    a: &Actor<'_>,
    snapshot: &Snapshot,
    children: &[Child],
    stale: &[(ChildKind, String)],
) -> (Applied, Result<(), ApplyError>) {
    let result = a.applier.apply(snapshot, children, stale).await;
    let applies = &a.metrics.applies;
    match result {
        Ok(r) => {
            Metrics::count(applies, "applied", r.applied as u64);
            Metrics::count(applies, "unchanged", r.unchanged as u64);
            Metrics::count(applies, "pruned", r.pruned as u64);
            if r.applied > 0 || r.pruned > 0 {
                info!(stack = %snapshot.name, namespace = %snapshot.namespace, applied = r.applied, unchanged = r.unchanged, pruned = r.pruned, "applied");
            }
            (Applied::Done(r), Ok(()))
        }
        Err(e) => {
            Metrics::count(applies, "failed", 1);
            let failed = Applied::Failed {
                reason: e.reason(),
                message: e.to_string(),
            };
            (failed, Err(e))
        }
    }
}
