//! One step of a zone-by-zone rollout, decided purely from the stack's pods and its
//! StatefulSets as the caches hold them.
//!
//! "Ready" is the pod's Ready condition, which for an ingester is the readiness probe on
//! Loki's `/ready`: it turns ready only once the ingester is ACTIVE in the ring (it has
//! joined, replayed its WAL and taken its tokens), so a Ready ingester is back in the
//! ring and holds its copies of the streams again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::checks::podzone::pod_zone;
use crate::checks::taint_evictions::{hazard, Hazard};
use crate::checks::zones::ZoneState;
use crate::intent::{Findings, Rollout, Victim};
use crate::model::api::{LokiStack, RolloutStatus, ZoneRolloutStatus};
use crate::model::conditions::{pod_phase, PodPhase};
use crate::model::defaults::Component;
use crate::model::names;
use crate::model::pods::component_of;
use crate::observe::Snapshot;

/// Where pods without a zone annotation are counted in the status: a label value cannot
/// contain parentheses, so no zone has this name.
pub const NO_ZONE: &str = "(no zone)";

/// What one rollout step is decided from.
#[derive(Debug, Default)]
pub struct Inputs<'a> {
    /// The stack's StatefulSets; those with `updateStrategy: OnDelete` are rolled here.
    pub statefulsets: Vec<&'a StatefulSet>,
    /// The stack's pods.
    pub pods: Vec<&'a Pod>,
    /// The nodes the pods are bound to, by name: a pod Kubernetes may still evict
    /// (`checks/taint_evictions.rs`) does not count as up.
    pub nodes: BTreeMap<&'a str, &'a Node>,
    /// The snapshot's clock.
    pub now: Timestamp,
    /// The zones the zone check finds disrupted (unavailable or in maintenance): the one
    /// zone that may be down, so no other zone is rolled meanwhile.
    pub disrupted: BTreeMap<String, ZoneState>,
    /// The zones the fast failover has out of their Services (`plan/failover.rs`): their
    /// pods are unready by its hand, not by a restart, and cost budget like a zone down;
    /// no other zone is rolled meanwhile, and theirs is not, even when forced.
    pub failed_over: BTreeSet<String>,
    /// `spec.replication.maxUnavailablePerZone`; `None` takes the whole zone at once.
    pub max_per_zone: Option<usize>,
    /// The stack is annotated to roll during an outage
    /// ([`names::ANNOTATION_ROLL_DURING_OUTAGE`]): an unavailable zone then holds back
    /// only its own pods, not the other zones'.
    pub forced: bool,
    /// The stack's status shows a rollout under way: it lasts until every pod of the
    /// rolled StatefulSets is updated and Ready, not only until the last deletion.
    pub rolling: bool,
}

/// One pod of a rolled StatefulSet.
struct Member<'a> {
    pod: &'a Pod,
    name: &'a str,
    set: &'a str,
    zone: Option<&'a str>,
    component: &'a str,
    outdated: bool,
    ready: bool,
    /// Why Kubernetes may still delete the pod, though it is Ready.
    hazard: Option<Hazard>,
    terminating: bool,
}

impl Member<'_> {
    /// Ready, and nothing says Kubernetes is about to take it: what a zone needs of
    /// each pod before the next zone may restart.
    fn up(&self) -> bool {
        self.ready && self.hazard.is_none()
    }

    /// Until when Kubernetes may still evict it, its node having returned lately.
    fn returned_until(&self) -> Option<Timestamp> {
        match self.hazard {
            Some(Hazard::Returned { until }) => Some(until),
            _ => None,
        }
    }

    fn zone_or_none(&self) -> &str {
        self.zone.unwrap_or(NO_ZONE)
    }

    fn victim(&self) -> Victim {
        let meta = &self.pod.metadata;
        Victim {
            name: self.name.to_string(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            zone: self.zone.map(str::to_string),
        }
    }
}

/// The StatefulSets the operator rolls: those whose controller does not.
fn rolled<'a>(sets: &[&'a StatefulSet]) -> BTreeMap<&'a str, &'a StatefulSet> {
    sets.iter()
        .filter(|s| {
            s.spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.type_.as_deref())
                == Some(names::UPDATE_STRATEGY_ON_DELETE)
        })
        .filter_map(|s| Some((s.metadata.name.as_deref()?, *s)))
        .collect()
}

