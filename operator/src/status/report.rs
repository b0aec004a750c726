//! The report of one reconcile, pure: the status to write and the Events to publish,
//! from what the plan decided ([`Intent`]) and what its execution came to ([`Done`]).
//! `act::report::publish` writes it as it stands.

use std::collections::BTreeMap;

use crate::intent::{About, Done, Intent, Move, PlannedEvent, Prepared, Victim};
use crate::model::api::{LokiStack, LokiStackStatus};
use crate::model::conditions::{ConditionType, Happening, Reason};
use crate::model::names;
use crate::observe::Snapshot;
use crate::plan::rollout::NO_ZONE;
use crate::plan::staging;

use super::{changed_conditions, compute};

/// What the user sees of one reconcile.
#[derive(Debug)]
pub struct Report {
    pub status: LokiStackStatus,
    /// Events of what the reconcile did (a scale-down, a rollout step, pods moved out of
    /// a lost zone), published before the status is written.
    pub events: Vec<PlannedEvent>,
    /// Events of what the new status shows (each changed condition, a new stage of
    /// turning zones on or off), published once it is written: a failed write announces
    /// none of them.
    pub after_status: Vec<PlannedEvent>,
    /// A rollout, a held scale-down or a change of zones is under way: the stack is looked
    /// at again soon even without a change to trigger it.
    pub rolling: bool,
}

pub fn report(stack: &LokiStack, snapshot: &Snapshot, intent: &Intent, done: &Done) -> Report {
    let status = compute(stack, snapshot, intent, done);
    let mut events = scale_down_events(intent, done);
    events.extend(rollout_events(stack, intent, done));
    events.extend(recovery_events(done));
    events.extend(failover_events(intent, done));
    let old = stack.status.clone().unwrap_or_default();
    let mut after_status: Vec<PlannedEvent> = changed_conditions(&old, &status)
        .into_iter()
        .filter_map(|c| {
            let reason = Reason::parse(&c.reason)?;
            let problem = ConditionType::parse(&c.type_).is_some_and(ConditionType::is_problem)
                && !reason.is_informational();
            let note = format!("{} is {}: {}", c.type_, c.status, c.message);
            Some(if problem && c.status == "True" {
                PlannedEvent::warning(reason, note)
            } else {
                PlannedEvent::normal(reason, note)
            })
        })
        .collect();
    after_status.extend(intent.stage_event.clone());
    let rolling = intent.rollout.status.is_some()
        || done.scale_down_held()
        || staging::under_way(intent.zone_awareness.as_ref());
    Report {
        status,
        events,
        after_status,
        rolling,
    }
}

/// A scale-down that goes ahead names who was asked to leave the ring (and who could not
/// be asked, not running); one held says which ingester could not be asked, and why.
fn scale_down_events(intent: &Intent, done: &Done) -> Vec<PlannedEvent> {
    let (Some(s), Some(prepared)) = (&intent.scale_down, &done.scale_down) else {
        return Vec::new();
    };
    let change = format!("ingesters {} → {}", s.running, s.wanted);
    match prepared {
        Prepared::Ready {
            prepared,
            unreachable_not_running,
        } => {
            let mut out = vec![PlannedEvent::normal(
                Happening::IngestersLeaving,
                format!(
                    "{change}: asked {} to flush and leave the ring when stopped",
                    list(prepared)
                ),
            )];
            if !unreachable_not_running.is_empty() {
                out.push(PlannedEvent::warning(
                    Happening::IngesterNotPrepared,
                    format!(
                        "ingesters {} were not running and could not be asked to leave the ring: they may stay in it as unhealthy members; press Forget for them on a distributor's /ring page",
                        list(unreachable_not_running)
                    ),
                ));
            }
            out
        }
        Prepared::Held { pod, why } => vec![PlannedEvent::warning(
            Happening::IngesterScaleDownHeld,
            format!(
                "the ingesters stay at {} replicas (the spec asks {}): ingester {pod} could not be asked to leave the ring ({why}). The operator must reach the ingesters' HTTP port {} ({}); it tries again",
                s.running,
                s.wanted,
                names::PORT_HTTP,
                names::PREPARE_SHUTDOWN_PATH
            ),
        )],
    }
}

fn list(pods: &[String]) -> String {
    if pods.is_empty() {
        "none (none running)".into()
    } else {
        pods.join(", ")
    }
}

