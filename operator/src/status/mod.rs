//! Status, the last step of a reconcile: a pure function of the stack, its snapshot, the
//! Intent the plan decided and what carrying it out came to (`Done`). `report.rs` adds
//! the Events; `act::report::publish` writes the status once per reconcile, and only when
//! it differs from what the stack already shows.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::checks::podzone::{decide, PodZone};
use crate::checks::zones::{
    self, name_list, write_quorum, zone_failures_tolerated, DownZone, ZoneCheck, ZoneState,
    ZoneVerdict,
};
use crate::intent::{Action, Applied, Done, Intent, Move, Recovered, Recovery};
use crate::model::api::{
    LokiStack, LokiStackComponentStatus, LokiStackStatus, PodStatusMap, ReplicationStatus,
    ZoneStatus,
};
use crate::model::conditions::{pod_phase, status_str, ConditionType, PodPhase, Reason};
use crate::model::defaults::{self, Component, EffectiveStack};
use crate::model::go_compat;
use crate::model::names;
use crate::model::pods::{component_of, condition, is_zone_aware};
use crate::model::text::shorten;
use crate::observe::Snapshot;

pub mod report;
pub mod rules;

/// Pod names by phase, per component; a pod on a lost node is `Unknown`, whatever its
/// last reported phase.
pub fn components(pods: &[&Pod], lost: impl Fn(&Pod) -> bool) -> BTreeMap<Component, PodStatusMap> {
    let mut out: BTreeMap<Component, PodStatusMap> = BTreeMap::new();
    for pod in pods {
        let Some(c) = component_of(pod) else { continue };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let phase = if lost(pod) {
            PodPhase::Unknown
        } else {
            pod_phase(pod)
        };
        out.entry(c)
            .or_default()
            .entry(phase.to_string())
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
    for pod in pods.iter().filter(|p| is_zone_aware(p)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node_obj = crate::checks::podzone::node_name(pod).and_then(&node);
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
    /// Every component has its desired replicas Ready, less its pods on lost nodes or its
    /// share in unavailable zones.
    all_ready: bool,
    /// A node or zone is lost: replacements that cannot start are expected, not a fault;
    /// the write quorum decides, through Degraded.
    outage: bool,
}

impl Counts {
    /// `outage`: (unavailable zones, known zones). During an outage each component is
    /// expected to miss the replicas it spread into the unavailable zones.
    fn of(
        by_component: &BTreeMap<Component, PodStatusMap>,
        eff: &EffectiveStack,
        outage: Option<(usize, usize)>,
    ) -> Counts {
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
            let unknown = by_component
                .get(&c.component)
                .and_then(|m| m.get(PodPhase::Unknown.as_str()))
                .map_or(0, Vec::len);
            let replicas = usize::try_from(c.replicas).unwrap_or(0);
            let expected_lost =
                outage.map_or(0, |(down, known)| (replicas * down).div_ceil(known.max(1)));
            // A zone's nodes fail one by one: a pod on a lost node is expected missing
            // before its whole zone counts as unavailable.
            ready + unknown.max(expected_lost) >= replicas
        });
        Counts {
            failed: count(PodPhase::Failed),
            pending: count(PodPhase::Pending) + count(PodPhase::Running),
            all_ready,
            outage: outage.is_some() || count(PodPhase::Unknown) > 0,
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

/// The Degraded reason and message: a finding that holds the spec back, else writes
/// without quorum, else a failed apply.
fn degraded(intent: &Intent, applied: &Applied, down: &[&str]) -> Option<(Reason, String)> {
    intent
        .findings
        .hold_back()
        .or_else(|| quorum_lost(intent, down))
        .or(match applied {
            Applied::Failed { reason, message } => Some((*reason, message.clone())),
            _ => None,
        })
}

/// The zones that hold no serving copy of the stack's streams now: the unavailable
/// ones, and those in maintenance whose ingesters are not all Ready (drained).
fn not_serving<'a>(z: &'a ZoneCheck, per_zone: &[ZoneStatus]) -> Vec<&'a str> {
    let drained = |zone: &str| {
        per_zone
            .iter()
            .find(|s| s.zone == zone)
            .is_none_or(|s| s.ingesters == 0 || s.ingesters_ready < s.ingesters)
    };
    z.unavailable
        .iter()
        .map(|u| u.zone.as_str())
        .chain(
            z.maintenance
                .iter()
                .map(|u| u.zone.as_str())
                .filter(|zone| drained(zone)),
        )
        .collect()
}

/// `down`: the zones [`not_serving`] now.
fn quorum_lost(intent: &Intent, down: &[&str]) -> Option<(Reason, String)> {
    let z = intent.findings.zone.as_ref()?;
    if z.write_quorum_met_without(down.len()) {
        return None;
    }
    let left = z.factor - z.factor.min(i32::try_from(down.len()).unwrap_or(i32::MAX));
    Some((
        Reason::WriteQuorumLost,
        format!(
            "zones {} are unavailable or drained: with replication factor {} and write quorum {}, some streams can write only {left} copies, so their pushes fail until a zone returns. Bring the zones' nodes back; do not change the replication factor or restart ingesters now",
            name_list(down),
            z.factor,
            z.write_quorum
        ),
    ))
}

/// What the zone-outage recovery did, waits for, or leaves to an admin.
fn recovery_note(r: &Recovery, done: &Recovered, snapshot: &Snapshot) -> String {
    let namespace = snapshot.namespace.as_str();
    let mut out = String::new();
    let pods =
        |moves: &[Move]| name_list(&moves.iter().map(|m| m.pod.as_str()).collect::<Vec<_>>());
    if !done.moved.is_empty() {
        out += &format!(" Moving out of the lost zone: {}.", pods(&done.moved));
    }
    if let Some(first) = r.waiting.iter().filter_map(|m| m.due).min() {
        out += &format!(
            " {} will be moved to an available zone at {first} (spec.replication.zoneOutage.recoverAfter).",
            pods(&r.waiting)
        );
    }
    for (m, why) in &done.failed {
        out += &format!(
            " {} could not be moved: {why}: {}.",
            m.pod,
            m.commands(namespace)
        );
    }
    let node_of = |m: &Move| {
        snapshot
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(m.pod.as_str()))
            .and_then(|p| crate::checks::podzone::node_name(p))
            .unwrap_or("its node")
            .to_string()
    };
    for m in &r.fence_first {
        let node = node_of(m);
        out += &format!(
            " {pod} is the only pod of its component and {node} is lost but not known to have stopped: a replacement could run beside it (two against one bucket), so it is not moved. Once {node} is shut down, run `kubectl taint node {node} {taint}=nodeshutdown:NoExecute` (or delete the Node object) and it is moved at once.",
            pod = m.pod,
            taint = names::TAINT_OUT_OF_SERVICE,
        );
    }
    for m in r.manual.iter().filter(|m| m.needs_fence) {
        out += &format!(
            " First make sure {node} is shut down: {pod} is the only pod of its component, and a replacement would run beside it.",
            node = node_of(m),
            pod = m.pod,
        );
    }
    if !r.manual.is_empty() {
        let commands: Vec<String> = r.manual.iter().map(|m| m.commands(namespace)).collect();
        out += &format!(
            " {} hold no data of their own (it is in object storage) and can be moved to an available zone: {} (or set spec.replication.zoneOutage.recoverAfter to let the operator do it).",
            pods(&r.manual),
            commands.join("; ")
        );
    }
    out
}

