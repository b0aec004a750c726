//! The nodes' heartbeats: their Leases in `kube-node-lease`, as the fast failover reads them
//! (`checks/silence.rs`): for each node, when the operator last saw its kubelet renew
//! it and whether that renewal arrived promptly, on the operator's monotonic clock ([`now`]).
//!
//! The watch itself is the caches' (`caches/reflectors.rs`), which feed [`on_event`]. A
//! Lease is renewed every few seconds on every node, so its changes trigger nothing by
//! themselves: a clock looks once a second how late each node is, and triggers the
//! zone-aware stacks when that changes, and once more when the first prompt renewal
//! after such a change has settled (the evidence a late zone's verdict waits for).
//!
//! Promptness: a renewal's delay is the time from the `renewTime` its kubelet wrote to
//! when the operator saw it. The two clocks differ by an unknown offset, but the offset
//! is steady, so a node's quickest recent delays are its baseline: a renewal within
//! [`PROMPT_SLACK`] of it came straight through; one that waited in a stalled watch, a
//! paused API server or a starved process did not. A kubelet clock stepping backwards
//! makes its renewals look slow for [`DELAY_SAMPLES`] renewals (the failover then waits
//! for other evidence); one stepping forwards makes them look quick, and they are.
//!
//! Without the right to read Leases (an install from before the fast failover) the map
//! stays empty, and no zone is ever silent: the failover is off, nothing else changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::checks::silence::{LeaseSeen, LeaseView, EVIDENCE_SETTLE, LATE_GRACE};

/// How often the clock looks how late each node is; the fast failover reacts within this
/// of a zone's last Lease going late.
pub const CLOCK: Duration = Duration::from_secs(1);

/// How many of a node's latest renewal delays set its baseline.
pub const DELAY_SAMPLES: usize = 8;

/// Renewals of a node seen before any of its renewals counts as prompt: its baseline
/// needs a few samples, and a process that started during a stall has only slow ones.
pub const MIN_SAMPLES: usize = 3;

/// How much slower than its baseline a node's renewal may arrive and still be prompt.
pub const PROMPT_SLACK: SignedDuration = SignedDuration::from_secs(1);