/// A zone's rollout announced when its pods go (one Event per zone, under its own
/// action), a pod that could not be deleted, and the end of the rollout.
fn rollout_events(stack: &LokiStack, intent: &Intent, done: &Done) -> Vec<PlannedEvent> {
    let previous = stack.status.as_ref().and_then(|s| s.rollout.as_ref());
    let mut out = Vec::new();
    if let Some(first) = done.deleted.first() {
        let zone = first.zone.clone();
        if zone.is_none() || previous.and_then(|p| p.zone.clone()) != zone {
            let (reason, note) = started_note(zone.as_deref(), &done.deleted);
            out.push(PlannedEvent {
                action: Some(format!("Roll {}", zone.as_deref().unwrap_or(NO_ZONE))),
                ..PlannedEvent::normal(reason, note)
            });
        }
    }
    for (v, why) in &done.not_deleted {
        out.push(PlannedEvent {
            about: About::Pod {
                name: v.name.clone(),
                uid: v.uid.clone(),
            },
            ..PlannedEvent::warning(Happening::RolloutFailed, why.clone())
        });
    }
    if previous.is_some() && intent.rollout.status.is_none() {
        out.push(PlannedEvent::normal(
            Happening::RolloutCompleted,
            "rollout complete: every pod of the ring members is updated and Ready".into(),
        ));
    }
    out
}

fn started_note(zone: Option<&str>, deleted: &[Victim]) -> (Happening, String) {
    let names: Vec<&str> = deleted.iter().map(|v| v.name.as_str()).collect();
    match zone {
        Some(z) => (
            Happening::RolloutZoneStarted,
            format!(
                "zone {z}: restarting its outdated pods at once ({}); the next zone starts once they are Ready",
                names.join(", ")
            ),
        ),
        None => (
            Happening::RolloutPodRestarted,
            format!(
                "restarting {}, which has no zone (it started before the stack had zones)",
                names.join(", ")
            ),
        ),
    }
}

/// Every pod the zone-outage recovery moved, and every move that failed. Each pod's
/// Events carry an action of their own: with one action, the recorder folded the second
/// pod moved in a reconcile into the first one's Event, whose note names only the first.
fn recovery_events(done: &Done) -> Vec<PlannedEvent> {
    let action = |m: &Move| Some(format!("Move {}", m.pod));
    let moved = done.recovered.moved.iter().map(|m| PlannedEvent {
        action: action(m),
        ..PlannedEvent::normal(Happening::ZoneOutageRecovery, moved_note(m))
    });
    let failed = done.recovered.failed.iter().map(|(m, why)| PlannedEvent {
        action: action(m),
        ..PlannedEvent::warning(
            Happening::ZoneOutageRecoveryFailed,
            format!("cannot move pod {} out of the lost zone: {why}", m.pod),
        )
    });
    moved.chain(failed).collect()
}

/// One Event per zone the fast failover took out or put back this pass (pods named), one
/// per pod whose write failed, and one while silent zones are held: the recorder folds
/// repeats of the same zone into one series.
fn failover_events(intent: &Intent, done: &Done) -> Vec<PlannedEvent> {
    let mut by_zone: BTreeMap<(&str, bool, &str), Vec<String>> = BTreeMap::new();
    for w in &done.failed_over.written {
        by_zone
            .entry((w.zone.as_str(), w.available, w.reason))
            .or_default()
            .push(w.pod.clone());
    }
    let mut events: Vec<PlannedEvent> = by_zone
        .into_iter()
        .map(|((zone, available, reason), pods)| {
            zone_moved_event(intent, zone, available, reason, &pods)
        })
        .collect();
    events.extend(done.failed_over.failed.iter().map(|(w, why)| PlannedEvent {
        action: Some(format!("Pod {}", w.pod)),
        ..PlannedEvent::warning(
            Happening::ZoneFailoverFailed,
            format!(
                "cannot write the zone-available condition of pod {}: {why}",
                w.pod
            ),
        )
    }));
    events.extend(intent.failover.alive.iter().map(|a| PlannedEvent {
        action: Some(format!("Pod {}", a.pod)),
        ..PlannedEvent::warning(
            Happening::ZoneKubeletAlive,
            format!(
                "pod {} was taken out of its Services with zone {}, whose node Leases stopped, and its kubelet has set it Ready again: node {}'s kubelet is alive although its Lease is not renewed. The pod is left in its Services; find why the Lease is not renewed (kubectl -n kube-node-lease get lease {})",
                a.pod, a.zone, a.node, a.node
            ),
        )
    }));
    if let Some((zones, why)) = &intent.failover.held {
        let zones: Vec<String> = zones.iter().map(|z| z.describe(intent.now)).collect();
        events.push(PlannedEvent::warning(
            Happening::ZoneFailoverHeld,
            format!(
                "{}: left to Kubernetes' node lifecycle controller, since {why}",
                zones.join("; ")
            ),
        ));
    }
    events
}

