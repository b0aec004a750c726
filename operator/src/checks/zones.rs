//! The zone arithmetic: which nodes count, which zone string each
//! gives, and what replication the stack gets from them. Pure functions of the nodes and
//! the effective stack, so the controller, `render --nodes` and the tests share them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, Taint, Toleration};
use k8s_openapi::jiff::Timestamp;

use crate::model::conditions::Reason;
use crate::model::defaults::{Component, EffectiveStack};
use crate::model::names;

/// How many node or pod names a message lists before it says "and N more".
pub const NAMES_IN_MESSAGE: usize = 5;

/// Why a node has no zone for a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneLabelError {
    Missing(String),
    Empty(String),
}

impl fmt::Display for ZoneLabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZoneLabelError::Missing(k) => write!(f, "label {k} is missing"),
            ZoneLabelError::Empty(k) => write!(f, "label {k} is empty"),
        }
    }
}

/// The zone Loki sees for a node: its values of `keys`, in that order, joined with `_`.
/// The pod annotator writes exactly this string, and zones are counted by it.
pub fn zone_of<'a>(
    labels: Option<&BTreeMap<String, String>>,
    keys: impl IntoIterator<Item = &'a str>,
) -> Result<String, ZoneLabelError> {
    let mut parts = Vec::new();
    for key in keys {
        match labels.and_then(|l| l.get(key)) {
            None => return Err(ZoneLabelError::Missing(key.to_string())),
            Some(v) if v.is_empty() => return Err(ZoneLabelError::Empty(key.to_string())),
            Some(v) => parts.push(v.as_str()),
        }
    }
    Ok(parts.join(names::ZONE_VALUES_SEPARATOR))
}

/// The zone a PersistentVolume is pinned to: the values its required node affinity gives
/// `keys`, where every term (they are alternatives) fixes each key to the same single
/// value with `In`; else its own topology labels (how older in-tree provisioners marked a
/// volume's zone).
pub fn volume_zone(pv: &PersistentVolume, keys: &[String]) -> Option<String> {
    let keys = || keys.iter().map(String::as_str);
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let term_zone = |term: &k8s_openapi::api::core::v1::NodeSelectorTerm| {
        let fixed: BTreeMap<String, String> = term
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| e.operator == "In")
            .filter_map(|e| match e.values.as_deref() {
                Some([v]) => Some((e.key.clone(), v.clone())),
                _ => None,
            })
            .collect();
        zone_of(Some(&fixed), keys()).ok()
    };
    let mut zones = terms.iter().map(term_zone);
    let from_affinity = match zones.next() {
        Some(Some(first)) => zones.all(|z| z.as_ref() == Some(&first)).then_some(first),
        _ => None,
    };
    match (terms.is_empty(), from_affinity) {
        (_, Some(zone)) => Some(zone),
        (true, None) => zone_of(pv.metadata.labels.as_ref(), keys()).ok(),
        (false, None) => None,
    }
}

/// Why a node does not count as a zone member for a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ineligible {
    NotReady,
    Cordoned,
    Taint(String),
    NodeSelector,
    Label(ZoneLabelError),
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::NotReady => f.write_str("not Ready"),
            Ineligible::Cordoned => f.write_str("cordoned"),
            Ineligible::Taint(t) => write!(f, "taint {t} not tolerated"),
            Ineligible::NodeSelector => f.write_str("outside the node selector"),
            Ineligible::Label(e) => e.fmt(f),
        }
    }
}

/// Taints that say a node is lost (as opposed to not taking new pods).
const LOST_TAINTS: [&str; 2] = [names::TAINT_UNREACHABLE, names::TAINT_OUT_OF_SERVICE];

fn taints(node: &Node) -> impl Iterator<Item = &Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
}

/// When a node that is not Ready stopped being Ready.
fn not_ready_since(node: &Node) -> Option<Timestamp> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status != "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// When the earliest of these taints was added to the node.
fn tainted_since(node: &Node, keys: &[&str]) -> Option<Timestamp> {
    taints(node)
        .filter(|t| keys.contains(&t.key.as_str()))
        .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
        .min()
}

/// A node that is not Ready or is tainted unreachable or out of service: its pods may
/// be gone, and no one can tell.
pub fn node_lost(node: &Node) -> bool {
    !node_ready(node) || taints(node).any(|t| LOST_TAINTS.contains(&t.key.as_str()))
}

/// When a lost node ([`node_lost`]) was lost: its Ready condition's last transition,
/// else the time the unreachable or out-of-service taint was added. A cordon is never a
/// loss and has no time here.
pub fn lost_since(node: &Node) -> Option<Timestamp> {
    not_ready_since(node).or_else(|| tainted_since(node, &LOST_TAINTS))
}

