//! How soon a failed reconcile runs again, per stack: [`FIRST_RETRY`] after its first
//! failure in a row, doubling with each further one up to [`MAX_RETRY`], and back to the
//! start once a reconcile of the stack goes through. A stack that fails for a reason
//! that lasts (a quota, a webhook of someone else's that refuses) thus costs the API
//! server a few requests an hour, not one every few seconds, while a passing failure
//! (a conflict, an API server restarting) is retried at once. Each stack counts its own
//! failures: one failing stack does not slow the others down.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The retry after a stack's first failure in a row.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between retries: under the default resync (5 min), so a failing
/// stack is never looked at less often than a healthy one.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// The retry after `failures` failures in a row (1 for the first).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// Failures in a row, by stack (namespace, name).
#[derive(Default)]
pub struct ErrorBackoff {
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl ErrorBackoff {
    /// Counts a failure of the stack; the retry it gets.
    pub fn failed(&self, namespace: &str, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let n = failures
            .entry((namespace.to_string(), name.to_string()))
            .or_insert(0);
        *n = n.saturating_add(1);
        delay(*n)
    }

    /// A reconcile of the stack went through (or it is no longer ours to run).
    pub fn succeeded(&self, namespace: &str, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Forgets the stacks not in `live` (deleted ones).
    pub fn retain(&self, live: &HashSet<(String, String)>) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| live.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_the_first_up_to_the_cap() {
        let secs: Vec<u64> = (1..=8).map(|n| delay(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(0), FIRST_RETRY);
        assert_eq!(delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn each_stack_counts_its_own_failures_until_it_goes_through() {
        let b = ErrorBackoff::default();
        assert_eq!(b.failed("a", "s"), Duration::from_secs(5));
        assert_eq!(b.failed("a", "s"), Duration::from_secs(10));
        // Another stack, or the same name elsewhere, starts from the first retry.
        assert_eq!(b.failed("a", "t"), Duration::from_secs(5));
        assert_eq!(b.failed("b", "s"), Duration::from_secs(5));
        assert_eq!(b.failed("a", "s"), Duration::from_secs(20));
        b.succeeded("a", "s");
        assert_eq!(b.failed("a", "s"), Duration::from_secs(5));
        // A deleted stack is forgotten.
        b.retain(&HashSet::from([("a".to_string(), "s".to_string())]));
        assert_eq!(b.failed("a", "t"), Duration::from_secs(5));
        assert_eq!(b.failed("a", "s"), Duration::from_secs(10));
    }
}
