//! Carries out a scale-down of a zone-aware stack's ingesters (see
//! `plan/scale_down.rs` for why they must leave the ring first): asks each leaving
//! ingester to prepare, or holds the StatefulSet at its replicas and says why.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::http::{self, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use kube::Resource;
use tracing::{info, warn};

use crate::act::report::Notifier;
use crate::model::api::LokiStack;
use crate::model::names;
use crate::observe::Snapshot;
use crate::plan::scale_down::{hold, leaving, replicas, Leaving};
use crate::plan::{Action, Plan};

/// Loki's endpoint that prepares an ingester to leave the ring on its next shutdown.
pub const PREPARE_SHUTDOWN_PATH: &str = "/ingester/prepare_shutdown";
/// How long one ingester gets to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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
pub async fn step(
    notify: &Notifier,
    stack: &LokiStack,
    snapshot: &Snapshot,
    plan: &mut Plan,
) -> bool {
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
                notify,
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
            notify
                .event(&object, EventType::Warning, reason, note)
                .await;
            true
        }
    }
}

/// The Events of a scale-down that goes ahead: who was asked to leave, and who could not
/// be asked because it was not running.
async fn announce_leaving(
    notify: &Notifier,
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
    notify
        .event(object, EventType::Normal, "IngestersLeaving", note)
        .await;
    if !not_running.is_empty() {
        let note = format!(
            "ingesters {} were not running and could not be asked to leave the ring: they may stay in it as unhealthy members; press Forget for them on a distributor's /ring page",
            list(not_running)
        );
        let reason = "IngesterNotPrepared";
        notify.event(object, EventType::Warning, reason, note).await;
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
