//! Status, the last step of a reconcile: a pure function of the stack, its snapshot, the
//! plan and what the apply step did. It is written once per reconcile, and only when it
//! differs from what the stack already shows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{
    LokiStack, LokiStackComponentStatus, LokiStackStatus, PodStatusMap, ReplicationStatus,
};
use crate::conditions::{status_str, ConditionType, PodPhase, Reason};
use crate::controller::observe::Snapshot;
use crate::controller::plan::Plan;
use crate::controller::podzone::{decide, PodZone};
use crate::defaults::{Component, EffectiveStack};
use crate::names;
use crate::zones::{name_list, write_quorum, ZoneVerdict};

/// What the apply step did with the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The plan held the spec back; nothing was sent.
    HeldBack,
    /// Every child of the current generation is applied.
    Applied,
    /// The apply failed: what to show the user.
    Failed { reason: Reason, message: String },
}

/// The phase a pod shows in `status.components`: the pod's phase, with a running pod
/// whose Ready condition is True shown as Ready.
pub fn pod_phase(pod: &Pod) -> PodPhase {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") => PodPhase::Failed,
        Some("Running") => {
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                PodPhase::Ready
            } else {
                PodPhase::Running
            }
        }
        Some("Succeeded") => PodPhase::Succeeded,
        _ => PodPhase::Pending,
    }
}

fn component_of(pod: &Pod) -> Option<Component> {
    pod.metadata
        .labels
        .as_ref()?
        .get(names::LABEL_COMPONENT)
        .and_then(|c| Component::from_name(c))
}

/// Pod names by phase, per component.
pub fn components(pods: &[&Pod]) -> BTreeMap<Component, PodStatusMap> {
    let mut out: BTreeMap<Component, PodStatusMap> = BTreeMap::new();
    for pod in pods {
        let Some(c) = component_of(pod) else { continue };
        let name = pod.metadata.name.clone().unwrap_or_default();
        out.entry(c)
            .or_default()
            .entry(pod_phase(pod).to_string())
            .or_default()
            .push(name);
    }
    for phases in out.values_mut() {
        for names in phases.values_mut() {
            names.sort();
        }
    }
    out
}

fn component_status(map: &BTreeMap<Component, PodStatusMap>) -> LokiStackComponentStatus {
    let get = |c| map.get(&c).cloned();
    LokiStackComponentStatus {
        compactor: get(Component::Compactor),
        distributor: get(Component::Distributor),
        ingester: get(Component::Ingester),
        querier: get(Component::Querier),
        query_frontend: get(Component::QueryFrontend),
        index_gateway: get(Component::IndexGateway),
        ruler: get(Component::Ruler),
    }
}

/// Zone-aware pods that have no zone, and pods whose node now gives another zone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PodZones {
    pub without_zone: Vec<String>,
    pub drifted: Vec<String>,
}

pub fn pod_zones<'a>(pods: &[&Pod], node: impl Fn(&str) -> Option<&'a Node>) -> PodZones {
    let mut out = PodZones::default();
    for pod in pods
        .iter()
        .filter(|p| crate::controller::caches::is_zone_aware(p))
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node_obj = crate::controller::podzone::node_name(pod).and_then(&node);
        match decide(pod, node_obj) {
            PodZone::NodeLabel(e) => out.without_zone.push(format!("{name} ({e})")),
            PodZone::NoKeys => out.without_zone.push(format!(
                "{name} (no {} annotation)",
                names::ANNOTATION_ZONE_LABELS
            )),
            PodZone::Drift { annotated, node } => out.drifted.push(format!(
                "{name} (runs as {annotated}, node now gives {node})"
            )),
            _ => {}
        }
    }
    out.without_zone.sort();
    out.drifted.sort();
    out
}

/// Pod counts over every component, by what the conditions need.
#[derive(Clone, Copy)]
struct Counts {
    failed: usize,
    /// Pending, or running but not ready yet.
    pending: usize,
    /// Every component has at least its desired replicas Ready.
    all_ready: bool,
}

