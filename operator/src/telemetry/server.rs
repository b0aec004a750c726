//! `/healthz`, `/readyz` (caches synced) and `/metrics`, on their own ports.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::telemetry::metrics::Metrics;

/// What `/readyz` answers from. The leader is ready once the caches have synced; a
/// standby is ready once it serves the webhooks (its only work), so the webhook Service
/// sends reviews to every replica that can answer them; with the webhooks off (OLM
/// installs), once its caches have synced, so that a Deployment of two replicas becomes
/// Available and its PodDisruptionBudget can let one go.
#[derive(Clone, Default)]
pub struct Readiness {
    pub leading: Arc<AtomicBool>,
    /// Every cache of the process has its first full list.
    pub caches: Arc<AtomicBool>,
    webhook: Arc<std::sync::OnceLock<Arc<AtomicBool>>>,
}

impl Readiness {
    pub fn set_webhook(&self, ready: Arc<AtomicBool>) {
        let _ = self.webhook.set(ready);
    }

    pub fn is_ready(&self) -> bool {
        if self.leading.load(Ordering::Relaxed) {
            return self.caches.load(Ordering::Relaxed);
        }
        match self.webhook.get() {
            Some(serving) => serving.load(Ordering::Relaxed),
            None => self.caches.load(Ordering::Relaxed),
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: Readiness,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches not synced, or (standby) webhook not serving",
        )
    }
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// Serves probes on `health` and metrics on `metrics` (the same address serves both).
pub async fn serve(
    health: SocketAddr,
    metrics_addr: SocketAddr,
    m: Arc<Metrics>,
    ready: Readiness,
) -> std::io::Result<()> {
    let state = AppState { metrics: m, ready };
    let probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let metrics_router = Router::new().route("/metrics", get(metrics));
    if health == metrics_addr {
        let listener = tokio::net::TcpListener::bind(health).await?;
        return axum::serve(listener, probes.merge(metrics_router).with_state(state)).await;
    }
    let l1 = tokio::net::TcpListener::bind(health).await?;
    let l2 = tokio::net::TcpListener::bind(metrics_addr).await?;
    let a = axum::serve(l1, probes.with_state(state.clone()));
    let b = axum::serve(l2, metrics_router.with_state(state));
    tokio::try_join!(async { a.await }, async { b.await })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standby serves only the webhooks; without them (OLM installs) it is ready with
    /// its caches, or a Deployment of two replicas would never become Available.
    #[test]
    fn a_standby_is_ready_when_its_webhook_serves_or_without_one_with_its_caches() {
        let r = Readiness::default();
        assert!(!r.is_ready());
        r.caches.store(true, Ordering::Relaxed);
        assert!(r.is_ready(), "webhooks off: the caches decide");
        let serving = Arc::new(AtomicBool::new(false));
        r.set_webhook(serving.clone());
        assert!(!r.is_ready(), "webhooks on: not before the webhook serves");
        serving.store(true, Ordering::Relaxed);
        assert!(r.is_ready());
        r.leading.store(true, Ordering::Relaxed);
        r.caches.store(false, Ordering::Relaxed);
        assert!(!r.is_ready(), "the leader needs its caches");
    }
}
