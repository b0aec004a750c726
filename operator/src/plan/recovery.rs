//! Recovery from a lost zone for the components whose state lives in object storage
//! (compactor, index gateway, ruler), opt-in through
//! `spec.replication.zoneOutage.recoverAfter`.
//!
//! A StatefulSet pod stranded in a lost zone cannot move by itself: its claims are bound
//! to volumes pinned to that zone, and the pod object stays until a kubelet confirms it
//! stopped. Moving it takes three steps, each decided from what the caches show now, so
//! a restart of the operator in the middle simply goes on:
//!
//! 1. delete the pod's claims (they stay, Terminating, while a scheduled pod uses them);
//! 2. force-delete the pod (no kubelet will ever confirm it);
//! 3. the StatefulSet recreates the pod, which cannot schedule on claims being deleted,
//!    so the claims go; a recreated pod still waiting for them is deleted once more, and
//!    the StatefulSet creates it with new claims, in an available zone.
//!
//! Ingesters are never moved: their WAL holds data not yet in object storage, and the
//! copies of their streams are in the other zones. Nothing here runs while the stack has
//! no unavailable zone, or for a stack without the opt-in; without the delete rights
//! (the optional zone-outage-recovery RBAC component) the condition lists the commands.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::checks::podzone::node_name;
use crate::checks::zones::{self, fenced, lost_since, node_lost, volume_zone, ZoneCheck};
use crate::intent::{Findings, Move, Recovery, Step};
use crate::model::api::LokiStack;
use crate::model::defaults::{Component, EffectiveStack};
use crate::model::duration::parse_duration;
use crate::model::pods::component_of;
use crate::observe::Snapshot;

/// The components whose pods may be moved out of a lost zone.
pub const MOVABLE: [Component; 3] = [
    Component::Compactor,
    Component::IndexGateway,
    Component::Ruler,
];

/// The recovery's grace period, when the stack opted in.
pub fn grace(stack: &LokiStack) -> Option<Duration> {
    let after = stack
        .spec
        .replication
        .as_ref()?
        .zone_outage
        .as_ref()?
        .recover_after
        .as_deref()?;
    parse_duration(after).ok()
}

/// The recovery of this reconcile: with the opt-in, the moves due now and those waiting
/// for the grace period; without it, the pods an admin may move (listed in the status).
pub fn plan(
    stack: &LokiStack,
    snapshot: &Snapshot,
    findings: &Findings,
    eff: &EffectiveStack,
) -> Recovery {
    let Some(grace) = grace(stack) else {
        // An admin decides: the status warns where the node must be known off first.
        let manual = candidates(snapshot, findings, eff, Duration::ZERO, snapshot.now)
            .into_iter()
            .filter(|m| m.step == Step::MoveOut)
            .collect();
        return Recovery {
            manual,
            ..Default::default()
        };
    };
    let (fence_first, movable): (Vec<Move>, Vec<Move>) =
        candidates(snapshot, findings, eff, grace, snapshot.now)
            .into_iter()
            .partition(|m| m.needs_fence);
    let (waiting, due) = movable.into_iter().partition(|m| m.due.is_some());
    Recovery {
        due,
        waiting,
        manual: Vec::new(),
        fence_first,
    }
}

