//! What the user sees of a reconcile: the stack's status (server-side applied on the
//! status subresource, only when it changed) and Events, published as the report
//! (`status::report`) says.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::caches::stacks::{self, DecodeError};
use crate::intent::{About, PlannedEvent};
use crate::model::api::{LokiStack, LokiStackStatus};
use crate::model::conditions::{EventReason, Reason};
use crate::model::names;
use crate::model::text::truncate;
use crate::status::report::Report;

/// Events are capped by the API server; a longer note is cut at a character boundary.
const MAX_NOTE: usize = 1000;

/// Publishes the Events of one controller instance: the one publisher of the
/// controller and the annotator, every reason an [`EventReason`], every note capped.
#[derive(Clone)]
pub struct Notifier {
    recorder: Recorder,
}

impl Notifier {
    pub fn new(recorder: Recorder) -> Notifier {
        Notifier { recorder }
    }

    /// An Event about `object` with the default action.
    pub async fn event(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: impl Into<EventReason>,
        note: String,
    ) {
        self.event_for(object, type_, reason, DEFAULT_ACTION, note)
            .await
    }

    /// An Event with its own action. The recorder folds Events of the same object,
    /// reason and action into one series that keeps the first note, so steps that must
    /// each be seen (one per zone of a rollout) need distinct actions.
    pub async fn event_for(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: impl Into<EventReason>,
        action: &str,
        note: String,
    ) {
        let event = KubeEvent {
            type_,
            reason: reason.into().as_str().to_string(),
            note: Some(truncate(note, MAX_NOTE)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            warn!(object = ?object.name, namespace = ?object.namespace, error = %e, "cannot publish event");
        }
    }

    /// A planned Event of `stack` (about it or one of its pods), logged as it goes out.
    pub async fn planned(&self, stack: &LokiStack, e: &PlannedEvent) {
        let ns = stack.namespace().unwrap_or_default();
        let object = match &e.about {
            About::Stack => stack.object_ref(&()),
            About::Pod { name, uid } => ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                uid: Some(uid.clone()),
                ..Default::default()
            },
        };
        let type_ = if e.warning {
            warn!(stack = %stack.name_any(), namespace = %ns, reason = %e.reason, "{}", e.note);
            EventType::Warning
        } else {
            info!(stack = %stack.name_any(), namespace = %ns, reason = %e.reason, "{}", e.note);
            EventType::Normal
        };
        let action = e.action.as_deref().unwrap_or(DEFAULT_ACTION);
        self.event_for(&object, type_, e.reason, action, e.note.clone())
            .await;
    }
}

/// The action of an Event that names none.
const DEFAULT_ACTION: &str = "Reconcile";

/// Publishes what one reconcile came to ([`Report`]): the Events of what it did,
/// the status when it differs from the stack's, then the Events of what the written
/// status shows (changed conditions, a new stage of turning zones on or off): a failed
/// write announces none of those, and the next reconcile announces them once.
pub async fn publish(
    client: &Client,
    notify: &Notifier,
    stack: &LokiStack,
    report: &Report,
) -> Result<(), kube::Error> {
    for e in &report.events {
        notify.planned(stack, e).await;
    }
    if stack.status.as_ref() != Some(&report.status) {
        write_status(client, stack, &report.status).await?;
    }
    for e in &report.after_status {
        notify.planned(stack, e).await;
    }
    Ok(())
}

/// Server-side applies `new` on the stack's status subresource.
async fn write_status(
    client: &Client,
    stack: &LokiStack,
    new: &LokiStackStatus,
) -> Result<(), kube::Error> {
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
        .event(&object, EventType::Warning, Reason::InvalidSpec, note)
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
