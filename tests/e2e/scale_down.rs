//! Ingesters removed by a scale-down leave the ring first (issue 15, item 2): the
//! ingesters of a zone-aware stack keep their ring entry across restarts, so before
//! their StatefulSet shrinks the operator asks each one that goes to leave the ring on
//! its next shutdown (Loki's `POST /ingester/prepare_shutdown`). While one cannot be
//! asked, the StatefulSet keeps its replicas and an Event says why.
//!
//! The node simulator gives every pod the IP 127.0.0.1, so the operator calls
//! `http://127.0.0.1:3100`: this scenario serves Loki's endpoint there, first failing,
//! then answering as Loki does.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, ensure, Context, Result};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::routing::any;
use axum::Router;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::nodesim::eventually;
use serde_json::json;

use super::rollout::ready_stack_in;
use super::{Env, WAIT};

const NS: &str = "e2e-scale-down";
const STACK: &str = "shrink";

/// A stand-in for the ingesters' prepare-shutdown endpoint: answers `status`, records
/// every call.
#[derive(Clone, Default)]
struct FakeIngesters {
    status: Arc<AtomicU16>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl FakeIngesters {
    async fn serve(&self) -> Result<tokio::task::JoinHandle<()>> {
        let addr = format!("127.0.0.1:{}", names::PORT_HTTP);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("serving the ingesters' endpoint on {addr}"))?;
        let app = Router::new()
            .route(
                "/ingester/prepare_shutdown",
                any(|State(f): State<FakeIngesters>, req: Request| async move {
                    let call = format!("{} {}", req.method(), req.uri().path());
                    f.calls.lock().unwrap_or_else(|e| e.into_inner()).push(call);
                    StatusCode::from_u16(f.status.load(Ordering::Relaxed))
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                }),
            )
            .with_state(self.clone());
        Ok(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }))
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn ingester_replicas(env: &Env) -> Result<Option<i32>> {
    let sets: Api<StatefulSet> = Api::namespaced(env.admin.clone(), NS);
    let s = sets.get(&format!("{STACK}-ingester")).await?;
    Ok(s.spec.and_then(|s| s.replicas))
}

async fn event_message(env: &Env, reason: &str) -> Result<Option<String>> {
    let events: Api<Event> = Api::namespaced(env.admin.clone(), NS);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .and_then(|e| e.message))
}

pub(super) async fn ingesters_removed_by_a_scale_down_leave_the_ring_first(
    env: &mut Env,
) -> Result<()> {
    ready_stack_in(env, NS, STACK).await?;
    let fake = FakeIngesters::default();
    fake.status.store(500, Ordering::Relaxed);
    let server = fake.serve().await?;
    let result = scale_down(env, &fake).await;
    server.abort();
    result
}

async fn scale_down(env: &Env, fake: &FakeIngesters) -> Result<()> {
    Api::<LokiStack>::namespaced(env.admin.clone(), NS)
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"ingester": {"replicas": 3}}}})),
        )
        .await?;
    // 1. The ingesters cannot be asked: the StatefulSet keeps its 6 replicas.
    let held = eventually("the scale-down held with a reason", WAIT, || async {
        event_message(env, "IngesterScaleDownHeld").await
    })
    .await?;
    ensure!(
        held.contains("stay at 6 replicas") && held.contains("500"),
        "held: {held}"
    );
    ensure!(
        ingester_replicas(env).await? == Some(6),
        "the StatefulSet shrank although no ingester was prepared"
    );
    ensure!(
        fake.calls()
            .iter()
            .all(|c| c == "POST /ingester/prepare_shutdown"),
        "calls: {:?}",
        fake.calls()
    );
    println!("    held: {held}");

    // 2. They answer as Loki does: each of ingesters 3, 4 and 5 is asked, then the
    //    StatefulSet shrinks.
    let before = fake.calls().len();
    fake.status.store(204, Ordering::Relaxed);
    eventually("the ingester StatefulSet at 3 replicas", WAIT, || async {
        Ok((ingester_replicas(env).await? == Some(3)).then_some(()))
    })
    .await?;
    // The Event is published once the reconcile that shrank the StatefulSet reports,
    // which may be just after the watch shows the new replica count.
    let leaving = eventually("the IngestersLeaving Event", WAIT, || async {
        event_message(env, "IngestersLeaving").await
    })
    .await?;
    for pod in [
        "shrink-ingester-3",
        "shrink-ingester-4",
        "shrink-ingester-5",
    ] {
        ensure!(leaving.contains(pod), "{pod} not named: {leaving}");
    }
    let asked = fake.calls().len() - before;
    if asked < 3 {
        bail!("only {asked} prepare calls after the endpoint answered");
    }
    println!("    {leaving}");
    Ok(())
}
