//! Carries out a scale-down of a zone-aware stack's ingesters (see
//! `plan/scale_down.rs` for why they must leave the ring first): asks each leaving
//! ingester to prepare, and reports whether all did.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::http::{self, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::intent::{Leaving, Prepared};
use crate::model::names::PREPARE_SHUTDOWN_PATH;

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
