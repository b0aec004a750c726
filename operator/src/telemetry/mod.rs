//! What the operator tells about itself: Prometheus metrics, and the HTTP server of
//! `/metrics`, `/healthz` and `/readyz`.

pub mod metrics;
pub mod server;
