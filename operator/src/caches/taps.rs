//! Where cache changes go. The caches outlive leadership terms; a term attaches to each
//! tap for as long as it runs and detaches when it ends. A change seen while no term
//! listens is dropped on purpose: a term starts from the caches' current state instead
//! (every stack is reconciled, every zone-aware pod looked at), so nothing is missed.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::caches::stacks::StackRef;

/// One kind of change, sent to the term attached, if any.
pub struct Tap<T>(Arc<Mutex<Option<UnboundedSender<T>>>>);

impl<T> Clone for Tap<T> {
    fn clone(&self) -> Self {
        Tap(self.0.clone())
    }
}

impl<T> Default for Tap<T> {
    fn default() -> Self {
        Tap(Arc::default())
    }
}

impl<T> Tap<T> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<UnboundedSender<T>>> {
        // A panic elsewhere while holding the slot leaves it usable: at worst a change
        // is dropped, which a term's start covers anyway.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn send(&self, value: T) {
        let mut slot = self.slot();
        if let Some(tx) = slot.as_ref() {
            if tx.send(value).is_err() {
                *slot = None;
            }
        }
    }

    /// Starts delivering changes to a new receiver (a previous one gets no more).
    pub fn attach(&self) -> UnboundedReceiver<T> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.slot() = Some(tx);
        rx
    }

    pub fn detach(&self) {
        *self.slot() = None;
    }

    pub fn is_attached(&self) -> bool {
        self.slot().is_some()
    }
}

/// A zone-aware pod as the pod cache just saw it. A change carries when the cache
/// stored it, for the annotator's `queued` step.
#[derive(Debug)]
pub enum PodChange {
    Changed(Pod, std::time::Instant),
    Deleted(Pod),
}

/// Every tap of the caches: stacks to reconcile, node names whose zone inputs changed
/// and zone-aware pods (both for the pod annotator).
#[derive(Clone, Default)]
pub struct Taps {
    pub stacks: Tap<StackRef>,
    pub nodes: Tap<String>,
    pub zone_aware_pods: Tap<PodChange>,
    /// Something that decides a rule's status changed: a rule, a RulerConfig, a
    /// namespace's labels, or a stack's `spec.rules`.
    pub rules: Tap<()>,
}

impl Taps {
    pub fn detach_all(&self) {
        self.stacks.detach();
        self.nodes.detach();
        self.zone_aware_pods.detach();
        self.rules.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reaches_only_the_attached_term() {
        let tap: Tap<u32> = Tap::default();
        tap.send(1);
        let mut first = tap.attach();
        tap.send(2);
        let mut second = tap.attach();
        tap.send(3);
        tap.detach();
        tap.send(4);
        assert_eq!(first.try_recv().ok(), Some(2));
        assert!(
            first.try_recv().is_err(),
            "a replaced receiver gets no more"
        );
        assert_eq!(second.try_recv().ok(), Some(3));
        assert!(second.try_recv().is_err(), "nothing after detach");
        assert!(!tap.is_attached());
    }
}
