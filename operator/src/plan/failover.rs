//! The fast failover: the pods of a zone whose node Leases all stopped leave their
//! Services a renewal period after the stop, instead of after the node lifecycle
//! controller's grace period (`checks/silence.rs` says when a zone counts as silent).
//!
//! A pod leaves its Services when its Ready condition is False: the endpoints
//! controllers then drop it, and kube-proxy stops sending to it. A readiness gate alone
//! would not do: the kubelet computes Ready from the gates, and a stopped zone's
//! kubelets compute nothing. So the plan sets Ready False itself, as the node lifecycle
//! controller does for a node it judges lost, together with the pod condition
//! [`names::POD_CONDITION_ZONE_AVAILABLE`], which says why and marks the pods it took
//! out. When the zone's Leases are renewed again it sets that condition True and leaves
//! Ready to the kubelet, whose status sync restores it within its sync period (10 s).
//!
//! What a wrong verdict costs: a zone cut off from the control plane but still serving
//! (a partition) stops receiving traffic through the Services while the other zones
//! serve it, as it would once Kubernetes marks its nodes NotReady anyway; nothing is
//! deleted, restarted or rescheduled, and it comes back by itself once its kubelets
//! renew their Leases. No pod of a zone outside the verdict is ever touched.

use k8s_openapi::api::core::v1::Pod;

use crate::checks::podzone::node_name;
use crate::checks::silence::{self, Silence};
use crate::checks::zones::{zone_of, ZoneCheck};
use crate::intent::{Failover, ZoneServiceWrite};
use crate::model::names;
use crate::model::pods::condition;
use crate::observe::Snapshot;

/// The failover of a zone-aware stack (`zone` is its zone check): the silent zones it
/// takes out when `on`, and the writes that take their pods out or put back those of
/// zones no longer silent (all of them when off, so turning it off undoes it).
pub fn plan(snapshot: &Snapshot, zone: Option<&ZoneCheck>, on: bool) -> Failover {
    let Some(zone) = zone else {
        return Failover::default();
    };
    let verdict = if on {
        silence::silence(
            &zone.keys,
            snapshot.nodes.iter().map(AsRef::as_ref),
            &snapshot.node_leases,
            snapshot.now,
        )
    } else {
        Silence::default()
    };
    let writes = snapshot
        .pods
        .iter()
        .filter_map(|pod| {
            let node = snapshot.node(node_name(pod)?)?;
            let pod_zone = zone_of(
                node.metadata.labels.as_ref(),
                zone.keys.iter().map(String::as_str),
            )
            .ok()?;
            let silent = verdict.out.iter().find(|z| z.zone == pod_zone);
            let write = match silent {
                Some(z) if pod.metadata.deletion_timestamp.is_none() && !taken_out(pod) => {
                    let message = format!(
                        "{} while other zones renew theirs: taken out of its Services by the Loki zone operator until they are renewed",
                        z.describe(snapshot.now)
                    );
                    (false, message)
                }
                None if marked_out(pod) => {
                    let why = if on {
                        format!("zone {pod_zone}'s node Leases are renewed again")
                    } else {
                        format!(
                            "the fast failover is off for this stack ({})",
                            names::ANNOTATION_ZONE_FAST_FAILOVER
                        )
                    };
                    (true, format!("{why}: back in its Services once its kubelet reports it Ready"))
                }
                _ => return None,
            };
            Some(ZoneServiceWrite {
                pod: pod.metadata.name.clone()?,
                uid: pod.metadata.uid.clone()?,
                zone: pod_zone,
                available: write.0,
                message: write.1,
            })
        })
        .collect();
    Failover {
        out: verdict.out,
        held: verdict.held,
        writes,
    }
}

/// The pod carries the failover's mark: its zone-available condition is False.
fn marked_out(pod: &Pod) -> bool {
    condition(pod, names::POD_CONDITION_ZONE_AVAILABLE) == Some("False")
}

