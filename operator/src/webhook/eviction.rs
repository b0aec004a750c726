//! Zone-aware disruptions: what the webhook answers for one `pods/eviction` CREATE of an
//! ingester of a zone-aware stack. Pure, so every rule is tested offline.
//!
//! Every stream has one copy per zone. Any number of one zone's ingesters may be down at
//! once (a whole zone being drained or rolled) without a stream losing more than one
//! copy; an ingester down in a second zone at the same time takes a second copy, and
//! with a replication factor of 3 that stream falls below its write quorum. So an
//! eviction is allowed when every ingester that is unavailable (not Ready, being
//! deleted, on a node that is down, evicted moments ago, or one Kubernetes may still
//! evict after a node loss: `checks/taint_evictions.rs`) is in the zone of the pod
//! being evicted, and at most `spec.replication.maxUnavailablePerZone` of that zone's
//! ingesters would then be down; it is refused otherwise, with the zone that is
//! disrupted named. The PodDisruptionBudget still applies after this webhook allows.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::checks::podzone::node_name;
use crate::model::conditions::pod_phase;
use crate::model::conditions::PodPhase;

/// Why an ingester counts as unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    NotReady,
    Terminating,
    NodeDown,
    /// This webhook allowed its eviction a moment ago; the cache does not show it yet.
    EvictionAllowed,
    /// Evicted, and its StatefulSet has not recreated it yet (or the cache not shown it).
    Recreating,
    /// Ready, on a node that is cordoned: its zone is in maintenance and about to be
    /// drained. It disrupts its zone for the other zones, not for its own.
    Cordoned,
    /// Ready, but Kubernetes marked it for deletion or its node for eviction
    /// (`checks/taint_evictions.rs`).
    TaintEviction,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Why::NotReady => "not Ready",
            Why::Terminating => "being deleted",
            Why::NodeDown => "on a node that is down",
            Why::EvictionAllowed => "being evicted",
            Why::Recreating => "evicted, not recreated yet",
            Why::Cordoned => "on a cordoned node: its zone is in maintenance",
            Why::TaintEviction => "being evicted by Kubernetes",
        })
    }
}

/// One ingester of the stack, with what the webhook knows of it.
#[derive(Clone, Debug)]
pub struct Ingester<'a> {
    pub pod: &'a Pod,
    pub name: &'a str,
    /// Where its copies live: its zone annotation, else its node's zone, else the zone
    /// its volumes are pinned to, else the zone it had when its eviction was allowed.
    pub zone: Option<String>,
    /// Its node is not Ready or is unreachable.
    pub node_down: bool,
    /// Its node is cordoned (and not down).
    pub node_cordoned: bool,
    /// This webhook allowed its eviction moments ago.
    pub eviction_allowed: bool,
    /// Ready, but Kubernetes announced its deletion (`DisruptionTarget`) or its node
    /// carries a `NoExecute` taint it does not tolerate for good
    /// (`checks/taint_evictions.rs`). A node back from an outage lately is not counted
    /// here, unlike in the rollout: a node that just joined looks the same, and the
    /// webhook would refuse drains for a toleration after every new node on no evidence
    /// of an eviction; the rollout, which only delays its own restarts, waits instead.
    pub evicting: bool,
}

impl Ingester<'_> {
    pub fn down(&self) -> Option<Why> {
        if self.pod.metadata.deletion_timestamp.is_some() {
            Some(Why::Terminating)
        } else if self.eviction_allowed {
            Some(Why::EvictionAllowed)
        } else if self.node_down {
            Some(Why::NodeDown)
        } else if pod_phase(self.pod) != PodPhase::Ready {
            Some(Why::NotReady)
        } else if self.evicting {
            Some(Why::TaintEviction)
        } else {
            None
        }
    }

    /// A pod that was never scheduled and has no volume holds no copy of any stream
    /// (a new replica): it disrupts nothing, wherever it lands.
    fn holds_nothing(&self) -> bool {
        self.zone.is_none() && node_name(self.pod).is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The ingester is already unavailable: evicting it takes nothing more away.
    AlreadyDown,
    Allow {
        zone: String,
    },
    Deny(Denial),
}

/// An unavailable ingester, as a denial names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    pub pod: String,
    pub why: Why,
}

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.pod, self.why)
    }
}