fn members<'a>(input: &Inputs<'a>, sets: &BTreeMap<&'a str, &'a StatefulSet>) -> Vec<Member<'a>> {
    let mut out = Vec::new();
    for pod in &input.pods {
        let meta = &pod.metadata;
        let owner = meta.owner_references.iter().flatten().find(|o| {
            o.controller == Some(true)
                && o.kind == "StatefulSet"
                && sets.contains_key(o.name.as_str())
        });
        let (Some(owner), Some(name)) = (owner, meta.name.as_deref()) else {
            continue;
        };
        let Some((set_name, set)) = sets.get_key_value(owner.name.as_str()) else {
            continue;
        };
        let labels = meta.labels.as_ref();
        let revision = labels.and_then(|l| l.get(names::LABEL_REVISION));
        let update = set.status.as_ref().and_then(|s| s.update_revision.as_ref());
        let terminating = meta.deletion_timestamp.is_some();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let node = node.and_then(|n| input.nodes.get(n).copied());
        out.push(Member {
            pod,
            name,
            set: set_name,
            zone: pod_zone(pod),
            component: component_of(pod).map_or("pod", Component::name),
            outdated: update.is_some_and(|u| revision != Some(u)),
            ready: !terminating && pod_phase(pod) == PodPhase::Ready,
            hazard: hazard(pod, node, input.now),
            terminating,
        });
    }
    out.sort_by(|a, b| a.name.cmp(b.name));
    out
}

/// What of the StatefulSets holds every zone back: a spec their controller has not seen
/// yet (its update revision is stale), or pods not created yet (their zone is unknown).
fn set_waits(sets: &BTreeMap<&str, &StatefulSet>, members: &[Member]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, set) in sets {
        let observed = set.status.as_ref().and_then(|s| s.observed_generation);
        if set.metadata.generation.is_some() && observed < set.metadata.generation {
            out.push(format!(
                "StatefulSet {name}: its controller has not seen the latest spec yet"
            ));
        }
        let want = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let have = members.iter().filter(|m| m.set == *name).count();
        if (have as i32) < want {
            out.push(format!("StatefulSet {name}: {have} of {want} pods exist"));
        }
    }
    out
}

pub fn plan(input: &Inputs) -> Rollout {
    let sets = rolled(&input.statefulsets);
    if sets.is_empty() {
        return Rollout::default();
    }
    let members = members(input, &sets);
    let mut waits = set_waits(&sets, &members);
    let outdated = members.iter().any(|m| m.outdated);
    let settled = waits.is_empty() && members.iter().all(Member::up);
    if !outdated && (settled || !input.rolling) {
        return Rollout::default();
    }
    let (chosen, zone) = choose(&members, input, &mut waits);
    Rollout {
        delete: chosen.iter().map(|m| m.victim()).collect(),
        settle_until: settle_until(&members),
        status: Some(RolloutStatus {
            zone,
            zones: progress(&members),
            waiting_for: (!waits.is_empty()).then(|| waits.join("; ")),
        }),
    }
}

/// Pods updated over all, per zone in rollout order.
fn progress(members: &[Member]) -> Vec<ZoneRolloutStatus> {
    let mut by_zone: BTreeMap<&str, (i32, i32)> = BTreeMap::new();
    for m in members {
        let e = by_zone.entry(m.zone_or_none()).or_default();
        e.0 += i32::from(!m.outdated);
        e.1 += 1;
    }
    by_zone
        .into_iter()
        .map(|(zone, (updated, total))| ZoneRolloutStatus {
            zone: zone.to_string(),
            updated,
            total,
        })
        .collect()
}

/// When the first pod Kubernetes may still evict after its node returned stops being
/// one: the plan must be looked at again then, as no change announces it.
fn settle_until(members: &[Member]) -> Option<Timestamp> {
    members
        .iter()
        .filter(|m| m.ready)
        .filter_map(Member::returned_until)
        .min()
}

/// The pods of rolled StatefulSets that are not up ([`Member::up`]), by zone. Under a
/// forced rollout an unavailable zone's pods hold back nothing: they cannot be Ready
/// until it returns.
fn down_by_zone<'m, 'a>(
    members: &'m [Member<'a>],
    input: &Inputs,
) -> BTreeMap<&'a str, Vec<&'m Member<'a>>> {
    let mut out: BTreeMap<&str, Vec<&Member>> = BTreeMap::new();
    for m in members.iter().filter(|m| !m.up()) {
        let lost = m.zone.is_some_and(|z| input.disrupted.contains_key(z));
        let lost = lost || m.zone.is_some_and(|z| input.failed_over.contains(z));
        if let (Some(zone), false) = (m.zone, input.forced && lost) {
            out.entry(zone).or_default().push(m);
        }
    }
    out
}