impl Counts {
    fn of(by_component: &BTreeMap<Component, PodStatusMap>, eff: &EffectiveStack) -> Counts {
        let count = |phase: PodPhase| {
            by_component
                .values()
                .map(|m| m.get(phase.as_str()).map_or(0, Vec::len))
                .sum::<usize>()
        };
        let all_ready = eff.components.iter().all(|c| {
            let ready = by_component
                .get(&c.component)
                .and_then(|m| m.get(PodPhase::Ready.as_str()))
                .map_or(0, Vec::len);
            ready >= usize::try_from(c.replicas).unwrap_or(0)
        });
        Counts {
            failed: count(PodPhase::Failed),
            pending: count(PodPhase::Pending) + count(PodPhase::Running),
            all_ready,
        }
    }
}

/// Builds conditions of one generation at one instant.
struct Stamp {
    generation: Option<i64>,
    now: Time,
}

impl Stamp {
    fn condition(
        &self,
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status_str(status).to_string(),
            reason: reason.to_string(),
            message: message.into(),
            observed_generation: self.generation,
            last_transition_time: self.now.clone(),
        }
    }
}

/// The Degraded reason and message: a finding that holds the spec back, else a failed
/// apply.
fn degraded(plan: &Plan, outcome: &Outcome) -> Option<(Reason, String)> {
    plan.findings.degraded().or(match outcome {
        Outcome::Failed { reason, message } => Some((*reason, message.clone())),
        _ => None,
    })
}

fn warnings(plan: &Plan, pod_zones: &PodZones) -> Vec<(Reason, String)> {
    let mut out = Vec::new();
    if let Some(z) = plan
        .findings
        .zone
        .as_ref()
        .filter(|z| z.verdict == ZoneVerdict::NoZoneFailureTolerance)
    {
        out.push((z.verdict.reason(), z.message()));
    }
    if !pod_zones.without_zone.is_empty() {
        out.push((
            Reason::PodZoneUnknown,
            format!(
                "pods wait for a zone because their node lacks a topology label: {}. Label the nodes; the pods are annotated as soon as they are",
                name_list(&pod_zones.without_zone)
            ),
        ));
    }
    if !pod_zones.drifted.is_empty() {
        out.push((
            Reason::ZoneLabelChanged,
            format!(
                "node topology labels changed after these pods started; they keep the zone Loki read at start: {}. Restart the pods to move them to their node's new zone",
                name_list(&pod_zones.drifted)
            ),
        ));
    }
    out
}

/// Computes the whole status. `now` is only used for conditions whose status changes:
/// an unchanged condition keeps its transition time, so an idle resync computes an
/// identical status and sends nothing.
pub fn compute(
    stack: &LokiStack,
    snapshot: &Snapshot,
    plan: &Plan,
    outcome: &Outcome,
    now: Timestamp,
) -> LokiStackStatus {
    let previous = stack.status.clone().unwrap_or_default();
    let generation = stack.metadata.generation;
    let pods = snapshot.pod_refs();
    let by_component = components(&pods);
    let pod_zones = pod_zones(&pods, |n| snapshot.node(n));
    let degraded = degraded(plan, outcome);
    let applied = *outcome == Outcome::Applied;
    // A spec applied by an earlier reconcile counts as long as nothing degrades it.
    let current_applied =
        applied || (previous.observed_generation == generation && degraded.is_none());
    let stamp = Stamp {
        generation,
        now: Time(now),
    };
    let desired = conditions(
        &stamp,
        &Counts::of(&by_component, &plan.eff),
        current_applied,
        degraded,
        &warnings(plan, &pod_zones),
    );
    LokiStackStatus {
        conditions: keep_transition_times(desired, &previous.conditions),
        components: Some(component_status(&by_component)),
        replication: Some(replication(plan, &pod_zones)),
        observed_generation: if applied {
            generation
        } else {
            previous.observed_generation
        },
    }
}

