//! One reconcile of one LokiStack, as a pipeline:
//!
//! observe ([`observe()`]: the caches, the objects no cache holds, the webhooks' coverage)
//! → plan ([`plan()`], pure, the only decider: the [`crate::intent::Intent`]) → act
//! ([`execute`]: carries the Intent out, reports what happened) → report
//! ([`status::report::report`], pure: the status and Events; [`report::publish`] writes
//! them).
//!
//! A step that fails returns `Err` after the user has been told (an Event, and a Degraded
//! condition where the status can still be computed), so [`error_policy`] retries it
//! with a backoff of its own ([`backoff`]) instead of waiting for the resync.

pub mod backoff;
pub mod controller;
pub mod rules;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use tracing::warn;

use crate::act::apply::{Applier, ApplyError};
use crate::act::execute::{execute, Actor};
use crate::act::failover as act_failover;
use crate::act::report::{self, Notifier};
use crate::caches::coverage::WebhookCoverage;
use crate::caches::reflectors::Caches;
use crate::caches::stacks;
use crate::intent::Applied;
use crate::model::api::{LokiStack, LokiStackStatus, ManagementState};
use crate::model::conditions::{EventReason, Happening};
use crate::model::names;
use crate::observe::{observe, ObserveError, Snapshot};
use crate::plan::{failover, plan, PlanError};
use crate::render::Settings;
use crate::status;
use crate::telemetry::metrics::{Metrics, StackView};

/// How soon a held-back stack is looked at again when no change arrives.
pub const HELD_BACK_RETRY: Duration = Duration::from_secs(30);
/// How soon a stack is looked at again while a rollout is under way. Pod and StatefulSet
/// changes trigger it anyway; this bounds how long a missed change can stall a zone.
pub const ROLLOUT_RETRY: Duration = Duration::from_secs(5);
/// How often a reconcile also forgets the stacks deleted without a finalizer: that walks
/// every stack, too much for every reconcile at thousands of stacks.
const FORGET_EVERY: Duration = Duration::from_secs(10);

/// What every reconcile of a term shares: the shared caches, and the term's writers.
pub struct Context {
    pub client: Client,
    pub caches: Caches,
    pub applier: Applier,
    pub settings: Settings,
    pub notify: Notifier,
    pub metrics: Arc<Metrics>,
    /// How often a stack is looked at with nothing changed (it sends no writes then).
    pub resync: Duration,
    /// The namespaces the zone-at-bind webhook covers; `None` when the operator does not
    /// register it (switched off, or OLM's).
    pub webhook_coverage: WebhookCoverage,
    /// When deleted stacks were last forgotten ([`FORGET_EVERY`]).
    pub forgotten_at: Mutex<Option<Instant>>,
    /// Each stack's failures in a row: how soon [`error_policy`] retries it.
    pub backoff: backoff::ErrorBackoff,
}

