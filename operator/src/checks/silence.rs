//! The fast failover's verdict: which zones went silent, from their nodes' Leases.
//!
//! Every kubelet renews its node's Lease in `kube-node-lease` every quarter of the
//! Lease's duration (10 s of the default 40 s). Kubernetes' node lifecycle controller
//! judges one node at a time and waits `--node-monitor-grace-period` (40 s; 50 s from
//! 1.32) before it marks the node NotReady and its pods unready; until then the pods of a
//! stopped zone stay behind their Services, and a share of every client's requests goes
//! to dead addresses. Every node of one zone missing its renewal together, while the
//! other zones renew theirs, is far stronger evidence than one node's silence, and it is
//! there a renewal period after the stop.
//!
//! Invariants of the verdict:
//! - a zone is silent only when every node it has is late, by a full renewal period and
//!   a grace ([`LATE_GRACE`]), and it has at least one: a single silent node among live
//!   ones is never its zone, and a cordon (whose kubelets still renew) never a loss;
//! - lateness is measured on the operator's own clock, from when it last saw each Lease
//!   renewed, never from the `renewTime` a kubelet wrote: a zone whose clocks lag is not
//!   silent (the node lifecycle controller measures the same way);
//! - zones are taken out only while another zone is seen renewing (else the operator's
//!   own view may be what stopped: Kubernetes' node lifecycle controller, too, stops
//!   evicting when every zone looks down), and never more than half of the zones: a
//!   majority silent at once is likelier the control plane's side than the zones', and
//!   Kubernetes' own timers decide.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::checks::zones::{name_list, zone_of};

/// How far past its renewal period a Lease may be before its node counts as late: room
/// for an API server round trip and the watch's delivery.
pub const LATE_GRACE: SignedDuration = SignedDuration::from_secs(2);

/// The share of its duration after which a kubelet renews its Lease (the kubelet's
/// `NodeLeaseRenewIntervalFraction`, fixed at 0.25).
const RENEW_DIVISOR: i64 = 4;

/// A node's Lease as the operator saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSeen {
    /// When the operator last saw its `renewTime` change (or first saw the Lease).
    pub renewed: Timestamp,
    /// `spec.leaseDurationSeconds`.
    pub duration_secs: i32,
}

impl LeaseSeen {
    /// When the node counts as late: a renewal period and [`LATE_GRACE`] after it was
    /// last seen renewed.
    pub fn late_at(&self) -> Timestamp {
        let period =
            SignedDuration::from_secs(i64::from(self.duration_secs.max(1))) / RENEW_DIVISOR as i32;
        self.renewed
            .checked_add(period + LATE_GRACE)
            .unwrap_or(Timestamp::MAX)
    }

    pub fn late(&self, now: Timestamp) -> bool {
        now > self.late_at()
    }
}

/// A zone every node of which is late.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilentZone {
    pub zone: String,
    /// Its nodes, sorted.
    pub nodes: Vec<String>,
    /// When the operator last saw one of them renewed.
    pub last_renewed: Timestamp,
}

impl SilentZone {
    /// "zone a (nodes n1, n2; silent for 14 s)".
    pub fn describe(&self, now: Timestamp) -> String {
        let secs = now.duration_since(self.last_renewed).as_secs();
        format!(
            "zone {} (its node Leases {} not renewed for {secs} s)",
            self.zone,
            name_list(&self.nodes)
        )
    }
}

/// Which zones to take out of service now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Silence {
    /// Silent zones to take out, sorted.
    pub out: Vec<SilentZone>,
    /// Silent zones left to Kubernetes' own timers, and why.
    pub held: Option<(Vec<SilentZone>, String)>,
}

#[derive(Default)]
struct ZoneLeases {
    nodes: Vec<String>,
    /// Every node has a Lease and is late.
    all_late: bool,
    /// Some node renewed within its period.
    renewing: bool,
    last_renewed: Option<Timestamp>,
}

