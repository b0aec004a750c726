//! The heartbeats as the fast failover's verdict reads them, from streams of renewals the
//! way the API server delivers them: on time, behind a stalled watch, behind a paused API
//! server (the kubelets' renewals queued with it), with kubelet clocks that step, with a
//! whole zone late once. Every stream of live zones must take nothing out at any moment;
//! a zone that really stopped must be taken out even when a stall came in between.

use super::*;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;

use crate::checks::silence::{silence, Silence, Tolerance};
use crate::testing::{node, ZONE};

/// Milliseconds on the true clock, which is also the operator's monotonic clock.
fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("ts")
}

fn at(secs: i64) -> Timestamp {
    at_ms(secs * 1000)
}

fn lease(name: &str, renewed: Option<Timestamp>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            renew_time: renewed.map(MicroTime),
            lease_duration_seconds: Some(40),
            ..Default::default()
        }),
    }
}

/// A kubelet: its node, zone, when in each 10 s period it renews, and how far its clock
/// is off the true one.
struct Kubelet {
    name: &'static str,
    zone: &'static str,
    phase_ms: i64,
    offset_ms: i64,
}

const KUBELETS: [Kubelet; 6] = [
    Kubelet {
        name: "a1",
        zone: "a",
        phase_ms: 900,
        offset_ms: 2_500,
    },
    Kubelet {
        name: "a2",
        zone: "a",
        phase_ms: 9_100,
        offset_ms: -700,
    },
    Kubelet {
        name: "b1",
        zone: "b",
        phase_ms: 3_300,
        offset_ms: 0,
    },
    Kubelet {
        name: "b2",
        zone: "b",
        phase_ms: 6_000,
        offset_ms: 40_000,
    },
    Kubelet {
        name: "c1",
        zone: "c",
        phase_ms: 4_700,
        offset_ms: -1_200,
    },
    Kubelet {
        name: "c2",
        zone: "c",
        phase_ms: 8_800,
        offset_ms: 300,
    },
];

/// What goes wrong in one run.
#[derive(Clone, Copy, Default)]
struct Trouble {
    /// The operator's watch delivers nothing in [start, end) (ms), then the backlog.
    stall: Option<(i64, i64)>,
    /// The API server is paused in [start, end): renewals sent meanwhile commit at the
    /// end, the late zone's last, and the watch delivers nothing meanwhile.
    pause: Option<(i64, i64)>,
    /// Zone a's kubelets stop renewing from this moment on.
    a_stops: Option<i64>,
    /// Zone a's kubelets renew once late: the renewals due in [start, end) come at end.
    a_late: Option<(i64, i64)>,
    /// From this moment, b1's clock is off by this many ms more.
    b1_step: Option<(i64, i64)>,
}

/// One renewal as the operator receives it.
struct Delivery {
    deliver_ms: i64,
    commit_ms: i64,
    node: &'static str,
    renew_time: Timestamp,
}

fn deliveries(t: Trouble, until_ms: i64) -> Vec<Delivery> {
    let mut out = Vec::new();
    for k in &KUBELETS {
        let mut sent = k.phase_ms;
        while sent < until_ms {
            let due = sent;
            sent += 10_000;
            if k.zone == "a" && t.a_stops.is_some_and(|s| due >= s) {
                continue;
            }
            let stamped = match t.a_late {
                Some((s, e)) if k.zone == "a" && (s..e).contains(&due) => e,
                _ => due,
            };
            let step = match t.b1_step {
                Some((from, by)) if k.name == "b1" && stamped >= from => by,
                _ => 0,
            };
            let renew_time = at_ms(stamped + k.offset_ms + step);
            // Queued in a paused API server: the late zone's commits come last.
            let commit_ms = match t.pause {
                Some((s, e)) if (s..e).contains(&stamped) => e + i64::from(k.zone == "a") * 5,
                _ => stamped + 20,
            };
            let mut deliver_ms = commit_ms + 30;
            for (s, e) in [t.stall, t.pause].into_iter().flatten() {
                if (s..e).contains(&deliver_ms) {
                    deliver_ms = e + 10;
                }
            }
            out.push(Delivery {
                deliver_ms,
                commit_ms,
                node: k.name,
                renew_time,
            });
        }
    }
    // One watch: delivered in commit order.
    out.sort_by_key(|d| (d.deliver_ms, d.commit_ms));
    out
}

fn nodes() -> Vec<Node> {
    KUBELETS
        .iter()
        .map(|k| node(k.name, &[(ZONE, k.zone)]))
        .collect()
}