/// A node known to run nothing: tainted `node.kubernetes.io/out-of-service`, which an
/// admin or a cloud controller puts on a node that is shut down (Kubernetes then
/// force-deletes its pods itself). A node that is only unreachable may still run its
/// pods behind a partition.
pub fn fenced(node: &Node) -> bool {
    taints(node).any(|t| t.key == names::TAINT_OUT_OF_SERVICE)
}

pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Kubernetes' toleration matching (an empty key with `Exists` tolerates everything; an
/// empty effect matches every effect; the operator defaults to `Equal`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref() {
        if !effect.is_empty() && effect != taint.effect {
            return false;
        }
    }
    let key = toleration.key.as_deref().unwrap_or("");
    let exists = toleration.operator.as_deref() == Some("Exists");
    if key.is_empty() {
        return exists;
    }
    if key != taint.key {
        return false;
    }
    exists || toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
}

/// Whether pods with these tolerations and node selector can be scheduled on the node,
/// the way the scheduler decides it; topology labels are checked separately.
pub fn schedulable(
    node: &Node,
    node_selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Result<(), Ineligible> {
    if !node_ready(node) {
        return Err(Ineligible::NotReady);
    }
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return Err(Ineligible::Cordoned);
    }
    taints_and_selector(node, node_selector, tolerations, |_| false)
}

/// The node's hard taints the pods do not tolerate (but those `ignored`), then the node
/// selector.
fn taints_and_selector(
    node: &Node,
    node_selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
    ignored: impl Fn(&Taint) -> bool,
) -> Result<(), Ineligible> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    for taint in taints.unwrap_or(&[]) {
        let hard = taint.effect == "NoSchedule" || taint.effect == "NoExecute";
        if hard && !ignored(taint) && !tolerations.iter().any(|t| tolerates(t, taint)) {
            return Err(Ineligible::Taint(format!("{}:{}", taint.key, taint.effect)));
        }
    }
    let labels = node.metadata.labels.as_ref();
    let selected = node_selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !selected {
        return Err(Ineligible::NodeSelector);
    }
    Ok(())
}

/// The result of the zone check of one stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneVerdict {
    /// Enough zones, and a zone can be lost without stopping writes.
    Ok,
    /// Enough zones, but losing any one stops writes for some streams (Warning).
    NoZoneFailureTolerance,
    /// No schedulable node carries every topology key with a value (Degraded).
    ZoneLabelMissing,
    /// A schedulable node carries a topology key with an empty value (Degraded).
    ZoneLabelEmpty,
    /// The replication factor exceeds the number of zones (Degraded).
    ZonesInsufficient,
}

impl ZoneVerdict {
    /// Degraded verdicts hold back the new spec; what runs is left alone.
    pub fn is_degraded(&self) -> bool {
        matches!(
            self,
            ZoneVerdict::ZoneLabelMissing
                | ZoneVerdict::ZoneLabelEmpty
                | ZoneVerdict::ZonesInsufficient
        )
    }

    pub fn reason(&self) -> Reason {
        match self {
            ZoneVerdict::Ok => Reason::ZonesSufficient,
            ZoneVerdict::NoZoneFailureTolerance => Reason::NoZoneFailureTolerance,
            ZoneVerdict::ZoneLabelMissing => Reason::ZoneLabelMissing,
            ZoneVerdict::ZoneLabelEmpty => Reason::ZoneLabelEmpty,
            ZoneVerdict::ZonesInsufficient => Reason::ZonesInsufficient,
        }
    }
}

/// Taints the node lifecycle controller, an operator or a drain put on a node that is
/// down or going away. A node carrying one still holds its zone (its volumes are there,
/// and it may come back); it only cannot run pods now.
pub const OUTAGE_TAINTS: [&str; 4] = [
    names::TAINT_UNREACHABLE,
    names::TAINT_NOT_READY,
    names::TAINT_OUT_OF_SERVICE,
    names::TAINT_UNSCHEDULABLE,
];

/// A known zone none of whose nodes can take pods now: unavailable when every node it
/// still has is lost ([`node_lost`]) or it has none left, in maintenance when some node
/// is Ready and reachable but cordoned or draining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownZone {
    pub zone: String,
    /// Its nodes, with why each is down; empty when every node of the zone is gone and
    /// only the stack's volumes keep it known.
    pub nodes: Vec<(String, Ineligible)>,
    /// The stack's claims whose volumes are pinned to the zone, sorted.
    pub claims: Vec<String>,
    /// When the last of its nodes went down, where the node says (a cordon says
    /// nothing).
    pub since: Option<Timestamp>,
    /// Every node it still has is [`fenced`], or it has none left: nothing of the stack
    /// runs there any more.
    pub fenced: bool,
}

/// A zone's health, as status reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ZoneState {
    /// Some node can take pods now.
    Available,
    /// Cordoned or draining: no node takes new pods, but the nodes are up and the pods
    /// there may still serve. Never an outage; for quorum it counts as available while
    /// its ingesters are Ready, and rollouts and evictions treat it as the one zone
    /// being disrupted.
    Maintenance,
    /// Every node it has is lost (not Ready, unreachable, out of service) or gone.
    Unavailable,
}

