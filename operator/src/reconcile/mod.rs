//! One reconcile of one LokiStack, as a pipeline:
//!
//! observe ([`Snapshot::take`], reads the caches) → plan ([`plan()`], pure) → apply
//! ([`Applier::apply`], server-side apply) → status ([`status::compute`], pure; then
//! [`report::write_status`], the only write of the stack).
//!
//! A step that fails returns `Err` after the user has been told (an Event, and a Degraded
//! condition where the status can still be computed), so [`error_policy`] retries it
//! with a short backoff instead of waiting for the resync.

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
use tracing::{info, warn};

use crate::act::apply::{Applier, ApplyError, ApplyReport};
use crate::act::report::{self, Notifier};
use crate::act::{recovery as recover_act, rollout, scale_down};
use crate::caches::coverage::WebhookCoverage;
use crate::caches::reflectors::Caches;
use crate::caches::stacks;
use crate::model::api::{LokiStack, LokiStackStatus, ManagementState, ZoneAwarenessStage};
use crate::observe::{ruler_secret_keys, storage_ca_keys, ObserveError, Snapshot};
use crate::plan::recovery;
use crate::plan::staging;
use crate::plan::{self, plan, Plan, PlanError};
use crate::render::{ServerCapabilities, Settings};
use crate::status::{self, Outcome};
use crate::telemetry::metrics::{Metrics, StackView};

/// How soon a failed reconcile runs again.
pub const ERROR_BACKOFF: Duration = Duration::from_secs(10);
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
    pub capabilities: ServerCapabilities,
    pub notify: Notifier,
    pub metrics: Arc<Metrics>,
    /// How often a stack is looked at with nothing changed (it sends no writes then).
    pub resync: Duration,
    /// The namespaces the zone-at-bind webhook covers; `None` when the operator does not
    /// register it (switched off, or OLM's).
    pub webhook_coverage: WebhookCoverage,
    /// When deleted stacks were last forgotten ([`FORGET_EVERY`]).
    pub forgotten_at: Mutex<Option<Instant>>,
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
    /// The Event reason, and the `result` label of the reconciles metric.
    fn reason(&self) -> (&'static str, &'static str) {
        match self {
            ReconcileError::Observe(_) => ("ObserveFailed", "observe_failed"),
            ReconcileError::Plan(_) => ("RenderFailed", "plan_failed"),
            ReconcileError::Apply(e) => (e.reason().as_str(), "apply_failed"),
            ReconcileError::Status(_) => ("StatusUpdateFailed", "status_failed"),
        }
    }
}

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
            report::undecodable(&ctx.client, &ctx.notify, &obj, &e)
                .await
                .map_err(ReconcileError::Status)?;
            // Fixing the object is a change, which runs it again.
            return Ok(Action::await_change());
        }
    };
    if let Some(action) = not_ours_to_run(&stack, &ctx) {
        return Ok(action);
    }
    let result = pipeline(&stack, &ctx).await;
    let label = match &result {
        Ok((Outcome::HeldBack, _)) => "held_back",
        Ok(_) => "ok",
        Err(e) => {
            let (reason, label) = e.reason();
            warn!(stack = %stack.name_any(), namespace = ?stack.namespace(), error = %e, "reconcile failed; retrying in {ERROR_BACKOFF:?}");
            let object = stack.object_ref(&());
            ctx.notify
                .event(&object, EventType::Warning, reason, e.to_string())
                .await;
            label
        }
    };
    Metrics::count(&ctx.metrics.reconciles, label, 1);
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result.map(|(outcome, next)| match outcome {
        // Some causes of a hold-back send no change when fixed (a CA ConfigMap, which is
        // not watched): look again soon, which costs reads only.
        Outcome::HeldBack => Action::requeue(ctx.resync.min(HELD_BACK_RETRY)),
        _ if next.rolling => Action::requeue(ctx.resync.min(ROLLOUT_RETRY)),
        _ => Action::requeue(next.wake.map_or(ctx.resync, |w| ctx.resync.min(w))),
    })
}

/// When a reconcile that went through must run again without a change to trigger it.
struct Next {
    /// A rollout, a scale-down or a change of zones is under way.
    rolling: bool,
    /// The stage of turning zones on moves on at a set time.
    wake: Option<Duration>,
}

