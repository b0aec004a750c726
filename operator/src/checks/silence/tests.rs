//! The verdict on views given directly; `heartbeats/` tests the views a stream of
//! renewals (stalled, paused, delayed, with clocks stepping) makes.

use super::*;
use crate::testing::{lease_seen, node, ZONE};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("ts")
}

/// Nodes a1, a2 in zone a, b1 and b2 in b, c1 and c2 in c.
fn nodes() -> Vec<Node> {
    [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("c1", "c"),
        ("c2", "c"),
    ]
    .into_iter()
    .map(|(n, z)| node(n, &[(ZONE, z)]))
    .collect()
}

/// A Lease of 40 s (renewed every 10 s) seen renewed at `s`, promptly.
fn renewed(s: i64) -> LeaseSeen {
    lease_seen(at(s))
}

fn view(leases: &[(&str, LeaseSeen)], now: i64) -> LeaseView {
    LeaseView {
        leases: leases.iter().map(|(n, l)| (n.to_string(), *l)).collect(),
        now: at(now),
        seq: 0,
    }
}

fn verdict_on(ns: &[Node], leases: &[(&str, LeaseSeen)], now: i64) -> Silence {
    silence(
        &[ZONE.to_string()],
        ns,
        &view(leases, now),
        Tolerance::default(),
    )
}

fn verdict(leases: &[(&str, LeaseSeen)], now: i64) -> Silence {
    verdict_on(&nodes(), leases, now)
}

fn out(s: &Silence) -> Vec<&str> {
    s.out.iter().map(|z| z.zone.as_str()).collect()
}

/// Zone a stopped after renewing at -3 (a1) and -1 (a2); b and c renew every 10 s,
/// each last at the given second (before `now`).
fn a_stopped(b: i64, c: i64) -> Vec<(&'static str, LeaseSeen)> {
    vec![
        ("a1", renewed(-3)),
        ("a2", renewed(-1)),
        ("b1", renewed(b)),
        ("b2", renewed(b)),
        ("c1", renewed(c)),
        ("c2", renewed(c)),
    ]
}

#[test]
fn a_zone_whose_leases_all_stopped_is_out_once_it_missed_two_renewals() {
    // One renewal missed is tolerated: a2 is late 2 periods and 2 s after -1, at 21.
    assert!(verdict(&a_stopped(19, 16), 20).out.is_empty());
    let at_21 = verdict(&a_stopped(19, 16), 21);
    assert!(
        at_21.out.is_empty(),
        "late at 21 only once past it: {at_21:?}"
    );
    // b renews promptly at 22: the evidence, once it settled a second.
    assert!(verdict(&a_stopped(22, 16), 22).out.is_empty());
    let at_23 = verdict(&a_stopped(22, 16), 23);
    assert_eq!(out(&at_23), vec!["a"]);
    assert_eq!(at_23.out[0].nodes, vec!["a1", "a2"]);
    assert_eq!(at_23.out[0].last_renewed, at(-1));
    assert_eq!(at_23.out[0].late_at, at(21));
    assert!(at_23.out[0]
        .describe(at(23))
        .contains("not renewed for 24 s"));
    assert_eq!(
        at_23.renewing,
        BTreeSet::from(["b".to_string(), "c".to_string()])
    );
}

#[test]
fn a_late_zone_is_not_silent_until_another_zone_renewed_promptly_after_it_went_late() {
    // At 30 every Lease of a is late (since 21), but the last prompt renewals of b and c
    // came before 21: the view may have stopped at 20, and a's renewals with it.
    let s = verdict(&a_stopped(19, 16), 30);
    assert!(s.out.is_empty(), "{s:?}");
    let (zones, why) = s.held.expect("held");
    assert_eq!(zones[0].zone, "a");
    assert!(why.contains("own view"), "{why}");
    // A renewal of b that arrived late (a backlog) is no evidence either.
    let mut backlog = a_stopped(19, 16);
    backlog[2].1 = LeaseSeen {
        renewed: at(29),
        prompt_at: Some(at(19)),
        ..renewed(29)
    };
    assert!(verdict(&backlog, 30).out.is_empty());
    // b's next prompt renewal is.
    let mut fresh = a_stopped(19, 16);
    fresh[3].1 = renewed(29);
    assert_eq!(out(&verdict(&fresh, 30)), vec!["a"]);
    // Not while another zone's renewal arrived slowly a period before it or since: the
    // view may have just delivered a backlog, the late zone's renewals due next in it.
    fresh[4].1.slow_at = Some(at(20));
    assert!(verdict(&fresh, 30).out.is_empty());
    fresh[4].1.slow_at = Some(at(18));
    assert_eq!(out(&verdict(&fresh, 30)), vec!["a"]);
    // The late zone's own slow renewals are no sign of the view's trouble.
    fresh[0].1.slow_at = Some(at(25));
    assert_eq!(out(&verdict(&fresh, 30)), vec!["a"]);
}