/// The stack's pods on the nodes of an unavailable zone.
fn stranded(snapshot: &Snapshot, keys: &[String], zone: &str) -> Vec<String> {
    let mut out: Vec<String> = snapshot
        .pods
        .iter()
        .filter(|p| {
            crate::checks::podzone::node_name(p)
                .and_then(|n| snapshot.node(n))
                .and_then(|n| {
                    zones::zone_of(n.metadata.labels.as_ref(), keys.iter().map(String::as_str)).ok()
                })
                .is_some_and(|z| z == zone)
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    out.sort();
    out
}

/// One unavailable zone: its nodes and why each is down, since when, the stack's pods
/// there and the claims pinned there.
/// A down zone's nodes, each with why it takes no pods: "n1 (cordoned)".
fn down_nodes(u: &DownZone) -> Vec<String> {
    u.nodes
        .iter()
        .map(|(n, why)| format!("{n} ({why})"))
        .collect()
}

fn unavailable_zone_line(u: &DownZone, pods: &[String]) -> String {
    let nodes = down_nodes(u);
    let since = u.since.map_or(String::new(), |t| format!(" since {t}"));
    let pods = if pods.is_empty() {
        "none of the stack's pods".to_string()
    } else {
        format!("the stack's pods there: {}", name_list(pods))
    };
    let nodes = if nodes.is_empty() {
        "no node is left".to_string()
    } else {
        format!("nodes {}", name_list(&nodes))
    };
    let claims = if u.claims.is_empty() {
        String::new()
    } else {
        format!("; volumes pinned there: {}", name_list(&u.claims))
    };
    format!(
        "zone {} is unavailable{since}: {nodes}; {pods}{claims}",
        u.zone
    )
}

fn zone_unavailable(
    intent: &Intent,
    snapshot: &Snapshot,
    recovery: (&Recovery, &Recovered),
    down: &[&str],
) -> Option<(Reason, String)> {
    let z = intent.findings.zone.as_ref()?;
    if z.unavailable.is_empty() {
        return None;
    }
    let zones: Vec<String> = z
        .unavailable
        .iter()
        .map(|u| unavailable_zone_line(u, &stranded(snapshot, &z.keys, &u.zone)))
        .collect();
    let quorum = if z.write_quorum_met_without(down.len()) {
        "Writes keep their quorum in the available zones. "
    } else {
        ""
    };
    Some((
        Reason::ZoneUnavailable,
        format!(
            "{}. {quorum}Do not lower the replication factor or restart ingesters in the available zones while it lasts; see docs/zone-failure-runbook.md.{}{}",
            zones.join("; "),
            held_note(intent),
            recovery_note(recovery.0, recovery.1, snapshot)
        ),
    ))
}

/// The ring members whose new spec waits while a zone is disrupted.
fn held_note(intent: &Intent) -> String {
    if intent.held.is_empty() {
        return String::new();
    }
    format!(
        " {} are not rolled until every zone is back (annotate the LokiStack {}=true to roll them now).",
        name_list(&intent.held),
        names::ANNOTATION_ROLL_DURING_OUTAGE
    )
}

/// Zones cordoned or draining: planned work, not an outage. Their ingesters serve until
/// drained; meanwhile no other zone is disrupted on the operator's account.
fn zone_maintenance(intent: &Intent, per_zone: &[ZoneStatus]) -> Option<(Reason, String)> {
    let z = intent.findings.zone.as_ref()?;
    if z.maintenance.is_empty() {
        return None;
    }
    let zones: Vec<String> = z
        .maintenance
        .iter()
        .map(|m| {
            let nodes = down_nodes(m);
            let ingesters = per_zone
                .iter()
                .find(|s| s.zone == m.zone)
                .map_or(String::new(), |s| {
                    format!(
                        ", {} of its {} ingesters Ready",
                        s.ingesters_ready, s.ingesters
                    )
                });
            format!(
                "zone {} is in maintenance: nodes {}{ingesters}",
                m.zone,
                name_list(&nodes)
            )
        })
        .collect();
    // With an outage as well, the outage's message carries the held StatefulSets.
    let held = if z.unavailable.is_empty() {
        held_note(intent)
    } else {
        String::new()
    };
    Some((
        Reason::ZoneMaintenance,
        format!(
            "{}. Its pods keep serving until drained; ingester rollouts and evictions in the other zones wait until it is uncordoned and its ingesters are Ready again.{held}",
            zones.join("; "),
        ),
    ))
}

/// Every warning, the most pressing first: its reason becomes the condition's.
fn warnings(
    intent: &Intent,
    snapshot: &Snapshot,
    recovery: (&Recovery, &Recovered),
    pod_zones: &PodZones,
    per_zone: &[ZoneStatus],
    down: &[&str],
) -> Vec<(Reason, String)> {
    let mut out: Vec<(Reason, String)> = zone_unavailable(intent, snapshot, recovery, down)
        .into_iter()
        .chain(zone_maintenance(intent, per_zone))
        .collect();
    if let Some(f) = intent
        .findings
        .storage_class
        .as_ref()
        .filter(|f| !f.holds_back())
    {
        out.push((f.reason(), f.to_string()));
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
    out.extend(evictions_off(intent));
    out.extend(rules_warning(intent));
    out.extend(migration_warnings(intent));
    if let Some(a) = &intent.findings.annotation {
        out.push((Reason::InvalidAnnotation, format!("{a}. Fix or remove it")));
    }
    let long = &intent.findings.gossip_zones_too_long;
    if !long.is_empty() {
        out.push((
            Reason::ZoneGossipRoutingOff,
            format!(
                "Loki's zone-aware gossip is off: its zone names are at most {} bytes, and {} {} longer, so gossip crosses zones freely (replication is unchanged). Annotate the stack {}=false to say so and clear this Warning",
                names::MAX_GOSSIP_ZONE_BYTES,
                name_list(long),
                if long.len() == 1 { "is" } else { "are" },
                names::ANNOTATION_ZONE_AWARE_GOSSIP
            ),
        ));
    }
    // Advice about the layout, not about something happening now: last.
    out.extend(defaults::advisories(&intent.eff));
    if let Some(z) = intent
        .findings
        .zone
        .as_ref()
        .filter(|z| z.verdict == ZoneVerdict::NoZoneFailureTolerance)
    {
        out.push((z.verdict.reason(), z.message()));
    }
    out
}

/// Zone-aware evictions switched off stay a Warning until switched back on.
fn evictions_off(intent: &Intent) -> Option<(Reason, String)> {
    (intent.findings.zone_evictions_off && intent.eff.zone_aware()).then(|| {
        (
            Reason::ZoneAwareEvictionsOff,
            format!(
                "{}=false: the zone-disruption webhook lets every ingester of this stack be evicted; only its PodDisruptionBudget limits a drain ({} ingester(s) at once, from any zones), so a drain may take two copies of a stream and stop its writes. Remove the annotation once the drain is done",
                names::ANNOTATION_ZONE_AWARE_EVICTIONS,
                intent.eff.ingester_disruptions
            ),
        )
    })
}

/// Of the rules a stack picks but does not load, how many its Warning names, and how
/// long each one's note may be there.
const MAX_RULES_NAMED: usize = 10;
const MAX_RULE_NOTE: usize = 600;

/// Rules the stack picks that are not loaded, and what keeps rules from being picked.
fn rules_warning(intent: &Intent) -> Option<(Reason, String)> {
    let r = &intent.findings.rules;
    let mut parts = Vec::new();
    if !r.not_loaded.is_empty() {
        // However many rules a namespace's editors leave wrong, the message stays far
        // below what a condition may hold (32 KiB): each rule's own condition has the rest.
        let named: Vec<String> = r
            .not_loaded
            .iter()
            .take(MAX_RULES_NAMED)
            .map(|n| shorten(n.clone(), MAX_RULE_NOTE))
            .collect();
        let more = match r.not_loaded.len().saturating_sub(MAX_RULES_NAMED) {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        parts.push(format!(
            "these rules are picked by spec.rules but not loaded, each for the reason given (its Ready condition says the same); fix them and they load without a restart: {}{more}",
            named.join(", ")
        ));
    }
    parts.extend(r.notes.iter().cloned());
    (!parts.is_empty()).then(|| (Reason::RulesNotLoaded, parts.join("; ")))
}

/// What a stack migrated from the Go Loki Operator carries that this operator does not
/// act on: fields it keeps, and objects it leaves running.
fn migration_warnings(intent: &Intent) -> Vec<(Reason, String)> {
    let mut out = Vec::new();
    if let Some(m) = go_compat::warning(&intent.findings.unsupported) {
        out.push((Reason::UnsupportedFields, m));
    }
    if let Action::Apply { left, .. } = &intent.action {
        if !left.is_empty() {
            let names: Vec<String> = left.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push((
                Reason::UnmanagedChildren,
                format!(
                    "objects owned by this stack that this operator did not create and does not manage are left as they run: {}. They are deleted with the stack; delete them earlier when no longer needed",
                    names.join(", ")
                ),
            ));
        }
    }
    out
}

/// Computes the whole status of what `intent` decided and `done` came to. The clock is
/// the snapshot's (`intent.now`), and it shows only in conditions whose status changes:
/// an unchanged condition keeps its transition time, so an idle resync computes an
/// identical status and sends nothing.
pub fn compute(
    stack: &LokiStack,
    snapshot: &Snapshot,
    intent: &Intent,
    done: &Done,
) -> LokiStackStatus {
    let previous = stack.status.clone().unwrap_or_default();
    let generation = stack.metadata.generation;
    let pods = snapshot.pod_refs();
    // A pod the fast failover takes out counts as one on a lost node: its zone went
    // silent before Kubernetes marks the nodes, and the stack stays Ready through it as
    // through any zone outage.
    let silent: BTreeSet<&str> = intent
        .failover
        .out
        .iter()
        .map(|z| z.zone.as_str())
        .collect();
    let keys = intent
        .findings
        .zone
        .as_ref()
        .map(|z| z.keys.as_slice())
        .unwrap_or_default();
    let lost = |p: &Pod| {
        let node = crate::checks::podzone::node_name(p).and_then(|n| snapshot.node(n));
        let in_silent_zone = || {
            node.and_then(|n| {
                zones::zone_of(n.metadata.labels.as_ref(), keys.iter().map(String::as_str)).ok()
            })
            .is_some_and(|z| silent.contains(z.as_str()))
        };
        node.is_some_and(zones::node_lost)
            || condition(p, names::POD_CONDITION_ZONE_AVAILABLE) == Some("False")
            || in_silent_zone()
    };
    let by_component = components(&pods, lost);
    let pod_zones = pod_zones(&pods, |n| snapshot.node(n));
    let zone = intent.findings.zone.as_ref();
    let per_zone = zone.map(|z| zone_status(z, snapshot)).unwrap_or_default();
    // Pods of a zone in maintenance are expected missing as much as those of a lost one.
    let outage = zone
        .map(|z| (z.disrupted().count(), z.zones.len()))
        .filter(|(down, _)| *down > 0);
    // The zones holding no serving copy, decided once for the quorum everywhere below.
    let down = zone.map(|z| not_serving(z, &per_zone)).unwrap_or_default();
    let degraded = degraded(intent, &done.applied, &down);
    let applied = matches!(done.applied, Applied::Done(_));
    // A spec applied by an earlier reconcile counts as long as nothing degrades it.
    let current_applied =
        applied || (previous.observed_generation == generation && degraded.is_none());
    let stamp = Stamp {
        generation,
        now: Time(intent.now),
    };
    let recovery = (&intent.recovery, &done.recovered);
    let desired = conditions(
        &stamp,
        &Counts::of(&by_component, &intent.eff, outage),
        current_applied,
        degraded,
        &warnings(intent, snapshot, recovery, &pod_zones, &per_zone, &down),
    );
    LokiStackStatus {
        conditions: keep_transition_times(desired, &previous.conditions),
        components: Some(component_status(&by_component)),
        replication: Some(replication(intent, &pod_zones, down.len(), per_zone)),
        observed_generation: if applied {
            generation
        } else {
            previous.observed_generation
        },
        rollout: intent.rollout.status.clone(),
        zone_awareness: intent.zone_awareness.clone(),
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
    // During an outage, replacements that cannot start (a StatefulSet pod whose volume is
    // in the lost zone) are expected; the quorum decides, through Degraded.
    let settled = c.pending == 0 || c.outage;
    if applied_and_healthy && c.all_ready && c.failed == 0 && settled {
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

fn replication(
    intent: &Intent,
    pod_zones: &PodZones,
    down: usize,
    per_zone: Vec<ZoneStatus>,
) -> ReplicationStatus {
    match &intent.findings.zone {
        Some(z) => {
            let serving = z.write_quorum_met_without(down);
            ReplicationStatus {
                factor: z.factor,
                zones: z.zones.iter().cloned().collect(),
                write_quorum: z.write_quorum,
                zone_failures_tolerated: Some(tolerated_by_placement(z, &per_zone)),
                ineligible_nodes: i32::try_from(z.ineligible.len()).unwrap_or(i32::MAX),
                pods_without_zone: pod_zones.without_zone.clone(),
                zones_available: per_zone
                    .iter()
                    .filter(|s| s.available)
                    .map(|s| s.zone.clone())
                    .collect(),
                write_quorum_met: Some(serving),
                zone_status: per_zone,
            }
        }
        None => ReplicationStatus {
            factor: intent.eff.replication_factor,
            write_quorum: write_quorum(intent.eff.replication_factor),
            pods_without_zone: pod_zones.without_zone.clone(),
            ..Default::default()
        },
    }
}

/// Per known zone: nodes (ready now / all) and the stack's ingesters there (by the zone
/// the annotator gave them).
fn zone_status(z: &ZoneCheck, snapshot: &Snapshot) -> Vec<ZoneStatus> {
    let keys = || z.keys.iter().map(String::as_str);
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    z.zones
        .iter()
        .map(|zone| {
            let nodes: Vec<&Node> = snapshot
                .nodes
                .iter()
                .map(AsRef::as_ref)
                .filter(|n| {
                    zones::zone_of(n.metadata.labels.as_ref(), keys())
                        .ok()
                        .as_deref()
                        == Some(zone)
                })
                .collect();
            let ingesters: Vec<&Pod> = snapshot
                .pods
                .iter()
                .map(AsRef::as_ref)
                .filter(|p| component_of(p) == Some(Component::Ingester))
                .filter(|p| crate::checks::podzone::pod_zone(p) == Some(zone.as_str()))
                .collect();
            let state = z.state(zone);
            ZoneStatus {
                zone: zone.clone(),
                state: Some(state.as_str().to_string()),
                available: state != ZoneState::Unavailable,
                nodes_ready: count(nodes.iter().filter(|n| !zones::node_lost(n)).count()),
                nodes: count(nodes.len()),
                ingesters_ready: count(
                    ingesters
                        .iter()
                        .filter(|p| pod_phase(p) == PodPhase::Ready)
                        .count(),
                ),
                ingesters: count(ingesters.len()),
            }
        })
        .collect()
}

/// Zone failures the stack survives as its ingesters are placed now: zones holding a
/// Ready ingester, capped at the factor, minus the quorum. Before any ingester is Ready
/// (a new stack), what the zones allow.
fn tolerated_by_placement(z: &ZoneCheck, per_zone: &[ZoneStatus]) -> i32 {
    let serving = per_zone
        .iter()
        .filter(|s| s.available && s.ingesters_ready > 0)
        .count();
    if serving == 0 {
        return z.zone_failures_tolerated;
    }
    zone_failures_tolerated(z.factor, serving)
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
    use crate::checks::validate::InvalidSpec;
    use crate::checks::zones::{check, ZoneCheck};
    use crate::intent::{Applied, Findings, Intent};
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::model::storage::StorageSecretError;
    use crate::testing;
    use crate::testing::{applied, done, intent, node, stack, stack_spec, zoned_spec, ZONE};

    use std::sync::Arc;

    fn plan_with(s: &LokiStack, zone: Option<ZoneCheck>) -> Intent {
        intent(
            effective(&s.spec),
            Findings {
                zone,
                ..Default::default()
            },
        )
    }

    /// However many picked rules are wrong and however long their reasons, the stack's
    /// Warning names ten, cut short, and counts the rest.
    #[test]
    fn a_flood_of_wrong_rules_keeps_the_warning_short() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut i = plan_with(&s, None);
        i.findings.rules.not_loaded = (0..500)
            .map(|n| format!("AlertingRule ns/r{n} ({})", "x".repeat(20_000)))
            .collect();
        let (reason, message) = rules_warning(&i).expect("a warning");
        assert_eq!(reason, Reason::RulesNotLoaded);
        assert!(message.len() < 8 * 1024, "{} bytes", message.len());
        assert!(message.contains("AlertingRule ns/r9 ("), "{message}");
        assert!(!message.contains("ns/r10 "), "{message}");
        assert!(message.ends_with(", and 490 more"), "{message}");
    }

    fn snapshot_with(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods: pods.into_iter().map(Arc::new).collect(),
            ..Default::default()
        }
    }

    fn pod(name: &str, component: &str, phase: &str, ready: bool) -> Pod {
        testing::pod(name)
            .label(names::LABEL_COMPONENT, component)
            .zone_aware()
            .zone_keys(ZONE)
            .on("n1")
            .phase(phase)
            .ready_is(ready)
            .build()
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

    /// The status of `plan` (at its clock) when the apply came to `outcome`, with no
    /// zone-outage recovery done.
    fn computed(
        s: &LokiStack,
        snap: &Snapshot,
        plan: &Intent,
        outcome: &Applied,
    ) -> LokiStackStatus {
        compute(s, snap, plan, &done(outcome.clone()))
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
        let c = components(&refs, |_| false);
        let ing = &c[&Component::Ingester];
        assert_eq!(ing["Ready"], vec!["i-0"]);
        assert_eq!(ing["Running"], vec!["i-1"]);
        assert_eq!(ing["Pending"], vec!["i-2"]);
        assert_eq!(c[&Component::Distributor]["Failed"], vec!["d-0"]);
    }

    /// The Go Loki Operator's two Warnings, under its reasons, after ours.
    #[test]
    fn an_old_schema_and_too_few_ingesters_are_warnings_under_the_go_reasons() {
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.replication_factor = Some(3);
        let s = stack("s", spec);
        let eff = effective(&s.spec);
        let plan = plan_with(&s, None);
        let snap = snapshot_with(all_ready_pods(&eff));
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True");
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.reason, "InsufficientIngesterReplicas", "{}", w.message);
        assert!(
            w.message.contains("3 ingester(s) for replication factor 3"),
            "{}",
            w.message
        );
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.storage.schemas = vec![crate::model::api::ObjectStorageSchema {
            version: crate::model::api::ObjectStorageSchemaVersion::V12,
            effective_date: "2023-01-01".into(),
        }];
        let s = stack("s", spec);
        let st = computed(&s, &snap, &plan_with(&s, None), &applied());
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.reason, "StorageNeedsSchemaUpdate", "{}", w.message);
        assert!(w.message.contains("add a v13 period"), "{}", w.message);
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
        let plan = plan_with(&s, Some(check(&eff, &nodes, &[])));
        let snap = snapshot_with(all_ready_pods(&eff));
        let st = computed(&s, &snap, &plan, &applied());
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
        let plan = plan_with(&s, Some(check(&eff, &nodes, &[])));
        let snap = snapshot_with(all_ready_pods(&eff));
        let st = computed(&s, &snap, &plan, &Applied::HeldBack);
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
        let first = computed(&s0, &snap, &plan, &applied());
        let mut s1 = s0.clone();
        s1.status = Some(first.clone());
        let later = Intent {
            now: k8s_openapi::jiff::Timestamp::from_second(1_000_000).expect("ts"),
            ..plan_with(&s0, None)
        };
        let second = computed(&s1, &snap, &later, &applied());
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

    /// Zone names too long for Loki's zone-aware gossip: a Warning naming them.
    #[test]
    fn a_zone_name_too_long_for_gossip_is_a_warning() {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let findings = Findings {
            gossip_zones_too_long: vec!["northamerica-northeast1-a".into()],
            ..Findings::default()
        };
        let i = intent(effective(&s.spec), findings);
        let st = compute(&s, &Snapshot::default(), &i, &done(applied()));
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.reason, "ZoneGossipRoutingOff");
        assert!(
            w.message.contains("northamerica-northeast1-a is longer")
                && w.message.contains(names::ANNOTATION_ZONE_AWARE_GOSSIP),
            "{}",
            w.message
        );
    }

    /// Switched off, zone-aware evictions are a standing Warning until switched on.
    #[test]
    fn zone_aware_evictions_off_is_a_warning_with_the_budget() {
        let (mut s, snap, _) = outage(&[]);
        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ZONE_AWARE_EVICTIONS.to_string(),
                "false".to_string(),
            )]
            .into(),
        );
        let mut plan =
            crate::plan::plan(&s, &snap, &crate::render::Settings::default()).expect("plan");
        plan.eff.ingester_disruptions = 2;
        let st = computed(&s, &snap, &plan, &applied());
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.reason, "ZoneAwareEvictionsOff", "{}", w.message);
        assert!(
            w.message
                .contains("(2 ingester(s) at once, from any zones)"),
            "{}",
            w.message
        );
        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ZONE_AWARE_EVICTIONS.to_string(),
                "no".to_string(),
            )]
            .into(),
        );
        let f = crate::plan::plan(&s, &snap, &crate::render::Settings::default())
            .expect("plan")
            .findings;
        assert!(!f.zone_evictions_off, "an invalid value keeps them on");
        assert!(f
            .annotation
            .is_some_and(|a| a.contains("zone-aware evictions stay on")));
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
            invalid: Some(InvalidSpec(vec![crate::checks::validate::FieldError {
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
        assert_eq!(f.hold_back().map(|d| d.0), Some(Reason::InvalidSpec));
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
        let outcome = Applied::Failed {
            reason: Reason::ApplyFailed,
            message: "server-side apply of Service s-distributor-http failed".into(),
        };
        let st = computed(&s, &Snapshot::default(), &plan, &outcome);
        let d = cond(&st, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "ApplyFailed")
        );
        assert!(d.message.contains("s-distributor-http"), "{}", d.message);
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(cond(&st, ConditionType::Ready).status, "False");
    }

    /// RF 3 over zones a, b, c: every component's pods spread one per zone, zone c down.
    fn outage(down: &[&str]) -> (LokiStack, Snapshot, Intent) {
        cluster(|z, n| {
            if down.contains(&z) {
                n.status = None;
            }
        })
    }

    /// A stack with every pod Ready on one node per zone a, b, c, each node as `edit`
    /// leaves it.
    fn cluster(edit: impl Fn(&str, &mut Node)) -> (LokiStack, Snapshot, Intent) {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let eff = effective(&s.spec);
        let zones = ["a", "b", "c"];
        let nodes: Vec<Node> = zones
            .iter()
            .map(|z| {
                let mut n = node(&format!("n{z}"), &[(ZONE, z)]);
                edit(z, &mut n);
                n
            })
            .collect();
        let mut pods = Vec::new();
        for c in &eff.components {
            for i in 0..c.replicas {
                let z = zones[usize::try_from(i).expect("i") % 3];
                let mut p = pod(
                    &format!("{}-{i}", c.component.name()),
                    c.component.name(),
                    "Running",
                    true,
                );
                p.spec.as_mut().expect("spec").node_name = Some(format!("n{z}"));
                p.metadata
                    .annotations
                    .as_mut()
                    .expect("ann")
                    .insert(names::ANNOTATION_ZONE.into(), z.into());
                pods.push(Arc::new(p));
            }
        }
        let plan = plan_with(&s, Some(check(&eff, &nodes, &[])));
        let snap = Snapshot {
            pod_nodes: nodes
                .iter()
                .map(|n| (n.metadata.name.clone().expect("name"), Arc::new(n.clone())))
                .collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            pods,
            ..Default::default()
        };
        (s, snap, plan)
    }

    /// The fast failover takes zone c's pods out (Ready False) while its nodes are still
    /// Ready: the stack stays Ready, as through any zone outage, whether the pods already
    /// carry the mark or the failover takes them out in this very reconcile.
    #[test]
    fn a_zone_taken_out_by_the_fast_failover_keeps_the_stack_ready() {
        let (s, mut snap, mut plan) = cluster(|_, _| {});
        let in_c = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("nc");
        let silent = crate::checks::silence::SilentZone {
            zone: "c".into(),
            nodes: vec!["nc".into()],
            last_renewed: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            late_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        };
        // Taken out now: the snapshot still shows them Ready.
        plan.failover.out = vec![silent];
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True", "{st:#?}");
        // Taken out before: Ready False with the mark, the zone still silent or not.
        for p in snap.pods.iter_mut().filter(|p| in_c(p)) {
            let mut marked = (**p).clone();
            let cs = marked
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .expect("conditions");
            cs.retain(|c| c.type_ != "Ready");
            for t in ["Ready", names::POD_CONDITION_ZONE_AVAILABLE] {
                cs.push(k8s_openapi::api::core::v1::PodCondition {
                    type_: t.into(),
                    status: "False".into(),
                    ..Default::default()
                });
            }
            *p = Arc::new(marked);
        }
        plan.failover.out.clear();
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True", "{st:#?}");
        let ingesters = st
            .components
            .as_ref()
            .and_then(|c| c.ingester.clone())
            .expect("ingesters");
        assert_eq!(ingesters["Unknown"], vec!["ingester-2"]);
    }

    #[test]
    fn one_zone_down_stays_ready_and_names_zone_nodes_and_pods() {
        let (s, snap, plan) = outage(&["c"]);
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True", "{st:#?}");
        assert_eq!(cond(&st, ConditionType::Degraded).status, "False");
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.reason, "ZoneUnavailable");
        for part in [
            "zone c is unavailable",
            "nc (not Ready)",
            "ingester-2",
            "Writes keep their quorum",
        ] {
            assert!(w.message.contains(part), "{part:?} not in {}", w.message);
        }
        let ingesters = st
            .components
            .as_ref()
            .and_then(|c| c.ingester.clone())
            .expect("ingesters");
        assert_eq!(ingesters["Unknown"], vec!["ingester-2"]);
        let r = st.replication.expect("replication");
        assert_eq!(r.zones, ["a", "b", "c"]);
        assert_eq!(r.zones_available, ["a", "b"]);
        assert_eq!(r.write_quorum_met, Some(true));
        assert_eq!(
            r.zone_failures_tolerated,
            Some(0),
            "two zones serve, quorum 2"
        );
        let c = &r.zone_status[2];
        assert_eq!(
            (
                c.available,
                c.nodes_ready,
                c.nodes,
                c.ingesters_ready,
                c.ingesters
            ),
            (false, 0, 1, 1, 1)
        );
    }

    /// A cordon is planned work: the zone is in maintenance, counted available while its
    /// ingesters are Ready, and no outage is reported.
    #[test]
    fn a_cordoned_zone_is_in_maintenance_not_unavailable() {
        let cordon = |z: &str, n: &mut Node| {
            if z == "c" {
                n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
            }
        };
        let (s, snap, plan) = cluster(cordon);
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True", "{st:#?}");
        assert_eq!(cond(&st, ConditionType::Degraded).status, "False");
        let w = cond(&st, ConditionType::Warning);
        let outage = w.message.contains("unavailable");
        assert!(w.reason == "ZoneMaintenance" && !outage, "{}", w.message);
        for part in [
            "zone c is in maintenance",
            "nc (cordoned)",
            "1 of its 1 ingesters Ready",
        ] {
            assert!(w.message.contains(part), "{part:?} not in {}", w.message);
        }
        let r = st.replication.expect("replication");
        assert_eq!(r.zones_available, ["a", "b", "c"]);
        assert_eq!(r.write_quorum_met, Some(true));
        assert_eq!(
            r.zone_failures_tolerated,
            Some(1),
            "c's ingester still serves"
        );
        let states: Vec<(&str, bool)> = r
            .zone_status
            .iter()
            .map(|z| (z.state.as_deref().unwrap_or_default(), z.available))
            .collect();
        let (up, maintenance) = (("Available", true), ("Maintenance", true));
        assert_eq!(states, [up, up, maintenance]);
        // Drained: c's ingester is gone, so c holds no copy; with b lost as well the
        // quorum is lost, although only b is an outage.
        let (s, mut snap, plan) = cluster(|z, n| {
            cordon(z, n);
            n.status = n.status.take().filter(|_| z != "b");
        });
        snap.pods
            .retain(|p| p.metadata.name.as_deref() != Some("ingester-2"));
        let st = computed(&s, &snap, &plan, &applied());
        let r = st.replication.clone().expect("replication");
        assert_eq!(r.write_quorum_met, Some(false));
        assert_eq!(r.zones_available, ["a", "c"]);
        let d = cond(&st, ConditionType::Degraded);
        assert_eq!(d.reason, "WriteQuorumLost", "{}", d.message);
        assert!(
            d.message.contains("zones b, c are unavailable or drained"),
            "{}",
            d.message
        );
    }

    #[test]
    fn two_zones_down_lose_the_write_quorum() {
        let (s, snap, plan) = outage(&["b", "c"]);
        let st = computed(&s, &snap, &plan, &applied());
        let d = cond(&st, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "WriteQuorumLost")
        );
        assert!(d.message.contains("write quorum 2"), "{}", d.message);
        assert_eq!(cond(&st, ConditionType::Ready).status, "False");
        assert_eq!(st.replication.expect("r").write_quorum_met, Some(false));
        assert_eq!(
            st.observed_generation,
            Some(1),
            "the spec was applied, not held back"
        );
    }

    #[test]
    fn all_zones_up_tolerate_one() {
        let (s, snap, plan) = outage(&[]);
        let st = computed(&s, &snap, &plan, &applied());
        assert_eq!(cond(&st, ConditionType::Ready).status, "True");
        assert_eq!(cond(&st, ConditionType::Warning).status, "False");
        assert_eq!(st.replication.expect("r").zone_failures_tolerated, Some(1));
    }

    #[test]
    fn a_migrated_stack_names_kept_fields_and_left_objects() {
        let mut spec = stack_spec(LokiStackSize::Demo);
        spec.tenants = Some(crate::model::api::KeptObject(
            serde_json::json!({"mode": "static"}),
        ));
        let s = stack("s", spec);
        let mut plan = plan_with(&s, None);
        plan.findings.unsupported = crate::model::go_compat::unsupported_fields(&s.spec);
        plan.action = Action::Apply {
            children: Vec::new(),
            stale: Vec::new(),
            left: vec![(
                crate::render::kinds::ChildKind::Deployment,
                "s-gateway".into(),
            )],
        };
        let st = computed(&s, &snapshot_with(Vec::new()), &plan, &applied());
        let w = cond(&st, ConditionType::Warning);
        assert_eq!(w.status, "True");
        assert_eq!(w.reason, "UnsupportedFields");
        for part in [
            "spec.tenants",
            "docs/migrate.md",
            "Deployment s-gateway",
            "left as they run",
        ] {
            assert!(w.message.contains(part), "{part:?} not in {}", w.message);
        }
    }
}
