//! The fast failover's verdict: which zones went silent, from their nodes' Leases.
//!
//! Every kubelet renews its node's Lease in `kube-node-lease` every quarter of the
//! Lease's duration (10 s of the default 40 s). Kubernetes' node lifecycle controller
//! judges one node at a time and waits `--node-monitor-grace-period` (40 s; 50 s from
//! 1.32) before it marks the node NotReady and its pods unready; until then the pods of a
//! stopped zone stay behind their Services, and a share of every client's requests goes
//! to dead addresses. Every node of one zone missing its renewals together, while the
//! other zones renew theirs, is far stronger evidence than one node's silence.
//!
//! Invariants of the verdict:
//! - a zone is late only when every node it has is late, and it has at least one: a
//!   single silent node among live ones is never its zone, and a cordon (whose kubelets
//!   still renew) never a loss;
//! - a node is late once it has missed its renewal and [`Tolerance::missed_renewals`]
//!   more (default [`DEFAULT_MISSED_RENEWALS`]), plus [`LATE_GRACE`]; a zone of one node
//!   tolerates one more (see [`Tolerance::for_zone`]);
//! - lateness is measured on the operator's monotonic clock, from when it last saw each
//!   Lease renewed, never from the `renewTime` a kubelet wrote: a zone whose clocks lag
//!   is not silent, and a step of any wall clock moves nothing;
//! - a late zone is silent only on fresh evidence: a renewal of a node in another zone
//!   that arrived promptly (as fast as that node's renewals usually arrive) after the
//!   moment the zone became late. The Leases come in one watch, in the order the API
//!   server committed them, so such a renewal proves the operator's view moved past that
//!   moment: any renewal of the late zone committed before it was delivered before it. A
//!   view that stalled (a watch reconnecting, a paused API server or etcd, a starved
//!   process) sees no prompt renewal, and a backlog delivered after the stall is not
//!   prompt: neither ever makes a zone silent. The evidence settles for
//!   [`EVIDENCE_SETTLE`] and counts only while no other zone's renewal arrived slowly
//!   around it: a paused API server commits what it held in any order when it resumes;
//! - never more than half of the zones are taken out: a majority silent at once is
//!   likelier the control plane's side than the zones', and Kubernetes' own timers
//!   decide;
//! - a zone counts as renewing (what puts its pods back) only on a renewal this process
//!   saw happen, never on a Lease it merely listed: a process that just started does not
//!   put a zone that is really down back into service.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::checks::zones::{name_list, zone_of};

/// How far past its renewal period a Lease may be before its node counts as late: room
/// for an API server round trip and the watch's delivery.
pub const LATE_GRACE: SignedDuration = SignedDuration::from_secs(2);

/// The share of its duration after which a kubelet renews its Lease (the kubelet's
/// `NodeLeaseRenewIntervalFraction`, fixed at 0.25).
const RENEW_DIVISOR: i32 = 4;

/// The renewals a node may miss before it counts as late, by default: one. A kubelet
/// whose Lease update hangs on a dead connection renews about two periods after its last
/// renewal, and every kubelet of a zone does so together when they share a failing path
/// to the API server; neither is a zone loss. It costs a period: on Kubernetes' default
/// timings a stopped zone leaves its Services 22 s after its last renewal instead of
/// 12 s, still well before the node lifecycle controller's 40 s (50 s from 1.32).
pub const DEFAULT_MISSED_RENEWALS: u32 = 1;

/// How long fresh evidence waits before a zone is taken out: requests that waited in a
/// paused API server are committed in no set order when it resumes, so a renewal of the
/// late zone queued there may come just after another zone's renewal sent later. Within
/// this it has arrived, or the slow renewals of the other zones have shown the pause.
pub const EVIDENCE_SETTLE: SignedDuration = SignedDuration::from_secs(1);

/// The most renewals a stack may set to be missed: past that the failover is no faster
/// than Kubernetes' own grace period, and turning it off says so more plainly.
pub const MAX_MISSED_RENEWALS: u32 = 3;

/// How the verdict tolerates late renewals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tolerance {
    /// Renewals a node may miss, past the one it is due for, before it is late.
    pub missed_renewals: u32,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            missed_renewals: DEFAULT_MISSED_RENEWALS,
        }
    }
}

