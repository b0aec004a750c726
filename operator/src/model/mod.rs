//! The shared vocabulary: the LokiStack API, the names, labels and ports every object
//! uses, conditions, the defaults a spec resolves to, and the object store's parameters.
//! Everything above speaks it; it imports nothing of the crate but itself.

pub mod api;
pub mod conditions;
pub mod defaults;
pub mod duration;
pub mod go_compat;
pub mod names;
pub mod pods;
pub mod storage;
pub mod text;
pub mod writers;
