//! `loki-zone-operator run`: the LokiStack controller and the pod zone annotator, in one
//! process, behind leader election.

pub mod annotator;
pub mod apply;
pub mod caches;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod plan;
pub mod podzone;
pub mod reconcile;
pub mod recovery;
pub mod report;
pub mod rollout;
pub mod scope;
pub mod secrets;
pub mod server;
pub mod stacks;
pub mod staging;
pub mod status;
pub mod takeover;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{error, info, warn};

use crate::names;
use crate::render::{ServerCapabilities, Settings};
use crate::webhook::registration::{self, Coverage, Keeper};
use crate::webhook::{self, WebhookConfig, WebhookMode};

use self::leader::{Elector, LeaderConfig, LeaderError};
use self::metrics::Metrics;
use self::reconcile::{error_policy, reconcile, Context};
use self::scope::Scope;
use self::secrets::SecretReader;
use self::stacks::StackRef;

pub struct RunConfig {
    pub settings: Settings,
    pub resync: Duration,
    pub health_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// `None` runs without leader election (a single replica, or local development).
    pub leader: Option<LeaderConfig>,
    pub identity: String,
    /// The namespaces whose stacks the operator runs (and the only ones it writes in).
    pub scope: Scope,
    /// How often the storage Secrets that stacks name are read again.
    pub secret_poll: Duration,
    pub webhook: WebhookConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot read the API server version: {0}")]
    Version(#[source] kube::Error),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("health and metrics server: {0}")]
    Server(#[from] std::io::Error),
    #[error("cannot serve the zone-at-bind webhook on {addr}: {source} (set --webhook-addr, or --bind-webhook=false to run without it)")]
    Webhook {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("stopped before the CRD was established")]
    Interrupted,
}

/// Resolves on SIGTERM or SIGINT.
fn shutdown_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! { _ = ctrl_c => {}, _ = term => {} }
        info!("shutdown requested");
        let _ = tx.send(true);
    });
    rx
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Waits until the LokiStack CRD is established, logging what to do meanwhile.
async fn wait_for_crd(client: &Client, shutdown: &watch::Receiver<bool>) -> Result<(), RunError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut logged = false;
    loop {
        let established = match api.get_opt(names::CRD_NAME).await {
            Ok(Some(crd)) => crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }),
            Ok(None) => false,
            Err(e) => {
                error!(error = %e, "cannot read CustomResourceDefinition {}", names::CRD_NAME);
                false
            }
        };
        if established {
            info!(crd = names::CRD_NAME, "CRD is established");
            return Ok(());
        }
        if !logged {
            info!(crd = names::CRD_NAME, "waiting for the CRD to be established (install it with `make install` or `kubectl apply -f manifests/crd`)");
            logged = true;
        }
        let mut s = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = s.wait_for(|v| *v) => return Err(RunError::Interrupted),
        }
    }
}

/// Asks the server its version: what it can take decides a few rendered fields.
async fn capabilities(client: &Client) -> Result<ServerCapabilities, RunError> {
    let version = client
        .apiserver_version()
        .await
        .map_err(RunError::Version)?;
    let caps = ServerCapabilities::parse(&format!("{}.{}", version.major, version.minor))
        .unwrap_or(ServerCapabilities::MODERN);
    info!(version = %version.git_version, capabilities = ?caps, "connected to the API server");
    Ok(caps)
}

pub async fn run(client: Client, cfg: RunConfig) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::default());
    let ready = server::Readiness::default();
    let shutdown = shutdown_signal();
    let capabilities = capabilities(&client).await?;
    let mut server = tokio::spawn(server::serve(
        cfg.health_addr,
        cfg.metrics_addr,
        metrics.clone(),
        ready.clone(),
    ));
    wait_for_crd(&client, &shutdown).await?;
    let hook = serve_webhook(&client, &cfg, metrics.clone(), &ready).await?;
    info!(namespaces = %cfg.scope, "watching LokiStacks");
    let elector = cfg.leader.clone().map(|l| Elector::new(client.clone(), l));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: names::CONTROLLER_NAME.into(),
            instance: Some(cfg.identity.clone()),
        },
    );
    let result = loop {
        if let Some(e) = &elector {
            tokio::select! {
                _ = e.acquire() => {}
                _ = stopped(shutdown.clone()) => break Ok(()),
            }
        }
        let running = start(
            &client,
            &cfg,
            capabilities,
            recorder.clone(),
            metrics.clone(),
            ready.leader.clone(),
            hook.ca_bundle.clone(),
        );
        let volumes = running.controller.ctx.caches.volumes.clone();
        hook.leader.lead(volumes, ready.leader.clone());
        ready.leading.store(true, Ordering::Relaxed);
        let term = lead(running, elector.as_ref(), &shutdown, &mut server).await;
        hook.leader.step_down();
        ready.leading.store(false, Ordering::Relaxed);
        ready.leader.store(false, Ordering::Relaxed);
        match term {
            Term::Lost(why) => warn!(error = %why, "stopped leading; campaigning again"),
            Term::Stopped => break Ok(()),
            Term::Server(e) => break Err(RunError::Server(e)),
        }
    };
    for t in hook.tasks {
        t.abort();
    }
    if let Some(e) = &elector {
        e.release().await;
    }
    info!("stopped");
    result
}