/// The most zones taken out at once, of `zones` known: half, rounded down, and one
/// of two.
pub fn most_out(zones: usize) -> usize {
    (zones / 2).max(1)
}

/// The silent zones of a zone-aware stack whose zone strings come from `keys`. Every
/// node with the keys counts, whether or not the stack runs there: the zone is what is
/// judged. A node without a Lease seen is never late.
pub fn silence<'a>(
    keys: &[String],
    nodes: impl IntoIterator<Item = &'a Node>,
    leases: &HashMap<String, LeaseSeen>,
    now: Timestamp,
) -> Silence {
    let mut zones: BTreeMap<String, ZoneLeases> = BTreeMap::new();
    for node in nodes {
        let Ok(zone) = zone_of(
            node.metadata.labels.as_ref(),
            keys.iter().map(String::as_str),
        ) else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        let z = zones.entry(zone).or_insert_with(|| ZoneLeases {
            all_late: true,
            ..ZoneLeases::default()
        });
        match leases.get(&name) {
            Some(l) => {
                let late = l.late(now);
                z.all_late &= late;
                z.renewing |= !late;
                z.last_renewed = z.last_renewed.max(Some(l.renewed));
            }
            None => z.all_late = false,
        }
        z.nodes.push(name);
    }
    let renewing = zones.values().any(|z| z.renewing);
    let most = most_out(zones.len());
    let silent: Vec<SilentZone> = zones
        .into_iter()
        .filter(|(_, z)| z.all_late && !z.nodes.is_empty())
        .filter_map(|(zone, mut z)| {
            z.nodes.sort();
            Some(SilentZone {
                zone,
                nodes: z.nodes,
                last_renewed: z.last_renewed?,
            })
        })
        .collect();
    if silent.is_empty() {
        return Silence::default();
    }
    let why = if !renewing {
        Some("no zone's node Leases are seen renewed: the operator's own view of the API server may be what stopped".to_string())
    } else if silent.len() > most {
        Some(format!(
            "{} zones silent together, more than half of the zones (at most {most} are taken out): likelier the control plane's side than the zones'",
            silent.len()
        ))
    } else {
        None
    };
    match why {
        Some(why) => Silence {
            out: Vec::new(),
            held: Some((silent, why)),
        },
        None => Silence {
            out: silent,
            held: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, ZONE};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("ts")
    }

    /// Nodes a1, a2 in zone a, b1 in b, c1 in c.
    fn nodes() -> Vec<Node> {
        [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")]
            .into_iter()
            .map(|(n, z)| node(n, &[(ZONE, z)]))
            .collect()
    }

    /// Each node last seen renewed at the given second, with the default 40 s Lease
    /// (renewed every 10 s: late 12 s after its last renewal).
    fn seen(renewed: &[(&str, i64)]) -> HashMap<String, LeaseSeen> {
        renewed
            .iter()
            .map(|(n, s)| {
                let l = LeaseSeen {
                    renewed: at(*s),
                    duration_secs: 40,
                };
                (n.to_string(), l)
            })
            .collect()
    }

    fn verdict(renewed: &[(&str, i64)], now: i64) -> Silence {
        let keys = vec![ZONE.to_string()];
        silence(&keys, &nodes(), &seen(renewed), at(now))
    }

    fn out(s: &Silence) -> Vec<&str> {
        s.out.iter().map(|z| z.zone.as_str()).collect()
    }

    #[test]
    fn a_zone_whose_leases_all_stopped_is_out_a_renewal_period_later() {
        // Zone a stopped at 0: a1 renewed last at -3, a2 at -1; b and c keep renewing.
        let alive = |now: i64| [("a1", -3), ("a2", -1), ("b1", now - 1), ("c1", now - 4)];
        let at_10 = verdict(&alive(10), 10);
        assert!(at_10.out.is_empty() && at_10.held.is_none(), "{at_10:?}");
        // a2 is late 12 s after -1, at 11; both are at 12.
        assert!(verdict(&alive(11), 11).out.is_empty());
        let at_12 = verdict(&alive(12), 12);
        assert_eq!(out(&at_12), vec!["a"]);
        assert_eq!(at_12.out[0].nodes, vec!["a1", "a2"]);
        assert_eq!(at_12.out[0].last_renewed, at(-1));
        assert!(at_12.out[0]
            .describe(at(12))
            .contains("not renewed for 13 s"));
    }

    #[test]
    fn one_stale_node_among_live_ones_is_never_its_zone() {
        let s = verdict(&[("a1", -30), ("a2", 19), ("b1", 19), ("c1", 19)], 20);
        assert_eq!(s, Silence::default());
    }

    #[test]
    fn a_cordoned_zone_renews_its_leases_and_is_never_out() {
        // A cordon is a spec field: its kubelets keep renewing, which is all this reads.
        let mut ns = nodes();
        for n in ns
            .iter_mut()
            .filter(|n| n.metadata.name.as_deref() == Some("b1"))
        {
            n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        }
        let keys = vec![ZONE.to_string()];
        let leases = seen(&[("a1", 19), ("a2", 19), ("b1", 19), ("c1", 19)]);
        assert_eq!(silence(&keys, &ns, &leases, at(20)), Silence::default());
    }

    #[test]
    fn a_partition_that_heals_puts_the_zone_back() {
        let during = verdict(&[("a1", 0), ("a2", 0), ("b1", 29), ("c1", 29)], 30);
        assert_eq!(out(&during), vec!["a"]);
        // The partition heals: a's kubelets renew again, and the zone is not silent.
        let healed = verdict(&[("a1", 31), ("a2", 30), ("b1", 31), ("c1", 31)], 32);
        assert_eq!(healed, Silence::default());
        // One node back is enough: the zone is no longer silent as a whole.
        let half = verdict(&[("a1", 0), ("a2", 31), ("b1", 31), ("c1", 31)], 32);
        assert_eq!(half, Silence::default());
    }

    #[test]
    fn nothing_goes_out_while_no_zone_is_seen_renewing() {
        // The operator's watch stalled, or the API server: every Lease looks old.
        let s = verdict(&[("a1", 0), ("a2", 0), ("b1", 0), ("c1", 0)], 60);
        assert!(s.out.is_empty());
        let (zones, why) = s.held.expect("held");
        assert_eq!(zones.len(), 3);
        assert!(why.contains("own view"), "{why}");
    }

    #[test]
    fn never_more_than_half_of_the_zones() {
        let s = verdict(&[("a1", 0), ("a2", 0), ("b1", 0), ("c1", 59)], 60);
        assert!(s.out.is_empty());
        let (zones, why) = s.held.expect("held");
        assert_eq!(zones.len(), 2);
        assert!(why.contains("at most 1 are taken out"), "{why}");
        assert_eq!(
            [1, 1, 1, 2, 2, 3].to_vec(),
            (1..=6).map(most_out).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_node_without_a_lease_keeps_its_zone_in() {
        // a2's Lease was never seen (a new node; or the Leases cannot be read at all).
        let s = verdict(&[("a1", 0), ("b1", 59), ("c1", 59)], 60);
        assert_eq!(s, Silence::default());
        assert_eq!(
            silence(&[ZONE.to_string()], &nodes(), &HashMap::new(), at(60)),
            Silence::default()
        );
    }

    #[test]
    fn the_renewal_period_follows_the_lease_duration() {
        // Kubelets with nodeLeaseDurationSeconds 8 renew every 2 s: late after 4 s.
        let l = LeaseSeen {
            renewed: at(0),
            duration_secs: 8,
        };
        assert_eq!(l.late_at(), at(4));
        assert!(!l.late(at(4)) && l.late(at(5)));
        let default = LeaseSeen {
            duration_secs: 40,
            ..l
        };
        assert_eq!(default.late_at(), at(12));
    }
}
