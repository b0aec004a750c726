//! Leader election on a `coordination.k8s.io/v1` Lease, so two replicas are safe: only
//! the holder reconciles and annotates; a standby takes over once the holder stops
//! renewing for a lease duration, or at once when the holder releases it on shutdown.
//! Every write is conditional on the Lease's resourceVersion.
//!
//! The rules are client-go's: a standby never compares the Lease's `renewTime` with its
//! own clock (clocks of two machines differ); it notes, on its own monotonic clock, when
//! it last saw the Lease change, and takes over only after a full lease duration without
//! a change. The holder gives up after a renew deadline shorter than the lease duration,
//! so it has stopped before anyone else can take over. Failed calls (an API server
//! restarting, RBAC warming up) are retried every retry period until that deadline.
//!
//! Every call of the holder is bounded by what is left of the renew deadline, so a call
//! stuck on a dead connection or held back by retries cannot keep it leading: when the
//! deadline passes, [`Elector::hold`] returns at once, and the term ends with it. The
//! lease client should have no retry layer and its own connections (`main.rs` builds
//! one), so that neither a throttled retry nor a stalled connection of the reconciler
//! delays a renewal.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tokio::time::Instant;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    /// The holder steps down when it could not renew for this long; shorter than
    /// `lease_duration`.
    pub renew_deadline: Duration,
    pub renew_every: Duration,
    pub retry_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the leader lease {0}: another replica holds it now")]
    Lost(String),
    #[error(
        "could not renew the leader lease {name} within its renew deadline of {seconds}s: {why}"
    )]
    RenewFailed {
        name: String,
        seconds: u64,
        /// The last error, or that the last call had not answered by the deadline.
        why: String,
    },
}

/// Whether `me` may take the lease: it is free, ours, or it has not changed for a full
/// lease duration of our own clock (`unchanged_for`).
pub fn can_acquire(lease: &Lease, me: &str, unchanged_for: Duration) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == me {
        return true;
    }
    let seconds = spec.lease_duration_seconds.unwrap_or(15).max(1);
    unchanged_for >= Duration::from_secs(u64::try_from(seconds).unwrap_or(15))
}

/// When this replica last saw the Lease change (by its resourceVersion).
struct Observed {
    version: Option<String>,
    at: Instant,
}

fn lease_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observed: Mutex<Option<Observed>>,
}

