//! loki-zone-operator: a Kubernetes operator for Grafana Loki whose log streams are
//! replicated across availability zones.
//!
//! A reconcile is a pipeline (`controller/reconcile.rs`): observe (a snapshot of the
//! caches) → plan (pure: [`validate`], [`storage`], [`zones::check`], [`render::render`])
//! → apply (server-side apply) → status (pure, then one write). `docs/architecture.md`
//! names the file of each step.

pub mod api;
pub mod cli;
pub mod conditions;
pub mod controller;
pub mod defaults;
pub mod fields;
pub mod go_compat;
pub mod kinds;
pub mod limits;
pub mod names;
pub mod render;
pub mod storage;
pub mod validate;
pub mod volumes;
pub mod waitzone;
pub mod webhook;
pub mod zones;

#[cfg(test)]
mod config_reference_tests;
#[cfg(test)]
mod render_tests;
#[cfg(test)]
pub(crate) mod testing;