fn conditions(
    stamp: &Stamp,
    counts: &Counts,
    current_applied: bool,
    degraded: Option<(Reason, String)>,
    warnings: &[(Reason, String)],
) -> Vec<Condition> {
    let healthy = degraded.is_none();
    vec![
        ready(stamp, counts, current_applied && healthy),
        pending(stamp, counts, healthy),
        failed(stamp, counts),
        degraded_condition(stamp, degraded),
        warning(stamp, warnings),
    ]
}

fn ready(stamp: &Stamp, c: &Counts, applied_and_healthy: bool) -> Condition {
    if applied_and_healthy && c.all_ready && c.failed == 0 && c.pending == 0 {
        stamp.condition(
            ConditionType::Ready,
            true,
            Reason::ReadyComponents,
            "all components are ready",
        )
    } else {
        stamp.condition(
            ConditionType::Ready,
            false,
            Reason::ComponentsNotReady,
            "some components are not ready, or the current spec is not applied",
        )
    }
}

/// Pods still starting. A held-back stack may lack replicas on purpose, so missing
/// replicas alone count as pending only while nothing degrades the stack.
fn pending(stamp: &Stamp, c: &Counts, healthy: bool) -> Condition {
    if c.pending > 0 || (!c.all_ready && healthy) {
        stamp.condition(
            ConditionType::Pending,
            true,
            Reason::PendingComponents,
            "some pods are pending or not ready yet",
        )
    } else {
        stamp.condition(
            ConditionType::Pending,
            false,
            Reason::NoPendingComponents,
            "no pod is pending",
        )
    }
}

fn failed(stamp: &Stamp, c: &Counts) -> Condition {
    if c.failed > 0 {
        let message = format!("{} pod(s) failed", c.failed);
        stamp.condition(
            ConditionType::Failed,
            true,
            Reason::FailedComponents,
            message,
        )
    } else {
        stamp.condition(
            ConditionType::Failed,
            false,
            Reason::NoFailedComponents,
            "no pod failed",
        )
    }
}

fn degraded_condition(stamp: &Stamp, degraded: Option<(Reason, String)>) -> Condition {
    match degraded {
        Some((reason, message)) => stamp.condition(ConditionType::Degraded, true, reason, message),
        None => stamp.condition(
            ConditionType::Degraded,
            false,
            Reason::NoIssues,
            "the spec is valid and applied",
        ),
    }
}

/// All warnings in one condition: the first one's reason, every message.
fn warning(stamp: &Stamp, warnings: &[(Reason, String)]) -> Condition {
    match warnings.first() {
        Some((reason, _)) => {
            let all: Vec<&str> = warnings.iter().map(|(_, m)| m.as_str()).collect();
            stamp.condition(ConditionType::Warning, true, *reason, all.join("; "))
        }
        None => stamp.condition(
            ConditionType::Warning,
            false,
            Reason::NoWarnings,
            "no warnings",
        ),
    }
}

/// A condition whose status did not change keeps its transition time.
fn keep_transition_times(desired: Vec<Condition>, previous: &[Condition]) -> Vec<Condition> {
    desired
        .into_iter()
        .map(|mut c| {
            if let Some(old) = previous.iter().find(|o| o.type_ == c.type_) {
                if old.status == c.status {
                    c.last_transition_time = old.last_transition_time.clone();
                }
            }
            c
        })
        .collect()
}

fn replication(plan: &Plan, pod_zones: &PodZones) -> ReplicationStatus {
    match &plan.findings.zone {
        Some(z) => ReplicationStatus {
            factor: z.factor,
            zones: z.zones.iter().cloned().collect(),
            write_quorum: z.write_quorum,
            zone_failures_tolerated: Some(z.zone_failures_tolerated),
            ineligible_nodes: i32::try_from(z.ineligible.len()).unwrap_or(i32::MAX),
            pods_without_zone: pod_zones.without_zone.clone(),
        },
        None => ReplicationStatus {
            factor: plan.eff.replication_factor,
            write_quorum: write_quorum(plan.eff.replication_factor),
            pods_without_zone: pod_zones.without_zone.clone(),
            ..Default::default()
        },
    }
}

