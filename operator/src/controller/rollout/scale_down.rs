//! Ingesters leaving a zone-aware stack for good.
//!
//! The ingesters of a zone-aware stack keep their ring entry and tokens across restarts
//! (`unregister_on_shutdown: false` and a tokens file on their volume), so restarting a
//! whole zone does not reshuffle streams. An ingester that a scale-down removes must
//! leave the ring, though, or it stays there for good as an unhealthy member, owning
//! tokens whose streams then keep one copy fewer. So before the ingester StatefulSet
//! shrinks, the operator asks every ingester that goes (the highest ordinals, as the
//! StatefulSet removes them) to prepare: Loki's `POST /ingester/prepare_shutdown` makes
//! it flush its chunks and unregister when it stops, and keeps that on its volume across
//! a crash. Only once every one of them has answered does the StatefulSet shrink. If one
//! cannot be asked, the StatefulSet keeps its replicas, those already asked are asked to
//! forget it (`DELETE`), and an Event says why; the next reconcile tries again.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::http::{self, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};

use kube::runtime::events::EventType;
use kube::Resource;
use tracing::{info, warn};

use crate::api::LokiStack;
use crate::controller::observe::Snapshot;
use crate::controller::plan::{Action, Plan};
use crate::controller::reconcile::Context;
use crate::controller::report;
use crate::defaults::Component;
use crate::names;
use crate::render::Child;

/// Loki's endpoint that prepares an ingester to leave the ring on its next shutdown.
pub const PREPARE_SHUTDOWN_PATH: &str = "/ingester/prepare_shutdown";
/// How long one ingester gets to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// An ingester a scale-down removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaving {
    pub pod: String,
    /// `http://<pod IP>:<http port>`; `None` when the pod is not running (never started,
    /// or waiting to be scheduled): there is no Loki to ask.
    pub base_url: Option<String>,
}

/// The ingester StatefulSet's replicas: as it runs, and as rendered now.
pub fn replicas(snapshot: &Snapshot, children: &[Child], stack: &str) -> Option<(i32, i32)> {
    let name = Component::Ingester.workload_name(stack);
    let running = snapshot
        .statefulsets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))?
        .spec
        .as_ref()?
        .replicas?;
    let wanted = children.iter().find_map(|c| match c {
        Child::StatefulSet(s) if s.metadata.name.as_deref() == Some(name.as_str()) => {
            s.spec.as_ref()?.replicas
        }
        _ => None,
    })?;
    Some((running, wanted))
}

/// The ingesters that going from `running` to `wanted` replicas removes, with where to
/// reach them.
pub fn leaving(stack: &str, running: i32, wanted: i32, pods: &[&Pod]) -> Vec<Leaving> {
    let workload = Component::Ingester.workload_name(stack);
    (wanted.max(0)..running)
        .map(|ordinal| {
            let name = format!("{workload}-{ordinal}");
            let pod = pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
            let base_url = pod.and_then(|p| running_ip(p)).map(|ip| {
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_string()
                };
                format!("http://{host}:{}", names::PORT_HTTP)
            });
            Leaving {
                pod: name,
                base_url,
            }
        })
        .collect()
}

fn running_ip(pod: &Pod) -> Option<&str> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    status.pod_ip.as_deref().filter(|ip| !ip.is_empty())
}

