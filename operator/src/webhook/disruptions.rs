//! The zone-disruption webhook at run time: gathers what [`eviction::decide`] needs for
//! one `pods/eviction` review from the process's shared caches (the zone of an ingester
//! that cannot schedule is the zone of its volumes) and answers it.
//!
//! A refusal carries HTTP 429, as a PodDisruptionBudget's does, so `kubectl drain` and
//! the cluster autoscaler wait and retry instead of giving up.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use tracing::{debug, info};

use super::eviction::{Ingester, Review, Verdict};
use super::review::{reply, request, Hook};
use crate::caches::stacks;
use crate::checks::podzone::{node_name, pod_keys, pod_zone};
use crate::checks::taint_evictions::{hazard, Hazard};
use crate::checks::validate::zone_aware_evictions;
use crate::checks::zones::{node_lost, volume_zone, zone_of};
use crate::model::defaults::Component;
use crate::model::names;
use crate::model::pods::{component_of, stack_of};
use crate::telemetry::metrics::Metrics;

const TOO_MANY_REQUESTS: u16 = 429;

pub(super) async fn zone_disruptions(State(hook): State<Hook>, body: Bytes) -> Response {
    let started = Instant::now();
    let answer = match request::<DynamicObject>(&body) {
        // A bug here must not turn into a webhook failure: under `failurePolicy: Fail`
        // that is a 500, which `kubectl drain` does not retry. A refusal it retries.
        Ok(req) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook.evict(&req)))
            .unwrap_or_else(|_| {
                Metrics::count(&hook.metrics.webhook_evictions, "internal_error", 1);
                Answer::Decided(refuse(&req, format!("the zone-disruption webhook failed on evicting pod {}/{} (an operator bug: see its log); retry in a few seconds", req.namespace.as_deref().unwrap_or_default(), req.name)))
            }),
        Err(r) => {
            hook.metrics.webhook_request(
                names::WEBHOOK_PATH_ZONE_DISRUPTIONS,
                r.status().as_u16(),
                started.elapsed(),
            );
            return *r;
        }
    };
    hook.metrics
        .webhook_duration
        .observe(started.elapsed().as_secs_f64());
    let response = match answer {
        Answer::Decided(response) => reply(response),
        Answer::NotLeader(response) => closing(reply(response)),
    };
    hook.metrics.webhook_request(
        names::WEBHOOK_PATH_ZONE_DISRUPTIONS,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// What this replica answers to one eviction.
enum Answer {
    Decided(AdmissionResponse),
    /// A standby's refusal: only the leader decides.
    NotLeader(AdmissionResponse),
}

/// `response`, and the connection closed after it. The API server keeps its connection
/// to the webhook Service open and sends every review down it: one that landed on a
/// standby would have it refuse every retry for as long as the connection lives
/// (minutes), and a drain of zone-aware ingesters would wait that long. Closed, the
/// retry opens a new connection, which the Service's proxy sends to any ready replica.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// A refusal the client retries (HTTP 429, like a PodDisruptionBudget's).
fn refuse(req: &AdmissionRequest<DynamicObject>, message: String) -> AdmissionResponse {
    let mut r = AdmissionResponse::from(req).deny(message);
    r.result.code = TOO_MANY_REQUESTS;
    r.result.reason = "TooManyRequests".into();
    r
}

impl Hook {
    fn evict(&self, req: &AdmissionRequest<DynamicObject>) -> Answer {
        let count = |result| Metrics::count(&self.metrics.webhook_evictions, result, 1);
        let namespace = req.namespace.as_deref().unwrap_or_default();
        let Some((pod, stack, max_per_zone, decided)) = self.ingester(namespace, &req.name) else {
            count("not_ours");
            return Answer::Decided(AdmissionResponse::from(req));
        };
        if !decided {
            count("switched_off");
            info!(pod = %req.name, namespace, stack, "ingester eviction allowed: zone-aware evictions are off for the stack ({}=false)", names::ANNOTATION_ZONE_AWARE_EVICTIONS);
            return Answer::Decided(AdmissionResponse::from(req));
        }
        let Some(grants) = self.leader.grants() else {
            count("not_leader");
            return Answer::NotLeader(refuse(req, format!("this replica of the operator is not the leader (or is still starting), and only the leader decides evictions of the ingesters of zone-aware stacks; retry in a few seconds (evicting pod {namespace}/{})", req.name)));
        };
        let pods = self.stack_ingesters(namespace, &stack);
        let Some(target) = pods.iter().position(|p| p.name_any() == req.name) else {
            count("not_ours");
            return Answer::Decided(AdmissionResponse::from(req));
        };
        let ingesters: Vec<Ingester<'_>> = pods
            .iter()
            .map(|p| self.ingester_view(p, &self.caches.volumes))
            .collect();
        let review = Review {
            namespace,
            stack: &stack,
            uid: pod.metadata.uid.as_deref().unwrap_or_default(),
            target,
            max_per_zone,
            dry_run: req.dry_run,
        };
        let verdict = grants.decide_and_record(&review, ingesters);
        Answer::Decided(match verdict {
            Verdict::Allow { zone } => {
                count("allowed");
                info!(pod = %req.name, namespace, zone, dry_run = req.dry_run, "ingester eviction allowed");
                AdmissionResponse::from(req)
            }
            Verdict::AlreadyDown => {
                count("already_down");
                AdmissionResponse::from(req)
            }
            Verdict::Deny(denial) => {
                count("denied");
                let message = denial.to_string();
                info!(pod = %req.name, namespace, "ingester eviction refused: {message}");
                refuse(req, message)
            }
        })
    }

    /// The pod, its stack, the stack's per-zone maximum and whether the stack has
    /// zone-aware evictions on, when `name` is an ingester of a zone-aware stack; `None`
    /// for anything else.
    fn ingester(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<(std::sync::Arc<Pod>, String, Option<usize>, bool)> {
        let pod = self
            .caches
            .zone_aware_pods
            .get(&ObjectRef::new(name).within(namespace))?;
        if component_of(&pod) != Some(Component::Ingester) {
            return None;
        }
        let stack = stack_of(&pod)?.to_string();
        let obj = self
            .caches
            .stacks
            .get(&ObjectRef::new_with(&stack, stacks::resource()).within(namespace))?;
        if !stacks::is_zone_aware(&obj) {
            return None;
        }
        let max = obj
            .data
            .pointer("/spec/replication/maxUnavailablePerZone")
            .and_then(serde_json::Value::as_u64)
            .and_then(|m| usize::try_from(m.max(1)).ok());
        // Read at every review: the switch holds from the moment the cache has it.
        let decided = zone_aware_evictions(obj.metadata.annotations.as_ref()).unwrap_or(true);
        Some((pod, stack, max, decided))
    }

    /// The stack's ingesters from the webhook's cache of zone-aware pods, sorted by name.
    fn stack_ingesters(&self, namespace: &str, stack: &str) -> Vec<std::sync::Arc<Pod>> {
        let mut pods = self.caches.zone_aware_pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && stack_of(p) == Some(stack)
                && component_of(p) == Some(Component::Ingester)
        });
        pods.sort_by_key(|p| p.name_any());
        pods
    }

    /// What the decision needs of one ingester: its zone from the pod, its node, or its
    /// volumes, and whether its node is down.
    fn ingester_view<'a>(&self, pod: &'a Pod, volumes: &Store<PersistentVolume>) -> Ingester<'a> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let keys: Vec<String> = pod_keys(pod).into_iter().map(str::to_string).collect();
        let node = node_name(pod).map(|n| self.caches.nodes.get(&ObjectRef::new(n)));
        let node_zone = || {
            let node = node.clone().flatten()?;
            zone_of(
                node.metadata.labels.as_ref(),
                keys.iter().map(String::as_str),
            )
            .ok()
        };
        let zone = pod_zone(pod)
            .map(str::to_string)
            .or_else(node_zone)
            .or_else(|| volumes_zone(pod, name, volumes, &keys));
        // A node gone from the cache is a node deleted: the pod goes with it.
        let node_down = node
            .clone()
            .is_some_and(|n| n.is_none_or(|n| node_lost(&n)));
        let node_cordoned = node.clone().flatten().is_some_and(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        });
        debug!(
            pod = name,
            ?zone,
            node_down,
            node_cordoned,
            "ingester seen by the zone-disruption webhook"
        );
        Ingester {
            pod,
            name,
            zone,
            node_down,
            node_cordoned,
            eviction_allowed: false,
            evicting: matches!(
                hazard(pod, node.flatten().as_deref(), Timestamp::now()),
                Some(Hazard::Announced | Hazard::Tainted)
            ),
        }
    }
}

/// The zone the pod's volumes are pinned to: its claims are `<volume>-<pod>`, one per
/// volume claim template of the ingester StatefulSet.
fn volumes_zone(
    pod: &Pod,
    name: &str,
    volumes: &Store<PersistentVolume>,
    keys: &[String],
) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref()?;
    let claims = [names::PVC_STORAGE, names::PVC_WAL].map(|v| format!("{v}-{name}"));
    volumes.state().iter().find_map(|pv| {
        let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
        let ours = claim.namespace.as_deref() == Some(namespace)
            && claim.name.as_ref().is_some_and(|c| claims.contains(c));
        ours.then(|| volume_zone(pv, keys)).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    /// A standby's refusal closes the connection it came on, so the retry reaches a
    /// replica the Service's proxy picks anew; every other answer keeps it open.
    #[test]
    fn a_standby_closes_the_connection_of_its_refusal() {
        let decided = reply(AdmissionResponse::invalid("x"));
        assert_eq!(decided.headers().get(header::CONNECTION), None);
        let refused = closing(reply(AdmissionResponse::invalid("x")));
        assert_eq!(
            refused
                .headers()
                .get(header::CONNECTION)
                .map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
        assert_eq!(
            refused
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
    }
}