/// The Event of one zone's pods taken out of their Services (`available` false) or put
/// back, and why.
fn zone_moved_event(
    intent: &Intent,
    zone: &str,
    available: bool,
    reason: &str,
    pods: &[String],
) -> PlannedEvent {
    let action = Some(format!("Zone {zone}"));
    if !available {
        let why = intent
            .failover
            .out
            .iter()
            .find(|z| z.zone == zone)
            .map_or_else(|| format!("zone {zone}"), |z| z.describe(intent.now));
        let note = format!(
            "{why} while other zones renew theirs: pods {} taken out of their Services (Ready=False, {}=False) before Kubernetes marks the nodes NotReady; they return when the Leases are renewed",
            list(pods),
            names::POD_CONDITION_ZONE_AVAILABLE
        );
        return PlannedEvent {
            action,
            ..PlannedEvent::warning(Happening::ZoneOutOfService, note)
        };
    }
    let why = if reason == names::POD_REASON_ZONE_RENEWING {
        format!("zone {zone}'s node Leases are renewed again")
    } else if intent.findings.fast_failover_off {
        format!(
            "the fast failover is off for this stack ({})",
            names::ANNOTATION_ZONE_FAST_FAILOVER
        )
    } else {
        "the stack no longer spreads over zones".to_string()
    };
    let note = format!(
        "{why}: pods {} marked {}=True, back in their Services once their kubelets report them Ready",
        list(pods),
        names::POD_CONDITION_ZONE_AVAILABLE
    );
    PlannedEvent {
        action,
        ..PlannedEvent::normal(Happening::ZoneBackInService, note)
    }
}

fn moved_note(m: &Move) -> String {
    match (&m.step, &m.zone) {
        (crate::intent::Step::MoveOut, Some(zone)) => format!(
            "zone {zone} unavailable for longer than spec.replication.zoneOutage.recoverAfter: deleted the claims {} and force-deleted pod {}; its StatefulSet recreates it in an available zone",
            m.claims.join(", "),
            m.pod
        ),
        _ => format!(
            "pod {} waited on claims that were deleted: deleted it, so its StatefulSet creates it with new claims in an available zone",
            m.pod
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{Findings, ZoneServiceWrite};
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::testing::{applied, done, intent, zoned_spec, ZONE};

    fn write(pod: &str, zone: &str, available: bool) -> ZoneServiceWrite {
        ZoneServiceWrite {
            pod: pod.into(),
            uid: format!("uid-{pod}"),
            zone: zone.into(),
            available,
            reason: if available {
                names::POD_REASON_ZONE_RENEWING
            } else {
                names::POD_REASON_ZONE_UNAVAILABLE
            },
            message: String::new(),
            fence: None,
        }
    }

    /// One Event per zone and direction, naming its pods; one per failed write; one
    /// while silent zones are held.
    #[test]
    fn the_fast_failover_is_told_per_zone() {
        let eff = effective(&zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let mut i = intent(eff, Findings::default());
        i.failover.held = Some((Vec::new(), "a reason".into()));
        i.failover.alive = vec![crate::intent::KubeletAlive {
            pod: "ingester-2".into(),
            node: "n2".into(),
            zone: "a".into(),
        }];
        let mut d = done(applied());
        d.failed_over.written = vec![
            write("ingester-0", "a", false),
            write("querier-0", "a", false),
            write("ingester-1", "b", true),
        ];
        d.failed_over.failed = vec![(write("distributor-0", "a", false), "forbidden".into())];
        let events = failover_events(&i, &d);
        let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "ZoneOutOfService",
                "ZoneBackInService",
                "ZoneFailoverFailed",
                "ZoneKubeletAlive",
                "ZoneFailoverHeld"
            ]
        );
        assert!(events[3].warning && events[3].note.contains("node n2's kubelet is alive"));
        assert!(events[0].warning && events[0].note.contains("ingester-0, querier-0"));
        assert!(!events[1].warning && events[1].note.contains("renewed again"));
        assert!(events[2].note.contains("distributor-0") && events[2].note.contains("forbidden"));
        assert!(events[4].note.contains("a reason"));
    }
}
