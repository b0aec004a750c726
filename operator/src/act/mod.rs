//! The writes of a reconcile, each carrying out what `plan` decided: server-side apply
//! (and the take-over of the Go operator's fields), pod deletes of rollouts and of
//! zone-outage recovery, the ingesters' leave-the-ring calls, the status write and Events.
//! Nothing here decides; every function is told what to do.

pub mod apply;
pub mod recovery;
pub mod report;
pub mod rollout;
pub mod scale_down;
pub mod takeover;
