//! The ruler: the Go Loki Operator's API for it (AlertingRule, RecordingRule,
//! RulerConfig), its names, and what the operator makes of it, all pure: the checks of
//! a rule or RulerConfig (with `logql`'s parser and durations), which rules
//! a stack picks, and a RulerConfig as Loki settings. Above `model` and `checks`, whose
//! vocabulary it speaks; below everything that acts on rules.

pub mod api;
pub mod check;
pub mod names;
pub mod settings;