fn verdict(leases: &NodeLeases, now_ms: i64) -> Silence {
    let view = leases.view_at(at_ms(now_ms));
    silence(&[ZONE.to_string()], &nodes(), &view, Tolerance::default())
}

/// Runs the stream to `until_ms`, judging every 100 ms and after every delivery; the
/// first moment zone a is taken out, if ever, and any other zone taken out.
fn run(t: Trouble, until_ms: i64) -> Result<Option<i64>, String> {
    let leases = NodeLeases::default();
    // The process starts at 0 and lists every Lease, renewed a period ago.
    for k in &KUBELETS {
        leases.observe(
            &lease(k.name, Some(at_ms(k.phase_ms - 10_000 + k.offset_ms))),
            at(0),
        );
    }
    let stream = deliveries(t, until_ms);
    let mut next = stream.iter().peekable();
    let mut first_out = None;
    for now_ms in (0..until_ms).step_by(100) {
        while let Some(d) = next.next_if(|d| d.deliver_ms <= now_ms) {
            leases.observe(&lease(d.node, Some(d.renew_time)), at_ms(d.deliver_ms));
            check(
                &verdict(&leases, d.deliver_ms),
                d.deliver_ms,
                &mut first_out,
            )?;
        }
        check(&verdict(&leases, now_ms), now_ms, &mut first_out)?;
    }
    Ok(first_out)
}

fn check(s: &Silence, now_ms: i64, first_out: &mut Option<i64>) -> Result<(), String> {
    for z in &s.out {
        if z.zone != "a" {
            return Err(format!("zone {} taken out at {now_ms} ms: {s:?}", z.zone));
        }
        first_out.get_or_insert(now_ms);
    }
    Ok(())
}

#[test]
fn live_zones_are_never_taken_out_by_a_stall_of_the_view_at_any_phase() {
    // Stalls of 2 to 40 s, starting at every second of a renewal period, after warm-up.
    for len in [2_000, 5_000, 8_000, 12_000, 21_000, 40_000] {
        for start in (40_000..50_000).step_by(500) {
            let t = Trouble {
                stall: Some((start, start + len)),
                ..Trouble::default()
            };
            assert_eq!(run(t, 120_000), Ok(None), "stall of {len} ms at {start} ms");
        }
    }
}

#[test]
fn live_zones_are_never_taken_out_by_a_paused_api_server_at_any_phase() {
    // The kubelets' renewals wait in the paused server and commit on resume, the zone
    // that went late last; the watch delivers nothing meanwhile.
    for len in [2_000, 5_000, 8_000, 15_000, 30_000] {
        for start in (40_000..50_000).step_by(500) {
            let t = Trouble {
                pause: Some((start, start + len)),
                ..Trouble::default()
            };
            assert_eq!(run(t, 120_000), Ok(None), "pause of {len} ms at {start} ms");
        }
    }
}

#[test]
fn one_late_renewal_of_a_whole_zone_takes_nothing_out() {
    // a's renewals due in [45, 61) s come at 61 s, 20 and 22 s after their last ones
    // (40.9 and 39.1 s): a renewal missed, as by a kubelet whose update hung.
    let t = Trouble {
        a_late: Some((45_000, 61_000)),
        ..Trouble::default()
    };
    assert_eq!(run(t, 120_000), Ok(None));
}

#[test]
fn kubelet_clocks_that_step_take_nothing_out() {
    for by in [-60_000, -5_000, 5_000, 3_600_000] {
        let t = Trouble {
            b1_step: Some((45_000, by)),
            ..Trouble::default()
        };
        assert_eq!(run(t, 150_000), Ok(None), "b1's clock stepped by {by} ms");
    }
}

#[test]
fn a_stopped_zone_is_taken_out_once_late_and_proven_even_across_a_stall() {
    // a's last renewals: a1 at 50.9 s, a2 at 49.1 s: late (two periods and 2 s) at
    // 72.9 s; the next prompt renewal of another zone comes at 73.3 s (b1), and settles
    // a second later.
    let stopped = Trouble {
        a_stops: Some(51_000),
        ..Trouble::default()
    };
    let out = run(stopped, 120_000).expect("only a").expect("a out");
    assert!((73_950..=74_400).contains(&out), "out at {out} ms");
    // A stall over the deadline delays the verdict to the first prompt renewal a period
    // after the backlog it delivered (b1's at 93.3 s), settled.
    let stalled = Trouble {
        stall: Some((70_000, 80_000)),
        ..stopped
    };
    let out = run(stalled, 120_000).expect("only a").expect("a out");
    assert!((94_300..=94_400).contains(&out), "out at {out} ms");
}