/// observe → plan → (prepare a scale-down) → apply → rollout → status. Returns what the apply step did and
/// whether a rollout is under way; a failed apply is an error once the status shows it.
async fn pipeline(stack: &LokiStack, ctx: &Context) -> Result<(Outcome, Next), ReconcileError> {
    let mut snapshot = Snapshot::take(&ctx.caches, stack)?;
    snapshot.storage_ca_keys = storage_ca_keys(&ctx.client, stack, &snapshot.namespace).await?;
    snapshot.rules.remote_write_secret_keys =
        ruler_secret_keys(&ctx.client, &snapshot.rules, &snapshot.namespace).await?;
    snapshot.disruptions_by_zone = disruptions_by_zone(ctx, stack, &snapshot.namespace).await;
    let mut plan = plan(stack, &snapshot, &ctx.settings, &ctx.capabilities)?;
    let scale_down_held = scale_down::step(&ctx.notify, stack, &snapshot, &mut plan).await;
    let applied = apply(ctx, &snapshot, &plan).await;
    let outcome = match &applied {
        Ok(None) => Outcome::HeldBack,
        Ok(Some(_)) => Outcome::Applied,
        Err(e) => Outcome::Failed {
            reason: e.reason(),
            message: e.to_string(),
        },
    };
    let now = Timestamp::now();
    let recovered = recover(ctx, stack, &snapshot, &plan, now).await;
    let rollout = rollout::step(
        &ctx.client,
        &ctx.caches,
        &ctx.notify,
        stack,
        &snapshot,
        &plan,
    )
    .await;
    let stage = plan.zone_awareness.as_ref();
    let next = Next {
        rolling: rollout.is_some() || scale_down_held || staging::under_way(stage),
        wake: staging::wake_after(stage, now),
    };
    let mut new = status::compute(stack, &snapshot, &plan, &outcome, &recovered, now);
    new.rollout = rollout;
    report::write_status(&ctx.client, &ctx.notify, stack, &new)
        .await
        .map_err(ReconcileError::Status)?;
    announce_stage(ctx, stack, &plan).await;
    record(ctx, &snapshot, stack, &new);
    applied?;
    Ok((outcome, next))
}

/// An Event when turning zones on or off moves to its next stage; once the status that
/// shows it is written, so a failed write does not announce it twice.
async fn announce_stage(ctx: &Context, stack: &LokiStack, plan: &Plan) {
    let previous = stack
        .status
        .as_ref()
        .and_then(|s| s.zone_awareness.as_ref());
    if let Some((reason, note)) = staging::transition(previous, plan.zone_awareness.as_ref()) {
        info!(stack = %stack.name_any(), namespace = ?stack.namespace(), "{note}");
        let object = stack.object_ref(&());
        ctx.notify
            .event(&object, EventType::Normal, reason, note)
            .await;
    }
}

/// The zone-outage recovery of the stack's movable pods (`plan/recovery.rs` decides,
/// `act/recovery.rs` deletes): run when
/// the stack opted in, else only listed for the condition. Every pod moved gets an Event.
async fn recover(
    ctx: &Context,
    stack: &LokiStack,
    snapshot: &Snapshot,
    plan: &Plan,
    now: Timestamp,
) -> recovery::Report {
    let Some(grace) = recovery::grace(stack) else {
        let manual = recovery::candidates(snapshot, plan, Duration::ZERO, now)
            .into_iter()
            .filter(|m| m.step == recovery::Step::MoveOut)
            .collect();
        return recovery::Report {
            manual,
            ..Default::default()
        };
    };
    let moves = recovery::candidates(snapshot, plan, grace, now);
    if moves.is_empty() {
        return recovery::Report::default();
    }
    let report = recover_act::run(&ctx.client, &snapshot.namespace, moves).await;
    let object = stack.object_ref(&());
    for m in &report.moved {
        let note = match (&m.step, &m.zone) {
            (recovery::Step::MoveOut, Some(zone)) => format!(
                "zone {zone} unavailable for longer than spec.replication.zoneOutage.recoverAfter: deleted the claims {} and force-deleted pod {}; its StatefulSet recreates it in an available zone",
                m.claims.join(", "),
                m.pod
            ),
            _ => format!(
                "pod {} waited on claims that were deleted: deleted it, so its StatefulSet creates it with new claims in an available zone",
                m.pod
            ),
        };
        info!(stack = %snapshot.name, namespace = %snapshot.namespace, pod = %m.pod, "{note}");
        ctx.notify
            .event(&object, EventType::Normal, "ZoneOutageRecovery", note)
            .await;
    }
    for (m, why) in &report.failed {
        let note = format!("cannot move pod {} out of the lost zone: {why}", m.pod);
        ctx.notify
            .event(
                &object,
                EventType::Warning,
                "ZoneOutageRecoveryFailed",
                note,
            )
            .await;
    }
    report
}