/// The webhook is served by every replica, leader or not: the Service sends reviews to
/// them all, and a standby is ready once its webhook serves.
async fn serve_webhook(
    client: &Client,
    cfg: &RunConfig,
    metrics: Arc<Metrics>,
    ready: &server::Readiness,
) -> Result<webhook::serve::Served, RunError> {
    let hook = webhook::serve::start(client, &cfg.webhook, &cfg.scope, metrics)
        .await
        .map_err(|source| RunError::Webhook {
            addr: cfg.webhook.addr,
            source,
        })?;
    ready.set_webhook(hook.ready.clone());
    Ok(hook)
}

/// The coverage of the webhooks the leader keeps, for the reconciler.
#[derive(Clone, Default)]
pub struct WebhookCoverage {
    /// Namespaces whose pods are zoned at bind.
    pub bind: Option<Coverage>,
    /// Namespaces whose ingester evictions the zone-disruption webhook decides.
    pub disruptions: Option<Coverage>,
}

/// The leader's part of the webhooks: keep their configurations current (and tell the
/// reconciler which namespaces they cover), or remove them when switched off. OLM keeps
/// the configuration it declares itself, and gets no disruption webhook.
fn register_webhook(
    client: &Client,
    cfg: &RunConfig,
    stacks: Store<DynamicObject>,
    ca_bundle: watch::Receiver<Option<String>>,
    caps: ServerCapabilities,
    metrics: &Arc<Metrics>,
) -> (WebhookCoverage, Vec<JoinHandle<()>>) {
    let remove_disruptions = || {
        tokio::spawn(registration::remove::<ValidatingWebhookConfiguration>(
            client.clone(),
        ))
    };
    let target = match &cfg.webhook.mode {
        WebhookMode::SelfManaged { target } => target,
        WebhookMode::External { .. } => return (WebhookCoverage::default(), Vec::new()),
        WebhookMode::Off => {
            let bind = registration::remove::<MutatingWebhookConfiguration>(client.clone());
            let tasks = vec![tokio::spawn(bind), remove_disruptions()];
            return (WebhookCoverage::default(), tasks);
        }
    };
    let keeper = |feed| Keeper {
        client: client.clone(),
        stacks: stacks.clone(),
        ca_bundle: ca_bundle.clone(),
        target: target.clone(),
        match_conditions: caps.webhook_match_conditions,
        feed,
        metrics: metrics.clone(),
    };
    let (bind, feed) = Coverage::new();
    let keep_bind = registration::keep::<MutatingWebhookConfiguration>(keeper(feed));
    let mut tasks = vec![tokio::spawn(keep_bind)];
    let disruptions = if cfg.webhook.disruptions {
        let (coverage, feed) = Coverage::new();
        let keep = registration::keep::<ValidatingWebhookConfiguration>(keeper(feed));
        tasks.push(tokio::spawn(keep));
        Some(coverage)
    } else {
        tasks.push(remove_disruptions());
        None
    };
    let coverage = WebhookCoverage {
        bind: Some(bind),
        disruptions,
    };
    (coverage, tasks)
}

/// Why a term of leadership ended.
enum Term {
    /// Shutdown was asked for (or the controller ended).
    Stopped,
    /// The lease was lost or could not be renewed: stop, then campaign again, rather than
    /// exit; an API server restart or an RBAC warm-up is no reason to restart the process.
    Lost(LeaderError),
    Server(std::io::Error),
}

/// Runs the controller until shutdown, a lost lease, or the server failing; then stops
/// every task of this term, so nothing reconciles without the lease.
async fn lead(
    running: Running,
    elector: Option<&Elector>,
    shutdown: &watch::Receiver<bool>,
    server: &mut JoinHandle<Result<(), std::io::Error>>,
) -> Term {
    let hold = async {
        match elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };
    let term = tokio::select! {
        _ = running.controller.run(stopped(shutdown.clone())) => Term::Stopped,
        lost = hold => Term::Lost(lost),
        served = server => match served {
            Ok(Err(e)) => Term::Server(e),
            _ => Term::Stopped,
        },
    };
    for t in running.tasks {
        t.abort();
    }
    term
}

