//! loki-zone-operator: a Kubernetes operator for Grafana Loki whose log streams are
//! replicated across availability zones.
//!
//! The crate is a stack of rooms (folders); a module imports only from its own room or
//! from a room below it, and never in a circle (`tests/architecture.rs` checks both).
//! Bottom to top:
//!
//! - [`model`]: the LokiStack API, names, conditions and Event reasons, defaults, what a
//!   pod's labels and an object's field managers say: the shared vocabulary.
//! - [`checks`]: pure checks of what the cluster offers (zones, storage classes and
//!   volumes, a pod's zone) and of the spec.
//! - [`logql`]: LogQL as Loki parses it, and Prometheus durations: what a rule's
//!   expression may be.
//! - [`ruler`]: the ruler's API (AlertingRule, RecordingRule, RulerConfig) and, pure,
//!   its checks, which rules a stack picks, and a RulerConfig as Loki settings.
//! - [`render`]: every Loki object, rendered from the templates and parsed into types.
//! - [`telemetry`]: metrics and the health/metrics HTTP server.
//! - [`heartbeats`]: when each node's kubelet last renewed its Lease, on the operator's
//!   clock, and the clock that says when that changes (the fast failover's evidence).
//! - [`stores`]: what the caches are made of, pure: what each cached object is reduced
//!   to, and each store's index by stack.
//! - [`caches`]: the one set of reflector caches of the process, outliving leadership,
//!   what they keep of each object, and what the webhook configurations cover.
//! - [`observe`]: one stack's snapshot, read from the caches.
//! - [`intent`]: the vocabulary between deciding and doing: what one reconcile will do
//!   ([`intent::Intent`]) and what came of it ([`intent::Done`]).
//! - [`plan`]: the only decider, pure: the Intent of a stack (what to apply, zone
//!   stages, rollouts, scale-downs, recovery, Events).
//! - [`status`]: pure: the status a stack should show and the Events of a reconcile,
//!   from its Intent and what came of it.
//! - [`act`]: carries an Intent out and publishes the report: server-side apply,
//!   take-over, deletes, Events, status. It imports nothing of `plan`.
//! - [`webhook`]: the admission webhooks every replica serves, their registration, and
//!   their own certificate authority.
//! - [`reconcile`]: one reconcile (observe → plan → act → report), and its controller.
//! - [`annotator`]: the pod zone annotator.
//! - [`lead`]: `run`: leader election and the term that owns what only the leader does.
//! - [`cli`]: the command line.
//!
//! `docs/architecture.md` draws the map.

pub mod act;
pub mod annotator;
pub mod caches;
pub mod checks;
pub mod cli;
pub mod heartbeats;
pub mod intent;
pub mod lead;
pub mod logql;
pub mod model;
pub mod observe;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod ruler;
pub mod status;
pub mod stores;
pub mod telemetry;
pub mod webhook;

#[cfg(test)]
pub(crate) mod testing;
