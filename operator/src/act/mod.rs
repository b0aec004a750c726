//! The writes of a reconcile: [`execute`] carries out the Intent `plan` decided
//! (server-side apply and the take-over of the Go operator's fields, the ingesters'
//! leave-the-ring calls, the pod deletes of rollouts and of zone-outage recovery, the fast
//! failover's pod conditions), and
//! [`report`] publishes what `status` made of it (the status write, Events). Nothing here
//! decides, and nothing imports `plan`: every function is told what to do by an
//! [`crate::intent::Intent`].

pub mod apply;
pub mod execute;
pub mod failover;
pub mod recovery;
pub mod report;
pub mod rollout;
pub mod scale_down;
pub mod takeover;
