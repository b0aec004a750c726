//! Status: a pure function of what the reconcile found and what the caches hold.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{
    LokiStack, LokiStackComponentStatus, LokiStackStatus, PodStatusMap, ReplicationStatus,
};
use crate::controller::podzone::{decide, PodZone};
use crate::defaults::{Component, EffectiveStack};
use crate::names;
use crate::storage::StorageSecretError;
use crate::validate::InvalidSpec;
use crate::zones::{name_list, write_quorum, ZoneCheck, ZoneVerdict};

pub const READY: &str = "Ready";
pub const PENDING: &str = "Pending";
pub const FAILED: &str = "Failed";
pub const DEGRADED: &str = "Degraded";
pub const WARNING: &str = "Warning";
pub const CONDITION_TYPES: [&str; 5] = [READY, PENDING, FAILED, DEGRADED, WARNING];

/// What one reconcile found, step by step.
#[derive(Debug, Default)]
pub struct Findings {
    pub invalid: Option<InvalidSpec>,
    pub secret: Option<StorageSecretError>,
    pub zone: Option<ZoneCheck>,
    /// An apply that failed: what to show the user.
    pub apply_error: Option<String>,
    /// Whether this reconcile applied the current generation.
    pub applied: bool,
}

impl Findings {
    /// The Degraded reason and message, if the stack is held back.
    pub fn degraded(&self) -> Option<(&'static str, String)> {
        if let Some(e) = &self.invalid {
            return Some(("InvalidSpec", format!("{e}. Fix the LokiStack spec")));
        }
        if let Some(e) = &self.secret {
            return Some((e.reason(), e.to_string()));
        }
        if let Some(z) = self.zone.as_ref().filter(|z| z.verdict.is_degraded()) {
            return Some((z.verdict.reason(), z.message()));
        }
        if let Some(e) = &self.apply_error {
            return Some(("ApplyFailed", e.clone()));
        }
        None
    }
}