/// Conditions whose status or reason changed, and new True ones: each gets an Event. A
/// condition that first appears False (no failure yet, no warning yet) is no news.
pub fn changed_conditions<'a>(
    old: &LokiStackStatus,
    new: &'a LokiStackStatus,
) -> Vec<&'a Condition> {
    new.conditions
        .iter()
        .filter(
            |c| match old.conditions.iter().find(|o| o.type_ == c.type_) {
                Some(o) => o.status != c.status || o.reason != c.reason,
                None => c.status == "True",
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LokiStackSize;
    use crate::controller::plan::{Action, Findings};
    use crate::defaults::effective;
    use crate::storage::StorageSecretError;
    use crate::testing::{node, stack, zoned_spec, ZONE};
    use crate::validate::InvalidSpec;
    use crate::zones::{check, ZoneCheck};
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;
    use std::sync::Arc;

    fn plan_with(s: &LokiStack, zone: Option<ZoneCheck>) -> Plan {
        Plan {
            eff: effective(&s.spec),
            findings: Findings {
                zone,
                ..Default::default()
            },
            action: Action::HoldBack,
        }
    }

    fn snapshot_with(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods: pods.into_iter().map(Arc::new).collect(),
            ..Default::default()
        }
    }

    fn pod(name: &str, component: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    [
                        (names::LABEL_COMPONENT.to_string(), component.to_string()),
                        (names::LABEL_ZONE_AWARE.to_string(), "enabled".to_string()),
                    ]
                    .into(),
                ),
                annotations: Some(
                    [(names::ANNOTATION_ZONE_LABELS.to_string(), ZONE.to_string())].into(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn all_ready_pods(eff: &EffectiveStack) -> Vec<Pod> {
        eff.components
            .iter()
            .flat_map(|c| {
                (0..c.replicas).map(move |i| {
                    pod(
                        &format!("{}-{i}", c.component.name()),
                        c.component.name(),
                        "Running",
                        true,
                    )
                })
            })
            .collect()
    }

    fn cond(s: &LokiStackStatus, t: ConditionType) -> &Condition {
        s.conditions
            .iter()
            .find(|c| c.type_ == t.as_str())
            .expect("condition")
    }

    #[test]
    fn phases_per_component() {
        let pods = [
            pod("i-0", "ingester", "Running", true),
            pod("i-1", "ingester", "Running", false),
            pod("i-2", "ingester", "Pending", false),
            pod("d-0", "distributor", "Failed", false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let c = components(&refs);
        let ing = &c[&Component::Ingester];
        assert_eq!(ing["Ready"], vec!["i-0"]);
        assert_eq!(ing["Running"], vec!["i-1"]);
        assert_eq!(ing["Pending"], vec!["i-2"]);
        assert_eq!(c[&Component::Distributor]["Failed"], vec!["d-0"]);
    }

    #[test]
    fn ready_with_warning_when_rf2_over_three_zones() {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let eff = effective(&s.spec);
        let nodes = [
            node("a", &[(ZONE, "a")]),
            node("b", &[(ZONE, "b")]),
            node("c", &[(ZONE, "c")]),
        ];
        let plan = plan_with(&s, Some(check(&eff, &nodes)));
        let snap = snapshot_with(all_ready_pods(&eff));
        let st = compute(&s, &snap, &plan, &Outcome::Applied, Timestamp::UNIX_EPOCH);
        assert_eq!(cond(&st, ConditionType::Ready).status, "True");
        assert_eq!(cond(&st, ConditionType::Degraded).status, "False");
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(
            (w.status.as_str(), w.reason.as_str()),
            ("True", "NoZoneFailureTolerance")
        );
        assert!(
            w.message
                .contains("replication factor 3 across at least 3 zones"),
            "{}",
            w.message
        );
        let r = st.replication.expect("replication");
        assert_eq!(
            (
                r.factor,
                r.write_quorum,
                r.zone_failures_tolerated,
                r.zones.len()
            ),
            (2, 2, Some(0), 3)
        );
        assert_eq!(st.observed_generation, Some(1));
    }

    #[test]
    fn held_back_keeps_observed_generation_and_says_why() {
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        s.metadata.generation = Some(2);
        s.status = Some(LokiStackStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        let eff = effective(&s.spec);
        let nodes = [node("a", &[(ZONE, "a")]), node("b", &[(ZONE, "b")])];
        let plan = plan_with(&s, Some(check(&eff, &nodes)));
        let snap = snapshot_with(all_ready_pods(&eff));
        let st = compute(&s, &snap, &plan, &Outcome::HeldBack, Timestamp::UNIX_EPOCH);
        assert_eq!(st.observed_generation, Some(1));
        let d = cond(&st, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "ZonesInsufficient")
        );
        assert!(d.message.contains("a, b"), "{}", d.message);
        assert_eq!(cond(&st, ConditionType::Ready).status, "False");
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let s0 = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let plan = plan_with(&s0, None);
        let snap = Snapshot::default();
        let first = compute(&s0, &snap, &plan, &Outcome::Applied, Timestamp::UNIX_EPOCH);
        let mut s1 = s0.clone();
        s1.status = Some(first.clone());
        let later = Timestamp::from_second(1_000_000).expect("ts");
        let second = compute(&s1, &snap, &plan, &Outcome::Applied, later);
        assert_eq!(first, second, "an idle resync computes an identical status");
        assert!(changed_conditions(&first, &second).is_empty());
        // A new stack: only its True conditions are news.
        let news: Vec<&str> = changed_conditions(&LokiStackStatus::default(), &first)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        let true_now: Vec<&str> = first
            .conditions
            .iter()
            .filter(|c| c.status == "True")
            .map(|c| c.type_.as_str())
            .collect();
        assert!(!true_now.is_empty());
        assert_eq!(news, true_now);
    }

    #[test]
    fn pods_without_zone_and_drift_are_named() {
        let p1 = pod("ingester-0", "ingester", "Pending", false);
        let mut p2 = pod("ingester-1", "ingester", "Running", true);
        p2.metadata
            .annotations
            .as_mut()
            .expect("ann")
            .insert(names::ANNOTATION_ZONE.into(), "old".into());
        let n = node("n1", &[(ZONE, "")]);
        let z = pod_zones(&[&p1], |_| Some(&n));
        assert_eq!(
            z.without_zone,
            vec![format!("ingester-0 (label {ZONE} is empty)")]
        );
        let n2 = node("n1", &[(ZONE, "new")]);
        let z = pod_zones(&[&p1, &p2], |_| Some(&n2));
        assert_eq!(
            z.drifted,
            vec!["ingester-1 (runs as old, node now gives new)".to_string()]
        );
        assert!(z.without_zone.is_empty());
    }

    #[test]
    fn invalid_spec_outranks_zone_and_secret() {
        let f = Findings {
            invalid: Some(InvalidSpec(vec![crate::validate::FieldError {
                field: "spec.x".into(),
                message: "bad".into(),
            }])),
            secret: Some(StorageSecretError::Missing {
                name: "s".into(),
                namespace: "n".into(),
                type_: "s3",
                keys: "k".into(),
            }),
            ..Default::default()
        };
        assert_eq!(f.degraded().map(|d| d.0), Some(Reason::InvalidSpec));
    }

    #[test]
    fn failed_apply_is_degraded_and_keeps_observed_generation() {
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        s.metadata.generation = Some(2);
        s.status = Some(LokiStackStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        let plan = plan_with(&s, None);
        let outcome = Outcome::Failed {
            reason: Reason::ApplyFailed,
            message: "server-side apply of Service s-distributor-http failed".into(),
        };
        let st = compute(
            &s,
            &Snapshot::default(),
            &plan,
            &outcome,
            Timestamp::UNIX_EPOCH,
        );
        let d = cond(&st, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "ApplyFailed")
        );
        assert!(d.message.contains("s-distributor-http"), "{}", d.message);
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(cond(&st, ConditionType::Ready).status, "False");
    }
}