/// "zone b: 1 ingester, 2 compactors not Ready", then the pods Kubernetes may still
/// evict, and until when.
fn describe_down(zone: &str, down: &[&Member]) -> String {
    let (not_ready, ready): (Vec<&Member>, Vec<&Member>) = down.iter().partition(|m| !m.ready);
    let (returned, evicting): (Vec<&Member>, Vec<&Member>) = ready
        .into_iter()
        .partition(|m| m.returned_until().is_some());
    let mut parts = Vec::new();
    if !not_ready.is_empty() {
        parts.push(format!("{} not Ready", count_components(&not_ready)));
    }
    if !evicting.is_empty() {
        parts.push(format!(
            "{} being evicted by Kubernetes",
            count_components(&evicting)
        ));
    }
    if let Some(until) = returned.iter().filter_map(|m| m.returned_until()).max() {
        parts.push(format!(
            "{} on nodes back from an outage, which Kubernetes may still evict until {until}",
            count_components(&returned)
        ));
    }
    format!("zone {zone}: {}", parts.join("; "))
}

/// "1 ingester, 2 compactors".
fn count_components(members: &[&Member]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in members {
        *counts.entry(m.component).or_default() += 1;
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|(c, n)| format!("{n} {c}{}", if n == 1 { "" } else { "s" }))
        .collect();
    parts.join(", ")
}

/// The pods to delete in this step and the zone in progress; what it waits for goes to
/// `waits`. One zone at a time: a zone with pods down is the only one that may lose more.
fn choose<'m, 'a>(
    members: &'m [Member<'a>],
    input: &Inputs,
    waits: &mut Vec<String>,
) -> (Vec<&'m Member<'a>>, Option<String>) {
    let down = down_by_zone(members, input);
    let single = (down.len() == 1)
        .then(|| down.keys().next().map(|z| z.to_string()))
        .flatten();
    waits.extend(zone_waits(input));
    let unzoned: Vec<&str> = members
        .iter()
        .filter(|m| m.zone.is_none() && !m.ready)
        .map(|m| m.name)
        .collect();
    if !unzoned.is_empty() {
        waits.push(format!("{} without a zone yet", unzoned.join(", ")));
    }
    if !waits.is_empty() {
        return (Vec::new(), single);
    }
    if down.len() > 1 {
        waits.extend(down.iter().map(|(z, d)| describe_down(z, d)));
        return (Vec::new(), None);
    }
    // A Ready pod without a zone started before the stack had zones: Loki does not know
    // its zone either, so such pods go one at a time, as an ordinal rolling update would.
    if let Some(m) = members.iter().find(|m| m.zone.is_none() && m.outdated) {
        if down.is_empty() && !m.terminating {
            waits.push(format!("{}: restarting, it has no zone", m.name));
            return (vec![m], None);
        }
    }
    let zone = down
        .keys()
        .next()
        .copied()
        .or_else(|| first_outdated_zone(members, input));
    let Some(zone) = zone else {
        waits.push("outdated pods remain only in unavailable zones or zones in maintenance".into());
        return (Vec::new(), None);
    };
    let chosen = in_zone(members, zone, input.max_per_zone);
    match (chosen.is_empty(), down.get(zone)) {
        (true, Some(d)) => waits.push(describe_down(zone, d)),
        (true, None) => {}
        (false, _) => waits.push(format!("zone {zone}: restarting {}", names_of(&chosen))),
    }
    (chosen, Some(zone.to_string()))
}

/// The zones that hold every rollout back, unless forced: disrupted ones, and those the
/// fast failover has out of their Services.
fn zone_waits(input: &Inputs) -> Vec<String> {
    if input.forced {
        return Vec::new();
    }
    let disrupted = input.disrupted.iter().map(|(z, state)| match state {
        ZoneState::Maintenance => format!("zone {z} in maintenance"),
        _ => format!("zone {z} unavailable"),
    });
    let failed_over = input
        .failed_over
        .iter()
        .filter(|z| !input.disrupted.contains_key(*z))
        .map(|z| format!("zone {z} out of its Services (fast failover)"));
    disrupted.chain(failed_over).collect()
}