#[test]
fn one_late_renewal_of_a_whole_zone_is_tolerated() {
    // Every kubelet of a shares a failing path: their renewals due at 9 come at 19.
    let s = verdict(&a_stopped(19, 19), 19);
    let renewing = BTreeSet::from(["b".to_string(), "c".to_string()]);
    assert_eq!(
        s,
        Silence {
            renewing,
            ..Silence::default()
        }
    );
    // a renews at 20: never out, and renewing again.
    let back = verdict(
        &[
            ("a1", renewed(20)),
            ("a2", renewed(20)),
            ("b1", renewed(19)),
            ("b2", renewed(19)),
            ("c1", renewed(19)),
            ("c2", renewed(19)),
        ],
        21,
    );
    assert!(back.out.is_empty() && back.held.is_none());
    assert_eq!(back.renewing.len(), 3);
}

#[test]
fn a_zone_of_one_node_tolerates_one_more_missed_renewal() {
    let ns: Vec<Node> = [("a1", "a"), ("b1", "b"), ("c1", "c")]
        .into_iter()
        .map(|(n, z)| node(n, &[(ZONE, z)]))
        .collect();
    let leases = |now: i64| {
        [
            ("a1", renewed(0)),
            ("b1", renewed(now)),
            ("c1", renewed(now)),
        ]
    };
    // Late 3 periods and 2 s after 0: a kubelet restart of 25 s takes nothing out.
    assert!(verdict_on(&ns, &leases(25), 25).out.is_empty());
    assert!(verdict_on(&ns, &leases(32), 33).out.is_empty());
    assert_eq!(out(&verdict_on(&ns, &leases(33), 34)), vec!["a"]);
    assert_eq!(Tolerance::default().for_zone(1), 2);
    assert_eq!(Tolerance::default().for_zone(2), 1);
    let none = Tolerance { missed_renewals: 0 };
    assert_eq!((none.for_zone(1), none.for_zone(3)), (1, 0));
}

#[test]
fn one_stale_node_among_live_ones_is_never_its_zone() {
    let mut leases = a_stopped(29, 29);
    leases[1].1 = renewed(29);
    assert_eq!(verdict(&leases, 30).out, Vec::new());
}

#[test]
fn a_cordoned_zone_renews_its_leases_and_is_never_out() {
    // A cordon is a spec field: its kubelets keep renewing, which is all this reads.
    let mut ns = nodes();
    for n in ns.iter_mut() {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    }
    let leases: Vec<_> = ["a1", "a2", "b1", "b2", "c1", "c2"]
        .into_iter()
        .map(|n| (n, renewed(29)))
        .collect();
    let s = verdict_on(&ns, &leases, 30);
    assert!(s.out.is_empty() && s.held.is_none());
}

#[test]
fn a_partition_that_heals_puts_the_zone_back() {
    let during = verdict(&a_stopped(29, 29), 30);
    assert_eq!(out(&during), vec!["a"]);
    assert!(!during.renewing.contains("a"));
    // One node renewing again is enough: the zone is no longer silent as a whole.
    let mut healed = a_stopped(31, 31);
    healed[0].1 = renewed(31);
    let s = verdict(&healed, 32);
    assert!(s.out.is_empty() && s.held.is_none());
    assert!(s.renewing.contains("a"));
}

#[test]
fn a_lease_only_listed_is_never_renewing() {
    // A process that just started lists every Lease: it saw none renewed yet.
    let listed = LeaseSeen {
        renewal_seen: false,
        prompt_at: None,
        ..renewed(0)
    };
    let leases: Vec<_> = ["a1", "a2", "b1", "b2", "c1", "c2"]
        .into_iter()
        .map(|n| (n, listed))
        .collect();
    let s = verdict(&leases, 1);
    assert!(s.renewing.is_empty() && s.out.is_empty());
    // Still listed only, 30 s on: every zone late, none proven, none out.
    let s = verdict(&leases, 30);
    assert!(s.out.is_empty());
    assert_eq!(s.held.expect("held").0.len(), 3);
}

#[test]
fn nothing_goes_out_while_no_zone_is_seen_renewing() {
    // The operator's watch stalled, or the API server: every Lease looks old.
    let leases: Vec<_> = ["a1", "a2", "b1", "b2", "c1", "c2"]
        .into_iter()
        .map(|n| (n, renewed(0)))
        .collect();
    let s = verdict(&leases, 60);
    assert!(s.out.is_empty());
    let (zones, why) = s.held.expect("held");
    assert_eq!(zones.len(), 3);
    assert!(why.contains("own view"), "{why}");
}

#[test]
fn never_more_than_half_of_the_zones() {
    let mut leases = a_stopped(0, 59);
    leases[2].1 = renewed(0);
    leases[3].1 = renewed(0);
    let s = verdict(&leases, 60);
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
    let mut leases = a_stopped(59, 59);
    leases.remove(1);
    assert!(verdict(&leases, 60).out.is_empty());
    assert_eq!(verdict(&[], 60), Silence::default());
}

#[test]
fn the_renewal_period_follows_the_lease_duration() {
    // Kubelets with nodeLeaseDurationSeconds 8 renew every 2 s.
    let l = LeaseSeen {
        duration_secs: 8,
        ..renewed(0)
    };
    assert_eq!(l.late_at(0), at(4));
    assert_eq!(l.late_at(1), at(6));
    assert!(!l.late(at(6), 1) && l.late(at(7), 1));
    assert!(l.renewing(at(4)) && !l.renewing(at(5)));
    assert_eq!(renewed(0).late_at(1), at(22));
    assert!(renewed(0).late_at(u32::MAX) > at(10_000_000_000));
}