/// The phase a pod shows in `status.components` (REFERENCE.md).
pub fn pod_phase(pod: &Pod) -> &'static str {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") => FAILED,
        Some("Running") => {
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                READY
            } else {
                "Running"
            }
        }
        Some("Succeeded") => "Succeeded",
        _ => PENDING,
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
    for pod in pods {
        let zone_aware = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_ZONE_AWARE))
            .is_some();
        if !zone_aware {
            continue;
        }
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

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Computes the whole status. `now` is only used for conditions whose status changes:
/// an unchanged condition keeps its transition time, so an idle resync computes an
/// identical status and sends nothing.
pub fn compute(
    stack: &LokiStack,
    eff: &EffectiveStack,
    findings: &Findings,
    pods: &[&Pod],
    pod_zones: &PodZones,
    now: Timestamp,
) -> LokiStackStatus {
    let now = Time(now);
    let generation = stack.metadata.generation;
    let previous = stack.status.clone().unwrap_or_default();
    let by_component = components(pods);

    let degraded = findings.degraded();
    let count = |phase: &str| {
        by_component
            .values()
            .map(|m| m.get(phase).map_or(0, Vec::len))
            .sum::<usize>()
    };
    let failed = count(FAILED);
    let pending = count(PENDING) + count("Running");
    let all_ready = eff.components.iter().all(|c| {
        let ready = by_component
            .get(&c.component)
            .and_then(|m| m.get(READY))
            .map_or(0, Vec::len);
        ready >= usize::try_from(c.replicas).unwrap_or(0)
    });
    let current_applied =
        findings.applied || (previous.observed_generation == generation && degraded.is_none());

    let mut warnings: Vec<(&str, String)> = Vec::new();
    if let Some(z) = findings
        .zone
        .as_ref()
        .filter(|z| z.verdict == ZoneVerdict::NoZoneFailureTolerance)
    {
        warnings.push((z.verdict.reason(), z.message()));
    }
    if !pod_zones.without_zone.is_empty() {
        warnings.push((
            "PodZoneUnknown",
            format!(
                "pods wait for a zone because their node lacks a topology label: {}. Label the nodes; the pods are annotated as soon as they are",
                name_list(&pod_zones.without_zone)
            ),
        ));
    }
    if !pod_zones.drifted.is_empty() {
        warnings.push((
            "ZoneLabelChanged",
            format!(
                "node topology labels changed after these pods started; they keep the zone Loki read at start: {}. Restart the pods to move them to their node's new zone",
                name_list(&pod_zones.drifted)
            ),
        ));
    }

    let ready = degraded.is_none() && current_applied && all_ready && failed == 0 && pending == 0;
    let desired = [
        if ready {
            condition(
                READY,
                true,
                "ReadyComponents",
                "all components are ready".into(),
                generation,
                &now,
            )
        } else {
            condition(
                READY,
                false,
                "ComponentsNotReady",
                "some components are not ready, or the current spec is not applied".into(),
                generation,
                &now,
            )
        },
        if pending > 0 || (!all_ready && degraded.is_none()) {
            condition(
                PENDING,
                true,
                "PendingComponents",
                "some pods are pending or not ready yet".into(),
                generation,
                &now,
            )
        } else {
            condition(
                PENDING,
                false,
                "NoPendingComponents",
                "no pod is pending".into(),
                generation,
                &now,
            )
        },
        if failed > 0 {
            condition(
                FAILED,
                true,
                "FailedComponents",
                format!("{failed} pod(s) failed"),
                generation,
                &now,
            )
        } else {
            condition(
                FAILED,
                false,
                "NoFailedComponents",
                "no pod failed".into(),
                generation,
                &now,
            )
        },
        match &degraded {
            Some((reason, message)) => {
                condition(DEGRADED, true, reason, message.clone(), generation, &now)
            }
            None => condition(
                DEGRADED,
                false,
                "NoIssues",
                "the spec is valid and applied".into(),
                generation,
                &now,
            ),
        },
        match warnings.first() {
            Some((reason, _)) => condition(
                WARNING,
                true,
                reason,
                warnings
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
                generation,
                &now,
            ),
            None => condition(
                WARNING,
                false,
                "NoWarnings",
                "no warnings".into(),
                generation,
                &now,
            ),
        },
    ];
    let conditions = desired
        .into_iter()
        .map(|mut c| {
            if let Some(old) = previous.conditions.iter().find(|o| o.type_ == c.type_) {
                if old.status == c.status {
                    c.last_transition_time = old.last_transition_time.clone();
                }
            }
            c
        })
        .collect();

    let replication = Some(match &findings.zone {
        Some(z) => ReplicationStatus {
            factor: z.factor,
            zones: z.zones.iter().cloned().collect(),
            write_quorum: z.write_quorum,
            zone_failures_tolerated: Some(z.zone_failures_tolerated),
            ineligible_nodes: i32::try_from(z.ineligible.len()).unwrap_or(i32::MAX),
            pods_without_zone: pod_zones.without_zone.clone(),
        },
        None => ReplicationStatus {
            factor: eff.replication_factor,
            write_quorum: write_quorum(eff.replication_factor),
            pods_without_zone: pod_zones.without_zone.clone(),
            ..Default::default()
        },
    });

    LokiStackStatus {
        conditions,
        components: Some(component_status(&by_component)),
        replication,
        observed_generation: if findings.applied {
            generation
        } else {
            previous.observed_generation
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
    use crate::defaults::effective;
    use crate::testing::{node, stack, zoned_spec, ZONE};
    use crate::zones::check;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

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

    fn cond<'a>(s: &'a LokiStackStatus, t: &str) -> &'a Condition {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
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
        let findings = Findings {
            zone: Some(check(&eff, &nodes)),
            applied: true,
            ..Default::default()
        };
        let pods = all_ready_pods(&eff);
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = compute(
            &s,
            &eff,
            &findings,
            &refs,
            &PodZones::default(),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(cond(&st, READY).status, "True");
        assert_eq!(cond(&st, DEGRADED).status, "False");
        let w = cond(&st, WARNING);
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
        let findings = Findings {
            zone: Some(check(&eff, &nodes)),
            applied: false,
            ..Default::default()
        };
        let pods = all_ready_pods(&eff);
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = compute(
            &s,
            &eff,
            &findings,
            &refs,
            &PodZones::default(),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(st.observed_generation, Some(1));
        let d = cond(&st, DEGRADED);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "ZonesInsufficient")
        );
        assert!(d.message.contains("a, b"), "{}", d.message);
        assert_eq!(cond(&st, READY).status, "False");
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let s0 = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let eff = effective(&s0.spec);
        let findings = Findings {
            applied: true,
            ..Default::default()
        };
        let first = compute(
            &s0,
            &eff,
            &findings,
            &[],
            &PodZones::default(),
            Timestamp::UNIX_EPOCH,
        );
        let mut s1 = s0.clone();
        s1.status = Some(first.clone());
        let later = Timestamp::from_second(1_000_000).expect("ts");
        let second = compute(&s1, &eff, &findings, &[], &PodZones::default(), later);
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
        assert_eq!(f.degraded().map(|d| d.0), Some("InvalidSpec"));
    }
}