impl Tolerance {
    /// The renewals the nodes of a zone of `nodes` nodes may miss. A zone of one node
    /// (and every zone under `kubernetes.io/hostname`) tolerates one more: a kubelet
    /// restart, routine in maintenance, silences such a zone whole for a while, where
    /// kubelets of a larger zone restart one at a time and the zone keeps renewing.
    pub fn for_zone(self, nodes: usize) -> u32 {
        self.missed_renewals + u32::from(nodes == 1)
    }
}

/// A node's Lease as the operator saw it, every time on the operator's monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSeen {
    /// When the operator last saw its `renewTime` change, or first saw the Lease.
    pub renewed: Timestamp,
    /// `spec.leaseDurationSeconds`.
    pub duration_secs: i32,
    /// This process saw the Lease renewed (not only listed it).
    pub renewal_seen: bool,
    /// When its last renewal that arrived promptly was seen: one that took no longer
    /// from its `renewTime` to the operator than that node's quickest recent renewals,
    /// so it cannot be a backlog delivered after a stall.
    pub prompt_at: Option<Timestamp>,
    /// When its last renewal that arrived slowly (not promptly, its baseline known) was
    /// seen: a sign that the view stalled and delivered a backlog.
    pub slow_at: Option<Timestamp>,
    /// The position of its last renewal in the order the operator saw Lease events.
    pub seq: u64,
}

impl LeaseSeen {
    /// The node's renewal period: a quarter of its Lease's duration.
    pub fn period(&self) -> SignedDuration {
        SignedDuration::from_secs(i64::from(self.duration_secs.max(1))) / RENEW_DIVISOR
    }

    /// When the node counts as late, allowing `missed` renewals past the one it is due
    /// for, and [`LATE_GRACE`].
    pub fn late_at(&self, missed: u32) -> Timestamp {
        let periods = i32::try_from(missed.saturating_add(1)).unwrap_or(i32::MAX);
        self.period()
            .checked_mul(periods)
            .and_then(|d| d.checked_add(LATE_GRACE))
            .and_then(|d| self.renewed.checked_add(d).ok())
            .unwrap_or(Timestamp::MAX)
    }

    pub fn late(&self, now: Timestamp, missed: u32) -> bool {
        now > self.late_at(missed)
    }

    /// Seen renewing by this process within its renewal period and grace.
    pub fn renewing(&self, now: Timestamp) -> bool {
        self.renewal_seen && !self.late(now, 0)
    }
}

/// The Leases as the operator's watch delivered them, at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// By node name.
    pub leases: HashMap<String, LeaseSeen>,
    /// The operator's monotonic clock when the view was taken.
    pub now: Timestamp,
    /// The Lease events seen so far (the newest one's position).
    pub seq: u64,
}

/// A zone every node of which is late.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilentZone {
    pub zone: String,
    /// Its nodes, sorted.
    pub nodes: Vec<String>,
    /// When the operator last saw one of them renewed.
    pub last_renewed: Timestamp,
    /// When the last of them became late.
    pub late_at: Timestamp,
}

impl SilentZone {
    /// "zone a (its node Leases n1, n2 not renewed for 24 s)".
    pub fn describe(&self, now: Timestamp) -> String {
        let secs = now.duration_since(self.last_renewed).as_secs();
        format!(
            "zone {} (its node Leases {} not renewed for {secs} s)",
            self.zone,
            name_list(&self.nodes)
        )
    }
}

/// Which zones to take out of service now, and which count as renewing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Silence {
    /// Silent zones to take out, sorted.
    pub out: Vec<SilentZone>,
    /// Late zones left to Kubernetes' own timers, and why.
    pub held: Option<(Vec<SilentZone>, String)>,
    /// Zones some node of which this process saw renewing within its period: the only
    /// zones whose pods are put back.
    pub renewing: BTreeSet<String>,
}

/// One zone's nodes and Leases.
#[derive(Default)]
struct ZoneLeases<'a> {
    nodes: Vec<String>,
    leases: Vec<&'a LeaseSeen>,
    /// A node has no Lease seen: the zone is never late.
    unseen: bool,
}

/// The most zones taken out at once, of `zones` known: half, rounded down, and one
/// of two.
pub fn most_out(zones: usize) -> usize {
    (zones / 2).max(1)
}

