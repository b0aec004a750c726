//! loki-zone-operator: a Kubernetes operator for Grafana Loki whose log streams are
//! replicated across availability zones.
//!
//! A reconcile is a pipeline: observe → [`validate`] → [`zones::check`] →
//! [`render::render`] → apply → status. Everything but observe, apply and status is a pure
//! function in this crate, tested without a cluster.

pub mod api;
pub mod cli;
pub mod conditions;
pub mod controller;
pub mod defaults;
pub mod kinds;
pub mod names;
pub mod render;
pub mod storage;
pub mod validate;
pub mod waitzone;
pub mod zones;

#[cfg(test)]
mod render_tests;
#[cfg(test)]
pub(crate) mod testing;
