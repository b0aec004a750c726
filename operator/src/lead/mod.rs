//! `loki-zone-operator run`: one process that every replica runs.
//!
//! What the process builds once, leader or not: the caches (`caches/`), the health and
//! metrics server, and the webhook server (every replica answers admission reviews, from
//! the shared caches). Then the lease loop: when this replica acquires the lease and the
//! caches have synced, it starts a [`Term`]; when the lease is lost or the process stops,
//! it ends the term, which stops everything only the leader does. The loop does nothing
//! else.

pub mod lease;
pub mod term;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::act::report::Notifier;
use crate::caches::reflectors::{self, Caches, Sources};
use crate::caches::scope::Scope;
use crate::caches::taps::Taps;
use crate::checks::kube_version::{self, KubeVersion};
use crate::model::names;
use crate::render::{FsGroup, Settings};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server;
use crate::webhook::{self, WebhookConfig};

use self::lease::{Elector, LeaderConfig, LeaderError};
use self::term::{Parts, Term};

pub struct RunConfig {
    pub settings: Settings,
    /// How to choose the pods' `fsGroup`: resolved against the server at start.
    pub fs_group: FsGroup,
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
    /// The client of the leader lease (see `lease.rs`); the main client when `None`.
    pub lease_client: Option<Client>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot read the API server version: {0}")]
    Version(#[source] kube::Error),
    #[error("cannot list the API server's API groups (to tell whether it assigns pod groups itself; --fs-group 10001 or none skips this): {0}")]
    Discovery(#[source] kube::Error),
    #[error(transparent)]
    Unsupported(#[from] kube_version::Unsupported),
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

/// Asks the server its version, and refuses one older than the operator supports
/// before anything else is done: what the operator renders and registers is what the
/// oldest supported server takes, with no fallback for an older one.
/// Reads the server's version, refuses one older than supported, and gives the version
/// it behaves as (`None`: it does not say in a form we read).
async fn connect(client: &Client) -> Result<Option<KubeVersion>, RunError> {
    let version = client
        .apiserver_version()
        .await
        .map_err(RunError::Version)?;
    check_server_version(&version)?;
    info!(version = %version.git_version, "connected to the API server");
    Ok(behaves_as(&version))
}

/// The version a server behaves as: the one it emulates where it says so (a server run
/// with `--emulated-version` serves that version's APIs and features), else its own
/// major and minor, else its git version.
fn behaves_as(info: &Info) -> Option<KubeVersion> {
    let emulated = match (&info.emulation_major, &info.emulation_minor) {
        (Some(major), Some(minor)) => KubeVersion::parse(&format!("{major}.{minor}")),
        _ => None,
    };
    emulated
        .or_else(|| KubeVersion::parse(&format!("{}.{}", info.major, info.minor)))
        .or_else(|| KubeVersion::parse(&info.git_version))
}

/// Refuses a server older than [`MIN_KUBE_VERSION`](kube_version::MIN_KUBE_VERSION),
/// naming its version as it reports it. A version that does not parse is let through
/// with a warning: a distribution that reports it oddly is more likely current than not.
fn check_server_version(info: &Info) -> Result<(), RunError> {
    let Some(version) = behaves_as(info) else {
        warn!(version = ?info, "cannot tell the API server's Kubernetes version; carrying on as if it were supported");
        return Ok(());
    };
    // As the server writes it (`v1.20.2`), and the version it emulates where that differs.
    let found = match KubeVersion::parse(&info.git_version) {
        Some(own) if own != version => format!("{} emulating {version}", info.git_version),
        Some(_) => info.git_version.clone(),
        None => version.to_string(),
    };
    Ok(version.require_supported("this API server", &found)?)
}

/// Whether the server serves OpenShift's SecurityContextConstraints: its restricted-v2
/// assigns each namespace's group to every pod and refuses a fixed one outside that
/// namespace's range. A discovery that fails stops the start, as a version that cannot
/// be read does: guessing would change every pod template on a wrong guess, and a pod
/// the platform then refuses is a zone down, while a restart of the operator harms
/// nobody.
async fn assigns_pod_groups(client: &Client) -> Result<bool, RunError> {
    let list = client
        .list_api_groups()
        .await
        .map_err(RunError::Discovery)?;
    Ok(list
        .groups
        .iter()
        .any(|g| g.name == names::OPENSHIFT_SECURITY_API_GROUP))
}

pub async fn run(client: Client, mut cfg: RunConfig) -> Result<(), RunError> {
    let version = connect(&client).await?;
    // What the server takes without a warning (the entry Services carry it), and whether
    // it copies the zone label at binding.
    cfg.settings = cfg.settings.for_server(version);
    let assigns = cfg.fs_group == FsGroup::Auto && assigns_pod_groups(&client).await?;
    cfg.settings.pod_fs_group = cfg.fs_group.resolve(assigns);
    info!(fs_group = ?cfg.settings.pod_fs_group, platform_assigns_groups = assigns, "the fsGroup of Loki's pods");
    let metrics = Arc::new(Metrics::default());
    let ready = server::Readiness::default();
    let shutdown = shutdown_signal();
    let mut server = tokio::spawn(server::serve(
        cfg.health_addr,
        cfg.metrics_addr,
        metrics.clone(),
        ready.clone(),
    ));
    wait_for_crd(&client, &shutdown).await?;
    let (parts, process_tasks, webhook_server) =
        start_process(&client, &cfg, metrics, &ready).await?;
    let lease_client = cfg.lease_client.clone().unwrap_or_else(|| client.clone());
    let elector = cfg.leader.clone().map(|l| Elector::new(lease_client, l));
    let result = loop {
        if let Some(e) = &elector {
            tokio::select! {
                _ = e.acquire() => {}
                _ = stopped(shutdown.clone()) => break Ok(()),
            }
        }
        ready.leading.store(true, Ordering::Relaxed);
        let ended = lead(&parts, elector.as_ref(), &shutdown, &mut server).await;
        ready.leading.store(false, Ordering::Relaxed);
        match ended {
            TermEnd::Lost(why) => warn!(error = %why, "stopped leading; campaigning again"),
            TermEnd::Stopped => break Ok(()),
            TermEnd::Server(e) => break Err(RunError::Server(e)),
        }
    };
    // The webhook serves until the term has finished (a terminating pod may still get
    // reviews until its endpoint is gone), then answers the reviews under way.
    webhook_server.shut_down().await;
    for t in process_tasks {
        t.abort();
    }
    if let Some(e) = &elector {
        e.release().await;
    }
    info!("stopped");
    result
}

/// What every replica runs for the life of the process, leader or not: the caches and
/// the webhook server. Returns what a term starts from, and the tasks to stop at exit.
async fn start_process(
    client: &Client,
    cfg: &RunConfig,
    metrics: Arc<Metrics>,
    ready: &server::Readiness,
) -> Result<(Parts, Vec<JoinHandle<()>>, webhook::serve::Server), RunError> {
    info!(namespaces = %cfg.scope, "watching LokiStacks");
    let taps = Taps::default();
    let rule_kinds = crate::caches::rules::served(client).await;
    let sources = Sources {
        client,
        scope: &cfg.scope,
        rule_kinds: &rule_kinds,
        judge: crate::plan::rules::judge(),
    };
    let (caches, mut tasks) = reflectors::start(sources, &taps);
    tasks.push(tokio::spawn(ready_when_synced(
        caches.clone(),
        ready.caches.clone(),
    )));
    let hook = serve_webhook(client, cfg, &caches, metrics.clone(), ready).await?;
    let notify = Notifier::new(Recorder::new(
        client.clone(),
        Reporter {
            controller: names::CONTROLLER_NAME.into(),
            instance: Some(cfg.identity.clone()),
        },
    ));
    let parts = Parts {
        client: client.clone(),
        caches,
        taps,
        settings: cfg.settings.clone(),
        resync: cfg.resync,
        secret_poll: cfg.secret_poll,
        webhook: cfg.webhook.clone(),
        ca_bundle: hook.ca_bundle.clone(),
        leader_view: hook.leader.clone(),
        notify,
        metrics,
    };
    tasks.extend(hook.tasks);
    Ok((parts, tasks, hook.server))
}

/// The webhook is served by every replica, leader or not: the Service sends reviews to
/// them all, and a standby is ready once its webhook serves.
async fn serve_webhook(
    client: &Client,
    cfg: &RunConfig,
    caches: &Caches,
    metrics: Arc<Metrics>,
    ready: &server::Readiness,
) -> Result<webhook::serve::Served, RunError> {
    let hook = webhook::serve::start(client, &cfg.webhook, caches, metrics)
        .await
        .map_err(|source| RunError::Webhook {
            addr: cfg.webhook.addr,
            source,
        })?;
    if let Some(serving) = &hook.ready {
        ready.set_webhook(serving.clone());
    }
    Ok(hook)
}

/// Why a term of leadership ended.
enum TermEnd {
    /// Shutdown was asked for (or the controller ended).
    Stopped,
    /// The lease was lost or could not be renewed: stop, then campaign again, rather than
    /// exit; an API server restart or an RBAC warm-up is no reason to restart the process.
    Lost(LeaderError),
    Server(std::io::Error),
}

/// Holds the lease while one term runs: starts the term once the caches have synced
/// (the leader acts only on a full view), and ends it on shutdown, a lost lease, or the
/// server failing. Returns only once the term has stopped everything it started.
async fn lead(
    parts: &Parts,
    elector: Option<&Elector>,
    shutdown: &watch::Receiver<bool>,
    server: &mut JoinHandle<Result<(), std::io::Error>>,
) -> TermEnd {
    let hold = async {
        match elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(hold);
    let server_ended = |served: Result<Result<(), std::io::Error>, _>| match served {
        Ok(Err(e)) => TermEnd::Server(e),
        _ => TermEnd::Stopped,
    };
    tokio::select! {
        ok = parts.caches.wait_until_ready() => if !ok {
            error!("a cache closed before it synced; stopping");
            return TermEnd::Stopped;
        },
        lost = &mut hold => return TermEnd::Lost(lost),
        _ = stopped(shutdown.clone()) => return TermEnd::Stopped,
        served = &mut *server => return server_ended(served),
    }
    let mut term = Term::start(parts);
    let ended = tokio::select! {
        _ = term.finished() => TermEnd::Stopped,
        lost = &mut hold => TermEnd::Lost(lost),
        _ = stopped(shutdown.clone()) => {
            term.finish().await;
            return TermEnd::Stopped;
        }
        served = &mut *server => server_ended(served),
    };
    term.end().await;
    ended
}

/// `/readyz` answers ready (as leader) once every cache has its first full list.
async fn ready_when_synced(caches: Caches, ready: Arc<AtomicBool>) {
    if caches.wait_until_ready().await {
        info!("caches synced");
        ready.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(major: &str, minor: &str, git: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git.into(),
            ..Info::default()
        }
    }

    #[test]
    fn a_server_older_than_the_oldest_supported_is_refused_by_its_version() {
        let refused =
            check_server_version(&server("1", "20", "v1.20.2")).expect_err("1.20 is refused");
        assert_eq!(
            refused.to_string(),
            "Kubernetes 1.31 or later is required; this API server is v1.20.2"
        );
        let eks = check_server_version(&server("1", "30+", "v1.30.9-eks-1234"))
            .expect_err("1.30 is refused");
        assert_eq!(
            eks.to_string(),
            "Kubernetes 1.31 or later is required; this API server is v1.30.9-eks-1234"
        );
        // A current binary emulating an older version serves that version's APIs.
        let emulating = Info {
            emulation_major: Some("1".into()),
            emulation_minor: Some("30".into()),
            ..server("1", "33", "v1.33.1")
        };
        assert_eq!(
            check_server_version(&emulating)
                .expect_err("emulating 1.30 is refused")
                .to_string(),
            "Kubernetes 1.31 or later is required; this API server is v1.33.1 emulating 1.30"
        );
    }

    #[test]
    fn supported_servers_and_unreadable_versions_go_on() {
        for (major, minor, git) in [
            ("1", "31+", "v1.31.0-gke.1200"),
            ("1", "31", "v1.31.0"),
            ("1", "35", "v1.35.4"),
            ("", "", "v1.35.4"),
            // Nothing to tell the version by: carry on (and warn).
            ("", "", ""),
        ] {
            assert!(
                check_server_version(&server(major, minor, git)).is_ok(),
                "{major}.{minor} {git}"
            );
        }
    }
}