/// The step that failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("observe: {0}")]
    Observe(#[from] ObserveError),
    #[error("plan: {0}")]
    Plan(#[from] PlanError),
    #[error("apply: {0}")]
    Apply(#[from] ApplyError),
    #[error("status update failed: {0}")]
    Status(#[source] kube::Error),
}

impl ReconcileError {
    /// A failed apply is in the status written before the error comes back (Degraded,
    /// with the message), and the report announced it when the condition changed: a
    /// second Event would fold into the first as a series and count one failure twice.
    fn shown_in_status(&self) -> bool {
        matches!(self, ReconcileError::Apply(_))
    }

    /// The Event reason, and the `result` label of the reconciles metric.
    fn reason(&self) -> (EventReason, &'static str) {
        match self {
            ReconcileError::Observe(_) => (Happening::ObserveFailed.into(), "observe_failed"),
            ReconcileError::Plan(_) => (Happening::RenderFailed.into(), "plan_failed"),
            ReconcileError::Apply(e) => (e.reason().into(), "apply_failed"),
            ReconcileError::Status(_) => (Happening::StatusUpdateFailed.into(), "status_failed"),
        }
    }
}

/// The LokiStack controller's name in the controller metrics (controller-runtime's
/// lowercase kind).
pub const CONTROLLER: &str = "lokistack";

pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    forget_deleted_stacks(&ctx);
    let stack = match stacks::decode(&obj) {
        Ok(stack) => stack,
        Err(e) => {
            warn!(stack = %obj.name_any(), namespace = ?obj.namespace(), error = %e, "stored LokiStack does not decode; it is skipped until fixed");
            Metrics::count(&ctx.metrics.reconciles, "undecodable", 1);
            ctx.metrics.reconciled(CONTROLLER, false, started.elapsed());
            report::undecodable(&ctx.client, &ctx.notify, &obj, &e)
                .await
                .map_err(ReconcileError::Status)?;
            // Fixing the object is a change, which runs it again.
            return Ok(Action::await_change());
        }
    };
    if let Some((action, why)) = not_ours_to_run(&stack, &ctx) {
        release_failover(&stack, &ctx, why).await;
        return Ok(action);
    }
    let result = pipeline(&stack, &ctx).await;
    let label = match &result {
        Ok(Next {
            held_back: true, ..
        }) => "held_back",
        Ok(_) => "ok",
        Err(e) => failed(&stack, &ctx, e).await,
    };
    Metrics::count(&ctx.metrics.reconciles, label, 1);
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics
        .reconciled(CONTROLLER, result.is_ok(), started.elapsed());
    result.map(|next| {
        ctx.backoff
            .succeeded(&stack.namespace().unwrap_or_default(), &stack.name_any());
        if next.held_back {
            // Some causes of a hold-back send no change when fixed (a CA ConfigMap, which
            // is not watched): look again soon, which costs reads only.
            Action::requeue(ctx.resync.min(HELD_BACK_RETRY))
        } else if next.rolling {
            Action::requeue(ctx.resync.min(ROLLOUT_RETRY))
        } else {
            Action::requeue(next.wake.map_or(ctx.resync, |w| ctx.resync.min(w)))
        }
    })
}

/// A failed reconcile: logged, and told in an Event unless the status shows it. Its
/// metric label. ([`error_policy`] counts it in the stack's backoff.)
async fn failed(stack: &LokiStack, ctx: &Context, e: &ReconcileError) -> &'static str {
    let (reason, label) = e.reason();
    warn!(stack = %stack.name_any(), namespace = ?stack.namespace(), error = %e, "reconcile failed");
    if !e.shown_in_status() {
        let object = stack.object_ref(&());
        ctx.notify
            .event(&object, EventType::Warning, reason, e.to_string())
            .await;
    }
    label
}

/// When a reconcile that went through must run again without a change to trigger it.
struct Next {
    /// The spec is held back.
    held_back: bool,
    /// A rollout, a scale-down or a change of zones is under way.
    rolling: bool,
    /// Something moves on at a set time with no change to announce it: the stage of
    /// turning zones on, or a rollout waiting out evictions Kubernetes may still make.
    wake: Option<Duration>,
}

/// observe → plan → act → report. A failed apply is an error once the status shows it.
async fn pipeline(stack: &LokiStack, ctx: &Context) -> Result<Next, ReconcileError> {
    let snapshot = observe(
        &ctx.client,
        &ctx.caches,
        &ctx.webhook_coverage,
        stack,
        ctx.settings.zone_labels_at_binding,
    )
    .await?;
    let intent = plan(stack, &snapshot, &ctx.settings)?;
    let (done, applied) = execute(&ctx.actor(), &snapshot, &intent).await;
    let report = status::report::report(stack, &snapshot, &intent, &done);
    // Before the status is written: whoever reads the written status and then the
    // metrics (an alert, a test) never finds the metrics behind it.
    record(ctx, &snapshot, stack, &report.status);
    report::publish(&ctx.client, &ctx.notify, stack, &report)
        .await
        .map_err(ReconcileError::Status)?;
    applied?;
    Ok(Next {
        held_back: done.applied == Applied::HeldBack,
        rolling: report.rolling,
        wake: intent.wake_after,
    })
}

impl Context {
    fn actor(&self) -> Actor<'_> {
        Actor {
            client: &self.client,
            caches: &self.caches,
            applier: &self.applier,
            bind_coverage: self.webhook_coverage.bind.as_ref(),
            metrics: &self.metrics,
        }
    }
}

