//! What the user sees of a reconcile: the stack's status (server-side applied on the
//! status subresource, only when it changed) and Events.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::warn;

use crate::caches::stacks::{self, DecodeError};
use crate::model::api::{LokiStack, LokiStackStatus};
use crate::model::conditions::{ConditionType, Reason};
use crate::model::names;
use crate::status::changed_conditions;

/// Events are capped by the API server; a longer note is cut at a character boundary.
const MAX_NOTE: usize = 1000;

/// Publishes the Events of one controller instance.
#[derive(Clone)]
pub struct Notifier {
    recorder: Recorder,
}

impl Notifier {
    pub fn new(recorder: Recorder) -> Notifier {
        Notifier { recorder }
    }

    pub async fn event(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.event_for(object, type_, reason, "Reconcile", note)
            .await
    }

    /// An Event with its own action. The recorder folds Events of the same object,
    /// reason and action into one series that keeps the first note, so steps that must
    /// each be seen (one per zone of a rollout) need distinct actions.
    pub async fn event_for(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note, MAX_NOTE)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            warn!(object = ?object.name, namespace = ?object.namespace, error = %e, "cannot publish event");
        }
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
    client: &Client,
    notify: &Notifier,
    stack: &LokiStack,
    new: &LokiStackStatus,
) -> Result<(), kube::Error> {
    if stack.status.as_ref() == Some(new) {
        return Ok(());
    }
    let ns = stack.namespace().unwrap_or_default();
    let api: Api<LokiStack> = Api::namespaced(client.clone(), &ns);
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
    .await?;
    let old = stack.status.clone().unwrap_or_default();
    for c in changed_conditions(&old, new) {
        let problem = ConditionType::parse(&c.type_).is_some_and(ConditionType::is_problem)
            && Reason::parse(&c.reason).is_none_or(|r| !r.is_informational());
        let type_ = if problem && c.status == "True" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{} is {}: {}", c.type_, c.status, c.message);
        notify
            .event(&stack.object_ref(&()), type_, &c.reason, note)
            .await;
    }
    Ok(())
}

/// Writes the conditions of an AlertingRule, RecordingRule or RulerConfig (computed by
/// `status::rules`), by server-side apply of its status under the operator's manager.
pub async fn write_rule_status(
    client: &Client,
    resource: &kube::api::ApiResource,
    namespace: &str,
    name: &str,
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name},
        "status": {"conditions": conditions},
    });
    api.patch_status(
        name,
        &PatchParams::apply(names::FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Marks a stored stack that does not decode, on its own status (see `caches/stacks.rs`). The
/// API server may refuse the write when the stored spec breaks the current schema; the
/// Event says it then.
pub async fn undecodable(
    client: &Client,
    notify: &Notifier,
    obj: &DynamicObject,
    e: &DecodeError,
) -> Result<(), kube::Error> {
    // Serialised as every other condition time is (RFC 3339, whole seconds).
    let now = serde_json::to_value(Time(Timestamp::now()))
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let Some(status) = stacks::undecodable_status(obj, e, &now) else {
        return Ok(());
    };
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &stacks::resource());
    let body = json!({
        "apiVersion": format!("{}/{}", names::GROUP, names::VERSION),
        "kind": names::KIND,
        "status": status,
    });
    let object = obj.object_ref(&stacks::resource());
    let note = format!("the stored LokiStack cannot be read: {e}; fix that field");
    notify
        .event(
            &object,
            EventType::Warning,
            Reason::InvalidSpec.as_str(),
            note,
        )
        .await;
    let written = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await;
    match written {
        Ok(_) => Ok(()),
        // The server validates the whole object on a status write, so a stored spec that
        // breaks today's schema cannot get a status; the Event above carries the finding,
        // and retrying would only repeat it.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            warn!(stack = %obj.name_any(), "the stored spec breaks the CRD's schema, so its status cannot be written either: {}", e.message);
            Ok(())
        }
        Err(e) => Err(e),
    }
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