/// The pods of movable components to look at while a zone is unavailable: those on a
/// node of it or waiting on claims whose volumes are pinned there ([`Step::MoveOut`],
/// due after the grace period), and the others waiting to be scheduled
/// ([`Step::Recreate`]). Pure: a function of the snapshot, the plan and the clock.
pub fn candidates(
    snapshot: &Snapshot,
    findings: &Findings,
    eff: &EffectiveStack,
    grace: Duration,
    now: Timestamp,
) -> Vec<Move> {
    let Some(z) = findings.zone.as_ref().filter(|z| !z.unavailable.is_empty()) else {
        return Vec::new();
    };
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    let mut out = Vec::new();
    for pod in &snapshot.pods {
        let Some(component) = movable(pod) else {
            continue;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let claims = claims_of(eff, component, &name);
        let lost = pod_zone(snapshot, z, pod, &claims)
            .and_then(|zone| z.unavailable.iter().find(|u| u.zone == zone));
        if !owned_by_its_statefulset(pod, component, &snapshot.name) {
            continue;
        }
        let (step, zone, due, needs_fence) = match lost {
            Some(lost) => {
                // A cordoned or draining zone is maintenance, never listed here: only a
                // pod whose own node is lost (or gone) moves, or, not scheduled, one whose
                // volumes are in the lost zone. A fenced node (out of service, or its Node
                // object deleted, after which Kubernetes deletes its pods itself) runs
                // nothing: the move is due at once. One that is only unreachable may
                // still run the pod behind a partition: the move waits the grace period,
                // counted from when the node was lost, never from the pod's age.
                let (since, fenced) = match node_name(pod).map(|n| snapshot.node(n)) {
                    Some(Some(node)) if node_lost(node) => (lost_since(node), fenced(node)),
                    Some(Some(_)) => continue,
                    Some(None) => (lost.since, true),
                    None => (lost.since, lost.fenced),
                };
                // Unreachable since an unknown time: the clock starts at every pass.
                let due = (!fenced)
                    .then(|| since.unwrap_or(now).checked_add(grace).ok())
                    .flatten()
                    .filter(|d| *d > now);
                // The only pod of its component, on a node that may still run it: a
                // replacement would run beside it (two compactors on one bucket), so it
                // waits for the node to be fenced, however long.
                let single = eff.component(component).is_some_and(|c| c.replicas <= 1);
                let needs_fence = single && !fenced && node_name(pod).is_some();
                let due = if needs_fence { None } else { due };
                (Step::MoveOut, Some(lost.zone.clone()), due, needs_fence)
            }
            None if node_name(pod).is_none() => (Step::Recreate, None, None, false),
            None => continue,
        };
        out.push(Move {
            pod: name,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            step,
            zone,
            claims,
            due,
            needs_fence,
        });
    }
    out
}

/// Only a pod its component's StatefulSet controls is ever moved: a pod someone else
/// created with the same labels is not the operator's to delete.
fn owned_by_its_statefulset(pod: &Pod, component: Component, stack: &str) -> bool {
    let workload = component.workload_name(stack);
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "StatefulSet" && o.name == workload)
}

fn movable(pod: &Pod) -> Option<Component> {
    component_of(pod).filter(|c| MOVABLE.contains(c))
}

/// `<volume>-<pod>`, as a StatefulSet names the claims of its pods.
fn claims_of(eff: &EffectiveStack, component: Component, pod: &str) -> Vec<String> {
    eff.component(component)
        .map(|c| {
            c.volumes
                .iter()
                .map(|v| format!("{}-{pod}", v.name))
                .collect()
        })
        .unwrap_or_default()
}