impl ZoneState {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneState::Available => "Available",
            ZoneState::Maintenance => "Maintenance",
            ZoneState::Unavailable => "Unavailable",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneCheck {
    pub keys: Vec<String>,
    pub factor: i32,
    /// Known zones: those of every node an ingester could run on when healthy, and those
    /// the stack's volumes are pinned to, sorted. A zone stays known during an outage,
    /// even once its nodes are deleted (an autoscaler removing them), so the replication
    /// factor is checked against the cluster's layout, not against what is up right now.
    pub zones: BTreeSet<String>,
    /// Known zones with at least one node that can run pods now.
    pub available: BTreeSet<String>,
    /// Known zones that are lost: an outage.
    pub unavailable: Vec<DownZone>,
    /// Known zones that are cordoned or draining, their nodes up.
    pub maintenance: Vec<DownZone>,
    pub write_quorum: i32,
    pub zone_failures_tolerated: i32,
    /// Every node that does not count, with why, sorted by name.
    pub ineligible: Vec<(String, Ineligible)>,
    pub verdict: ZoneVerdict,
}

impl ZoneCheck {
    /// Whether every stream still has a write quorum of copies with `down` zones not
    /// serving: the unavailable ones, and those in maintenance whose ingesters are
    /// drained, which only the status knows (it counts them, `status::not_serving`). Loki places at most one copy per zone, so in the worst case a stream
    /// lost one copy per such zone.
    pub fn write_quorum_met_without(&self, down: usize) -> bool {
        let lost = i32::try_from(down).unwrap_or(i32::MAX);
        self.factor - self.factor.min(lost) >= self.write_quorum
    }

    /// The zones no node of which takes pods now: unavailable, then in maintenance.
    /// Rollouts and spreading treat each the same: the one zone being disrupted.
    pub fn disrupted(&self) -> impl Iterator<Item = &DownZone> {
        self.unavailable.iter().chain(&self.maintenance)
    }

    pub fn state(&self, zone: &str) -> ZoneState {
        if self.unavailable.iter().any(|u| u.zone == zone) {
            ZoneState::Unavailable
        } else if self.maintenance.iter().any(|u| u.zone == zone) {
            ZoneState::Maintenance
        } else {
            ZoneState::Available
        }
    }
}

/// The zones whose names Loki's zone-aware gossip refuses (longer than
/// [`names::MAX_GOSSIP_ZONE_BYTES`]), sorted; a multi-key zone counts as its joined name.
pub fn too_long_for_gossip(zones: &BTreeSet<String>) -> Vec<String> {
    zones
        .iter()
        .filter(|z| z.len() > names::MAX_GOSSIP_ZONE_BYTES)
        .cloned()
        .collect()
}

/// `floor(RF/2)+1`: copies that must be written for a push to succeed.
pub fn write_quorum(factor: i32) -> i32 {
    factor / 2 + 1
}

/// Loki keeps at most one copy of a stream per zone: with Z zones a stream has
/// `min(RF, Z)` copies, and writes survive losing `min(RF, Z) - quorum` zones; with fewer
/// zones than the quorum, none (writes fail already), never a negative count.
pub fn zone_failures_tolerated(factor: i32, zones: usize) -> i32 {
    let zones = i32::try_from(zones).unwrap_or(i32::MAX);
    (factor.min(zones) - write_quorum(factor)).max(0)
}

/// Evaluates the zone check of a zone-aware stack against the nodes the operator sees.
///
/// Eligibility follows the ingester, the component whose replicas hold the copies of a
/// stream: its node selector and tolerations decide which nodes can hold a copy.
/// `volumes` are the stack's bound PersistentVolumes: data lives in their zones.
pub fn check<'a>(
    stack: &EffectiveStack,
    nodes: impl IntoIterator<Item = &'a Node>,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
) -> ZoneCheck {
    let keys: Vec<String> = stack.zones.iter().map(|z| z.topology_key.clone()).collect();
    let (selector, tolerations) = stack
        .component(Component::Ingester)
        .map(|c| (c.node_selector.clone(), c.tolerations.clone()))
        .unwrap_or_default();
    let mut seen = Seen::default();
    for node in nodes {
        seen.add(node, &keys, &selector, &tolerations);
    }
    for pv in volumes {
        seen.add_volume(pv, &keys);
    }
    seen.ineligible.sort_by(|a, b| a.0.cmp(&b.0));
    let factor = stack.replication_factor;
    let tolerated = zone_failures_tolerated(factor, seen.zones.len());
    let verdict = if seen.empty_on_schedulable {
        ZoneVerdict::ZoneLabelEmpty
    } else if seen.zones.is_empty() {
        ZoneVerdict::ZoneLabelMissing
    } else if usize::try_from(factor).unwrap_or(0) > seen.zones.len() {
        ZoneVerdict::ZonesInsufficient
    } else if tolerated < 1 {
        ZoneVerdict::NoZoneFailureTolerance
    } else {
        ZoneVerdict::Ok
    };
    let (unavailable, maintenance) =
        down_zones(&seen.zones, &seen.available, seen.down, seen.claims);
    ZoneCheck {
        keys,
        factor,
        zones: seen.zones,
        available: seen.available,
        unavailable,
        maintenance,
        write_quorum: write_quorum(factor),
        zone_failures_tolerated: tolerated,
        ineligible: seen.ineligible,
        verdict,
    }
}

