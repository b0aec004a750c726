//! Zone-by-zone rollouts of the ring members (StatefulSets) of a zone-aware stack.
//!
//! Their StatefulSets use `updateStrategy: OnDelete` (see `render.rs`), so a changed pod
//! template restarts nothing by itself: the operator deletes the outdated pods of one
//! zone at once (up to `spec.replication.maxUnavailablePerZone`), and the StatefulSet
//! controller recreates them at the update revision. The next zone starts only once
//! every pod of the previous one is updated and Ready. With one copy of each stream per
//! zone, a whole zone down at once costs one copy of each stream, exactly what an ordinal
//! rolling update costs for a single pod, and the rollout takes as many steps as there
//! are zones instead of pods.
//!
//! [`plan::plan`] decides purely from the snapshot; [`run::run`] deletes the pods it
//! chose. The only pods ever deleted here are outdated pods the StatefulSet owns: the
//! rollout itself, never the reaction to a failed check.
//!
//! [`scale_down`] asks the ingesters a scale-down removes to leave the ring before their
//! StatefulSet shrinks (they keep their ring entry across restarts otherwise).

pub mod plan;
pub mod run;
pub mod scale_down;

pub use plan::{plan, Decision, Inputs, Victim};
