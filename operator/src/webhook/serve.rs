//! The webhook at run time, in every replica: its certificate, and the HTTPS handlers that answer `pods/binding` reviews (and `pods/eviction` ones, in
//! [`disruptions`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Binding, Pod, Secret};
use kube::api::{Api, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::binding::{self, BindDecision};
use super::disruptions;
use super::review::{reply, request, Hook, LeaderView};
use super::tls::{self, CertSlot};
use super::{WebhookConfig, WebhookMode};
use crate::caches::reflectors::{synced, Caches};
use crate::caches::stacks;
use crate::checks::podzone::keys_not_allowed;
use crate::model::names;
use crate::telemetry::metrics::Metrics;
use crate::webhook::certs::{self, CertAction, Certs, LIFETIMES};

/// How often the certificate is read again (a rotation by another replica, or new
/// files from OLM, is served within this long).
const CERT_RELOAD: Duration = Duration::from_secs(30);
const CERT_RETRY: Duration = Duration::from_secs(3);
/// A pod the cache has not seen yet (created a moment before its binding) is read from
/// the API server, within this budget: the API server waits for the answer.
const POD_READ_BUDGET: Duration = Duration::from_millis(500);

/// What the rest of the process sees of the webhook.
pub struct Served {
    /// Caches synced and a certificate loaded: `/readyz` of a standby replica. `None`
    /// when the webhook is off: there is nothing to serve, and a standby is ready as
    /// soon as its caches are.
    pub ready: Option<Arc<AtomicBool>>,
    /// The CA bundle the configuration must carry (self-managed certificates only).
    pub ca_bundle: watch::Receiver<Option<String>>,
    pub tasks: Vec<JoinHandle<()>>,
    /// Set by the leader for its term: the zone-disruption webhook decides only there.
    pub leader: LeaderView,
    /// Stops the HTTPS server at the end of the process.
    pub server: Server,
}

/// The HTTPS server of the webhook, to stop at the end of the process.
#[derive(Default)]
pub struct Server {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Stops accepting connections and returns once the reviews under way are
    /// answered (within `tls::LIMITS.drain`): see `tls::serve`.
    pub async fn shut_down(self) {
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// Binds the webhook port (an error here is the operator's to report at start) and starts
/// everything the webhook needs. `Off` starts nothing.
pub async fn start(
    client: &Client,
    cfg: &WebhookConfig,
    caches: &Caches,
    metrics: Arc<Metrics>,
) -> std::io::Result<Served> {
    let (bundle_tx, ca_bundle) = watch::channel(None);
    let ready = Arc::new(AtomicBool::new(false));
    let slot = Arc::new(CertSlot::default());
    let secrets = Api::namespaced(client.clone(), &cfg.namespace);
    let gauge = metrics.webhook_certificate_ready.clone();
    let Some(certs) = cert_keeper(&cfg.mode, secrets, slot.clone(), bundle_tx, gauge) else {
        return Ok(Served {
            ready: None,
            ca_bundle,
            tasks: Vec::new(),
            leader: LeaderView::default(),
            server: Server::default(),
        });
    };
    let listener = tokio::net::TcpListener::bind(cfg.addr).await?;
    let hook = Hook {
        caches: caches.clone(),
        client: client.clone(),
        metrics,
        leader: LeaderView::default(),
    };
    let leader = hook.leader.clone();
    let mut tasks = vec![tokio::spawn(mark_ready(
        caches.clone(),
        slot.clone(),
        ready.clone(),
    ))];
    let mut router = Router::new().route(names::WEBHOOK_PATH_ZONE_AT_BIND, post(zone_at_bind));
    if cfg.disruptions {
        router = router.route(
            names::WEBHOOK_PATH_ZONE_DISRUPTIONS,
            post(disruptions::zone_disruptions),
        );
    }
    let router = router.with_state(hook);
    tasks.push(tokio::spawn(certs));
    let stop = CancellationToken::new();
    let stopping = stop.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = tls::serve(listener, slot, router, tls::LIMITS, stopping).await {
            warn!(error = %e, "webhook server stopped");
        }
    });
    info!(addr = %cfg.addr, mode = ?cfg.mode, "zone-at-bind webhook serving");
    Ok(Served {
        ready: Some(ready),
        ca_bundle,
        tasks,
        leader,
        server: Server {
            stop,
            task: Some(task),
        },
    })
}

/// What keeps the certificate served, by mode; `None` when the webhook is off.
fn cert_keeper(
    mode: &WebhookMode,
    secrets: Api<Secret>,
    slot: Arc<CertSlot>,
    bundle: watch::Sender<Option<String>>,
    ready: Gauge,
) -> Option<BoxFuture<'static, ()>> {
    match mode {
        WebhookMode::Off => None,
        WebhookMode::SelfManaged { target } => {
            Some(keep_certs(secrets, target.hosts(), slot, bundle, ready).boxed())
        }
        WebhookMode::External { dir } => Some(keep_files(dir.clone(), slot, ready).boxed()),
    }
}