/// The operator's monotonic clock, as a timestamp: the wall clock when first read, then
/// moved on by the monotonic clock only, so that a step of the wall clock (NTP, a VM
/// resumed) never makes a node look late or renewed.
pub fn now() -> Timestamp {
    static ANCHOR: OnceLock<(Timestamp, Instant)> = OnceLock::new();
    let (wall, mono) = ANCHOR.get_or_init(|| (Timestamp::now(), Instant::now()));
    SignedDuration::try_from(mono.elapsed())
        .ok()
        .and_then(|d| wall.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

#[derive(Clone, Debug)]
struct Entry {
    /// The `renewTime` last seen, to tell a renewal from a resync.
    renew_time: Timestamp,
    seen: LeaseSeen,
    /// The latest renewals' delays, newest last.
    delays: VecDeque<SignedDuration>,
}

impl Entry {
    /// Records a renewal seen at `now` as event `seq`.
    fn renewed(&mut self, renew_time: Timestamp, now: Timestamp, seq: u64) {
        let delay = now.duration_since(renew_time);
        if self.delays.len() == DELAY_SAMPLES {
            self.delays.pop_front();
        }
        self.delays.push_back(delay);
        let baseline = self.delays.iter().min().copied().unwrap_or(delay);
        let prompt = self.delays.len() >= MIN_SAMPLES
            && baseline
                .checked_add(PROMPT_SLACK)
                .is_some_and(|b| delay <= b);
        self.renew_time = renew_time;
        self.seen.renewed = now;
        self.seen.renewal_seen = true;
        self.seen.seq = seq;
        if prompt {
            self.seen.prompt_at = Some(now);
        } else if self.delays.len() >= MIN_SAMPLES {
            self.seen.slow_at = Some(now);
        }
    }
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Entry>,
    /// Lease events seen.
    seq: u64,
}

/// What the operator saw of each node's Lease, by node name.
#[derive(Clone, Default)]
pub struct NodeLeases(Arc<RwLock<State>>);

impl NodeLeases {
    /// A copy of what is known now, for one reconcile.
    pub fn view(&self) -> LeaseView {
        self.view_at(now())
    }

    pub fn view_at(&self, now: Timestamp) -> LeaseView {
        let state = self.read();
        LeaseView {
            leases: state
                .nodes
                .iter()
                .map(|(name, e)| (name.clone(), e.seen))
                .collect(),
            now,
            seq: state.seq,
        }
    }

    /// Whether one of `nodes` was seen renewed after event `seq`: a verdict on a view
    /// taken at `seq` that named them silent is out of date.
    pub fn renewed_after(&self, nodes: &[String], seq: u64) -> bool {
        let state = self.read();
        nodes
            .iter()
            .filter_map(|n| state.nodes.get(n))
            .any(|e| e.seen.seq > seq)
    }

    /// How many renewal periods past its grace each node is at `now` (0: on time).
    pub fn lateness(&self, now: Timestamp) -> BTreeMap<String, i64> {
        self.read()
            .nodes
            .iter()
            .map(|(name, e)| (name.clone(), periods_late(&e.seen, now)))
            .collect()
    }

    /// When the newest prompt renewal was seen.
    pub fn newest_prompt(&self) -> Option<Timestamp> {
        self.read()
            .nodes
            .values()
            .filter_map(|e| e.seen.prompt_at)
            .max()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `lease` as seen at `now`: a renewal if its `renewTime` changed, a first
    /// sighting (not a renewal) if it is new. A Lease without a renew time or a duration
    /// is not one a kubelet keeps, and is forgotten.
    pub fn observe(&self, lease: &Lease, now: Timestamp) {
        let name = lease.name_any();
        let spec = lease.spec.as_ref();
        let renew_time = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        let duration = spec.and_then(|s| s.lease_duration_seconds);
        let mut state = self.write();
        state.seq += 1;
        let seq = state.seq;
        let (Some(renew_time), Some(duration_secs)) = (renew_time, duration) else {
            state.nodes.remove(&name);
            return;
        };
        let entry = state.nodes.entry(name).or_insert_with(|| Entry {
            renew_time,
            seen: LeaseSeen {
                renewed: now,
                duration_secs,
                renewal_seen: false,
                prompt_at: None,
                slow_at: None,
                seq,
            },
            delays: VecDeque::new(),
        });
        entry.seen.duration_secs = duration_secs;
        if entry.renew_time != renew_time {
            entry.renewed(renew_time, now, seq);
        }
    }

    pub fn forget(&self, name: &str) {
        self.write().nodes.remove(name);
    }

    /// After a relist: forgets the Leases it did not return.
    pub fn keep_only(&self, names: &BTreeSet<String>) {
        self.write().nodes.retain(|name, _| names.contains(name));
    }
}

/// Whole renewal periods past a node's first due renewal and grace; 0 while on time.
fn periods_late(seen: &LeaseSeen, now: Timestamp) -> i64 {
    let past = now.duration_since(seen.renewed) - LATE_GRACE;
    let period = seen.period().as_millis().max(1);
    i64::try_from((past.as_millis() / period).max(0)).unwrap_or(i64::MAX)
}

/// What the watch of `kube-node-lease` (`caches/reflectors.rs`) saw: records renewals,
/// forgets deleted Leases, and after a relist those it did not return.
pub fn on_event(
    leases: &NodeLeases,
    relisted: &mut Option<BTreeSet<String>>,
    event: &watcher::Event<Lease>,
) {
    let now = now();
    match event {
        watcher::Event::Apply(l) => leases.observe(l, now),
        watcher::Event::Delete(l) => leases.forget(&l.name_any()),
        watcher::Event::Init => *relisted = Some(BTreeSet::new()),
        watcher::Event::InitApply(l) => {
            leases.observe(l, now);
            if let Some(names) = relisted.as_mut() {
                names.insert(l.name_any());
            }
        }
        watcher::Event::InitDone => {
            if let Some(names) = relisted.take() {
                leases.keep_only(&names);
            }
        }
    }
}

/// What the clock last triggered on.
#[derive(Default)]
struct Watched {
    lateness: BTreeMap<String, i64>,
    /// The lateness changed, with some node late, and no prompt renewal has settled
    /// since ([`EVIDENCE_SETTLE`]).
    awaiting_evidence: Option<Timestamp>,
}

impl Watched {
    /// Whether to trigger now: the lateness changed, or the first prompt renewal since it
    /// changed while some node is late has settled.
    fn tick(&mut self, leases: &NodeLeases, now: Timestamp) -> bool {
        let lateness = leases.lateness(now);
        if lateness != self.lateness {
            let late = lateness.values().any(|l| *l > 0);
            self.awaiting_evidence = late.then_some(now);
            self.lateness = lateness;
            return true;
        }
        let settled = |p: Timestamp| p.checked_add(EVIDENCE_SETTLE).is_ok_and(|s| s <= now);
        match (self.awaiting_evidence, leases.newest_prompt()) {
            (Some(since), Some(prompt)) if prompt > since && settled(prompt) => {
                self.awaiting_evidence = None;
                true
            }
            _ => false,
        }
    }
}

/// Starts the clock: `on_change` runs when a verdict may have changed.
pub fn start_clock(leases: NodeLeases, on_change: impl Fn() + Send + 'static) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CLOCK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watched = Watched::default();
        loop {
            tick.tick().await;
            if watched.tick(&leases, now()) {
                debug!("how late the node Leases are changed");
                on_change();
            }
        }
    })
}

#[cfg(test)]
mod tests;
