//! The reflector caches of the process: one per kind, started once, outliving every
//! leadership term, read by the reconciler, the annotator and the webhooks alike. Each
//! object is cached once per process ([`reflectors::Caches`]).

pub mod coverage;
pub mod reflectors;
pub mod rule_bodies;
pub mod rule_kinds;
pub mod rules;
pub mod scope;
pub mod secrets;
pub mod stacks;
pub mod taps;