/// Housekeeping for stacks deleted without a finalizer, which are never reconciled again;
/// at most every [`FORGET_EVERY`].
fn forget_deleted_stacks(ctx: &Context) {
    {
        let mut at = ctx
            .forgotten_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if at.is_some_and(|t| t.elapsed() < FORGET_EVERY) {
            return;
        }
        *at = Some(Instant::now());
    }
    let live: HashSet<(String, String)> = ctx
        .caches
        .stacks
        .state()
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    ctx.applier.retain(&live);
    ctx.metrics.retain(&live);
    ctx.backoff.retain(&live);
}

/// A stack being deleted (Kubernetes garbage-collects its children through their owner
/// references) or set Unmanaged is left alone, but for [`release_failover`]; with why.
fn not_ours_to_run(stack: &LokiStack, ctx: &Context) -> Option<(Action, &'static str)> {
    let (ns, name) = (stack.namespace().unwrap_or_default(), stack.name_any());
    let leaving = stack.metadata.deletion_timestamp.is_some()
        || stack.spec.management_state == ManagementState::Unmanaged;
    if leaving {
        ctx.backoff.succeeded(&ns, &name);
    }
    if stack.metadata.deletion_timestamp.is_some() {
        ctx.applier.forget(&ns, &name);
        ctx.metrics.set_stack(&ns, &name, None);
        return Some((Action::await_change(), "the stack is being deleted"));
    }
    if stack.spec.management_state == ManagementState::Unmanaged {
        ctx.applier.forget(&ns, &name);
        return Some((Action::await_change(), "the stack is Unmanaged"));
    }
    None
}

/// The one write for a stack left alone: its pods the fast failover took out are put
/// back, since nothing would lift the mark otherwise. A failure is a Warning Event on the
/// stack (`ZoneFailoverFailed`, saying what to fix) and in the log; the next change of
/// the stack tries again.
async fn release_failover(stack: &LokiStack, ctx: &Context, why: &str) {
    let ns = stack.namespace().unwrap_or_default();
    let pods = ctx.caches.stack_pods(&ns, &stack.name_any());
    let writes = failover::release(pods.iter().map(AsRef::as_ref), why);
    if writes.is_empty() {
        return;
    }
    let done = act_failover::run(
        &ctx.client,
        &ns,
        &writes,
        Timestamp::now(),
        &ctx.caches.node_leases,
    )
    .await;
    let object = stack.object_ref(&());
    for (w, e) in &done.failed {
        warn!(pod = %w.pod, namespace = %ns, error = %e, "cannot put a pod the fast failover took out back ({why})");
        let note = format!(
            "{why}: cannot set {}=True on pod {}: {e}",
            names::POD_CONDITION_ZONE_AVAILABLE,
            w.pod
        );
        ctx.notify
            .event(
                &object,
                EventType::Warning,
                Happening::ZoneFailoverFailed,
                note,
            )
            .await;
    }
}

fn record(ctx: &Context, snapshot: &Snapshot, stack: &LokiStack, status: &LokiStackStatus) {
    let view = StackView {
        spec: &stack.spec,
        status,
    };
    ctx.metrics
        .set_stack(&snapshot.namespace, &snapshot.name, Some(view));
}

/// Every failed reconcile passes here, whichever step failed (the pipeline, or the
/// status write of a stack that does not decode): the one place its failures are
/// counted. `reconcile` has logged and reported the error already.
pub fn error_policy(
    stack: Arc<DynamicObject>,
    _error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let retry = ctx
        .backoff
        .failed(&stack.namespace().unwrap_or_default(), &stack.name_any());
    tracing::info!(stack = %stack.name_any(), namespace = ?stack.namespace(), "retrying the failed reconcile in {retry:?}");
    Action::requeue(retry)
}

#[cfg(test)]
mod tests;
