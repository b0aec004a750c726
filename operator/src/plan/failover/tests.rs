use super::*;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::checks::silence::{LeaseSeen, LeaseView};
use crate::checks::zones;
use crate::model::api::LokiStackSize;
use crate::model::defaults::{effective, Component};
use crate::testing::{lease_seen, node, pod, zoned_spec, ZONE};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("ts")
}

const ON: Switch = Switch::On(Tolerance { missed_renewals: 1 });

/// A Lease of 40 s (renewed every 10 s) seen renewed at `s`, promptly.
fn renewed(s: i64) -> LeaseSeen {
    lease_seen(at(s))
}

/// Zones a, b, c of two nodes each (na1, na2, ...); one ingester in each, and a
/// distributor in a. `leases`: each node's Lease; `now`: the operator's clock.
fn snapshot(leases: &[(&str, LeaseSeen)], now: i64, pods: Vec<Pod>) -> Snapshot {
    let nodes: Vec<Arc<_>> = ["a", "b", "c"]
        .iter()
        .flat_map(|z| [1, 2].map(|i| Arc::new(node(&format!("n{z}{i}"), &[(ZONE, z)]))))
        .collect();
    Snapshot {
        pod_nodes: nodes
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.clone()))
            .collect(),
        nodes,
        node_leases: LeaseView {
            leases: leases
                .iter()
                .map(|(n, l)| (n.to_string(), *l))
                .collect::<HashMap<_, _>>(),
            now: at(now),
            seq: 42,
        },
        pods: pods.into_iter().map(Arc::new).collect(),
        now: at(now),
        ..Default::default()
    }
}

/// Zone a silent since 0 (late at 22); b and c renewed promptly at `live`.
fn a_silent(live: i64) -> Vec<(&'static str, LeaseSeen)> {
    vec![
        ("na1", renewed(0)),
        ("na2", renewed(0)),
        ("nb1", renewed(live)),
        ("nb2", renewed(live)),
        ("nc1", renewed(live)),
        ("nc2", renewed(live)),
    ]
}

fn all_renewing(s: i64) -> Vec<(&'static str, LeaseSeen)> {
    ["na1", "na2", "nb1", "nb2", "nc1", "nc2"]
        .into_iter()
        .map(|n| (n, renewed(s)))
        .collect()
}

fn member(name: &str, node: &str, c: Component) -> crate::testing::PodBuilder {
    pod(name)
        .uid(&format!("uid-{name}"))
        .component(c)
        .zone_aware()
        .on(node)
}

fn pods() -> Vec<Pod> {
    vec![
        member("s-ingester-0", "na1", Component::Ingester)
            .ready_is(true)
            .build(),
        member("s-ingester-1", "nb1", Component::Ingester)
            .ready_is(true)
            .build(),
        member("s-ingester-2", "nc1", Component::Ingester)
            .ready_is(true)
            .build(),
        member("s-distributor-x", "na2", Component::Distributor)
            .ready_is(true)
            .build(),
    ]
}

/// A pod the failover took out at `mark` (RFC 3339), its Ready `ready` since `since`.
fn marked(name: &str, node: &str, ready: &str, since: &str) -> Pod {
    member(name, node, Component::Ingester)
        .zone("a")
        .condition_since(
            names::POD_CONDITION_ZONE_AVAILABLE,
            "False",
            "2027-01-15T08:00:20Z",
        )
        .condition_since("Ready", ready, since)
        .build()
}