/// Sets the ingester StatefulSet's replicas in the rendered children: the scale-down is
/// held there until every leaving ingester is prepared.
pub fn hold(children: &mut [Child], stack: &str, replicas: i32) {
    let name = Component::Ingester.workload_name(stack);
    for c in children.iter_mut() {
        if let Child::StatefulSet(s) = c {
            if s.metadata.name.as_deref() == Some(name.as_str()) {
                if let Some(spec) = s.spec.as_mut() {
                    spec.replicas = Some(replicas);
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Http(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("answered {0}")]
    Status(StatusCode),
}

/// `POST` (prepare) or `DELETE` (undo) on one ingester's prepare-shutdown endpoint.
pub async fn call(base_url: &str, method: Method) -> Result<(), CallError> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{base_url}{PREPARE_SHUTDOWN_PATH}"))
        .body(Empty::new())
        .map_err(|e| CallError::Http(e.to_string()))?;
    let response = tokio::time::timeout(CALL_TIMEOUT, client.request(request))
        .await
        .map_err(|_| CallError::Timeout(CALL_TIMEOUT))?
        .map_err(|e| CallError::Http(e.to_string()))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(CallError::Status(response.status()))
    }
}

/// What preparing a scale-down came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Every leaving ingester that runs was asked and agreed; those not running (named
    /// here) could not be asked and may stay in the ring as unhealthy members.
    Ready {
        prepared: Vec<String>,
        unreachable_not_running: Vec<String>,
    },
    /// One could not be asked: the scale-down waits.
    Held { pod: String, why: String },
}

/// Asks every leaving ingester to prepare; on the first failure, asks those already
/// prepared to forget it, so none is left to unregister on a mere restart.
pub async fn prepare(leaving: &[Leaving]) -> Prepared {
    let mut prepared: Vec<(String, String)> = Vec::new();
    let mut not_running = Vec::new();
    for l in leaving {
        let Some(url) = &l.base_url else {
            not_running.push(l.pod.clone());
            continue;
        };
        if let Err(e) = call(url, Method::POST).await {
            for (_, url) in &prepared {
                let _ = call(url, Method::DELETE).await;
            }
            return Prepared::Held {
                pod: l.pod.clone(),
                why: e.to_string(),
            };
        }
        prepared.push((l.pod.clone(), url.clone()));
    }
    Prepared::Ready {
        prepared: prepared.into_iter().map(|(p, _)| p).collect(),
        unreachable_not_running: not_running,
    }
}

/// The pipeline step between plan and apply: when the plan shrinks a zone-aware stack's
/// ingesters, asks those that go to leave the ring, or holds the scale-down. Returns
/// true while it is held, so the stack is looked at again soon.
pub async fn step(ctx: &Context, stack: &LokiStack, snapshot: &Snapshot, plan: &mut Plan) -> bool {
    if !plan.eff.zone_aware() {
        return false;
    }
    let Action::Apply { children, .. } = &mut plan.action else {
        return false;
    };
    let Some((running, wanted)) = replicas(snapshot, children, &snapshot.name) else {
        return false;
    };
    if wanted >= running {
        return false;
    }
    let leaving = leaving(&snapshot.name, running, wanted, &snapshot.pod_refs());
    let object = stack.object_ref(&());
    let change = format!("ingesters {running} → {wanted}");
    match prepare(&leaving).await {
        Prepared::Ready {
            prepared,
            unreachable_not_running,
        } => {
            announce_leaving(
                ctx,
                snapshot,
                &object,
                &change,
                &prepared,
                &unreachable_not_running,
            )
            .await;
            false
        }
        Prepared::Held { pod, why } => {
            hold(children, &snapshot.name, running);
            let note = format!(
                "the ingesters stay at {running} replicas (the spec asks {wanted}): ingester {pod} could not be asked to leave the ring ({why}). The operator must reach the ingesters' HTTP port {} ({PREPARE_SHUTDOWN_PATH}); it tries again",
                names::PORT_HTTP
            );
            warn!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
            let reason = "IngesterScaleDownHeld";
            report::event(ctx, &object, EventType::Warning, reason, note).await;
            true
        }
    }
}

/// The Events of a scale-down that goes ahead: who was asked to leave, and who could not
/// be asked because it was not running.
async fn announce_leaving(
    ctx: &Context,
    snapshot: &Snapshot,
    object: &ObjectReference,
    change: &str,
    prepared: &[String],
    not_running: &[String],
) {
    let note = format!(
        "{change}: asked {} to flush and leave the ring when stopped",
        list(prepared)
    );
    info!(stack = %snapshot.name, namespace = %snapshot.namespace, "{note}");
    report::event(ctx, object, EventType::Normal, "IngestersLeaving", note).await;
    if !not_running.is_empty() {
        let note = format!(
            "ingesters {} were not running and could not be asked to leave the ring: they may stay in it as unhealthy members; press Forget for them on a distributor's /ring page",
            list(not_running)
        );
        let reason = "IngesterNotPrepared";
        report::event(ctx, object, EventType::Warning, reason, note).await;
    }
}

fn list(pods: &[String]) -> String {
    if pods.is_empty() {
        "none (none running)".into()
    } else {
        pods.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use axum::extract::State;
    use axum::http::StatusCode as AxumStatus;
    use axum::routing::any;
    use axum::Router;
    use serde_json::json;

    fn pod(name: &str, phase: &str, ip: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": phase, "podIP": ip},
        }))
        .expect("pod")
    }

    #[test]
    fn the_highest_ordinals_leave_and_only_running_pods_can_be_asked() {
        let pods = [
            pod("s-ingester-0", "Running", Some("10.0.0.1")),
            pod("s-ingester-4", "Running", Some("10.0.0.5")),
            pod("s-ingester-5", "Pending", None),
            pod("s-ingester-6", "Running", Some("fd00::7")),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let l = leaving("s", 7, 4, &refs);
        assert_eq!(
            l,
            vec![
                Leaving {
                    pod: "s-ingester-4".into(),
                    base_url: Some("http://10.0.0.5:3100".into())
                },
                Leaving {
                    pod: "s-ingester-5".into(),
                    base_url: None
                },
                Leaving {
                    pod: "s-ingester-6".into(),
                    base_url: Some("http://[fd00::7]:3100".into())
                },
            ]
        );
        assert!(leaving("s", 3, 3, &refs).is_empty());
        assert!(
            leaving("s", 3, 6, &refs).is_empty(),
            "a scale-up asks nobody"
        );
    }

    /// A stand-in for Loki's endpoint: records `METHOD path`, answers `status`.
    async fn ingester(status: AxumStatus) -> (String, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route(
                PREPARE_SHUTDOWN_PATH,
                any(
                    |State((seen, status)): State<(Arc<Mutex<Vec<String>>>, AxumStatus)>,
                     req: axum::extract::Request| async move {
                        seen.lock().expect("lock").push(format!(
                            "{} {}",
                            req.method(),
                            req.uri().path()
                        ));
                        status
                    },
                ),
            )
            .with_state((seen.clone(), status));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (format!("http://{addr}"), seen)
    }

    #[tokio::test]
    async fn every_running_leaver_is_asked_and_a_failure_undoes_the_others() {
        let (ok, ok_seen) = ingester(AxumStatus::NO_CONTENT).await;
        let (broken, broken_seen) = ingester(AxumStatus::INTERNAL_SERVER_ERROR).await;
        let leave = |pod: &str, url: Option<&String>| Leaving {
            pod: pod.into(),
            base_url: url.cloned(),
        };
        let all_fine = [
            leave("s-ingester-3", Some(&ok)),
            leave("s-ingester-4", None),
        ];
        assert_eq!(
            prepare(&all_fine).await,
            Prepared::Ready {
                prepared: vec!["s-ingester-3".into()],
                unreachable_not_running: vec!["s-ingester-4".into()],
            }
        );
        assert_eq!(
            *ok_seen.lock().expect("lock"),
            ["POST /ingester/prepare_shutdown"]
        );
        let one_fails = [
            leave("s-ingester-3", Some(&ok)),
            leave("s-ingester-4", Some(&broken)),
        ];
        let Prepared::Held { pod, why } = prepare(&one_fails).await else {
            panic!("held");
        };
        assert_eq!(pod, "s-ingester-4");
        assert!(why.contains("500"), "{why}");
        assert_eq!(broken_seen.lock().expect("lock").len(), 1);
        assert_eq!(
            ok_seen.lock().expect("lock").last().map(String::as_str),
            Some("DELETE /ingester/prepare_shutdown"),
            "the one already prepared is undone"
        );
        let nobody = [leave(
            "s-ingester-3",
            Some(&"http://127.0.0.1:1".to_string()),
        )];
        assert!(matches!(prepare(&nobody).await, Prepared::Held { .. }));
    }
}