/// Every node with the `keys`, by zone. Every such node counts, whether or not a stack
/// runs there: the zone is what is judged.
fn by_zone<'a, 'n>(
    keys: &[String],
    nodes: impl IntoIterator<Item = &'n Node>,
    view: &'a LeaseView,
) -> BTreeMap<String, ZoneLeases<'a>> {
    let mut zones: BTreeMap<String, ZoneLeases> = BTreeMap::new();
    for node in nodes {
        let labels = node.metadata.labels.as_ref();
        let Ok(zone) = zone_of(labels, keys.iter().map(String::as_str)) else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        let z = zones.entry(zone).or_default();
        match view.leases.get(&name) {
            Some(l) => z.leases.push(l),
            None => z.unseen = true,
        }
        z.nodes.push(name);
    }
    zones
}

/// The zone, if every node it has is late at `now`.
fn late_zone(
    zone: &str,
    z: &ZoneLeases,
    tolerance: Tolerance,
    now: Timestamp,
) -> Option<SilentZone> {
    if z.unseen || z.leases.is_empty() {
        return None;
    }
    let missed = tolerance.for_zone(z.nodes.len());
    let late_at = z.leases.iter().map(|l| l.late_at(missed)).max()?;
    let last_renewed = z.leases.iter().map(|l| l.renewed).max()?;
    let mut nodes = z.nodes.clone();
    nodes.sort();
    (now > late_at).then(|| SilentZone {
        zone: zone.to_string(),
        nodes,
        last_renewed,
        late_at,
    })
}

/// The fresh evidence for `silent`: a renewal of a node of another zone that arrived
/// promptly after the zone became late, at least [`EVIDENCE_SETTLE`] before `now`, with
/// no renewal of another zone arriving slowly from a renewal period before it until now
/// (a backlog around it: the view stalled, and a resumed API server may commit what it
/// held in any order). The late zone's own slow renewals are its own trouble, not the
/// view's.
fn seen_past(silent: &SilentZone, zones: &BTreeMap<String, ZoneLeases>, now: Timestamp) -> bool {
    let others: Vec<&LeaseSeen> = zones
        .iter()
        .filter(|(zone, _)| **zone != silent.zone)
        .flat_map(|(_, z)| z.leases.iter().copied())
        .collect();
    let settled = |t: Timestamp| t.checked_add(EVIDENCE_SETTLE).is_ok_and(|s| s <= now);
    others.iter().any(|l| {
        let Some(t) = l.prompt_at.filter(|t| *t > silent.late_at && settled(*t)) else {
            return false;
        };
        let calm_since = t.checked_sub(l.period()).unwrap_or(Timestamp::MIN);
        !others
            .iter()
            .any(|o| o.slow_at.is_some_and(|s| s >= calm_since))
    })
}

/// The silent zones of a zone-aware stack whose zone strings come from `keys`.
pub fn silence<'a>(
    keys: &[String],
    nodes: impl IntoIterator<Item = &'a Node>,
    view: &LeaseView,
    tolerance: Tolerance,
) -> Silence {
    let zones = by_zone(keys, nodes, view);
    let renewing = zones
        .iter()
        .filter(|(_, z)| z.leases.iter().any(|l| l.renewing(view.now)))
        .map(|(zone, _)| zone.clone())
        .collect();
    let late: Vec<SilentZone> = zones
        .iter()
        .filter_map(|(zone, z)| late_zone(zone, z, tolerance, view.now))
        .collect();
    let (silent, unproven): (Vec<_>, Vec<_>) = late
        .into_iter()
        .partition(|s| seen_past(s, &zones, view.now));
    let most = most_out(zones.len());
    let (out, held) = if silent.len() > most {
        let why = format!(
            "{} zones silent together, more than half of the zones (at most {most} are taken out): likelier the control plane's side than the zones'",
            silent.len()
        );
        let mut all = silent;
        all.extend(unproven);
        all.sort_by(|a, b| a.zone.cmp(&b.zone));
        (Vec::new(), Some((all, why)))
    } else if unproven.is_empty() {
        (silent, None)
    } else {
        let why = "no other zone's Lease renewal has reached the operator promptly since they went late: the operator's own view of the API server may be what stopped".to_string();
        (silent, Some((unproven, why)))
    };
    Silence {
        out,
        held,
        renewing,
    }
}

#[cfg(test)]
mod tests;