/// The zone a pod is held in: its node's, else (not scheduled) that of a bound volume of
/// one of its claims.
fn pod_zone(snapshot: &Snapshot, z: &ZoneCheck, pod: &Pod, claims: &[String]) -> Option<String> {
    if let Some(node) = node_name(pod) {
        let node = snapshot.node(node)?;
        return zones::zone_of(
            node.metadata.labels.as_ref(),
            z.keys.iter().map(String::as_str),
        )
        .ok();
    }
    snapshot.volumes.iter().find_map(|pv| {
        let claim = pv.spec.as_ref()?.claim_ref.as_ref()?.name.as_ref()?;
        claims.contains(claim).then(|| volume_zone(pv, &z.keys))?
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Node, PersistentVolume};
    use serde_json::json;

    use super::*;
    use crate::intent::Findings;
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::model::defaults::EffectiveStack;
    use crate::model::names;
    use crate::testing;

    /// What the candidates are decided from.
    struct Planned {
        eff: EffectiveStack,
        findings: Findings,
    }
    use crate::testing::{node, stack, zoned_spec, ZONE};

    fn down(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {ZONE: zone}},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .expect("node")
    }

    /// A pod of the StatefulSet its name gives (`s-compactor-0`: `s-compactor`).
    fn pod(name: &str, component: &str, node: Option<&str>) -> Pod {
        let set = name.rsplit_once('-').map_or(name, |(set, _)| set);
        let p = testing::pod(name)
            .uid(&format!("uid-{name}"))
            .created("2026-01-01T00:05:00Z")
            .label(names::LABEL_COMPONENT, component)
            .owner("StatefulSet", set);
        match node {
            Some(n) => p.on(n),
            None => p,
        }
        .build()
    }

    /// A node that is Ready but cordoned (`kubectl cordon`, a drain's first step).
    fn cordoned(name: &str, zone: &str) -> Node {
        let mut n = node(name, &[(ZONE, zone)]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        n
    }

    fn pinned(claim: &str, zone: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": format!("pv-{claim}")},
            "spec": {"claimRef": {"namespace": "ns", "name": claim},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": ZONE, "operator": "In", "values": [zone]}]}]}}},
        }))
        .expect("pv")
    }

    fn setup(pods: Vec<Pod>, volumes: Vec<PersistentVolume>) -> (Snapshot, Planned) {
        let nodes = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            down("c1", "c"),
        ];
        setup_with(nodes, pods, volumes)
    }

    fn setup_with(
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        volumes: Vec<PersistentVolume>,
    ) -> (Snapshot, Planned) {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let eff = effective(&s.spec);
        let zone = zones::check(&eff, &nodes, &volumes);
        let snapshot = Snapshot {
            pod_nodes: nodes
                .iter()
                .map(|n| {
                    (
                        n.metadata.name.clone().unwrap_or_default(),
                        Arc::new(n.clone()),
                    )
                })
                .collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            pods: pods.into_iter().map(Arc::new).collect(),
            volumes: volumes.into_iter().map(Arc::new).collect(),
            name: "s".into(),
            ..Default::default()
        };
        let plan = Planned {
            eff,
            findings: Findings {
                zone: Some(zone),
                ..Default::default()
            },
        };
        (snapshot, plan)
    }

    fn at(t: &str) -> Timestamp {
        t.parse().expect("time")
    }

    #[test]
    fn only_object_storage_components_in_the_lost_zone_move_after_the_grace() {
        let (snapshot, plan) = setup(
            vec![
                pod("s-compactor-0", "compactor", Some("c1")),
                pod("s-index-gateway-1", "index-gateway", Some("c1")),
                pod("s-index-gateway-0", "index-gateway", Some("a1")),
                pod("s-ingester-2", "ingester", Some("c1")),
                pod("s-querier-x", "querier", Some("c1")),
            ],
            vec![],
        );
        let grace = Duration::from_secs(600);
        let early = candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            grace,
            at("2026-01-01T00:09:00Z"),
        );
        let names: Vec<&str> = early.iter().map(|m| m.pod.as_str()).collect();
        assert_eq!(names, ["s-compactor-0", "s-index-gateway-1"]);
        assert!(early.iter().all(|m| m.step == Step::MoveOut));
        // The compactor is the only one: it waits for its node to be fenced, not for
        // the clock (see a_single_pod_moves_only_off_a_fenced_node).
        assert!(early[0].needs_fence);
        assert_eq!(early[1].due, Some(at("2026-01-01T00:10:00Z")));
        assert!(!early[1].needs_fence, "one of two index gateways");
        assert_eq!(early[0].zone.as_deref(), Some("c"));
        assert_eq!(early[0].claims, ["storage-s-compactor-0"]);
        let late = candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            grace,
            at("2026-01-01T00:10:00Z"),
        );
        assert!(late.iter().all(|m| m.due.is_none()));
        assert_eq!(
            late[0].commands("ns"),
            "kubectl -n ns delete pvc storage-s-compactor-0 --wait=false && kubectl -n ns delete pod s-compactor-0 --grace-period=0 --force"
        );
    }

    /// The only pod of a component (the compactor; an index gateway of one replica) is
    /// never moved off a node that is lost but not fenced, however long past the grace:
    /// the node may still run it behind a partition, and a replacement would run beside
    /// it (two compactors against one bucket). Once the node is fenced it moves at once.
    #[test]
    fn a_single_pod_moves_only_off_a_fenced_node() {
        let pods = || {
            vec![
                pod("s-compactor-0", "compactor", Some("c1")),
                pod("s-index-gateway-1", "index-gateway", Some("c1")),
            ]
        };
        let (mut snapshot, mut planned) = setup(pods(), vec![]);
        let mut spec = zoned_spec(LokiStackSize::Small, 3, &[ZONE]);
        spec.replication.as_mut().expect("zones").zone_outage =
            Some(crate::model::api::ZoneOutageSpec {
                recover_after: Some("10m".into()),
            });
        let opted_in = stack("s", spec.clone());
        snapshot.now = at("2030-01-01T00:00:00Z");
        let r = plan(&opted_in, &snapshot, &planned.findings, &planned.eff);
        let names = |ms: &[Move]| ms.iter().map(|m| m.pod.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&r.fence_first),
            ["s-compactor-0"],
            "years past the grace"
        );
        assert_eq!(
            names(&r.due),
            ["s-index-gateway-1"],
            "one of two moves on time"
        );
        // One index gateway is a single pod too.
        spec.template = Some(crate::model::api::LokiTemplateSpec {
            index_gateway: Some(crate::model::api::LokiComponentSpec {
                replicas: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        });
        let single = stack("s", spec);
        planned.eff = effective(&single.spec);
        let r = plan(&single, &snapshot, &planned.findings, &planned.eff);
        assert_eq!(
            names(&r.fence_first),
            ["s-compactor-0", "s-index-gateway-1"]
        );
        assert!(r.due.is_empty());
        // Fenced: both move at once.
        let mut fenced = down("c1", "c");
        fenced.spec = Some(
            serde_json::from_value(json!({"taints": [
            {"key": names::TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}]}))
            .expect("spec"),
        );
        let nodes = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            fenced,
        ];
        let (mut snapshot, mut planned) = setup_with(nodes, pods(), vec![]);
        planned.eff = effective(&single.spec);
        snapshot.now = at("2026-01-01T00:00:30Z");
        let r = plan(&single, &snapshot, &planned.findings, &planned.eff);
        assert!(r.fence_first.is_empty());
        assert_eq!(names(&r.due), ["s-compactor-0", "s-index-gateway-1"]);
    }

    #[test]
    fn a_waiting_pod_moves_out_if_its_volume_is_in_the_lost_zone_else_is_looked_at() {
        let (snapshot, plan) = setup(
            vec![
                pod("s-compactor-0", "compactor", None),
                pod("s-ruler-0", "ruler", None),
            ],
            vec![
                pinned("storage-s-compactor-0", "c"),
                pinned("storage-s-ruler-0", "a"),
            ],
        );
        let now = at("2026-01-01T01:00:00Z");
        let moves = candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            Duration::from_secs(60),
            now,
        );
        let steps: Vec<(&str, Step)> = moves.iter().map(|m| (m.pod.as_str(), m.step)).collect();
        assert_eq!(
            steps,
            [
                ("s-compactor-0", Step::MoveOut),
                ("s-ruler-0", Step::Recreate)
            ]
        );
        // The grace counts from when the zone's nodes were lost (00:00), not from the pod.
        assert_eq!(moves[0].due, None);
    }

    #[test]
    fn nothing_moves_while_every_zone_is_available() {
        let (mut snapshot, mut plan) = setup(vec![pod("s-compactor-0", "compactor", None)], vec![]);
        let nodes: Vec<Node> = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            node("c1", &[(ZONE, "c")]),
        ];
        plan.findings.zone = Some(zones::check(&plan.eff, &nodes, &[]));
        snapshot.nodes = nodes.into_iter().map(Arc::new).collect();
        assert!(candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            Duration::ZERO,
            at("2026-01-01T01:00:00Z")
        )
        .is_empty());
    }

    /// A cordoned zone is maintenance: its pods run and nothing of it is moved, however
    /// long the cordon lasts; and a pod on a cordoned node moves not even when the rest
    /// of its zone is down.
    #[test]
    fn a_cordon_never_moves_anything() {
        let pods = || {
            vec![
                pod("s-compactor-0", "compactor", Some("c1")),
                pod("s-index-gateway-0", "index-gateway", None),
            ]
        };
        let volumes = || vec![pinned("storage-s-index-gateway-0", "c")];
        let nodes = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            cordoned("c1", "c"),
        ];
        let (snapshot, plan) = setup_with(nodes, pods(), volumes());
        assert_eq!(
            plan.findings
                .zone
                .as_ref()
                .map(|z| (z.unavailable.len(), z.maintenance.len())),
            Some((0, 1))
        );
        let years_later = at("2036-01-01T00:00:00Z");
        assert_eq!(
            candidates(
                &snapshot,
                &plan.findings,
                &plan.eff,
                Duration::ZERO,
                years_later
            ),
            []
        );
        let nodes = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            cordoned("c1", "c"),
            down("c2", "c"),
        ];
        let (snapshot, plan) = setup_with(nodes, pods(), volumes());
        assert_eq!(
            candidates(
                &snapshot,
                &plan.findings,
                &plan.eff,
                Duration::ZERO,
                years_later
            ),
            []
        );
    }

    /// Only what the component's StatefulSet controls is moved.
    #[test]
    fn a_pod_its_statefulset_does_not_control_is_never_moved() {
        let mut stray = pod("s-compactor-0", "compactor", Some("c1"));
        stray.metadata.owner_references = None;
        let mut other = pod("s-compactor-1", "compactor", Some("c1"));
        if let Some(o) = other.metadata.owner_references.as_mut() {
            o[0].name = "someone-else".into();
        }
        let (snapshot, plan) = setup(vec![stray, other], vec![]);
        let late = at("2036-01-01T00:00:00Z");
        assert_eq!(
            candidates(&snapshot, &plan.findings, &plan.eff, Duration::ZERO, late),
            []
        );
    }

    /// Every node of the lost zone deleted: fenced (Kubernetes deleted their pods), so
    /// the move is due at once, whatever the grace.
    #[test]
    fn a_zone_whose_nodes_are_all_deleted_is_fenced_and_due_at_once() {
        let nodes = vec![node("a1", &[(ZONE, "a")]), node("b1", &[(ZONE, "b")])];
        let (snapshot, plan) = setup_with(
            nodes,
            vec![pod("s-compactor-0", "compactor", None)],
            vec![pinned("storage-s-compactor-0", "c")],
        );
        let now = at("2026-01-01T00:00:01Z");
        let moves = candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            Duration::from_secs(3600),
            now,
        );
        assert_eq!(moves.len(), 1);
        assert_eq!((moves[0].step, moves[0].due), (Step::MoveOut, None));
    }

    /// An out-of-service node is fenced: its pods move at once; an unreachable one only
    /// once the grace period has passed since it was lost.
    #[test]
    fn out_of_service_moves_at_once_unreachable_after_the_grace() {
        let mut fenced = down("c1", "c");
        fenced.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: names::TAINT_OUT_OF_SERVICE.into(),
                value: Some("nodeshutdown".into()),
                effect: "NoExecute".into(),
                time_added: None,
            }]),
            ..Default::default()
        });
        let nodes = vec![
            node("a1", &[(ZONE, "a")]),
            node("b1", &[(ZONE, "b")]),
            fenced,
            down("c2", "c"),
        ];
        let (snapshot, plan) = setup_with(
            nodes,
            vec![
                pod("s-compactor-0", "compactor", Some("c1")),
                pod("s-ruler-0", "ruler", Some("c2")),
            ],
            vec![],
        );
        let grace = Duration::from_secs(600);
        let moves = candidates(
            &snapshot,
            &plan.findings,
            &plan.eff,
            grace,
            at("2026-01-01T00:00:01Z"),
        );
        let due: Vec<(&str, Option<Timestamp>)> =
            moves.iter().map(|m| (m.pod.as_str(), m.due)).collect();
        assert_eq!(
            due,
            [
                ("s-compactor-0", None),
                ("s-ruler-0", Some(at("2026-01-01T00:10:00Z")))
            ]
        );
    }
}
