//! What the user sees of a reconcile: the stack's status (server-side applied on the
//! status subresource, only when it changed) and Events.

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::warn;

use crate::api::{LokiStack, LokiStackStatus};
use crate::conditions::ConditionType;
use crate::controller::reconcile::{Context, ReconcileError};
use crate::controller::status::changed_conditions;
use crate::names;

/// Events are capped by the API server; a longer note is cut at a character boundary.
const MAX_NOTE: usize = 1000;

pub async fn event(ctx: &Context, stack: &LokiStack, type_: EventType, reason: &str, note: String) {
    let event = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, MAX_NOTE)),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &stack.object_ref(&())).await {
        warn!(stack = %stack.name_any(), error = %e, "cannot publish event");
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Writes `new` if it differs from the stack's status, then sends an Event for each
/// condition that changed: Warning for a problem that became True, else Normal.
pub async fn write_status(
    ctx: &Context,
    stack: &LokiStack,
    new: &LokiStackStatus,
) -> Result<(), ReconcileError> {
    if stack.status.as_ref() == Some(new) {
        return Ok(());
    }
    let ns = stack.namespace().unwrap_or_default();
    let api: Api<LokiStack> = Api::namespaced(ctx.client.clone(), &ns);
    let body = json!({
        "apiVersion": format!("{}/{}", names::GROUP, names::VERSION),
        "kind": names::KIND,
        "status": new,
    });
    api.patch_status(
        &stack.name_any(),
        &PatchParams::apply(names::FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(ReconcileError::Status)?;
    let old = stack.status.clone().unwrap_or_default();
    for c in changed_conditions(&old, new) {
        let problem = ConditionType::parse(&c.type_).is_some_and(ConditionType::is_problem);
        let type_ = if problem && c.status == "True" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{} is {}: {}", c.type_, c.status, c.message);
        event(ctx, stack, type_, &c.reason, note).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("abc".into(), 5), "abc");
        assert_eq!(truncate("ééé".into(), 3), "é");
    }
}