/// Ready once the shared caches it reads have synced and a certificate is loaded.
async fn mark_ready(caches: Caches, slot: Arc<CertSlot>, ready: Arc<AtomicBool>) {
    let nodes = synced("nodes", &caches.nodes).await;
    let pods = synced("zone-aware pods", &caches.zone_aware_pods).await;
    let stacks = synced("lokistacks", &caches.stacks).await;
    if !(nodes && pods && stacks) {
        return;
    }
    while !slot.is_set() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ready.store(true, Ordering::Relaxed);
}

async fn zone_at_bind(State(hook): State<Hook>, body: Bytes) -> Response {
    let started = Instant::now();
    let response = match request::<Binding>(&body) {
        Ok(req) => reply(hook.answer(&req).await),
        Err(r) => *r,
    };
    hook.metrics
        .webhook_duration
        .observe(started.elapsed().as_secs_f64());
    // controller-runtime labels a webhook by its path.
    hook.metrics.webhook_request(
        names::WEBHOOK_PATH_ZONE_AT_BIND,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

impl Hook {
    /// Always allows; adds the zone when everything needed is known.
    async fn answer(&self, req: &AdmissionRequest<Binding>) -> AdmissionResponse {
        let allowed = AdmissionResponse::from(req);
        let Some(binding) = &req.object else {
            return allowed;
        };
        let namespace = req.namespace.clone().unwrap_or_default();
        let name = binding
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| req.name.clone());
        let pod = match self
            .caches
            .zone_aware_pods
            .get(&ObjectRef::new(&name).within(&namespace))
        {
            Some(p) => Some(p),
            None if self.holds_zone_aware_stack(&namespace) => {
                self.read_pod(&namespace, &name).await.map(Arc::new)
            }
            None => {
                Metrics::count(&self.metrics.webhook_bindings, "not_zone_aware", 1);
                return allowed;
            }
        };
        let node =
            binding::target_node(binding).and_then(|n| self.caches.nodes.get(&ObjectRef::new(n)));
        // Only the stack's topology keys are copied; the annotator reports any other.
        if let Some(p) = pod.as_deref().filter(|p| {
            !keys_not_allowed(p, &stacks::keys_for_pod(&self.caches.stacks, p)).is_empty()
        }) {
            Metrics::count(&self.metrics.webhook_bindings, "keys_not_allowed", 1);
            debug!(pod = %p.name_any(), namespace = %namespace, "binding left unchanged: the pod names node labels that are not its stack's topology keys");
            return allowed;
        }
        let decision = binding::decide(binding, pod.as_deref(), node.as_deref());
        Metrics::count(&self.metrics.webhook_bindings, decision.result(), 1);
        let BindDecision::Zone(zone) = decision else {
            debug!(pod = %name, namespace = %namespace, result = decision.result(), "binding left unchanged");
            return allowed;
        };
        match allowed
            .clone()
            .with_patch(binding::zone_patch(binding, &zone))
        {
            Ok(r) => {
                self.metrics.zoned("bind");
                r
            }
            Err(e) => {
                warn!(error = %e, "cannot encode the zone patch; the annotator zones the pod");
                allowed
            }
        }
    }

    fn holds_zone_aware_stack(&self, namespace: &str) -> bool {
        self.caches
            .stacks
            .state()
            .iter()
            .any(|s| s.namespace().as_deref() == Some(namespace) && stacks::is_zone_aware(s))
    }

    async fn read_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        Metrics::count(&self.metrics.webhook_pod_reads, "read", 1);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match tokio::time::timeout(POD_READ_BUDGET, api.get_opt(name)).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                debug!(pod = name, error = %e, "cannot read the pod being bound");
                None
            }
            Err(_) => None,
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[derive(Debug, thiserror::Error)]
enum CertSyncError {
    #[error("cannot read or write Secret {secret}: {source}", secret = names::WEBHOOK_CERT_SECRET)]
    Api {
        #[from]
        source: kube::Error,
    },
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// Reads the certificate Secret, creates or rotates it when [`certs::plan`] says so (any
/// replica may; the resourceVersion makes concurrent writers take turns), and serves what
/// it holds.
async fn keep_certs(
    api: Api<Secret>,
    hosts: Vec<String>,
    slot: Arc<CertSlot>,
    bundle: watch::Sender<Option<String>>,
    ready: Gauge,
) {
    let mut serving: Option<String> = None;
    loop {
        let next = match sync_certs(&api, &hosts).await {
            Ok(c) => match load(&slot, &mut serving, &c.tls_crt, &c.tls_key) {
                Ok(()) => {
                    bundle.send_if_modified(|b| {
                        let new = Some(c.ca_bundle());
                        let changed = *b != new;
                        *b = new;
                        changed
                    });
                    CERT_RELOAD
                }
                Err(e) => {
                    warn!(error = %e, "cannot load the webhook certificate");
                    CERT_RETRY
                }
            },
            Err(e) => {
                warn!(error = %e, "webhook certificate not ready; pods get their zone from the annotator meanwhile");
                CERT_RETRY
            }
        };
        ready.set(i64::from(next == CERT_RELOAD));
        tokio::time::sleep(next).await;
    }
}

async fn sync_certs(api: &Api<Secret>, hosts: &[String]) -> Result<Certs, CertSyncError> {
    let secret = api.get_opt(names::WEBHOOK_CERT_SECRET).await?;
    let current = secret.as_ref().and_then(|s| {
        certs::from_secret(s)
            .map_err(|e| warn!(error = %e, "the webhook certificate Secret is unusable; issuing a new one"))
            .ok()
    });
    let now = unix_now();
    let action = certs::plan(now, current.as_ref(), hosts, &LIFETIMES);
    if let (CertAction::Keep, Some(c)) = (&action, &current) {
        return Ok(c.clone());
    }
    let new = certs::carry_out(&action, now, current, hosts, &LIFETIMES)?.ok_or(
        certs::CertError::Unreadable {
            secret: names::WEBHOOK_CERT_SECRET.into(),
            what: "nothing to keep".into(),
        },
    )?;
    let mut s = certs::to_secret(&new);
    s.metadata.name = Some(names::WEBHOOK_CERT_SECRET.into());
    match secret {
        None => {
            api.create(&PostParams::default(), &s).await?;
        }
        Some(old) => {
            s.metadata.resource_version = old.metadata.resource_version;
            api.replace(names::WEBHOOK_CERT_SECRET, &PostParams::default(), &s)
                .await?;
        }
    }
    info!(?action, hosts = ?hosts, "webhook certificate written");
    Ok(new)
}

/// Puts a certificate into the slot unless it is the one already served.
fn load(
    slot: &CertSlot,
    serving: &mut Option<String>,
    crt: &str,
    key: &str,
) -> Result<(), tls::TlsError> {
    if serving.as_deref() == Some(crt) {
        return Ok(());
    }
    slot.set(tls::certified_key(crt.as_bytes(), key.as_bytes())?);
    *serving = Some(crt.to_string());
    info!("webhook serving certificate loaded");
    Ok(())
}

/// OLM mounts `tls.crt` and `tls.key` and rotates them in place.
async fn keep_files(dir: PathBuf, slot: Arc<CertSlot>, ready: Gauge) {
    let mut serving = None;
    loop {
        let next = match read_files(&dir) {
            Ok((crt, key)) => match load(&slot, &mut serving, &crt, &key) {
                Ok(()) => CERT_RELOAD,
                Err(e) => {
                    warn!(dir = %dir.display(), error = %e, "cannot load the webhook certificate");
                    CERT_RETRY
                }
            },
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "cannot read the webhook certificate");
                CERT_RETRY
            }
        };
        ready.set(i64::from(next == CERT_RELOAD));
        tokio::time::sleep(next).await;
    }
}

fn read_files(dir: &Path) -> std::io::Result<(String, String)> {
    Ok((
        std::fs::read_to_string(dir.join(certs::TLS_CRT))?,
        std::fs::read_to_string(dir.join(certs::TLS_KEY))?,
    ))
}