fn list(down: &[Down]) -> String {
    down.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// Another zone is disrupted.
    SecondZone {
        pod: String,
        zone: String,
        disrupted: String,
        down: Vec<Down>,
    },
    /// The pod's own zone has as many ingesters down as the stack allows.
    ZoneFull {
        pod: String,
        zone: String,
        max: usize,
        down: Vec<Down>,
    },
    /// The pod runs but nothing says which zone it is in.
    ZoneUnknown { pod: String },
    /// An unavailable ingester runs on a node whose zone is not known.
    DownZoneUnknown { pod: String, down: Vec<Down> },
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::SecondZone { pod, zone, disrupted, down } => write!(
                f,
                "evicting ingester {pod} (zone {zone}) would disrupt a second zone: zone {disrupted} is disrupted, {}. Every stream keeps one copy per zone, so only one zone may be disrupted at a time; retry once zone {disrupted} is whole again (drain one zone at a time)",
                list(down)
            ),
            Denial::ZoneFull { pod, zone, max, down } => write!(
                f,
                "evicting ingester {pod} would leave more than {max} ingester(s) of zone {zone} unavailable (spec.replication.maxUnavailablePerZone): {}; retry once one of them is Ready",
                list(down)
            ),
            Denial::ZoneUnknown { pod } => write!(
                f,
                "the zone of ingester {pod} is not known yet (no zone annotation and its node's zone unknown to the operator); retry in a few seconds"
            ),
            Denial::DownZoneUnknown { pod, down } => write!(
                f,
                "evicting ingester {pod} is refused while an unavailable ingester's zone is not known: {}; retry once it is scheduled or Ready",
                list(down)
            ),
        }
    }
}

/// An ingester whose eviction was allowed and which the cache does not hold: deleted,
/// and not recreated yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    pub name: String,
    pub zone: String,
}

/// The decision for evicting `target`, one of `ingesters` (the stack's ingesters, the
/// target included); `gone` are evicted ingesters not back yet. `max_per_zone` is
/// `spec.replication.maxUnavailablePerZone`; `None` allows the whole zone.
pub fn decide(
    target: &Ingester<'_>,
    ingesters: &[Ingester<'_>],
    gone: &[Gone],
    max_per_zone: Option<usize>,
) -> Verdict {
    if target.down().is_some() {
        return Verdict::AlreadyDown;
    }
    let Some(zone) = target.zone.clone() else {
        return Verdict::Deny(Denial::ZoneUnknown {
            pod: target.name.to_string(),
        });
    };
    let mut by_zone = down_by_zone(target.name, &zone, ingesters, gone);
    if let Some(down) = by_zone.get(&None) {
        return Verdict::Deny(Denial::DownZoneUnknown {
            pod: target.name.to_string(),
            down: down.clone(),
        });
    }
    if let Some((Some(other), down)) = by_zone.iter().find(|(z, _)| **z != Some(zone.as_str())) {
        return Verdict::Deny(Denial::SecondZone {
            pod: target.name.to_string(),
            zone,
            disrupted: other.to_string(),
            down: down.clone(),
        });
    }
    let same = by_zone.remove(&Some(zone.as_str())).unwrap_or_default();
    match max_per_zone {
        Some(max) if same.len() + 1 > max => Verdict::Deny(Denial::ZoneFull {
            pod: target.name.to_string(),
            zone,
            max,
            down: same,
        }),
        _ => Verdict::Allow { zone },
    }
}

/// The other ingesters that are down, by zone: not Ready, going, gone, or (in another
/// zone than the target's) on a cordoned node.
fn down_by_zone<'a>(
    target: &str,
    zone: &str,
    ingesters: &'a [Ingester<'_>],
    gone: &'a [Gone],
) -> BTreeMap<Option<&'a str>, Vec<Down>> {
    let mut by_zone: BTreeMap<Option<&str>, Vec<Down>> = BTreeMap::new();
    for i in ingesters.iter().filter(|i| i.name != target) {
        let cordoned =
            (i.node_cordoned && i.zone.as_deref() != Some(zone)).then_some(Why::Cordoned);
        let Some(why) = i.down().or(cordoned) else {
            continue;
        };
        if i.holds_nothing() {
            continue;
        }
        by_zone.entry(i.zone.as_deref()).or_default().push(Down {
            pod: i.name.to_string(),
            why,
        });
    }
    for g in gone.iter().filter(|g| g.name != target) {
        by_zone
            .entry(Some(g.zone.as_str()))
            .or_default()
            .push(Down {
                pod: g.name.clone(),
                why: Why::Recreating,
            });
    }
    by_zone
}

