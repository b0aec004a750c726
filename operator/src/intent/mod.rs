//! The vocabulary between deciding and doing: what one reconcile of a stack will do
//! ([`Intent`], which `plan/` alone decides) and what came of it ([`Done`], which `act/`
//! reports). `act/` carries an Intent out from these types alone and imports nothing of
//! `plan/` (`tests/architecture.rs` checks it); `status/` turns Intent and Done into the
//! stack's status and Events. Types, and the accessors that read them: no decision.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::checks::silence::{SilentZone, Tolerance};
use crate::checks::validate::InvalidSpec;
use crate::checks::volumes::StorageClassFinding;
use crate::checks::zones::ZoneCheck;
use crate::model::api::{RolloutStatus, ZoneAwarenessStatus};
use crate::model::conditions::{EventReason, Reason};
use crate::model::defaults::EffectiveStack;
use crate::model::storage::{StorageCaError, StorageSecretError};
use crate::render::kinds::ChildKind;
use crate::render::Child;

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub invalid: Option<InvalidSpec>,
    pub secret: Option<StorageSecretError>,
    /// The CA bundle of `spec.storage.tls`, when it is missing or lacks its key.
    pub storage_ca: Option<StorageCaError>,
    pub storage_class: Option<StorageClassFinding>,
    /// `None` for a stack that is not zone-aware.
    pub zone: Option<ZoneCheck>,
    /// Known zones whose names are longer than Loki's zone-aware gossip takes: it is off
    /// while there is one (empty when it is switched off anyway).
    pub gossip_zones_too_long: Vec<String>,
    /// Go Loki Operator fields the stack sets that this operator does not act on.
    pub unsupported: Vec<String>,
    /// The stack's annotations that are set but invalid, and what applies instead.
    pub annotation: Option<String>,
    /// Zone-aware evictions are switched off for the stack
    /// ([`crate::model::names::ANNOTATION_ZONE_AWARE_EVICTIONS`]).
    pub zone_evictions_off: bool,
    /// The fast failover is switched off for the stack
    /// ([`crate::model::names::ANNOTATION_ZONE_FAST_FAILOVER`]).
    pub fast_failover_off: bool,
    /// How the fast failover tolerates late renewals
    /// ([`crate::model::names::ANNOTATION_ZONE_FAST_FAILOVER_MISSED_RENEWALS`]).
    pub failover_tolerance: Tolerance,
    /// The ruler's rules and RulerConfig.
    pub rules: RuleFindings,
}

impl Findings {
    /// The Degraded reason and message when the spec must be held back; the first finding
    /// in this order wins, since fixing it may change the others. A zone outage is not
    /// among them: during one, spec changes still go out (see [`Intent::held`]).
    pub fn hold_back(&self) -> Option<(Reason, String)> {
        if let Some(e) = &self.invalid {
            return Some((Reason::InvalidSpec, format!("{e}. Fix the LokiStack spec")));
        }
        if let Some(e) = &self.secret {
            return Some((e.reason(), e.to_string()));
        }
        if let Some(e) = &self.storage_ca {
            return Some((e.reason(), e.to_string()));
        }
        if let Some(hold) = &self.rules.hold {
            return Some(hold.clone());
        }
        if let Some(f) = self.storage_class.as_ref().filter(|f| f.holds_back()) {
            return Some((f.reason(), f.to_string()));
        }
        self.zone
            .as_ref()
            .filter(|z| z.verdict.is_degraded())
            .map(|z| (z.verdict.reason(), z.message()))
    }
}

/// What the stack's status says about its rules.
#[derive(Debug, Default, PartialEq)]
pub struct RuleFindings {
    /// Picked rules that are not loaded, each with why (`AlertingRule ns/name: ...`).
    pub not_loaded: Vec<String>,
    /// Why the stack is held back, when its RulerConfig or remote-write Secret is wrong.
    pub hold: Option<(Reason, String)>,
    /// What else the user should know (rule kinds the server does not serve).
    pub notes: Vec<String>,
}

#[derive(Debug)]
pub enum Action {
    /// Leave every object as it is: a Degraded finding holds the new spec back.
    HoldBack,
    /// Apply `children` in order, then remove `stale`: objects this operator applied for
    /// the stack that it no longer renders (a disabled ruler). PersistentVolumeClaims are
    /// never in it.
    Apply {
        children: Vec<Child>,
        stale: Vec<(ChildKind, String)>,
        /// Objects owned by the stack that this operator neither applied nor renders (the
        /// Go Loki Operator's gateway after a migration): left as they run, and reported.
        left: Vec<(ChildKind, String)>,
    },
}

