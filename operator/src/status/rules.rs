//! The status of AlertingRules, RecordingRules and RulerConfigs: one `Ready` condition
//! saying which stacks pick the object, or why it is not loaded. Pure: the term's rule
//! status loop (`reconcile/rules.rs`) decides what to write with it.
//!
//! Objects no stack of this operator picks are never written to (they may be another
//! operator's), except one this operator marked before: its condition then says that
//! nothing picks it any more.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::model::conditions::{status_str, ConditionType, Reason};
use crate::model::text::shorten;

/// What the operator found for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The stacks (`namespace/name`) that pick it, sorted.
    pub picked_by: Vec<String>,
    /// Why it cannot be loaded, field by field; empty when it can.
    pub errors: Vec<String>,
    /// `AlertingRule`, `RecordingRule` or `RulerConfig`, for the messages.
    pub kind: &'static str,
}

fn ready(
    status: bool,
    reason: Reason,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: ConditionType::Ready.as_str().into(),
        status: status_str(status).into(),
        reason: reason.as_str().into(),
        message,
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// How much of an object's errors its condition quotes (a condition holds 32 KiB).
const MAX_ERRORS_NOTE: usize = 8 * 1024;

/// The `Ready` condition an object should have; `None` for one no stack picks that
/// this operator never marked.
fn desired(
    v: &Verdict,
    marked: bool,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Condition> {
    let stacks = v
        .picked_by
        .iter()
        .map(|s| format!("LokiStack {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    let (status, reason, message) = if v.picked_by.is_empty() {
        if !marked {
            return None;
        }
        (
            false,
            Reason::NotSelected,
            format!(
                "no LokiStack with rules enabled picks this {} now; check the stack's spec.rules.selector and namespaceSelector against its labels and namespace",
                v.kind
            ),
        )
    } else if !v.errors.is_empty() {
        (
            false,
            Reason::InvalidRule,
            format!(
                "not loaded: {}. Fix it; {stacks} will load it then",
                shorten(v.errors.join("; "), MAX_ERRORS_NOTE)
            ),
        )
    } else if v.kind == crate::ruler::names::KIND_RULER_CONFIG {
        (
            true,
            Reason::Selected,
            format!("its ruler settings apply to {stacks}"),
        )
    } else {
        (
            true,
            Reason::Selected,
            format!("picked by the ruler of {stacks}"),
        )
    };
    Some(ready(status, reason, message, generation, now))
}

/// The object's conditions as they should be, or `None` when nothing is to be written.
pub fn conditions(
    v: &Verdict,
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let type_ = ConditionType::Ready.as_str();
    let ours = previous.iter().find(|c| c.type_ == type_);
    let mut desired = desired(v, ours.is_some(), generation, now)?;
    let unchanged = ours.is_some_and(|c| {
        c.status == desired.status
            && c.reason == desired.reason
            && c.message == desired.message
            && c.observed_generation == desired.observed_generation
    });
    if unchanged {
        return None;
    }
    // A condition whose status stays keeps its transition time.
    if let Some(c) = ours.filter(|c| c.status == desired.status) {
        desired.last_transition_time = c.last_transition_time.clone();
    }
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != type_)
        .cloned()
        .collect();
    out.push(desired);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(picked: &[&str], errors: &[&str]) -> Verdict {
        Verdict {
            picked_by: picked.iter().map(|s| s.to_string()).collect(),
            errors: errors.iter().map(|s| s.to_string()).collect(),
            kind: "AlertingRule",
        }
    }

    #[test]
    fn picked_rules_say_by_whom_and_invalid_ones_why() {
        let t0 = Timestamp::from_second(1_000).expect("time");
        let c = conditions(&verdict(&["ns/a", "ns/b"], &[]), &[], Some(2), t0).expect("written");
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("True", "Selected")
        );
        assert_eq!(
            c[0].message,
            "picked by the ruler of LokiStack ns/a, LokiStack ns/b"
        );
        assert_eq!(c[0].observed_generation, Some(2));
        assert_eq!(
            conditions(&verdict(&["ns/a", "ns/b"], &[]), &c, Some(2), t0),
            None,
            "unchanged: no write"
        );

        let t1 = Timestamp::from_second(2_000).expect("time");
        let bad = conditions(
            &verdict(&["ns/a"], &["spec.groups[0].interval: bad"]),
            &c,
            Some(3),
            t1,
        )
        .expect("written");
        assert_eq!(
            (bad[0].status.as_str(), bad[0].reason.as_str()),
            ("False", "InvalidRule")
        );
        assert!(bad[0]
            .message
            .starts_with("not loaded: spec.groups[0].interval: bad. Fix it; LokiStack ns/a"));
        assert_eq!(bad[0].last_transition_time.0, t1);
    }

    #[test]
    fn an_object_nobody_picks_is_left_alone_unless_it_was_marked() {
        let t = Timestamp::from_second(1_000).expect("time");
        let foreign = Condition {
            type_: "Synced".into(),
            status: "True".into(),
            reason: "X".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(t),
        };
        assert_eq!(
            conditions(&verdict(&[], &[]), std::slice::from_ref(&foreign), None, t),
            None
        );
        let marked = conditions(
            &verdict(&["ns/a"], &[]),
            std::slice::from_ref(&foreign),
            None,
            t,
        )
        .expect("written");
        assert_eq!(marked.len(), 2, "another writer's condition is kept");
        let dropped = conditions(&verdict(&[], &[]), &marked, None, t).expect("written");
        assert_eq!(dropped[1].reason, "NotSelected");
    }
}