/// How long an allowed eviction counts as disruption before the cache shows the pod
/// being deleted: the API server deletes it right after the webhook answers, so this only
/// covers the cache's lag (and an eviction the PodDisruptionBudget then refused).
pub const IN_FLIGHT: Duration = Duration::from_secs(10);
/// How long an evicted ingester missing from the cache counts as disruption: its
/// StatefulSet recreates it within seconds, so one missing for longer was scaled away.
pub const GONE_FOR: Duration = Duration::from_secs(120);
/// Grants older than this are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

struct Grant {
    uid: String,
    zone: String,
    at: Instant,
}

/// The evictions this replica allowed, by namespace, stack and pod name. Concurrent
/// reviews (a drain evicts in parallel) see each other's decisions before the cache
/// does; an evicted pod counts until its successor is in the cache; and a recreated pod
/// that cannot schedule yet keeps the zone its predecessor had.
#[derive(Default)]
pub struct Grants {
    inner: Mutex<HashMap<(String, String, String), Grant>>,
}

/// Which eviction is reviewed.
pub struct Review<'a> {
    pub namespace: &'a str,
    pub stack: &'a str,
    pub uid: &'a str,
    /// Index of the pod being evicted in the ingesters.
    pub target: usize,
    pub max_per_zone: Option<usize>,
    pub dry_run: bool,
}

impl Grants {
    /// Decides and, when allowed, records, under one lock: two reviews never both pass
    /// on the same picture.
    pub fn decide_and_record(&self, r: &Review<'_>, mut ingesters: Vec<Ingester<'_>>) -> Verdict {
        let mut grants = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        grants.retain(|_, g| g.at.elapsed() < FORGET_AFTER);
        let key = |name: &str| {
            (
                r.namespace.to_string(),
                r.stack.to_string(),
                name.to_string(),
            )
        };
        for i in &mut ingesters {
            if let Some(g) = grants.get(&key(i.name)) {
                let uid = i.pod.metadata.uid.as_deref().unwrap_or_default();
                i.eviction_allowed = g.uid == uid && g.at.elapsed() < IN_FLIGHT;
                if i.zone.is_none() {
                    i.zone = Some(g.zone.clone());
                }
            }
        }
        let gone: Vec<Gone> = grants
            .iter()
            .filter(|((ns, stack, name), g)| {
                ns == r.namespace
                    && stack == r.stack
                    && g.at.elapsed() < GONE_FOR
                    && !ingesters.iter().any(|i| i.name == name)
            })
            .map(|((_, _, name), g)| Gone {
                name: name.clone(),
                zone: g.zone.clone(),
            })
            .collect();
        let Some(t) = ingesters.get(r.target) else {
            return Verdict::AlreadyDown;
        };
        let verdict = decide(t, &ingesters, &gone, r.max_per_zone);
        if let (Verdict::Allow { zone }, false) = (&verdict, r.dry_run) {
            let grant = Grant {
                uid: r.uid.to_string(),
                zone: zone.clone(),
                at: Instant::now(),
            };
            grants.insert(key(t.name), grant);
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn pod(name: &str, ready: bool, node: Option<&str>) -> Pod {
        let p = testing::pod(name).uid(&format!("uid-{name}"));
        match node {
            Some(n) => p.on(n).ready_is(ready),
            None => p.phase("Pending").ready_is(ready),
        }
        .build()
    }

    fn terminating(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        p
    }

    /// Six ingesters, two per zone, all Ready: `i-0`,`i-1` in a, `i-2`,`i-3` in b, `i-4`,`i-5` in c.
    fn six() -> Vec<Pod> {
        (0..6)
            .map(|n| pod(&format!("i-{n}"), true, Some("node")))
            .collect()
    }

    fn zone_of(n: usize) -> &'static str {
        ["a", "b", "c"][n / 2]
    }

    fn ingesters(pods: &[Pod]) -> Vec<Ingester<'_>> {
        pods.iter()
            .enumerate()
            .map(|(n, p)| Ingester {
                pod: p,
                name: p.metadata.name.as_deref().expect("name"),
                zone: Some(zone_of(n).to_string()),
                node_down: false,
                node_cordoned: false,
                eviction_allowed: false,
                evicting: false,
            })
            .collect()
    }