/// An ingester a scale-down removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaving {
    pub pod: String,
    /// `http://<pod IP>:<http port>`; `None` when the pod is not running (never started,
    /// or waiting to be scheduled): there is no Loki to ask.
    pub base_url: Option<String>,
}

/// A scale-down of a zone-aware stack's ingesters: every leaving one is asked to leave
/// the ring before the StatefulSet shrinks (`plan/scale_down.rs` says why).
#[derive(Debug)]
pub struct ScaleDown {
    /// The StatefulSet's replicas as it runs, and as the spec asks.
    pub running: i32,
    pub wanted: i32,
    pub leaving: Vec<Leaving>,
    /// The ingester StatefulSet at `running` replicas: what is applied instead of the
    /// rendered one when a leaving ingester cannot be asked.
    pub held: Child,
}

/// A pod to delete, with the preconditions of the deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub zone: Option<String>,
}

/// One step of a zone-by-zone rollout.
#[derive(Debug, Default, PartialEq)]
pub struct Rollout {
    /// Outdated pods to delete now: all in one zone, or one pod without a zone. Empty
    /// while the spec is held back.
    pub delete: Vec<Victim>,
    /// `None` while no rollout is under way, so an idle stack's status does not change.
    pub status: Option<RolloutStatus>,
    /// When a pod the rollout waits for stops being one Kubernetes may still evict
    /// (`checks/taint_evictions.rs`): no change announces it, so the plan is looked at
    /// again then.
    pub settle_until: Option<Timestamp>,
}

/// What a pod needs to leave a lost zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Steps 1 and 2: the pod is on a node of the lost zone, or waits on claims whose
    /// volumes are pinned there.
    MoveOut,
    /// Step 3: a recreated pod waiting to be scheduled; deleted if its claims are gone
    /// or going (the executor looks), else left to schedule.
    Recreate,
}

/// One pod of a movable component, and what moving it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub pod: String,
    pub uid: String,
    pub step: Step,
    /// The lost zone, for [`Step::MoveOut`].
    pub zone: Option<String>,
    /// The pod's claims, by the names its StatefulSet gives them.
    pub claims: Vec<String>,
    /// `None`: due now; else when the grace period ends.
    pub due: Option<Timestamp>,
    /// The pod is the only one of its component and its node is lost but not known to
    /// have stopped (unreachable, not fenced): it moves only once the node is fenced, so
    /// that two never run at once (two compactors against one bucket).
    pub needs_fence: bool,
}

impl Move {
    /// What an admin runs to do the same by hand (the runbook's commands).
    pub fn commands(&self, namespace: &str) -> String {
        format!(
            "kubectl -n {namespace} delete pvc {} --wait=false && kubectl -n {namespace} delete pod {} --grace-period=0 --force",
            self.claims.join(" "),
            self.pod
        )
    }
}

/// The zone-outage recovery of the stack's movable pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Moves due now (the stack opted in and the grace period is over).
    pub due: Vec<Move>,
    /// Moves waiting for the grace period.
    pub waiting: Vec<Move>,
    /// Without the opt-in: the pods an admin may move, with [`Move::commands`].
    pub manual: Vec<Move>,
    /// With the opt-in: single pods of their component on lost nodes not known to have
    /// stopped ([`Move::needs_fence`]), which wait for the node to be fenced.
    pub fence_first: Vec<Move>,
}

/// One pod's zone-available condition to write (the fast failover, `plan/failover.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneServiceWrite {
    pub pod: String,
    pub uid: String,
    pub zone: String,
    /// `false`: out of its Services, its Ready condition set False with it; `true`:
    /// back, its Ready condition left to its kubelet.
    pub available: bool,
    /// The conditions' reason.
    pub reason: &'static str,
    /// The conditions' message.
    pub message: String,
    /// For a pod taken out: what the verdict stood on, checked again just before the
    /// write.
    pub fence: Option<Fence>,
}

/// What a take-out stands on: none of the silent zone's `nodes` renewed after the Lease
/// event `seq` its verdict saw last. The executor drops the write when one did (the next
/// plan judges again): a verdict is never carried out on a view older than the newest
/// renewal of its zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub nodes: Vec<String>,
    pub seq: u64,
}

/// A pod the fast failover took out whose kubelet set it Ready again while its zone's
/// Leases stay silent: the kubelet is alive and its probes pass, so the pod is left in
/// its Services and written no more until the zone renews (no flapping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletAlive {
    pub pod: String,
    pub node: String,
    pub zone: String,
}