/// A node that cannot take pods now.
struct DownNode {
    name: String,
    why: Ineligible,
    since: Option<Timestamp>,
    /// [`node_lost`]: not a cordon or a drain.
    lost: bool,
    /// [`fenced`].
    fenced: bool,
}

type DownNodes = BTreeMap<String, Vec<DownNode>>;

/// What the nodes say, node by node.
#[derive(Default)]
struct Seen {
    zones: BTreeSet<String>,
    available: BTreeSet<String>,
    /// Per known zone, its nodes that cannot run pods now.
    down: DownNodes,
    ineligible: Vec<(String, Ineligible)>,
    empty_on_schedulable: bool,
    /// Per zone, the stack's claims whose volumes are pinned there.
    claims: BTreeMap<String, BTreeSet<String>>,
}

impl Seen {
    fn add_volume(&mut self, pv: &PersistentVolume, keys: &[String]) {
        let Some(zone) = volume_zone(pv, keys) else {
            return;
        };
        let claim = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|c| c.name.clone())
            .unwrap_or_else(|| pv.metadata.name.clone().unwrap_or_default());
        self.zones.insert(zone.clone());
        self.claims.entry(zone).or_default().insert(claim);
    }

    fn add(
        &mut self,
        node: &Node,
        keys: &[String],
        selector: &BTreeMap<String, String>,
        tolerations: &[Toleration],
    ) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Err(why) = could_hold(node, selector, tolerations) {
            self.ineligible.push((name, why));
            return;
        }
        let now = schedulable(node, selector, tolerations);
        let zone = zone_of(
            node.metadata.labels.as_ref(),
            keys.iter().map(String::as_str),
        );
        match (zone, now) {
            (Ok(zone), Ok(())) => {
                self.zones.insert(zone.clone());
                self.available.insert(zone);
            }
            (Ok(zone), Err(why)) => {
                self.zones.insert(zone.clone());
                self.down.entry(zone).or_default().push(DownNode {
                    name: name.clone(),
                    why: why.clone(),
                    since: down_since(node),
                    lost: node_lost(node),
                    fenced: fenced(node),
                });
                self.ineligible.push((name, why));
            }
            (Err(e), now) => {
                // A node without the key is never picked by the scheduler for a pod with a
                // DoNotSchedule spread constraint, but a node with an empty value is: it
                // forms a domain "" and its pods could never get a zone.
                self.empty_on_schedulable |= now.is_ok() && matches!(e, ZoneLabelError::Empty(_));
                self.ineligible.push((name, Ineligible::Label(e)));
            }
        }
    }
}

/// The known zones without an available node, split into (unavailable, maintenance): a
/// zone with a node that is up (cordoned or draining) is maintenance, never an outage.
fn down_zones(
    known: &BTreeSet<String>,
    available: &BTreeSet<String>,
    mut down: DownNodes,
    mut claims: BTreeMap<String, BTreeSet<String>>,
) -> (Vec<DownZone>, Vec<DownZone>) {
    let (mut unavailable, mut maintenance) = (Vec::new(), Vec::new());
    for zone in known.difference(available) {
        let mut nodes = down.remove(zone).unwrap_or_default();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let up = nodes.iter().any(|n| !n.lost);
        let since = nodes.iter().filter_map(|n| n.since).max();
        let z = DownZone {
            zone: zone.clone(),
            fenced: nodes.iter().all(|n| n.fenced),
            nodes: nodes.into_iter().map(|n| (n.name, n.why)).collect(),
            claims: claims
                .remove(zone)
                .unwrap_or_default()
                .into_iter()
                .collect(),
            since,
        };
        if up {
            maintenance.push(z);
        } else {
            unavailable.push(z);
        }
    }
    (unavailable, maintenance)
}

