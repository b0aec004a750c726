//! The reconcile pipeline: observe (caches) → validate → zone check → render → apply →
//! status. Only apply and status write to the cluster.
//!
//! A Degraded finding (invalid spec, storage secret, zone check) holds the new spec back:
//! nothing is applied, nothing is deleted or scaled down, `observedGeneration` stays
//! behind, and the next trigger (a node or secret change) tries again by itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{LokiStack, LokiStackStatus, ManagementState};
use crate::controller::apply::Applier;
use crate::controller::metrics::Metrics;
use crate::controller::observe::Caches;
use crate::controller::status::{self, Findings};
use crate::defaults::effective;
use crate::names;
use crate::render::{render, RenderError, ServerCapabilities, Settings};
use crate::storage::check_secret;
use crate::validate::validate;
use crate::zones;

pub struct Context {
    pub client: Client,
    pub caches: Caches,
    pub applier: Applier,
    pub settings: Settings,
    pub capabilities: ServerCapabilities,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// How often a stack is looked at with nothing changed (it sends no writes then).
    pub resync: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("LokiStack has no namespace")]
    NoNamespace,
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("status update failed: {0}")]
    Status(#[source] kube::Error),
}

fn stack_pods(caches: &Caches, ns: &str, name: &str) -> Vec<Arc<Pod>> {
    caches.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns)
            && p.labels().get(names::LABEL_INSTANCE).map(String::as_str) == Some(name)
    })
}

async fn publish(
    ctx: &Context,
    stack: &LokiStack,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: action.to_string(),
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

pub async fn reconcile(stack: Arc<LokiStack>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let ns = stack.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = stack.name_any();
    let live: HashSet<(String, String)> = ctx
        .caches
        .stacks
        .state()
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    ctx.applier.retain(&live);
    ctx.metrics.retain(&live);
    if stack.metadata.deletion_timestamp.is_some() {
        // Kubernetes garbage-collects the children through their owner references.
        ctx.applier.forget(&ns, &name);
        ctx.metrics.set_stack(&ns, &name, None, None);
        return Ok(Action::await_change());
    }
    if stack.spec.management_state == ManagementState::Unmanaged {
        ctx.applier.forget(&ns, &name);
        return Ok(Action::await_change());
    }

    // validate
    let eff = effective(&stack.spec);
    let mut findings = Findings {
        invalid: validate(&stack.spec).err(),
        ..Default::default()
    };
    let secret_name = &stack.spec.storage.secret.name;
    let secret = ctx
        .caches
        .secrets
        .get(&ObjectRef::new(secret_name).within(&ns));
    findings.secret = check_secret(
        stack.spec.storage.secret.type_,
        secret_name,
        &ns,
        secret.as_deref(),
    )
    .err();
    if eff.zone_aware() {
        let nodes = ctx.caches.nodes.state();
        findings.zone = Some(zones::check(&eff, nodes.iter().map(AsRef::as_ref)));
    }

    // render and apply, unless held back
    let mut result = "held_back";
    if findings.degraded().is_none() {
        let children = render(&stack, &eff, &ctx.settings, &ctx.capabilities)?;
        let uid = stack.metadata.uid.clone().unwrap_or_default();
        match ctx
            .applier
            .apply(&ns, &name, &uid, &children, &ctx.caches)
            .await
        {
            Ok(report) => {
                findings.applied = true;
                result = "ok";
                Metrics::count(&ctx.metrics.applies, "applied", report.applied as u64);
                Metrics::count(&ctx.metrics.applies, "unchanged", report.unchanged as u64);
                Metrics::count(&ctx.metrics.applies, "pruned", report.pruned as u64);
                if report.applied > 0 || report.pruned > 0 {
                    info!(stack = %name, namespace = %ns, applied = report.applied, unchanged = report.unchanged, pruned = report.pruned, "applied");
                }
            }
            Err(e) => {
                result = "apply_failed";
                Metrics::count(&ctx.metrics.applies, "failed", 1);
                warn!(stack = %name, namespace = %ns, error = %e, "apply failed");
                publish(
                    &ctx,
                    &stack,
                    EventType::Warning,
                    "ApplyFailed",
                    "Apply",
                    format!("{e}"),
                )
                .await;
                findings.apply_error = Some(e.to_string());
            }
        }
    }

    // status
    let pods = stack_pods(&ctx.caches, &ns, &name);
    let pod_refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let nodes: HashMap<String, Arc<Node>> = pods
        .iter()
        .filter_map(|p| crate::controller::podzone::node_name(p))
        .filter_map(|n| {
            ctx.caches
                .nodes
                .get(&ObjectRef::new(n))
                .map(|node| (n.to_string(), node))
        })
        .collect();
    let pod_zones = status::pod_zones(&pod_refs, |n| nodes.get(n).map(AsRef::as_ref));
    let new = status::compute(
        &stack,
        &eff,
        &findings,
        &pod_refs,
        &pod_zones,
        Timestamp::now(),
    );
    let old = stack.status.clone().unwrap_or_default();
    if stack.status.as_ref() != Some(&new) {
        if let Err(e) = patch_status(&ctx.client, &ns, &name, &new).await {
            // The status cannot carry this one; an Event can (e.g. a policy rejecting it).
            publish(
                &ctx,
                &stack,
                EventType::Warning,
                "StatusUpdateFailed",
                "UpdateStatus",
                e.to_string(),
            )
            .await;
            return Err(e);
        }
        for c in status::changed_conditions(&old, &new) {
            let warning = c.status == "True"
                && matches!(
                    c.type_.as_str(),
                    status::DEGRADED | status::FAILED | status::WARNING
                );
            let kind = if warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            publish(
                &ctx,
                &stack,
                kind,
                &c.reason,
                "Reconcile",
                format!("{} is {}: {}", c.type_, c.status, c.message),
            )
            .await;
        }
    }
    let true_conditions = new
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_.clone())
        .collect();
    ctx.metrics.set_stack(
        &ns,
        &name,
        Some(true_conditions),
        findings.zone.as_ref().map(|z| z.zones.len()),
    );
    Metrics::count(&ctx.metrics.reconciles, result, 1);
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    Ok(Action::requeue(ctx.resync))
}

async fn patch_status(
    client: &Client,
    ns: &str,
    name: &str,
    status: &LokiStackStatus,
) -> Result<(), ReconcileError> {
    let api: Api<LokiStack> = Api::namespaced(client.clone(), ns);
    let body = json!({
        "apiVersion": format!("{}/{}", names::GROUP, names::VERSION),
        "kind": names::KIND,
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(names::FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(ReconcileError::Status)?;
    Ok(())
}

pub fn error_policy(stack: Arc<LokiStack>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    warn!(stack = %stack.name_any(), error = %error, "reconcile failed; retrying");
    Metrics::count(&ctx.metrics.reconciles, "error", 1);
    Action::requeue(Duration::from_secs(10))
}