fn check(s: &Snapshot) -> ZoneCheck {
    let eff = effective(&zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
    zones::check(&eff, s.nodes.iter().map(AsRef::as_ref), [])
}

fn writes(f: &Failover) -> Vec<(&str, bool, &str)> {
    f.writes
        .iter()
        .map(|w| (w.pod.as_str(), w.available, w.reason))
        .collect()
}

#[test]
fn a_silent_zones_pods_are_taken_out_and_only_theirs() {
    let s = snapshot(&a_silent(29), 30, pods());
    let f = plan(&s, Some(&check(&s)), ON);
    assert_eq!(f.out.len(), 1);
    let out = names::POD_REASON_ZONE_UNAVAILABLE;
    assert_eq!(
        writes(&f),
        vec![
            ("s-ingester-0", false, out),
            ("s-distributor-x", false, out)
        ]
    );
    let w = &f.writes[0];
    assert_eq!((w.zone.as_str(), w.uid.as_str()), ("a", "uid-s-ingester-0"));
    assert!(w.message.contains("not renewed for 30 s"), "{}", w.message);
    // The write stands on the zone's nodes not renewing after the view's event 42.
    let fence = w.fence.as_ref().expect("fence");
    assert_eq!(
        (fence.nodes.clone(), fence.seq),
        (vec!["na1".into(), "na2".into()], 42)
    );
    assert_eq!(f.zones_out, BTreeSet::from(["a".to_string()]));
}

#[test]
fn a_zone_late_by_one_renewal_or_without_fresh_evidence_keeps_its_pods() {
    // Late by one renewal only (tolerated): at 21 nothing.
    let s = snapshot(&a_silent(20), 21, pods());
    assert_eq!(plan(&s, Some(&check(&s)), ON), Failover::default());
    // Late, but the others' last prompt renewals came before a went late (at 22).
    let s = snapshot(&a_silent(21), 30, pods());
    let f = plan(&s, Some(&check(&s)), ON);
    assert!(f.writes.is_empty() && f.out.is_empty());
    assert!(f.held.expect("held").1.contains("own view"));
    // Tolerating none, a was late at 12.
    let s = snapshot(&a_silent(21), 22, pods());
    let none = Switch::On(Tolerance { missed_renewals: 0 });
    assert_eq!(plan(&s, Some(&check(&s)), none).out.len(), 1);
}

#[test]
fn nothing_is_written_while_every_zone_renews() {
    let s = snapshot(&all_renewing(29), 30, pods());
    assert_eq!(plan(&s, Some(&check(&s)), ON), Failover::default());
}

#[test]
fn pods_already_out_are_not_written_again() {
    let mut ps = pods();
    ps[0] = marked("s-ingester-0", "na1", "False", "2027-01-15T08:00:20Z");
    let s = snapshot(&a_silent(29), 30, ps);
    let f = plan(&s, Some(&check(&s)), ON);
    assert_eq!(
        writes(&f),
        vec![("s-distributor-x", false, names::POD_REASON_ZONE_UNAVAILABLE)]
    );
    assert!(f.alive.is_empty());
}

#[test]
fn a_kubelet_that_sets_ready_again_is_left_alone_not_flapped() {
    // Its kubelet set Ready True after the mark: alive, left in, reported.
    let mut ps = pods();
    ps[0] = marked("s-ingester-0", "na1", "True", "2027-01-15T08:00:30Z");
    let s = snapshot(&a_silent(39), 40, ps.clone());
    let f = plan(&s, Some(&check(&s)), ON);
    assert!(!writes(&f).iter().any(|w| w.0 == "s-ingester-0"), "{f:?}");
    assert_eq!(
        f.alive,
        vec![KubeletAlive {
            pod: "s-ingester-0".into(),
            node: "na1".into(),
            zone: "a".into()
        }]
    );
    // The zone renews again: put back like the others.
    let back = snapshot(&all_renewing(49), 50, ps);
    let f = plan(&back, Some(&check(&back)), ON);
    assert_eq!(
        writes(&f),
        vec![("s-ingester-0", true, names::POD_REASON_ZONE_RENEWING)]
    );
}

#[test]
fn a_zone_renewing_again_gets_its_pods_back_and_never_touches_others() {
    let mut ps = pods();
    ps[0] = marked("s-ingester-0", "na1", "False", "2027-01-15T08:00:20Z");
    ps[3] = marked("s-distributor-x", "na2", "False", "2027-01-15T08:00:20Z");
    let s = snapshot(&all_renewing(31), 32, ps.clone());
    let f = plan(&s, Some(&check(&s)), ON);
    let renewing = names::POD_REASON_ZONE_RENEWING;
    assert_eq!(
        writes(&f),
        vec![
            ("s-ingester-0", true, renewing),
            ("s-distributor-x", true, renewing)
        ]
    );
    assert!(f.writes[0].message.contains("renewed again"));
    assert!(f.zones_out.is_empty());
    // Turning the failover off puts them back too, whatever the Leases say.
    let silent = snapshot(&a_silent(29), 30, ps.clone());
    let off = plan(&silent, Some(&check(&silent)), Switch::Off);
    assert!(off.out.is_empty());
    assert!(off.writes[0].message.contains("fast failover is off"));
    let released = names::POD_REASON_ZONE_RELEASED;
    assert_eq!(
        writes(&off),
        vec![
            ("s-ingester-0", true, released),
            ("s-distributor-x", true, released)
        ]
    );
    // So does turning the stack's zones off.
    let no_zones = plan(&silent, None, ON);
    assert_eq!(writes(&no_zones).len(), 2);
    assert!(no_zones.writes[0]
        .message
        .contains("no longer spreads over zones"));
}

#[test]
fn a_process_that_just_started_puts_no_pod_back_before_it_sees_a_renewal() {
    // The Leases are listed, not seen renewed: zone a may still be down.
    let listed = |l: LeaseSeen| LeaseSeen {
        renewal_seen: false,
        prompt_at: None,
        ..l
    };
    let leases: Vec<_> = all_renewing(0)
        .into_iter()
        .map(|(n, l)| (n, listed(l)))
        .collect();
    let mut ps = pods();
    ps[0] = marked("s-ingester-0", "na1", "False", "2027-01-15T08:00:20Z");
    let s = snapshot(&leases, 1, ps);
    let f = plan(&s, Some(&check(&s)), ON);
    assert!(f.writes.is_empty(), "{f:?}");
    // Its zone still counts as out for the rollout.
    assert_eq!(f.zones_out, BTreeSet::from(["a".to_string()]));
}

#[test]
fn terminating_and_unbound_pods_are_left() {
    let ps = vec![
        pod("s-querier-x")
            .uid("u1")
            .on("na1")
            .ready_is(true)
            .deleting()
            .build(),
        pod("s-querier-y").uid("u2").ready_is(false).build(),
    ];
    let s = snapshot(&a_silent(29), 30, ps);
    assert!(plan(&s, Some(&check(&s)), ON).writes.is_empty());
    // Without zones and no mark: nothing.
    assert_eq!(plan(&s, None, ON), Failover::default());
}

#[test]
fn release_puts_back_only_marked_pods() {
    let ps = vec![
        marked("s-ingester-0", "na1", "False", "2027-01-15T08:00:20Z"),
        member("s-ingester-1", "nb1", Component::Ingester)
            .ready_is(true)
            .build(),
    ];
    let w = release(&ps, "the stack is Unmanaged");
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].pod.as_str(), w[0].zone.as_str(), w[0].available),
        ("s-ingester-0", "a", true)
    );
    assert!(w[0].message.starts_with("the stack is Unmanaged"));
}

#[test]
fn more_than_half_of_the_zones_silent_are_held_not_taken_out() {
    let mut leases = a_silent(29);
    leases[2].1 = renewed(0);
    leases[3].1 = renewed(0);
    let s = snapshot(&leases, 30, pods());
    let f = plan(&s, Some(&check(&s)), ON);
    assert!(f.writes.is_empty() && f.out.is_empty());
    assert_eq!(f.held.expect("held").0.len(), 2);
}