    /// Zone b's nodes are cordoned (the first step of draining it): its ingesters serve,
    /// and may be evicted, but no other zone's may.
    #[test]
    fn a_cordoned_zone_is_the_one_being_disrupted() {
        let pods = six();
        let mut all = ingesters(&pods);
        all[2].node_cordoned = true;
        all[3].node_cordoned = true;
        assert_eq!(
            decide(&all[2], &all, &[], Some(1)),
            Verdict::Allow { zone: "b".into() },
            "a cordon does not count against the zone's own maximum"
        );
        let Verdict::Deny(d) = decide(&all[0], &all, &[], None) else {
            panic!("a second zone while b is in maintenance");
        };
        let msg = d.to_string();
        assert!(
            msg.contains(
                "zone b is disrupted, i-2 (on a cordoned node: its zone is in maintenance)"
            ),
            "{msg}"
        );
    }

    /// Kubernetes is evicting zone a's ingesters, though they are Ready: zone b's may not
    /// go meanwhile; zone a's may.
    #[test]
    fn a_zone_kubernetes_is_evicting_is_disrupted() {
        let pods = six();
        let mut all = ingesters(&pods);
        all[0].evicting = true;
        all[1].evicting = true;
        let Verdict::Deny(d) = decide(&all[2], &all, &[], None) else {
            panic!("a second zone while Kubernetes evicts zone a's ingesters");
        };
        let msg = d.to_string();
        assert!(
            msg.contains("zone a is disrupted, i-0 (being evicted by Kubernetes), i-1 (being evicted by Kubernetes)"),
            "{msg}"
        );
        assert_eq!(decide(&all[0], &all, &[], None), Verdict::AlreadyDown);
    }

    #[test]
    fn a_whole_zone_may_go_but_not_a_second_one() {
        let pods = six();
        let all = ingesters(&pods);
        assert_eq!(
            decide(&all[0], &all, &[], None),
            Verdict::Allow { zone: "a".into() }
        );
        let mut pods = six();
        pods[0] = terminating(pods[0].clone());
        let all = ingesters(&pods);
        assert_eq!(
            decide(&all[1], &all, &[], None),
            Verdict::Allow { zone: "a".into() }
        );
        let Verdict::Deny(d) = decide(&all[2], &all, &[], None) else {
            panic!("a second zone must be refused");
        };
        let msg = d.to_string();
        assert!(
            msg.contains("zone a is disrupted, i-0 (being deleted)"),
            "{msg}"
        );
        assert!(msg.contains("ingester i-2 (zone b)"), "{msg}");
    }

    #[test]
    fn not_ready_and_nodes_down_disrupt_their_zone() {
        let mut pods = six();
        pods[4] = pod("i-4", false, Some("node"));
        let all = ingesters(&pods);
        assert!(
            matches!(decide(&all[0], &all, &[], None), Verdict::Deny(Denial::SecondZone { ref disrupted, .. }) if disrupted == "c")
        );
        assert_eq!(
            decide(&all[5], &all, &[], None),
            Verdict::Allow { zone: "c".into() }
        );
        let pods = six();
        let mut all = ingesters(&pods);
        all[3].node_down = true;
        assert!(
            matches!(decide(&all[0], &all, &[], None), Verdict::Deny(Denial::SecondZone { ref disrupted, .. }) if disrupted == "b")
        );
    }

    #[test]
    fn the_per_zone_maximum_counts_the_zone_s_own_pods() {
        let mut pods = six();
        pods[0] = terminating(pods[0].clone());
        let all = ingesters(&pods);
        let Verdict::Deny(d) = decide(&all[1], &all, &[], Some(1)) else {
            panic!("over the per-zone maximum");
        };
        assert!(
            d.to_string().contains("more than 1 ingester(s) of zone a"),
            "{d}"
        );
        assert_eq!(
            decide(&all[1], &all, &[], Some(2)),
            Verdict::Allow { zone: "a".into() }
        );
    }