impl Elector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Mutex::new(None),
        }
    }

    /// How long the Lease has been seen unchanged, noting a change now.
    fn unchanged_for(&self, lease: &Lease) -> Duration {
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        let version = lease.metadata.resource_version.clone();
        match observed.as_ref() {
            Some(o) if o.version == version => o.at.elapsed(),
            _ => {
                *observed = Some(Observed {
                    version,
                    at: Instant::now(),
                });
                Duration::ZERO
            }
        }
    }

    fn mine(&self, old: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let already =
            old.and_then(|s| s.holder_identity.as_deref()) == Some(self.cfg.identity.as_str());
        let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(lease_seconds(self.cfg.lease_duration)),
            acquire_time: if already {
                old.and_then(|s| s.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if already {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    /// One attempt; `Ok(true)` when we hold the lease afterwards.
    async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        match self.api.get_opt(&self.cfg.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.mine(None, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease)
                if can_acquire(&lease, &self.cfg.identity, self.unchanged_for(&lease)) =>
            {
                lease.spec = Some(self.mine(lease.spec.as_ref(), now));
                match self
                    .api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(_) => Ok(false),
        }
    }

    /// Waits until this replica holds the lease. Each attempt is bounded by the renew
    /// deadline, so a call stuck on a dead connection does not stop the campaign.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            let attempt = tokio::time::timeout(self.cfg.renew_deadline, self.try_acquire());
            match attempt.await {
                Ok(Ok(true)) => {
                    info!(lease = %self.cfg.name, identity = %self.cfg.identity, "became leader");
                    return;
                }
                Ok(Ok(false)) if !logged => {
                    info!(lease = %self.cfg.name, "another replica leads; standing by");
                    logged = true;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    warn!(lease = %self.cfg.name, error = %e, "leader election attempt failed")
                }
                Err(_) => {
                    warn!(lease = %self.cfg.name, "leader election attempt got no answer; trying again")
                }
            }
            tokio::time::sleep(self.cfg.retry_every).await;
        }
    }

    /// Renews the lease until it is lost or not renewed within the renew deadline;
    /// returns why, at the latest when the deadline passes. A failed renewal is retried
    /// every retry period meanwhile, each call bounded by what is left of the deadline.
    pub async fn hold(&self) -> LeaderError {
        let mut renewed = Instant::now();
        let mut wait = self.cfg.renew_every;
        let mut last_error: Option<String> = None;
        loop {
            let deadline = renewed + self.cfg.renew_deadline;
            tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = tokio::time::timeout(left, self.try_acquire()).await;
            match attempt {
                Ok(Ok(true)) => {
                    renewed = Instant::now();
                    wait = self.cfg.renew_every;
                    last_error = None;
                }
                Ok(Ok(false)) => return LeaderError::Lost(self.cfg.name.clone()),
                Ok(Err(e)) if Instant::now() < deadline => {
                    warn!(error = %e, "lease renewal failed; retrying");
                    last_error = Some(e.to_string());
                    wait = self.cfg.retry_every;
                }
                Ok(Err(e)) => return self.deadline_passed(Some(e.to_string())),
                Err(_) => {
                    let why = last_error.take().unwrap_or_else(|| "no answer".to_string());
                    return self.deadline_passed(Some(why));
                }
            }
        }
    }

    fn deadline_passed(&self, why: Option<String>) -> LeaderError {
        LeaderError::RenewFailed {
            name: self.cfg.name.clone(),
            seconds: self.cfg.renew_deadline.as_secs(),
            why: why.unwrap_or_else(|| "no answer".to_string()),
        }
    }

    /// Gives the lease up on shutdown, so a standby takes over without waiting it out.
    pub async fn release(&self) {
        if tokio::time::timeout(self.cfg.renew_deadline, self.release_now())
            .await
            .is_err()
        {
            warn!(lease = %self.cfg.name, "releasing the lease got no answer; a standby takes over when it expires");
        }
    }

    async fn release_now(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.cfg.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
        }
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.cfg.name, "released leadership"),
            Err(e) => {
                warn!(error = %e, "could not release the lease; a standby takes over when it expires")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs: Option<i64>, duration: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: renewed_secs.map(|s| MicroTime(Timestamp::from_second(s).expect("ts"))),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn acquire_rules() {
        let fresh = Duration::from_secs(5);
        let stale = Duration::from_secs(15);
        assert!(can_acquire(&lease(None, None, 15), "me", fresh), "free");
        assert!(
            can_acquire(&lease(Some(""), Some(999), 15), "me", fresh),
            "released"
        );
        assert!(
            can_acquire(&lease(Some("me"), Some(999), 15), "me", fresh),
            "ours"
        );
        assert!(
            !can_acquire(&lease(Some("other"), Some(990), 15), "me", fresh),
            "held, changing"
        );
        assert!(
            can_acquire(&lease(Some("other"), Some(990), 15), "me", stale),
            "unchanged for a lease duration"
        );
        // A renewTime far in the past or future says nothing: only our own observation counts.
        assert!(!can_acquire(
            &lease(Some("other"), Some(0), 15),
            "me",
            fresh
        ));
        assert!(!can_acquire(
            &lease(Some("other"), Some(9_999_999), 15),
            "me",
            fresh
        ));
    }

    /// A renewal that never answers (a stalled connection) ends the hold when the renew
    /// deadline passes, counted from the last renewal, not a moment later.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_ends_the_hold_at_the_deadline() {
        use std::convert::Infallible;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use http::{Request, Response};
        use kube::client::Body;
        use serde_json::json;

        // Answers the first three calls (a get, a put, a get: one renewal and a read),
        // then never again.
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let service = tower::service_fn(move |_req: Request<Body>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            async move {
                if n >= 3 {
                    std::future::pending::<()>().await;
                }
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "l", "namespace": "ns", "resourceVersion": n.to_string()},
                    "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
                });
                Ok::<_, Infallible>(Response::new(Body::from(lease.to_string().into_bytes())))
            }
        });
        let cfg = LeaderConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            retry_every: Duration::from_secs(2),
        };
        let elector = Elector::new(Client::new(service, "ns"), cfg);
        let started = Instant::now();
        let why = elector.hold().await;
        // Renewed once at 2 s; the next call, at 4 s, never answers: out at 2 + 10 s.
        assert_eq!(started.elapsed(), Duration::from_secs(12), "{why}");
        assert!(
            matches!(&why, LeaderError::RenewFailed { why, .. } if why == "no answer"),
            "{why}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }
}