/// The LokiStack controller, ready to run, and the background tasks feeding it.
struct Running {
    controller: StackController,
    tasks: Vec<JoinHandle<()>>,
}

struct StackController {
    controller: Controller<DynamicObject>,
    triggers: UnboundedReceiver<StackRef>,
    secrets: SecretReader,
    ctx: Arc<Context>,
}

impl StackController {
    async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
        let stacks = self.ctx.caches.stacks.clone();
        let triggers = UnboundedReceiverStream::new(self.triggers);
        self.controller
            .reconcile_on(read_secret_first(triggers, stacks, self.secrets))
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, self.ctx)
            .for_each(|_| futures::future::ready(()))
            .await
    }
}

/// `/readyz` answers ready once every cache has its first full list.
async fn ready_when_synced(caches: caches::Caches, ready: Arc<AtomicBool>) {
    if caches.wait_until_ready().await {
        info!("caches synced");
        ready.store(true, Ordering::Relaxed);
    }
}

/// Passes each trigger on once the storage Secret its stack names has been read, so no
/// reconcile sees a Secret as missing only because it was not read yet.
fn read_secret_first(
    triggers: impl Stream<Item = StackRef> + Send + 'static,
    stacks: Store<DynamicObject>,
    secrets: SecretReader,
) -> impl Stream<Item = StackRef> + Send + 'static {
    triggers.then(move |r| {
        let (stacks, secrets) = (stacks.clone(), secrets.clone());
        async move {
            if let Some(stack) = stacks.get(&r) {
                secrets.ensure_for(&stack).await;
            }
            r
        }
    })
}

/// The LokiStack controller over one watch per namespace of the scope (untyped, so
/// that one stored object that does not decode stops only itself). A stack's own
/// changes, too, reach it only after its Secret has been read.
fn stack_controller(
    client: &Client,
    scope: &Scope,
    secrets: &SecretReader,
) -> Controller<DynamicObject> {
    let resource = stacks::resource();
    let watches = scope.watches(
        || Api::all_with(client.clone(), &resource),
        |ns| Api::namespaced_with(client.clone(), ns, &resource),
    );
    let (store, events) = scope::reflect(
        watches,
        watcher::Config::default(),
        |_| {},
        resource.clone(),
    );
    let gate = secrets.clone();
    let changed = events.applied_objects().then(move |stack| {
        let gate = gate.clone();
        async move {
            if let Ok(s) = &stack {
                gate.ensure_for(s).await;
            }
            stack
        }
    });
    Controller::for_stream_with(changed, store, resource)
        .with_config(controller::Config::default().debounce(Duration::from_millis(100)))
}

/// Starts the caches and the pod annotator, and builds the controller over them.
fn start(
    client: &Client,
    cfg: &RunConfig,
    capabilities: ServerCapabilities,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    ca_bundle: watch::Receiver<Option<String>>,
) -> Running {
    let (stack_tx, stack_rx) = mpsc::unbounded_channel();
    let (node_tx, node_rx) = mpsc::unbounded_channel();
    let (pod_tx, pod_rx) = mpsc::unbounded_channel();
    let secrets = SecretReader::new(client.clone());
    let controller = stack_controller(client, &cfg.scope, &secrets);
    let (stacks, every) = (controller.store(), cfg.secret_poll);
    let poll = secrets::poll(secrets.clone(), stacks.clone(), stack_tx.clone(), every);
    let triggers = caches::Triggers {
        stacks: stack_tx,
        nodes: node_tx,
        zone_aware_pods: pod_tx,
    };
    let sources = caches::Sources {
        client,
        stacks: controller.store(),
        capabilities: &capabilities,
        scope: &cfg.scope,
        secrets: &secrets,
    };
    let (caches, mut tasks) = caches::start(sources, triggers);
    let (webhook_coverage, registration) =
        register_webhook(client, cfg, stacks, ca_bundle, capabilities, &metrics);
    tasks.extend(registration.into_iter().chain([tokio::spawn(poll)]));
    let inputs = annotator::Inputs::from_caches(&caches, pod_rx, node_rx);
    let annotate = annotator::run(client.clone(), inputs, recorder.clone(), metrics.clone());
    let ready = ready_when_synced(caches.clone(), ready);
    tasks.extend([tokio::spawn(annotate), tokio::spawn(ready)]);
    let ctx = Arc::new(Context::new(
        client,
        cfg,
        caches,
        capabilities,
        recorder,
        metrics,
        webhook_coverage,
    ));
    Running {
        controller: StackController {
            controller,
            triggers: stack_rx,
            secrets,
            ctx,
        },
        tasks,
    }
}