    #[test]
    fn an_unavailable_pod_is_evicted_freely_and_a_new_replica_disrupts_nothing() {
        let mut pods = six();
        pods[2] = pod("i-2", false, Some("node"));
        pods[4] = pod("i-4", false, None);
        let mut all = ingesters(&pods);
        all[4].zone = None;
        assert_eq!(decide(&all[2], &all, &[], None), Verdict::AlreadyDown);
        // i-4 never ran and has no volume: it holds no copy, so only zone b counts.
        assert!(
            matches!(decide(&all[0], &all, &[], None), Verdict::Deny(Denial::SecondZone { ref disrupted, .. }) if disrupted == "b")
        );
        assert_eq!(
            decide(&all[3], &all, &[], None),
            Verdict::Allow { zone: "b".into() }
        );
    }

    #[test]
    fn unknown_zones_refuse() {
        let mut pods = six();
        pods[4] = pod("i-4", false, Some("node"));
        let mut all = ingesters(&pods);
        all[4].zone = None;
        assert!(matches!(
            decide(&all[0], &all, &[], None),
            Verdict::Deny(Denial::DownZoneUnknown { .. })
        ));
        let pods = six();
        let mut all = ingesters(&pods);
        all[0].zone = None;
        assert!(matches!(
            decide(&all[0], &all, &[], None),
            Verdict::Deny(Denial::ZoneUnknown { .. })
        ));
    }

    fn review(target: usize, dry_run: bool) -> Review<'static> {
        const UIDS: [&str; 6] = [
            "uid-i-0", "uid-i-1", "uid-i-2", "uid-i-3", "uid-i-4", "uid-i-5",
        ];
        Review {
            namespace: "ns",
            stack: "s",
            uid: UIDS[target],
            target,
            max_per_zone: None,
            dry_run,
        }
    }

    /// A drain evicts in parallel: the second review must see the first one's grant
    /// before the cache shows the pod going, and a recreated pod that cannot schedule
    /// keeps its predecessor's zone.
    #[test]
    fn grants_are_seen_before_the_cache_and_keep_the_zone() {
        let grants = Grants::default();
        let pods = six();
        let v = grants.decide_and_record(&review(0, false), ingesters(&pods));
        assert_eq!(v, Verdict::Allow { zone: "a".into() });
        let v = grants.decide_and_record(&review(2, false), ingesters(&pods));
        assert!(
            matches!(v, Verdict::Deny(Denial::SecondZone { ref down, .. }) if down[0].why == Why::EvictionAllowed),
            "{v:?}"
        );
        // A dry run records nothing.
        let other = Grants::default();
        other.decide_and_record(&review(0, true), ingesters(&pods));
        assert_eq!(
            other.decide_and_record(&review(2, false), ingesters(&pods)),
            Verdict::Allow { zone: "b".into() }
        );
        // i-0 recreated (a new uid), Pending on a cordoned zone, no zone of its own.
        let mut pods = six();
        pods[0] = pod("i-0", false, None);
        pods[0].metadata.uid = Some("uid-new".into());
        let mut all = ingesters(&pods);
        all[0].zone = None;
        let v = grants.decide_and_record(&review(2, false), all);
        assert!(
            matches!(v, Verdict::Deny(Denial::SecondZone { ref disrupted, ref down, .. }) if disrupted == "a" && down[0].why == Why::NotReady),
            "{v:?}"
        );
    }

    /// Between the eviction deleting the pod and its StatefulSet's new pod reaching the
    /// cache, the pod is in no list at all: the grant still counts it, in its zone.
    #[test]
    fn an_evicted_pod_missing_from_the_cache_still_counts() {
        let grants = Grants::default();
        let pods = six();
        grants.decide_and_record(&review(0, false), ingesters(&pods));
        let missing: Vec<Pod> = pods[1..].to_vec();
        let all: Vec<Ingester<'_>> = ingesters(&pods)
            .into_iter()
            .skip(1)
            .zip(&missing)
            .map(|(mut i, p)| {
                i.pod = p;
                i
            })
            .collect();
        // i-2 is now at index 1.
        let r = Review {
            target: 1,
            ..review(2, false)
        };
        let v = grants.decide_and_record(&r, all.clone());
        assert!(
            matches!(v, Verdict::Deny(Denial::SecondZone { ref disrupted, ref down, .. }) if disrupted == "a" && down[0] == Down { pod: "i-0".into(), why: Why::Recreating }),
            "{v:?}"
        );
        // The other stack of the namespace is not held back by it.
        let r = Review {
            stack: "t",
            target: 1,
            ..review(2, false)
        };
        assert_eq!(
            grants.decide_and_record(&r, all),
            Verdict::Allow { zone: "b".into() }
        );
    }
}