/// The fast failover of a zone-aware stack: the silent zones whose pods leave their
/// Services, and the writes that take them out or put them back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failover {
    pub out: Vec<SilentZone>,
    /// Silent zones left to Kubernetes' own timers, and why.
    pub held: Option<(Vec<SilentZone>, String)>,
    pub writes: Vec<ZoneServiceWrite>,
    /// Pods left in their Services, their kubelets being alive.
    pub alive: Vec<KubeletAlive>,
    /// The zones whose pods are out of their Services by the failover, or go out now:
    /// rollouts count their pods as unavailable and roll none of them.
    pub zones_out: BTreeSet<String>,
}

/// What the fast failover's writes came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedOver {
    pub written: Vec<ZoneServiceWrite>,
    /// Writes that failed, with why.
    pub failed: Vec<(ZoneServiceWrite, String)>,
    /// Take-outs not written: their zone renewed after the view of their verdict.
    pub dropped: Vec<ZoneServiceWrite>,
}

/// Whom an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum About {
    /// The stack itself.
    Stack,
    /// One of its pods, by name and UID.
    Pod { name: String, uid: String },
}

/// An Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub about: About,
    pub warning: bool,
    pub reason: EventReason,
    /// The recorder folds Events of the same object, reason and action into one series
    /// that keeps the first note, so steps that must each be seen (one per zone of a
    /// rollout) carry distinct actions; `None` is the default action.
    pub action: Option<String>,
    pub note: String,
}

impl PlannedEvent {
    pub fn normal(reason: impl Into<EventReason>, note: String) -> PlannedEvent {
        PlannedEvent {
            about: About::Stack,
            warning: false,
            reason: reason.into(),
            action: None,
            note,
        }
    }

    pub fn warning(reason: impl Into<EventReason>, note: String) -> PlannedEvent {
        PlannedEvent {
            warning: true,
            ..PlannedEvent::normal(reason, note)
        }
    }
}

/// Everything one reconcile of a stack will do, decided by `plan::plan` from the stack
/// and its snapshot, and carried out by `act::execute` as it stands.
#[derive(Debug)]
pub struct Intent {
    /// The snapshot's clock: the one time every decision and the status use.
    pub now: Timestamp,
    /// The spec with every default resolved and everything the plan read into it.
    pub eff: EffectiveStack,
    pub findings: Findings,
    pub action: Action,
    /// Ring members (StatefulSets) left as they run because a zone is unavailable.
    pub held: Vec<String>,
    /// The stage of turning zones on or off (`plan/staging.rs`); the previous one while
    /// the spec is held back.
    pub zone_awareness: Option<ZoneAwarenessStatus>,
    /// Before the apply: wait (briefly) until the zone-at-bind webhook covers the
    /// namespace, so the new pods are zoned in their binding.
    pub wait_for_webhook: bool,
    pub scale_down: Option<ScaleDown>,
    pub rollout: Rollout,
    pub recovery: Recovery,
    pub failover: Failover,
    /// The Event of a stage of turning zones on or off, once the status shows it.
    pub stage_event: Option<PlannedEvent>,
    /// When to plan again though no change announces it: the stage of turning zones on
    /// moves on, or pods the rollout waits for stop being ones Kubernetes may evict.
    pub wake_after: Option<Duration>,
}

/// How many children an apply sent, found unchanged, and removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplyReport {
    pub applied: usize,
    pub unchanged: usize,
    pub pruned: usize,
}

/// What preparing a scale-down came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Every leaving ingester that runs was asked and agreed; those not running (named
    /// here) could not be asked and may stay in the ring as unhealthy members.
    Ready {
        prepared: Vec<String>,
        unreachable_not_running: Vec<String>,
    },
    /// One could not be asked: the scale-down waits.
    Held { pod: String, why: String },
}

/// What the apply came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The spec is held back: nothing was sent.
    HeldBack,
    Done(ApplyReport),
    /// The Degraded condition's reason and message.
    Failed {
        reason: Reason,
        message: String,
    },
}

/// What the recovery did with the moves that were due.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Pods deleted this pass, to be recreated in an available zone.
    pub moved: Vec<Move>,
    /// Moves that could not be done, with why.
    pub failed: Vec<(Move, String)>,
}

/// What one reconcile's writes came to: `act::execute`'s report.
#[derive(Debug)]
pub struct Done {
    pub scale_down: Option<Prepared>,
    pub applied: Applied,
    /// The rollout's pods deleted, and those that could not be, with why.
    pub deleted: Vec<Victim>,
    pub not_deleted: Vec<(Victim, String)>,
    pub recovered: Recovered,
    pub failed_over: FailedOver,
}

impl Done {
    /// A scale-down waits for its ingesters.
    pub fn scale_down_held(&self) -> bool {
        matches!(self.scale_down, Some(Prepared::Held { .. }))
    }
}