/// Whether an ingester could run on the node if the node were healthy: the node selector
/// and every hard taint except those of an outage ([`OUTAGE_TAINTS`]).
fn could_hold(
    node: &Node,
    node_selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Result<(), Ineligible> {
    taints_and_selector(node, node_selector, tolerations, |t| {
        OUTAGE_TAINTS.contains(&t.key.as_str())
    })
}

/// When the node went down: its Ready condition's last transition, else the time an
/// outage taint was added.
fn down_since(node: &Node) -> Option<Timestamp> {
    not_ready_since(node).or_else(|| tainted_since(node, &OUTAGE_TAINTS))
}

/// "a, b, c and 4 more"
pub fn name_list<S: AsRef<str>>(names: &[S]) -> String {
    let shown: Vec<&str> = names
        .iter()
        .take(NAMES_IN_MESSAGE)
        .map(AsRef::as_ref)
        .collect();
    let mut s = shown.join(", ");
    if names.len() > NAMES_IN_MESSAGE {
        s.push_str(&format!(" and {} more", names.len() - NAMES_IN_MESSAGE));
    }
    s
}

impl ZoneCheck {
    fn nodes_where(&self, f: impl Fn(&Ineligible) -> bool) -> Vec<String> {
        self.ineligible
            .iter()
            .filter(|(_, why)| f(why))
            .map(|(n, why)| format!("{n} ({why})"))
            .collect()
    }

    fn zone_list(&self) -> String {
        if self.zones.is_empty() {
            "none".to_string()
        } else {
            self.zones.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    }

    /// A message that says what is wrong and what to change.
    pub fn message(&self) -> String {
        let keys = self.keys.join(", ");
        match self.verdict {
            ZoneVerdict::ZoneLabelEmpty => {
                let nodes = self.nodes_where(|w| matches!(w, Ineligible::Label(ZoneLabelError::Empty(_))));
                format!(
                    "schedulable nodes carry an empty value for topology key(s) {keys}: {}. \
                     Pods scheduled there could never get a zone; give these nodes a value or \
                     remove the label",
                    name_list(&nodes)
                )
            }
            ZoneVerdict::ZoneLabelMissing => {
                let nodes = self.nodes_where(|_| true);
                let seen = if nodes.is_empty() {
                    "no nodes are visible".to_string()
                } else {
                    format!("ineligible nodes: {}", name_list(&nodes))
                };
                format!(
                    "no schedulable node carries every topology key ({keys}) with a value; {seen}. \
                     Label the nodes or change spec.replication.zones"
                )
            }
            ZoneVerdict::ZonesInsufficient => format!(
                "replication factor {} needs at least {} zones, but eligible nodes span {} ({}). \
                 Add nodes in more zones or lower spec.replication.factor",
                self.factor,
                self.factor,
                self.zones.len(),
                self.zone_list()
            ),
            ZoneVerdict::NoZoneFailureTolerance => format!(
                "{} zones ({}) hold {} copies of each stream with a write quorum of {}: losing one \
                 zone stops writes for some streams. Use replication factor 3 across at least 3 zones",
                self.zones.len(),
                self.zone_list(),
                self.factor.min(i32::try_from(self.zones.len()).unwrap_or(i32::MAX)),
                self.write_quorum
            ),
            ZoneVerdict::Ok => format!(
                "{} zones ({}), replication factor {}, write quorum {}: writes survive the loss of {} zone(s)",
                self.zones.len(),
                self.zone_list(),
                self.factor,
                self.write_quorum,
                self.zone_failures_tolerated
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No zone at all, or fewer than the write quorum: no zone failure is tolerated, and
    /// the count is never negative (it was -2 for RF 3 with no eligible zone).
    #[test]
    fn zone_failures_tolerated_is_never_negative() {
        assert_eq!(zone_failures_tolerated(3, 0), 0);
        assert_eq!(zone_failures_tolerated(3, 1), 0);
        assert_eq!(zone_failures_tolerated(3, 3), 1);
        assert_eq!(zone_failures_tolerated(2, 3), 0);
        assert_eq!(zone_failures_tolerated(5, 5), 2);
    }
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::testing::{node, zoned_spec, ZONE};

    fn stack(factor: i32, keys: &[&str]) -> EffectiveStack {
        effective(&zoned_spec(LokiStackSize::Small, factor, keys))
    }

    fn nodes_in(zones: &[&str]) -> Vec<Node> {
        zones
            .iter()
            .enumerate()
            .map(|(i, z)| node(&format!("n{i}"), &[(ZONE, z)]))
            .collect()
    }

    #[test]
    fn quorum_and_tolerance_over_rf_and_zones() {
        // (RF, zones) -> (quorum, tolerated, verdict)
        use ZoneVerdict::*;
        let cases = [
            (1, 1, 1, 0, NoZoneFailureTolerance),
            (1, 3, 1, 0, NoZoneFailureTolerance),
            (2, 1, 2, 0, ZonesInsufficient),
            (2, 2, 2, 0, NoZoneFailureTolerance),
            (2, 3, 2, 0, NoZoneFailureTolerance),
            (2, 4, 2, 0, NoZoneFailureTolerance),
            (3, 1, 2, 0, ZonesInsufficient),
            (3, 2, 2, 0, ZonesInsufficient),
            (3, 3, 2, 1, Ok),
            (3, 4, 2, 1, Ok),
        ];
        let all = ["a", "b", "c", "d"];
        for (rf, z, quorum, tolerated, verdict) in cases {
            let c = check(&stack(rf, &[ZONE]), &nodes_in(&all[..z]), &[]);
            assert_eq!(c.write_quorum, quorum, "RF {rf} zones {z}");
            assert_eq!(c.zone_failures_tolerated, tolerated, "RF {rf} zones {z}");
            assert_eq!(c.verdict, verdict, "RF {rf} zones {z}");
            assert_eq!(c.zones.len(), z);
        }
    }

    #[test]
    fn insufficient_message_names_zones_and_factor() {
        let c = check(&stack(3, &[ZONE]), &nodes_in(&["a", "b", "a"]), &[]);
        assert_eq!(c.verdict, ZoneVerdict::ZonesInsufficient);
        let m = c.message();
        assert!(m.contains("replication factor 3"), "{m}");
        assert!(m.contains("span 2 (a, b)"), "{m}");
    }

    #[test]
    fn nodes_missing_the_key_are_ineligible_and_named() {
        let mut nodes = nodes_in(&["a", "b"]);
        nodes.push(node("bare", &[]));
        let c = check(&stack(2, &[ZONE]), &nodes, &[]);
        assert_eq!(c.zones.len(), 2);
        assert_eq!(
            c.ineligible,
            vec![(
                "bare".into(),
                Ineligible::Label(ZoneLabelError::Missing(ZONE.into()))
            )]
        );
        // Only nodes without any key: ZoneLabelMissing, with the nodes named.
        let c = check(&stack(2, &[ZONE]), &[node("x", &[]), node("y", &[])], &[]);
        assert_eq!(c.verdict, ZoneVerdict::ZoneLabelMissing);
        assert!(c
            .message()
            .contains("x (label topology.kubernetes.io/zone is missing)"));
    }

    #[test]
    fn empty_value_on_a_schedulable_node_degrades_and_is_named() {
        let mut nodes = nodes_in(&["a", "b", "c"]);
        nodes.push(node("blank", &[(ZONE, "")]));
        let c = check(&stack(2, &[ZONE]), &nodes, &[]);
        assert_eq!(c.verdict, ZoneVerdict::ZoneLabelEmpty);
        assert!(c
            .message()
            .contains("blank (label topology.kubernetes.io/zone is empty)"));
        // The same node cordoned cannot receive pods: it no longer degrades the stack.
        let last = nodes.last_mut().expect("node");
        last.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        let c = check(&stack(2, &[ZONE]), &nodes, &[]);
        assert_eq!(c.verdict, ZoneVerdict::NoZoneFailureTolerance);
        assert_eq!(
            c.ineligible,
            vec![(
                "blank".into(),
                Ineligible::Label(ZoneLabelError::Empty(ZONE.into()))
            )]
        );
    }

    #[test]
    fn down_nodes_keep_their_zone_known_but_unavailable() {
        let mut nodes = nodes_in(&["a", "b", "c", "d"]);
        nodes[0].status = None;
        nodes[1]
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        nodes[2].spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        }]);
        // A PreferNoSchedule taint does not keep pods away.
        nodes[3].spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
            key: "soft".into(),
            effect: "PreferNoSchedule".into(),
            ..Default::default()
        }]);
        let c = check(&stack(2, &[ZONE]), &nodes, &[]);
        // An outage is not a smaller cluster: the factor is checked against known zones.
        assert_eq!(c.zones.len(), 4);
        assert_eq!(c.available.iter().collect::<Vec<_>>(), vec!["d"]);
        let down: Vec<(&str, String)> = c
            .unavailable
            .iter()
            .map(|u| (u.zone.as_str(), u.nodes[0].1.to_string()))
            .collect();
        assert_eq!(
            down,
            [
                ("a", "not Ready".to_string()),
                (
                    "c",
                    "taint node.kubernetes.io/unreachable:NoExecute not tolerated".to_string()
                ),
            ]
        );
        // A cordoned zone whose node is up is maintenance, not an outage.
        let maintenance: Vec<&str> = c.maintenance.iter().map(|u| u.zone.as_str()).collect();
        assert_eq!(maintenance, ["b"]);
        assert_eq!(c.maintenance[0].nodes[0].1, Ineligible::Cordoned);
        let states: Vec<ZoneState> = ["a", "b", "c", "d"].iter().map(|z| c.state(z)).collect();
        assert_eq!(
            states,
            [
                ZoneState::Unavailable,
                ZoneState::Maintenance,
                ZoneState::Unavailable,
                ZoneState::Available
            ]
        );
        let disrupted: Vec<&str> = c.disrupted().map(|u| u.zone.as_str()).collect();
        assert_eq!(disrupted, ["a", "c", "b"]);
        assert_eq!(c.ineligible.len(), 3);
        assert_eq!(c.verdict, ZoneVerdict::NoZoneFailureTolerance);
        let lost = c.unavailable.len();
        assert!(!c.write_quorum_met_without(lost), "RF 2, {lost} zones lost");
        assert!(!c.write_quorum_met_without(1), "RF 2, quorum 2");
    }

    #[test]
    fn a_cordoned_zone_is_in_maintenance_until_its_last_up_node_is_lost() {
        let mut nodes = nodes_in(&["a", "b", "c"]);
        let mut b2 = nodes[1].clone();
        b2.metadata.name = Some("b2".into());
        nodes.push(b2);
        for n in &mut nodes[1..] {
            n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        }
        // c is cordoned too: both other zones are down, one of them only cordoned.
        let c = check(&stack(3, &[ZONE]), &nodes, &[]);
        let zones = |v: &[DownZone]| v.iter().map(|u| u.zone.clone()).collect::<Vec<_>>();
        assert_eq!(zones(&c.maintenance), ["b", "c"]);
        assert!(c.unavailable.is_empty());
        assert!(
            c.write_quorum_met_without(c.unavailable.len()),
            "maintenance is no outage"
        );
        // One node of b stops: b still has a node up, so it stays in maintenance.
        nodes[1].status = None;
        let c = check(&stack(3, &[ZONE]), &nodes, &[]);
        assert_eq!(zones(&c.maintenance), ["b", "c"]);
        // The other one too: b is lost, whatever the cordon.
        nodes[3].status = None;
        let c = check(&stack(3, &[ZONE]), &nodes, &[]);
        assert_eq!(zones(&c.unavailable), ["b"]);
        assert_eq!(zones(&c.maintenance), ["c"]);
        assert!(c.write_quorum_met_without(c.unavailable.len()));
        assert!(!c.write_quorum_met_without(2));
    }

    #[test]
    fn one_of_three_zones_down_keeps_the_quorum_two_do_not() {
        let mut nodes = nodes_in(&["a", "b", "c"]);
        let since = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("ts");
        nodes[2].status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    since,
                )),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let c = check(&stack(3, &[ZONE]), &nodes, &[]);
        assert_eq!(
            c.verdict,
            ZoneVerdict::Ok,
            "no ZonesInsufficient during an outage"
        );
        assert_eq!(c.unavailable.len(), 1);
        assert_eq!(c.unavailable[0].since, Some(since));
        assert!(c.write_quorum_met_without(c.unavailable.len()));
        nodes[1].status = nodes[2].status.clone();
        let c = check(&stack(3, &[ZONE]), &nodes, &[]);
        assert_eq!(c.unavailable.len(), 2);
        assert!(!c.write_quorum_met_without(c.unavailable.len()));
    }

    #[test]
    fn tolerated_taints_and_node_selector_follow_the_ingester() {
        let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
        spec.template = Some(crate::model::api::LokiTemplateSpec {
            ingester: Some(crate::model::api::LokiComponentSpec {
                replicas: None,
                node_selector: Some([("pool".to_string(), "loki".to_string())].into()),
                tolerations: Some(vec![Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Equal".into()),
                    value: Some("loki".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let s = effective(&spec);
        let mut a = node("a", &[(ZONE, "a"), ("pool", "loki")]);
        a.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("loki".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        let b = node("b", &[(ZONE, "b"), ("pool", "loki")]);
        let c_other_pool = node("c", &[(ZONE, "c")]);
        let c = check(&s, &[a, b, c_other_pool], &[]);
        assert_eq!(c.zones.len(), 2);
        assert_eq!(c.ineligible, vec![("c".into(), Ineligible::NodeSelector)]);
    }

    #[test]
    fn toleration_matching_rules() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let t = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
            Toleration {
                key: key.map(Into::into),
                operator: op.map(Into::into),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                ..Default::default()
            }
        };
        assert!(tolerates(&t(None, Some("Exists"), None, None), &taint));
        assert!(!tolerates(&t(None, None, None, None), &taint));
        assert!(tolerates(&t(Some("k"), None, Some("v"), None), &taint));
        assert!(!tolerates(&t(Some("k"), None, Some("w"), None), &taint));
        assert!(tolerates(
            &t(Some("k"), Some("Exists"), None, Some("NoSchedule")),
            &taint
        ));
        assert!(!tolerates(
            &t(Some("k"), Some("Exists"), None, Some("NoExecute")),
            &taint
        ));
    }

    #[test]
    fn two_keys_join_in_zones_order_and_count_by_the_joined_string() {
        const RACK: &str = "example.com/rack";
        let keys = [ZONE, RACK];
        // ("a_b", "c") and ("a", "b_c") both join to "a_b_c": Loki sees one zone.
        let nodes = vec![
            node("n1", &[(ZONE, "a_b"), (RACK, "c")]),
            node("n2", &[(ZONE, "a"), (RACK, "b_c")]),
            node("n3", &[(ZONE, "x"), (RACK, "1")]),
        ];
        let c = check(&stack(2, &keys), &nodes, &[]);
        assert_eq!(c.zones.iter().collect::<Vec<_>>(), vec!["a_b_c", "x_1"]);
        let labels: BTreeMap<String, String> = [
            (RACK.to_string(), "r1".to_string()),
            (ZONE.to_string(), "z1".to_string()),
        ]
        .into();
        assert_eq!(zone_of(Some(&labels), [ZONE, RACK]).as_deref(), Ok("z1_r1"));
        assert_eq!(zone_of(Some(&labels), [RACK, ZONE]).as_deref(), Ok("r1_z1"));
        assert_eq!(
            zone_of(Some(&labels), [ZONE, "other"]),
            Err(ZoneLabelError::Missing("other".into()))
        );
    }

    #[test]
    fn name_list_truncates() {
        let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
        assert_eq!(name_list(&names), "n0, n1, n2, n3, n4 and 3 more");
        assert_eq!(name_list(&names[..2]), "n0, n1");
    }

    fn volume(
        claim: &str,
        terms: serde_json::Value,
        labels: serde_json::Value,
    ) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("pv-{claim}"), "labels": labels},
            "spec": {
                "claimRef": {"namespace": "ns", "name": claim},
                "nodeAffinity": {"required": {"nodeSelectorTerms": terms}},
            },
        }))
        .expect("pv")
    }

    fn pinned(claim: &str, zone: &str) -> PersistentVolume {
        let terms = serde_json::json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]);
        volume(claim, terms, serde_json::json!({}))
    }

    #[test]
    fn a_zone_whose_nodes_were_deleted_stays_known_through_the_stacks_volumes() {
        let volumes = [
            pinned("storage-s-ingester-2", "c"),
            pinned("wal-s-ingester-2", "c"),
            pinned("storage-s-ingester-0", "a"),
        ];
        let c = check(&stack(3, &[ZONE]), &nodes_in(&["a", "b"]), &volumes);
        assert_eq!(c.verdict, ZoneVerdict::Ok, "{}", c.message());
        assert_eq!(
            c.zones,
            BTreeSet::from(["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(c.zone_failures_tolerated, 1);
        assert_eq!(c.available, BTreeSet::from(["a".into(), "b".into()]));
        let [u] = c.unavailable.as_slice() else {
            panic!("one unavailable zone: {:?}", c.unavailable)
        };
        assert_eq!(u.zone, "c");
        assert!(u.nodes.is_empty());
        assert_eq!(u.claims, ["storage-s-ingester-2", "wal-s-ingester-2"]);
        assert!(c.write_quorum_met_without(c.unavailable.len()));
        // Without the volumes, the same nodes mean too few zones.
        let bare = check(&stack(3, &[ZONE]), &nodes_in(&["a", "b"]), &[]);
        assert_eq!(bare.verdict, ZoneVerdict::ZonesInsufficient);
    }

    #[test]
    fn a_volumes_zone_comes_from_its_node_affinity_else_its_labels() {
        let keys = [ZONE.to_string(), "rack".to_string()];
        let both = serde_json::json!([{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": ["b"]},
            {"key": "rack", "operator": "In", "values": ["r1"]},
        ]}]);
        let pv = volume("c", both, serde_json::json!({}));
        assert_eq!(volume_zone(&pv, &keys).as_deref(), Some("b_r1"));
        assert_eq!(volume_zone(&pv, &keys[..1]).as_deref(), Some("b"));
        // Terms are alternatives: pinned only where every term agrees.
        let agree = serde_json::json!([
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]},
            {"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": ["b"]},
                {"key": "rack", "operator": "In", "values": ["r1"]},
            ]},
        ]);
        let pv = volume("c", agree, serde_json::json!({}));
        assert_eq!(volume_zone(&pv, &keys[..1]).as_deref(), Some("b"));
        assert_eq!(
            volume_zone(&pv, &keys),
            None,
            "the first term leaves the rack open"
        );
        let two_zones = serde_json::json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]);
        let pv = volume("c", two_zones, serde_json::json!({ZONE: "a"}));
        assert_eq!(
            volume_zone(&pv, &keys[..1]),
            None,
            "the affinity wins over labels"
        );
        let labelled = volume("c", serde_json::json!([]), serde_json::json!({ZONE: "z"}));
        assert_eq!(volume_zone(&labelled, &keys[..1]).as_deref(), Some("z"));
        let anywhere = volume("c", serde_json::json!([]), serde_json::json!({}));
        assert_eq!(volume_zone(&anywhere, &keys[..1]), None);
    }
}
