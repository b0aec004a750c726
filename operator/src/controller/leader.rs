//! Leader election on a `coordination.k8s.io/v1` Lease, so two replicas are safe: only
//! the holder reconciles and annotates; a standby takes over once the holder stops
//! renewing for a lease duration, or at once when the holder releases it on shutdown.
//! Every write is conditional on the Lease's resourceVersion.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
    pub retry_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the leader lease {0}: another replica holds it now")]
    Lost(String),
    #[error("could not renew the leader lease {name} for {seconds}s: {source}")]
    RenewFailed {
        name: String,
        seconds: u64,
        source: kube::Error,
    },
}

/// Whether `me` may take the lease at `now`: it is free, ours, or expired.
pub fn can_acquire(lease: &Lease, me: &str, now: Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == me {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    renewed.0 + duration < now
}

fn lease_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
}

impl Elector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
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
            Some(mut lease) if can_acquire(&lease, &self.cfg.identity, now) => {
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

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    info!(lease = %self.cfg.name, identity = %self.cfg.identity, "became leader");
                    return;
                }
                Ok(false) if !logged => {
                    info!(lease = %self.cfg.name, "another replica leads; standing by");
                    logged = true;
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(lease = %self.cfg.name, error = %e, "leader election attempt failed")
                }
            }
            tokio::time::sleep(self.cfg.retry_every).await;
        }
    }

    /// Renews the lease until it is lost; returns why.
    pub async fn hold(&self) -> LeaderError {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.cfg.renew_every).await;
            match self.try_acquire().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => return LeaderError::Lost(self.cfg.name.clone()),
                Err(source) if last_ok.elapsed() >= self.cfg.lease_duration => {
                    return LeaderError::RenewFailed {
                        name: self.cfg.name.clone(),
                        seconds: self.cfg.lease_duration.as_secs(),
                        source,
                    }
                }
                Err(e) => warn!(error = %e, "lease renewal failed; retrying"),
            }
        }
    }

    /// Gives the lease up on shutdown, so a standby takes over without waiting it out.
    pub async fn release(&self) {
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
        let now = Timestamp::from_second(1_000).expect("ts");
        assert!(can_acquire(&lease(None, None, 15), "me", now), "free");
        assert!(
            can_acquire(&lease(Some(""), Some(999), 15), "me", now),
            "released"
        );
        assert!(
            can_acquire(&lease(Some("me"), Some(999), 15), "me", now),
            "ours"
        );
        assert!(
            !can_acquire(&lease(Some("other"), Some(990), 15), "me", now),
            "held and fresh"
        );
        assert!(
            can_acquire(&lease(Some("other"), Some(980), 15), "me", now),
            "expired"
        );
    }
}