#[test]
fn a_renewal_after_the_view_a_verdict_was_made_on_makes_it_out_of_date() {
    let leases = NodeLeases::default();
    leases.observe(&lease("a1", Some(at(0))), at(0));
    leases.observe(&lease("b1", Some(at(0))), at(0));
    let view = leases.view_at(at(1));
    assert!(!leases.renewed_after(&["a1".to_string()], view.seq));
    // b1 renews: no matter for a verdict on a1.
    leases.observe(&lease("b1", Some(at(10))), at(10));
    assert!(!leases.renewed_after(&["a1".to_string()], view.seq));
    // a1 renews (its write waited, or the zone is back): the verdict is out of date.
    leases.observe(&lease("a1", Some(at(11))), at(11));
    assert!(leases.renewed_after(&["a1".to_string()], view.seq));
    // A resync of the same renewal is no renewal.
    let seq = leases.view_at(at(12)).seq;
    leases.observe(&lease("a1", Some(at(11))), at(12));
    assert!(!leases.renewed_after(&["a1".to_string()], seq));
}

#[test]
fn a_renewal_is_prompt_only_as_fast_as_its_nodes_usual_ones() {
    let leases = NodeLeases::default();
    let seen = |l: &NodeLeases| l.view_at(at(0)).leases["n1"];
    // Listed at start: seen, not renewed, not prompt.
    leases.observe(&lease("n1", Some(at(-100))), at(0));
    assert!(!seen(&leases).renewal_seen && seen(&leases).prompt_at.is_none());
    // Its clock lags 100 s: three renewals set the baseline, the third is prompt.
    for s in [10, 20, 30] {
        leases.observe(&lease("n1", Some(at(s - 100))), at(s));
    }
    assert_eq!(seen(&leases).prompt_at, Some(at(30)));
    // One that arrives 5 s late is a renewal, not a prompt one.
    leases.observe(&lease("n1", Some(at(40 - 100))), at(45));
    assert_eq!(
        (seen(&leases).renewed, seen(&leases).prompt_at),
        (at(45), Some(at(30)))
    );
    // 0.5 s late is within the slack.
    leases.observe(&lease("n1", Some(at(50 - 100))), at_ms(50_500));
    assert_eq!(seen(&leases).prompt_at, Some(at_ms(50_500)));
}

#[test]
fn leases_without_a_renewal_are_not_kept_and_a_relist_forgets_the_gone() {
    let leases = NodeLeases::default();
    leases.observe(&lease("n1", Some(at(0))), at(0));
    leases.observe(&lease("n2", Some(at(0))), at(0));
    leases.observe(&lease("n1", None), at(1));
    assert!(!leases.view().leases.contains_key("n1"));
    leases.observe(&lease("n3", Some(at(0))), at(1));
    leases.keep_only(&BTreeSet::from(["n3".to_string()]));
    assert_eq!(leases.view().leases.keys().collect::<Vec<_>>(), vec!["n3"]);
    leases.forget("n3");
    assert!(leases.view().leases.is_empty());
}

#[test]
fn the_clock_triggers_on_lateness_and_on_the_first_evidence_after_it() {
    let leases = NodeLeases::default();
    for n in ["a1", "b1"] {
        leases.observe(&lease(n, Some(at(0))), at(0));
        for s in [10, 20, 30] {
            leases.observe(&lease(n, Some(at(s))), at(s));
        }
    }
    let mut w = Watched::default();
    assert!(w.tick(&leases, at(31)), "first look");
    assert!(!w.tick(&leases, at(32)), "nothing changed");
    // b1 renews at 40, a1 does not: a1 is a period late at 42, two at 52.
    leases.observe(&lease("b1", Some(at(40))), at(40));
    assert!(!w.tick(&leases, at(41)));
    assert!(w.tick(&leases, at(43)), "a1 missed its renewal at 40");
    assert!(!w.tick(&leases, at(44)), "no evidence yet");
    leases.observe(&lease("b1", Some(at(50))), at(50));
    assert!(
        !w.tick(&leases, at(50)),
        "b1's prompt renewal, not settled yet"
    );
    assert!(
        w.tick(&leases, at(51)),
        "b1's prompt renewal after a1 went late, settled"
    );
    assert!(!w.tick(&leases, at_ms(51_500)), "once");
    assert!(w.tick(&leases, at(52)), "a1 two periods late");
}

#[test]
fn the_monotonic_clock_moves_forward() {
    let (a, b) = (now(), now());
    assert!(b >= a);
}