/// The pod is out of its Services, marked as the failover's: nothing left to write.
fn taken_out(pod: &Pod) -> bool {
    marked_out(pod) && condition(pod, "Ready") == Some("False")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    use k8s_openapi::jiff::Timestamp;

    use crate::checks::silence::LeaseSeen;
    use crate::checks::zones;
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::{effective, Component};
    use crate::testing::{node, pod, zoned_spec, ZONE};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("ts")
    }

    /// Three zones a, b, c of one node each (na, nb, nc); one ingester on each, and a
    /// distributor on na. `renewed`: when each node's Lease was last seen renewed.
    fn snapshot(renewed: &[(&str, i64)], now: i64, pods: Vec<Pod>) -> Snapshot {
        let nodes: Vec<Arc<_>> = ["a", "b", "c"]
            .iter()
            .map(|z| Arc::new(node(&format!("n{z}"), &[(ZONE, z)])))
            .collect();
        let node_leases = renewed
            .iter()
            .map(|(n, s)| {
                let seen = LeaseSeen {
                    renewed: at(*s),
                    duration_secs: 40,
                };
                (n.to_string(), seen)
            })
            .collect::<HashMap<_, _>>();
        Snapshot {
            pod_nodes: nodes
                .iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.clone()))
                .collect(),
            nodes,
            node_leases,
            pods: pods.into_iter().map(Arc::new).collect(),
            now: at(now),
            ..Default::default()
        }
    }

    fn pods() -> Vec<Pod> {
        let p = |name: &str, node: &str, c: Component| {
            pod(name)
                .uid(&format!("uid-{name}"))
                .component(c)
                .zone_aware()
                .on(node)
        };
        vec![
            p("s-ingester-0", "na", Component::Ingester)
                .ready_is(true)
                .build(),
            p("s-ingester-1", "nb", Component::Ingester)
                .ready_is(true)
                .build(),
            p("s-ingester-2", "nc", Component::Ingester)
                .ready_is(true)
                .build(),
            p("s-distributor-x", "na", Component::Distributor)
                .ready_is(true)
                .build(),
        ]
    }

    fn check(s: &Snapshot) -> ZoneCheck {
        let eff = effective(&zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        zones::check(&eff, s.nodes.iter().map(AsRef::as_ref), [])
    }

    fn writes(f: &Failover) -> Vec<(&str, bool)> {
        f.writes
            .iter()
            .map(|w| (w.pod.as_str(), w.available))
            .collect()
    }

    #[test]
    fn a_silent_zones_pods_are_taken_out_and_only_theirs() {
        let s = snapshot(&[("na", 0), ("nb", 29), ("nc", 29)], 30, pods());
        let f = plan(&s, Some(&check(&s)), true);
        assert_eq!(f.out.len(), 1);
        assert_eq!(
            writes(&f),
            vec![("s-ingester-0", false), ("s-distributor-x", false)]
        );
        let w = &f.writes[0];
        assert_eq!((w.zone.as_str(), w.uid.as_str()), ("a", "uid-s-ingester-0"));
        assert!(w.message.contains("not renewed for 30 s"), "{}", w.message);
    }

    #[test]
    fn nothing_is_written_while_every_zone_renews() {
        let s = snapshot(&[("na", 29), ("nb", 29), ("nc", 29)], 30, pods());
        assert_eq!(plan(&s, Some(&check(&s)), true), Failover::default());
    }

    #[test]
    fn pods_already_out_are_not_written_again() {
        let mut ps = pods();
        ps[0] = pod("s-ingester-0")
            .uid("uid-s-ingester-0")
            .on("na")
            .ready_is(false)
            .condition(names::POD_CONDITION_ZONE_AVAILABLE, "False")
            .build();
        let s = snapshot(&[("na", 0), ("nb", 29), ("nc", 29)], 30, ps);
        assert_eq!(
            writes(&plan(&s, Some(&check(&s)), true)),
            vec![("s-distributor-x", false)]
        );
    }

    #[test]
    fn a_kubelet_that_set_ready_again_is_taken_out_again() {
        // Ready True beside the failover's False: written again while the zone is silent.
        let mut ps = pods();
        ps[0] = pod("s-ingester-0")
            .uid("uid-s-ingester-0")
            .on("na")
            .ready_is(true)
            .condition(names::POD_CONDITION_ZONE_AVAILABLE, "False")
            .build();
        let s = snapshot(&[("na", 0), ("nb", 29), ("nc", 29)], 30, ps);
        assert!(writes(&plan(&s, Some(&check(&s)), true)).contains(&("s-ingester-0", false)));
    }

    #[test]
    fn a_zone_renewing_again_gets_its_pods_back_and_never_touches_others() {
        let marked = |name: &str, node: &str| {
            pod(name)
                .uid(&format!("uid-{name}"))
                .on(node)
                .ready_is(false)
                .condition(names::POD_CONDITION_ZONE_AVAILABLE, "False")
                .build()
        };
        let mut ps = pods();
        ps[0] = marked("s-ingester-0", "na");
        ps[3] = marked("s-distributor-x", "na");
        // Zone a renews again (the partition healed); b's pod was never the failover's.
        let s = snapshot(&[("na", 31), ("nb", 31), ("nc", 31)], 32, ps.clone());
        let f = plan(&s, Some(&check(&s)), true);
        assert_eq!(
            writes(&f),
            vec![("s-ingester-0", true), ("s-distributor-x", true)]
        );
        assert!(f.writes[0].message.contains("renewed again"));
        // Turning the failover off puts them back too, whatever the Leases say.
        let silent = snapshot(&[("na", 0), ("nb", 29), ("nc", 29)], 30, ps);
        let off = plan(&silent, Some(&check(&silent)), false);
        assert!(off.out.is_empty());
        assert!(off.writes[0].message.contains("fast failover is off"));
        assert_eq!(
            writes(&off),
            vec![("s-ingester-0", true), ("s-distributor-x", true)]
        );
    }

    #[test]
    fn terminating_and_unbound_pods_are_left() {
        let ps = vec![
            pod("s-querier-x")
                .uid("u1")
                .on("na")
                .ready_is(true)
                .deleting()
                .build(),
            pod("s-querier-y").uid("u2").ready_is(false).build(),
        ];
        let s = snapshot(&[("na", 0), ("nb", 29), ("nc", 29)], 30, ps);
        assert!(plan(&s, Some(&check(&s)), true).writes.is_empty());
        // Not zone-aware: no zone check, no failover.
        assert_eq!(plan(&s, None, true), Failover::default());
    }

    #[test]
    fn more_than_half_of_the_zones_silent_are_held_not_taken_out() {
        let s = snapshot(&[("na", 0), ("nb", 0), ("nc", 29)], 30, pods());
        let f = plan(&s, Some(&check(&s)), true);
        assert!(f.writes.is_empty() && f.out.is_empty());
        assert_eq!(f.held.expect("held").0.len(), 2);
    }
}