/// The first zone, in name order, with an outdated pod that can be deleted.
fn first_outdated_zone<'a>(members: &[Member<'a>], input: &Inputs) -> Option<&'a str> {
    members
        .iter()
        .filter(|m| m.outdated && !m.terminating)
        .filter_map(|m| m.zone)
        .filter(|z| !input.disrupted.contains_key(*z) && !input.failed_over.contains(*z))
        .min()
}

/// The outdated pods of `zone` to delete: those not up cost nothing more; up ones as
/// long as the zone stays within `max` pods down.
fn in_zone<'m, 'a>(
    members: &'m [Member<'a>],
    zone: &str,
    max: Option<usize>,
) -> Vec<&'m Member<'a>> {
    let of_zone: Vec<&Member> = members.iter().filter(|m| m.zone == Some(zone)).collect();
    let mut down = of_zone.iter().filter(|m| !m.up()).count();
    let budget = max.unwrap_or(usize::MAX);
    let mut chosen = Vec::new();
    for m in of_zone.iter().filter(|m| m.outdated && !m.terminating) {
        if !m.up() {
            chosen.push(*m);
        } else if down < budget {
            chosen.push(*m);
            down += 1;
        }
    }
    chosen
}

fn names_of(members: &[&Member]) -> String {
    members
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// When to look at the rollout again though nothing changes: once the first pod it
/// waits for stops being one Kubernetes may still evict (a second later, so that it has).
pub fn wake_after(rollout: &Rollout, now: Timestamp) -> Option<std::time::Duration> {
    let left = rollout.settle_until?.duration_since(now);
    Some(
        std::time::Duration::try_from(left).unwrap_or_default() + std::time::Duration::from_secs(1),
    )
}

/// The stack asks to roll ring members during an outage.
pub fn forced(stack: &LokiStack) -> bool {
    stack
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ROLL_DURING_OUTAGE))
        .is_some_and(|v| v == "true")
}

/// What one step decides from, out of the snapshot and the findings.
pub fn inputs<'a>(
    stack: &'a LokiStack,
    snapshot: &'a Snapshot,
    findings: &Findings,
    failed_over: &BTreeSet<String>,
) -> Inputs<'a> {
    let replication = stack.spec.replication.as_ref();
    Inputs {
        statefulsets: snapshot.statefulsets.iter().map(AsRef::as_ref).collect(),
        pods: snapshot.pod_refs(),
        nodes: snapshot
            .pod_nodes
            .iter()
            .map(|(name, node)| (name.as_str(), node.as_ref()))
            .collect(),
        now: snapshot.now,
        disrupted: findings
            .zone
            .iter()
            .flat_map(|z| z.disrupted().map(|u| (u.zone.clone(), z.state(&u.zone))))
            .collect(),
        failed_over: failed_over.clone(),
        max_per_zone: replication
            .and_then(|r| r.max_unavailable_per_zone)
            .map(|m| usize::try_from(m.max(1)).unwrap_or(1)),
        forced: forced(stack),
        rolling: stack.status.as_ref().is_some_and(|s| s.rollout.is_some()),
    }
}

