//! What the webhook configurations cover, as the leader's keepers last applied them
//! (`webhook/registration.rs`): the namespaces whose pods are zoned at bind, and those
//! whose ingester evictions the zone-disruption webhook decides. Part of what a
//! reconcile observes: a zone-aware stack's first apply waits (briefly) for its
//! namespace to be covered, so its pods are zoned at bind from the first one.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// The longest a zone-aware stack's first apply waits for the webhook to cover its
/// namespace; after that it goes on, and the annotator zones its pods.
pub const COVERAGE_WAIT: Duration = Duration::from_secs(5);

/// The namespaces the applied configuration covers, for the reconciler: a zone-aware
/// stack's workloads are applied once its namespace is covered, so its pods are zoned at
/// bind from the first one.
#[derive(Clone)]
pub struct Coverage {
    covered: watch::Receiver<BTreeSet<String>>,
    wake: Arc<Notify>,
    failing: Arc<AtomicBool>,
}

/// The keeper's side of [`Coverage`].
pub struct CoverageFeed {
    covered: watch::Sender<BTreeSet<String>>,
    wake: Arc<Notify>,
    failing: Arc<AtomicBool>,
}

impl CoverageFeed {
    pub fn applied(&self, covered: BTreeSet<String>) {
        self.failing.store(false, Ordering::Relaxed);
        self.covered.send_replace(covered);
    }

    /// Resolves when a reconcile waits for a namespace the configuration does not cover
    /// yet: the keeper then looks at the stacks at once, not at its next tick.
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    pub fn failed(&self) {
        self.failing.store(true, Ordering::Relaxed);
    }
}

impl Coverage {
    pub fn new() -> (Coverage, CoverageFeed) {
        let (tx, covered) = watch::channel(BTreeSet::new());
        let (wake, failing) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
        let feed = CoverageFeed {
            covered: tx,
            wake: wake.clone(),
            failing: failing.clone(),
        };
        (
            Coverage {
                covered,
                wake,
                failing,
            },
            feed,
        )
    }

    /// Waits until `namespace` is covered, at most [`COVERAGE_WAIT`]; false if it is not.
    /// While the configuration cannot be applied (its RBAC missing, say) nothing waits:
    /// the annotator zones the pods, and the keeper's warning says why.
    pub async fn wait_for(&self, namespace: &str) -> bool {
        if self.covered.borrow().contains(namespace) {
            return true;
        }
        if self.failing.load(Ordering::Relaxed) {
            return false;
        }
        self.wake.notify_one();
        let mut rx = self.covered.clone();
        tokio::time::timeout(COVERAGE_WAIT, rx.wait_for(|c| c.contains(namespace)))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// The coverage of the webhooks the leader keeps, for the reconciler.
#[derive(Clone, Default)]
pub struct WebhookCoverage {
    /// Namespaces whose pods are zoned at bind; `None` when the operator does not
    /// register that webhook (switched off, or OLM's).
    pub bind: Option<Coverage>,
    /// Namespaces whose ingester evictions the zone-disruption webhook decides.
    pub disruptions: Option<Coverage>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A reconcile waits for its namespace only while the configuration can be applied.
    #[tokio::test]
    async fn coverage_waits_only_while_the_configuration_can_be_applied() {
        let (coverage, feed) = Coverage::new();
        let waiting = tokio::spawn({
            let c = coverage.clone();
            async move { c.wait_for("logs").await }
        });
        tokio::task::yield_now().await;
        feed.applied(BTreeSet::from(["logs".to_string()]));
        assert!(waiting.await.expect("joins"), "covered while waiting");
        assert!(coverage.wait_for("logs").await);
        feed.failed();
        let started = Instant::now();
        assert!(!coverage.wait_for("team").await, "not covered");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no wait while failing"
        );
    }
}
