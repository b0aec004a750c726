//! The nodes' heartbeats: their Leases in `kube-node-lease`, as the fast failover reads them
//! (`checks/silence.rs`): for each node, when the operator last saw its kubelet renew
//! it, on the operator's own clock (a kubelet's `renewTime` is its own clock's, and a
//! zone whose clocks lag must not look silent).
//!
//! The watch itself is the caches' (`caches/reflectors.rs`), which feed [`on_event`]. A
//! Lease is renewed every few seconds on every node, so its changes trigger nothing by
//! themselves: a clock looks once a second which nodes are late, and triggers the
//! zone-aware stacks only when that set changes (a zone going silent, or renewing again).
//!
//! Without the right to read Leases (an install from before the fast failover) the map
//! stays empty, and no zone is ever silent: the failover is off, nothing else changes.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::checks::silence::LeaseSeen;

/// How often the clock looks for nodes that became late or renew again; the fast
/// failover reacts within this of a zone's last Lease going late.
pub const CLOCK: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The `renewTime` last seen, to tell a renewal from a resync.
    renew_time: Timestamp,
    seen: LeaseSeen,
}

/// When each node's Lease was last seen renewed, by node name.
#[derive(Clone, Default)]
pub struct NodeLeases(Arc<RwLock<HashMap<String, Entry>>>);

impl NodeLeases {
    /// A copy of what is known, for one reconcile.
    pub fn seen(&self) -> HashMap<String, LeaseSeen> {
        self.read()
            .iter()
            .map(|(name, e)| (name.clone(), e.seen))
            .collect()
    }

    /// The nodes late at `now`.
    pub fn late(&self, now: Timestamp) -> BTreeSet<String> {
        self.read()
            .iter()
            .filter(|(_, e)| e.seen.late(now))
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `lease` as seen at `now`: renewed now if its `renewTime` changed or it is
    /// new. A Lease without a renew time or a duration is not one a kubelet keeps, and
    /// is forgotten.
    pub fn observe(&self, lease: &Lease, now: Timestamp) {
        let name = lease.name_any();
        let spec = lease.spec.as_ref();
        let renew_time = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        let duration = spec.and_then(|s| s.lease_duration_seconds);
        let (Some(renew_time), Some(duration_secs)) = (renew_time, duration) else {
            self.write().remove(&name);
            return;
        };
        let mut map = self.write();
        let renewed = match map.get(&name) {
            Some(e) if e.renew_time == renew_time => e.seen.renewed,
            _ => now,
        };
        map.insert(
            name,
            Entry {
                renew_time,
                seen: LeaseSeen {
                    renewed,
                    duration_secs,
                },
            },
        );
    }

    pub fn forget(&self, name: &str) {
        self.write().remove(name);
    }

    /// After a relist: forgets the Leases it did not return.
    pub fn keep_only(&self, names: &BTreeSet<String>) {
        self.write().retain(|name, _| names.contains(name));
    }
}

/// What the watch of `kube-node-lease` (`caches/reflectors.rs`) saw: records renewals,
/// forgets deleted Leases, and after a relist those it did not return.
pub fn on_event(
    leases: &NodeLeases,
    relisted: &mut Option<BTreeSet<String>>,
    event: &watcher::Event<Lease>,
) {
    let now = Timestamp::now();
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

/// Starts the clock: `on_late_change` runs when the set of late nodes changes.
pub fn start_clock(
    leases: NodeLeases,
    on_late_change: impl Fn() + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CLOCK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut late = BTreeSet::new();
        loop {
            tick.tick().await;
            let now_late = leases.late(Timestamp::now());
            if now_late != late {
                debug!(late = ?now_late, "nodes whose Lease is late changed");
                late = now_late;
                on_late_change();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("ts")
    }

    fn lease(name: &str, renewed: Option<i64>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                renew_time: renewed.map(|s| MicroTime(at(s))),
                lease_duration_seconds: Some(40),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn lateness_is_on_the_operators_clock_not_the_kubelets() {
        let leases = NodeLeases::default();
        // A kubelet whose clock lags 100 s: its renewTime looks old, but it renews.
        leases.observe(&lease("n1", Some(-100)), at(0));
        leases.observe(&lease("n1", Some(-90)), at(10));
        assert_eq!(leases.seen()["n1"].renewed, at(10));
        assert!(leases.late(at(20)).is_empty());
        // A resync of the same Lease is no renewal.
        leases.observe(&lease("n1", Some(-90)), at(20));
        assert_eq!(leases.seen()["n1"].renewed, at(10));
        assert_eq!(leases.late(at(23)), BTreeSet::from(["n1".to_string()]));
    }

    #[test]
    fn leases_without_a_renewal_are_not_kept_and_a_relist_forgets_the_gone() {
        let leases = NodeLeases::default();
        leases.observe(&lease("n1", Some(0)), at(0));
        leases.observe(&lease("n2", Some(0)), at(0));
        leases.observe(&lease("n1", None), at(1));
        assert!(!leases.seen().contains_key("n1"));
        leases.observe(&lease("n3", Some(0)), at(1));
        leases.keep_only(&BTreeSet::from(["n3".to_string()]));
        assert_eq!(leases.seen().keys().collect::<Vec<_>>(), vec!["n3"]);
        leases.forget("n3");
        assert!(leases.seen().is_empty());
    }
}