/// This reconcile's rollout step. While the spec is held back (`applying` false) it
/// deletes nothing, whatever it would roll: the stack is Degraded, and a failed check
/// never deletes a running pod; the status says the rollout waits.
pub fn step(
    stack: &LokiStack,
    snapshot: &Snapshot,
    findings: &Findings,
    failed_over: &BTreeSet<String>,
    applying: bool,
) -> Rollout {
    let mut rollout = plan(&inputs(stack, snapshot, findings, failed_over));
    if !applying {
        rollout.delete.clear();
        if let Some(s) = rollout.status.as_mut() {
            s.waiting_for = Some("the spec is held back (see the Degraded condition)".into());
        }
    }
    rollout
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use k8s_openapi::api::apps::v1::{
        StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
    };

    use k8s_openapi::jiff::SignedDuration;
    use kube::api::ObjectMeta;

    const NEW: &str = "ing-new";
    const OLD: &str = "ing-old";

    fn set(name: &str, replicas: i32, strategy: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some(strategy.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(2),
                update_revision: Some(NEW.into()),
                ..Default::default()
            }),
        }
    }

    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Ready,
        Starting,
        Terminating,
    }

    /// A pod of the StatefulSet `owner`, in `zone` ("" for none), at `revision`.
    fn pod(name: &str, owner: Option<&str>, zone: &str, revision: &str, state: State) -> Pod {
        let mut p = testing::pod(name)
            .uid(&format!("uid-{name}"))
            .resource_version("7")
            .label(names::LABEL_REVISION, revision)
            .component(Component::Ingester)
            .ready_is(state != State::Starting);
        if let Some(o) = owner {
            p = p.owner("StatefulSet", o);
        }
        if !zone.is_empty() {
            p = p.zone(zone);
        }
        if state == State::Terminating {
            p = p.deleting();
        }
        p.build()
    }

    /// Two ingesters per zone in zones a, b, c; `revisions` and `states` per pod, in the
    /// order a-0, a-1, b-0, b-1, c-0, c-1 (listed out of zone order on purpose).
    fn six(revisions: [&str; 6], states: [State; 6]) -> Vec<Pod> {
        let zones = ["a", "a", "b", "b", "c", "c"];
        let mut pods: Vec<Pod> = (0..6)
            .map(|i| {
                let name = format!("ing-{}-{}", zones[i], i % 2);
                pod(&name, Some("ing"), zones[i], revisions[i], states[i])
            })
            .collect();
        pods.reverse();
        pods
    }

    fn decide(sets: &[StatefulSet], pods: &[Pod], f: impl FnOnce(&mut Inputs)) -> Rollout {
        let mut input = Inputs {
            statefulsets: sets.iter().collect(),
            pods: pods.iter().collect(),
            ..Default::default()
        };
        f(&mut input);
        plan(&input)
    }

    fn deleted(d: &Rollout) -> Vec<&str> {
        d.delete.iter().map(|v| v.name.as_str()).collect()
    }

    fn waiting(d: &Rollout) -> String {
        d.status
            .as_ref()
            .and_then(|s| s.waiting_for.clone())
            .unwrap_or_default()
    }

    fn zone(d: &Rollout) -> Option<&str> {
        d.status.as_ref().and_then(|s| s.zone.as_deref())
    }

    use State::{Ready as R, Starting as S, Terminating as T};
    const ALL_READY: [State; 6] = [R, R, R, R, R, R];

    #[test]
    fn nothing_outdated_is_no_rollout_and_no_status() {
        let sets = [set("ing", 6, "OnDelete")];
        let d = decide(&sets, &six([NEW; 6], ALL_READY), |_| {});
        assert_eq!(d, Rollout::default());
        // A pod that is merely not Ready is no rollout either, unless one is under way.
        let pods = six([NEW; 6], [R, R, S, R, R, R]);
        assert_eq!(decide(&sets, &pods, |_| {}), Rollout::default());
        let d = decide(&sets, &pods, |i| i.rolling = true);
        assert!(d.delete.is_empty());
        assert_eq!(zone(&d), Some("b"));
        assert_eq!(waiting(&d), "zone b: 1 ingester not Ready");
    }

    /// The fast failover took zone a out (its pods not Ready by its hand): a pending
    /// rollout deletes none of them, however many are outdated, and rolls no other zone
    /// meanwhile; forced, it rolls the other zones within their budget and still leaves a.
    #[test]
    fn a_zone_the_fast_failover_took_out_is_no_free_budget() {
        let sets = [set("ing", 6, "OnDelete")];
        let pods = six([OLD; 6], [S, S, R, R, R, R]);
        let out = BTreeSet::from(["a".to_string()]);
        let d = decide(&sets, &pods, |i| {
            i.failed_over = out.clone();
            i.max_per_zone = Some(1);
        });
        assert!(d.delete.is_empty(), "{:?}", deleted(&d));
        assert!(
            waiting(&d).contains("zone a out of its Services (fast failover)"),
            "{}",
            waiting(&d)
        );
        // Without it, the old rule: a's unready pods cost nothing and go at once.
        let before = decide(&sets, &pods, |i| i.max_per_zone = Some(1));
        assert_eq!(deleted(&before), ["ing-a-0", "ing-a-1"]);
        let forced = decide(&sets, &pods, |i| {
            i.failed_over = out.clone();
            i.max_per_zone = Some(1);
            i.forced = true;
        });
        assert_eq!(deleted(&forced), ["ing-b-0"]);
    }

    #[test]
    fn rolling_update_statefulsets_are_left_to_their_controller() {
        let sets = [set("ing", 6, "RollingUpdate")];
        let d = decide(&sets, &six([OLD; 6], ALL_READY), |_| {});
        assert_eq!(d, Rollout::default());
    }

    #[test]
    fn the_first_zone_in_name_order_restarts_as_a_whole() {
        let sets = [set("ing", 6, "OnDelete")];
        let d = decide(&sets, &six([OLD; 6], ALL_READY), |_| {});
        assert_eq!(deleted(&d), ["ing-a-0", "ing-a-1"]);
        assert!(d.delete.iter().all(|v| v.zone.as_deref() == Some("a")));
        assert_eq!(d.delete[0].uid, "uid-ing-a-0");
        assert_eq!(d.delete[0].resource_version, "7");
        let st = d.status.expect("status");
        assert_eq!(st.zone.as_deref(), Some("a"));
        let progress: Vec<(&str, i32, i32)> = st
            .zones
            .iter()
            .map(|z| (z.zone.as_str(), z.updated, z.total))
            .collect();
        assert_eq!(progress, [("a", 0, 2), ("b", 0, 2), ("c", 0, 2)]);
    }

    #[test]
    fn the_next_zone_waits_until_the_previous_is_updated_and_ready() {
        let sets = [set("ing", 6, "OnDelete")];
        // Zone a recreated at the new revision, one pod not Ready yet: b waits.
        let pods = six([NEW, NEW, OLD, OLD, OLD, OLD], [R, S, R, R, R, R]);
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty(), "{:?}", deleted(&d));
        assert_eq!(zone(&d), Some("a"));
        assert_eq!(waiting(&d), "zone a: 1 ingester not Ready");
        // Still terminating: nothing either, and not deleted twice.
        let pods = six([OLD, OLD, OLD, OLD, OLD, OLD], [T, T, R, R, R, R]);
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "zone a: 2 ingesters not Ready");
        // Zone a Ready: b starts.
        let pods = six([NEW, NEW, OLD, OLD, OLD, OLD], ALL_READY);
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["ing-b-0", "ing-b-1"]);
        assert_eq!(zone(&d), Some("b"));
        let st = d.status.expect("status");
        assert_eq!((st.zones[0].updated, st.zones[1].updated), (2, 0));
    }

    #[test]
    fn a_missing_pod_holds_every_zone_back() {
        // Zone a's pods were deleted and are not recreated yet: they are not in the
        // cache at all, so only the StatefulSet's replicas say they are missing.
        let sets = [set("ing", 6, "OnDelete")];
        let mut pods = six([OLD; 6], ALL_READY);
        pods.retain(|p| {
            !p.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with("ing-a")
        });
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "StatefulSet ing: 4 of 6 pods exist");
    }

    #[test]
    fn a_spec_the_statefulset_controller_has_not_seen_holds_back() {
        let mut s = set("ing", 6, "OnDelete");
        s.metadata.generation = Some(3);
        let d = decide(&[s], &six([OLD; 6], ALL_READY), |_| {});
        assert!(d.delete.is_empty());
        assert!(
            waiting(&d).contains("has not seen the latest spec"),
            "{}",
            waiting(&d)
        );
    }

    #[test]
    fn never_while_another_zone_has_a_pod_down() {
        let sets = [set("ing", 6, "OnDelete")];
        // Zone c has an up-to-date pod not Ready: zone a, first in order, must wait.
        let pods = six([OLD, OLD, OLD, OLD, NEW, NEW], [R, R, R, R, R, S]);
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty(), "{:?}", deleted(&d));
        assert_eq!(zone(&d), Some("c"));
        assert_eq!(waiting(&d), "zone c: 1 ingester not Ready");
        // Two zones down: nothing, and both are named.
        let pods = six([OLD; 6], [S, R, R, R, R, S]);
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty());
        assert_eq!(zone(&d), None);
        assert_eq!(
            waiting(&d),
            "zone a: 1 ingester not Ready; zone c: 1 ingester not Ready"
        );
    }

    #[test]
    fn a_zone_already_down_is_the_one_rolled() {
        // Zone b has an outdated pod not Ready: rolling b adds no second zone, and its
        // other outdated pod goes too; zone a waits although it comes first.
        let sets = [set("ing", 6, "OnDelete")];
        let pods = six([OLD; 6], [R, R, S, R, R, R]);
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["ing-b-0", "ing-b-1"]);
        assert_eq!(zone(&d), Some("b"));
    }

    #[test]
    fn the_per_zone_maximum_caps_pods_down_in_the_zone() {
        let sets = [set("ing", 6, "OnDelete")];
        let d = decide(&sets, &six([OLD; 6], ALL_READY), |i| {
            i.max_per_zone = Some(1)
        });
        assert_eq!(deleted(&d), ["ing-a-0"]);
        // One down (recreated, starting): the next of the zone waits for it.
        let pods = six([NEW, OLD, OLD, OLD, OLD, OLD], [S, R, R, R, R, R]);
        let d = decide(&sets, &pods, |i| i.max_per_zone = Some(1));
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "zone a: 1 ingester not Ready");
        // Ready again: the second pod of zone a, still not zone b.
        let pods = six([NEW, OLD, OLD, OLD, OLD, OLD], ALL_READY);
        let d = decide(&sets, &pods, |i| i.max_per_zone = Some(1));
        assert_eq!(deleted(&d), ["ing-a-1"]);
        // A maximum above the zone's size takes the whole zone.
        let d = decide(&sets, &six([OLD; 6], ALL_READY), |i| {
            i.max_per_zone = Some(5)
        });
        assert_eq!(deleted(&d), ["ing-a-0", "ing-a-1"]);
    }

    #[test]
    fn an_unavailable_zone_pauses_the_rollout_unless_forced() {
        let sets = [set("ing", 6, "OnDelete")];
        // Zone c is dark: its pods are not Ready, and the nodes say why.
        let pods = six([NEW, NEW, OLD, OLD, OLD, OLD], [R, R, R, R, S, S]);
        let dark =
            |i: &mut Inputs| i.disrupted = [("c".to_string(), ZoneState::Unavailable)].into();
        let d = decide(&sets, &pods, dark);
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "zone c unavailable");
        // Even with every pod of c still shown Ready.
        let d = decide(&sets, &six([NEW, NEW, OLD, OLD, OLD, OLD], ALL_READY), dark);
        assert!(d.delete.is_empty());
        // Forced: zone b rolls; c's pods hold nothing back and are not touched.
        let d = decide(&sets, &pods, |i| {
            dark(i);
            i.forced = true;
        });
        assert_eq!(deleted(&d), ["ing-b-0", "ing-b-1"]);
        // Forced, with only the dark zone left outdated: it waits for the zone.
        let pods = six([NEW, NEW, NEW, NEW, OLD, OLD], [R, R, R, R, S, S]);
        let d = decide(&sets, &pods, |i| {
            dark(i);
            i.forced = true;
        });
        assert!(d.delete.is_empty());
        assert_eq!(
            waiting(&d),
            "outdated pods remain only in unavailable zones or zones in maintenance"
        );
    }

    /// A cordoned zone is the one zone that may be down: nothing else rolls, even with
    /// every pod of it still Ready.
    #[test]
    fn a_zone_in_maintenance_pauses_the_rollout_like_an_outage() {
        let sets = [set("ing", 6, "OnDelete")];
        let d = decide(
            &sets,
            &six([NEW, NEW, OLD, OLD, OLD, OLD], ALL_READY),
            |i| {
                i.disrupted = [("c".to_string(), ZoneState::Maintenance)].into();
            },
        );
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "zone c in maintenance");
    }

    /// Zone a is back from an outage with its pods updated and Ready on nodes Ready
    /// again since T0; the pods tolerate the loss taints for 10 s. Kubernetes may still
    /// evict them (a taint eviction of the pod of that name before them), so zone b
    /// waits until the toleration and the settle have passed, and the plan says when to
    /// look again.
    #[test]
    fn a_zone_back_from_an_outage_holds_the_next_until_no_eviction_can_fire() {
        use k8s_openapi::api::core::v1::Toleration;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t0 = Timestamp::from_second(1_800_000_000).expect("a time");
        let mut node = testing::node("back", &[]);
        if let Some(c) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].last_transition_time = Some(Time(t0));
        }
        let mut pods = six([NEW, NEW, OLD, OLD, OLD, OLD], ALL_READY);
        for p in pods.iter_mut().filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("ing-a"))
        }) {
            let spec = p.spec.get_or_insert_with(Default::default);
            spec.node_name = Some("back".into());
            spec.tolerations = Some(vec![Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(10),
                ..Default::default()
            }]);
        }
        let sets = [set("ing", 6, "OnDelete")];
        let at = |secs: i64| {
            plan(&Inputs {
                statefulsets: sets.iter().collect(),
                pods: pods.iter().collect(),
                nodes: [("back", &node)].into(),
                now: t0
                    .checked_add(SignedDuration::from_secs(secs))
                    .expect("a time"),
                ..Default::default()
            })
        };
        let d = at(5);
        assert!(d.delete.is_empty(), "{:?}", deleted(&d));
        let until = t0
            .checked_add(SignedDuration::from_secs(20))
            .expect("a time");
        assert_eq!(
            waiting(&d),
            format!("zone a: 2 ingesters on nodes back from an outage, which Kubernetes may still evict until {until}")
        );
        assert_eq!(d.settle_until, Some(until));
        let now = t0
            .checked_add(SignedDuration::from_secs(5))
            .expect("a time");
        assert_eq!(
            wake_after(&d, now),
            Some(std::time::Duration::from_secs(16))
        );
        // Past it, zone b restarts.
        let d = at(20);
        assert_eq!(deleted(&d), ["ing-b-0", "ing-b-1"]);
        assert_eq!(d.settle_until, None);
    }

    /// A pod Kubernetes announced it deletes (`DisruptionTarget`) is down already: its
    /// zone is the one in progress, and no other starts.
    #[test]
    fn a_pod_kubernetes_is_deleting_holds_the_next_zone() {
        let mut pods = six([NEW, NEW, OLD, OLD, OLD, OLD], ALL_READY);
        let doomed = testing::pod("x")
            .condition_since(
                names::POD_CONDITION_DISRUPTION_TARGET,
                "True",
                "2027-01-15T08:00:00Z",
            )
            .build();
        let condition = doomed
            .status
            .and_then(|s| s.conditions)
            .expect("a condition");
        if let Some(p) = pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some("ing-a-1"))
        {
            let status = p.status.get_or_insert_with(Default::default);
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .extend(condition);
        }
        let d = decide(&[set("ing", 6, "OnDelete")], &pods, |_| {});
        assert!(d.delete.is_empty(), "{:?}", deleted(&d));
        assert_eq!(
            waiting(&d),
            "zone a: 1 ingester being evicted by Kubernetes"
        );
    }

    #[test]
    fn a_pod_without_a_zone_yet_blocks() {
        let sets = [set("ing", 7, "OnDelete")];
        let mut pods = six([OLD; 6], ALL_READY);
        pods.push(pod("ing-new-6", Some("ing"), "", NEW, S));
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "ing-new-6 without a zone yet");
    }

    #[test]
    fn pods_from_before_the_stack_had_zones_go_one_at_a_time() {
        let sets = [set("ing", 3, "OnDelete")];
        let pods: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("ing-{i}"), Some("ing"), "", OLD, R))
            .collect();
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["ing-0"]);
        assert_eq!(zone(&d), None);
        let st = d.status.expect("status");
        assert_eq!(st.zones[0].zone, NO_ZONE);
    }

    #[test]
    fn only_pods_the_statefulset_owns_are_deleted() {
        let sets = [set("ing", 2, "OnDelete")];
        let pods = vec![
            pod("ing-a-0", Some("ing"), "a", OLD, R),
            pod("ing-a-1", Some("ing"), "a", OLD, R),
            // Same labels, no owner: never touched, and not counted.
            pod("stray-a", None, "a", OLD, R),
            // Owned by a StatefulSet the operator does not roll.
            pod("other-a-0", Some("other"), "a", OLD, R),
        ];
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["ing-a-0", "ing-a-1"]);
        assert_eq!(d.status.expect("status").zones[0].total, 2);
    }

    #[test]
    fn every_rolled_statefulset_of_a_zone_goes_in_the_same_step() {
        let sets = [set("ing", 2, "OnDelete"), set("cmp", 1, "OnDelete")];
        let mut cmp = pod("cmp-0", Some("cmp"), "a", OLD, R);
        cmp.metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(names::LABEL_COMPONENT.into(), "compactor".into());
        let pods = vec![
            pod("ing-0", Some("ing"), "b", OLD, R),
            pod("ing-1", Some("ing"), "a", OLD, S),
            cmp,
        ];
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["cmp-0", "ing-1"]);
        let mut pods = pods;
        pods[2] = pod("cmp-0", Some("cmp"), "a", NEW, S);
        pods[2]
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(names::LABEL_COMPONENT.into(), "compactor".into());
        let d = decide(&sets, &pods, |_| {});
        assert_eq!(deleted(&d), ["ing-1"]);
        assert_eq!(waiting(&d), "zone a: restarting ing-1");
        // Once nothing is left to delete, the wait names each component that is down.
        pods[1] = pod("ing-1", Some("ing"), "a", NEW, S);
        let d = decide(&sets, &pods, |_| {});
        assert!(d.delete.is_empty());
        assert_eq!(waiting(&d), "zone a: 1 compactor, 1 ingester not Ready");
    }
}