/// `None` when the plan holds the spec back.
async fn apply(
    ctx: &Context,
    snapshot: &Snapshot,
    plan: &Plan,
) -> Result<Option<ApplyReport>, ApplyError> {
    let plan::Action::Apply {
        children, stale, ..
    } = &plan.action
    else {
        return Ok(None);
    };
    wait_for_webhook(ctx, snapshot, plan).await;
    let result = ctx.applier.apply(snapshot, children, stale).await;
    let applies = &ctx.metrics.applies;
    match &result {
        Ok(r) => {
            Metrics::count(applies, "applied", r.applied as u64);
            Metrics::count(applies, "unchanged", r.unchanged as u64);
            Metrics::count(applies, "pruned", r.pruned as u64);
            if r.applied > 0 || r.pruned > 0 {
                info!(stack = %snapshot.name, namespace = %snapshot.namespace, applied = r.applied, unchanged = r.unchanged, pruned = r.pruned, "applied");
            }
        }
        Err(_) => Metrics::count(applies, "failed", 1),
    }
    result.map(Some)
}

/// A zone-aware stack's workloads wait (briefly) until the zone-at-bind webhook covers
/// their namespace, so that their pods are zoned in the binding from the first one. The
/// wait ends at once when covered, and gives up after a few seconds: the annotator zones
/// what the webhook does not.
async fn wait_for_webhook(ctx: &Context, snapshot: &Snapshot, plan: &Plan) {
    // While zones are turned off the webhook no longer covers the stack: its ring
    // members keep their zones, and the annotator writes them.
    let turning_off = plan
        .zone_awareness
        .as_ref()
        .is_some_and(|z| z.stage == ZoneAwarenessStage::Disabling);
    let (Some(coverage), true) = (
        &ctx.webhook_coverage.bind,
        plan.eff.zone_aware() && !turning_off,
    ) else {
        return;
    };
    if !coverage.wait_for(&snapshot.namespace).await {
        warn!(namespace = %snapshot.namespace, "the zone-at-bind webhook does not cover this namespace yet; applying anyway, the annotator zones the pods");
    }
}

/// Whether the zone-disruption webhook decides the evictions of this zone-aware stack's
/// ingesters, so their PodDisruptionBudget can allow a whole zone. The first reconcile
/// of a new stack waits (briefly) for the configuration to cover its namespace; until it
/// does, the budget stays at one ingester.
async fn disruptions_by_zone(ctx: &Context, stack: &LokiStack, namespace: &str) -> bool {
    if !crate::model::defaults::zone_aware(&stack.spec) {
        return false;
    }
    // Both keepers are woken at once: the zone-at-bind wait before the apply then finds
    // its namespace covered already, instead of adding a second wait after this one.
    let bind = async {
        if let Some(c) = &ctx.webhook_coverage.bind {
            c.wait_for(namespace).await;
        }
    };
    let disruptions = async {
        match &ctx.webhook_coverage.disruptions {
            Some(c) => c.wait_for(namespace).await,
            None => false,
        }
    };
    tokio::join!(bind, disruptions).1
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
}

/// A stack being deleted (Kubernetes garbage-collects its children through their owner
/// references) or set Unmanaged is left alone.
fn not_ours_to_run(stack: &LokiStack, ctx: &Context) -> Option<Action> {
    let (ns, name) = (stack.namespace().unwrap_or_default(), stack.name_any());
    if stack.metadata.deletion_timestamp.is_some() {
        ctx.applier.forget(&ns, &name);
        ctx.metrics.set_stack(&ns, &name, None);
        return Some(Action::await_change());
    }
    if stack.spec.management_state == ManagementState::Unmanaged {
        ctx.applier.forget(&ns, &name);
        return Some(Action::await_change());
    }
    None
}

fn record(ctx: &Context, snapshot: &Snapshot, stack: &LokiStack, status: &LokiStackStatus) {
    let view = StackView {
        size: stack.spec.size.as_str(),
        status,
    };
    ctx.metrics
        .set_stack(&snapshot.namespace, &snapshot.name, Some(view));
}

pub fn error_policy(
    _stack: Arc<DynamicObject>,
    _error: &ReconcileError,
    _ctx: Arc<Context>,
) -> Action {
    // `reconcile` has logged, counted and reported the error already.
    Action::requeue(ERROR_BACKOFF)
}
