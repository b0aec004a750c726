use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use loki_zone_operator::caches::scope::Scope;
use loki_zone_operator::checks::kube_version::{
    KubeVersion, MIN_KUBE_VERSION, PREFER_SAME_ZONE_SINCE,
};
use loki_zone_operator::cli::{self, RenderRequest};
use loki_zone_operator::model::duration;
use loki_zone_operator::render::{self, FsGroup, Settings};
use loki_zone_operator::webhook::{ClientTarget, WebhookConfig, WebhookMode};

/// `--version`: the release and the commit it was built from (operator/build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LZO_GIT_COMMIT"),
    ")"
);

/// Kubernetes operator for Grafana Loki replicated across availability zones.
#[derive(Parser)]
#[command(name = "loki-zone-operator", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The images a stack's pods run. The environment variables follow OLM's convention for
/// images to mirror (`RELATED_IMAGE_*`); `RELATED_IMAGE_LOKI` is the Go Loki Operator's.
#[derive(clap::Args)]
struct ImageArgs {
    /// Loki image of every component (by digest in released installs).
    #[arg(long, env = "RELATED_IMAGE_LOKI", default_value = render::DEFAULT_LOKI_IMAGE)]
    loki_image: String,
    /// Image of the zone init container of zone-aware pods (loki-zone-wait, built from
    /// zone-wait/). By digest in released installs. Its own image, not the operator's:
    /// an operator upgrade that leaves it alone changes no pod template.
    #[arg(long, env = "RELATED_IMAGE_ZONE_WAIT", default_value = render::DEFAULT_ZONE_WAIT_IMAGE)]
    zone_wait_image: String,
    /// How long the zone init container waits for the pod's zone annotation.
    #[arg(long, env = "ZONE_WAIT_TIMEOUT", default_value = render::DEFAULT_ZONE_WAIT_TIMEOUT, value_parser = parse_timeout)]
    zone_wait_timeout: String,
    /// The `fsGroup` of Loki's pods: `auto` (10001, Loki's group, unless the server
    /// serves OpenShift's SecurityContextConstraints, which assign each namespace's group
    /// and refuse a fixed one: then none; `render` takes `auto` as 10001), `none`, or a
    /// group ID.
    #[arg(long, env = "FS_GROUP", default_value = "auto")]
    fs_group: FsGroup,
}

impl ImageArgs {
    /// The settings, with `--fs-group auto` resolved for a platform that does not
    /// assign groups itself (`run` resolves it again from the server).
    fn settings(&self) -> Settings {
        Settings {
            loki_image: self.loki_image.clone(),
            zone_wait_image: self.zone_wait_image.clone(),
            zone_wait_timeout: self.zone_wait_timeout.clone(),
            pod_fs_group: self.fs_group.resolve(false),
            ..Settings::default()
        }
    }
}

fn parse_timeout(s: &str) -> Result<String, String> {
    duration::parse_duration(s).map(|_| s.to_string())
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    images: ImageArgs,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: std::net::SocketAddr,
    /// Address of /metrics (may equal --health-addr).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// How often an unchanged stack is looked at again (it writes nothing then).
    #[arg(long, env = "RESYNC", default_value = "5m", value_parser = duration::parse_duration)]
    resync: Duration,
    /// Elect a leader on a Lease, so that several replicas are safe.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The operator's own namespace: its leader Lease and webhook certificate live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    #[arg(long, env = "LEASE_NAME", default_value = "loki-zone-operator")]
    lease_name: String,
    /// This replica's name in the Lease and in Events (in-cluster: the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Run only the stacks of these namespaces (comma-separated), with Roles there
    /// instead of cluster-wide rights; empty: every namespace. OLM sets it from the
    /// `olm.targetNamespaces` annotation.
    #[arg(long, env = "WATCH_NAMESPACES", default_value = "", value_parser = parse_scope)]
    watch_namespaces: Scope,
    /// How often, on average, a storage Secret that stacks name is read again (each
    /// Secret within ±25%, at its own offset): the operator may only `get` Secrets by
    /// name, so a change is seen at the next read. A Secret a stack waits on (missing or
    /// invalid) is read every 10 s, and editing or annotating the stack re-reads it at once.
    #[arg(long, env = "SECRET_POLL_INTERVAL", default_value = "2m", value_parser = duration::parse_duration)]
    secret_poll_interval: Duration,
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// The zone-at-bind webhook (docs/zone-aware-replication.md).
#[derive(clap::Args)]
struct WebhookArgs {
    /// Serve the pods/binding webhook that zones pods as they are bound; off, the pod
    /// annotator alone zones them (and the operator removes the configuration it
    /// registered).
    #[arg(long, env = "BIND_WEBHOOK", default_value_t = true, action = clap::ArgAction::Set)]
    bind_webhook: bool,
    /// Address of the webhook's HTTPS server.
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    webhook_addr: std::net::SocketAddr,
    /// The Service the API server calls the webhook through (in the operator's namespace).
    /// The install sets it, so that a kustomize `namePrefix` renames both together.
    #[arg(long, env = "WEBHOOK_SERVICE", default_value = loki_zone_operator::model::names::WEBHOOK_SERVICE)]
    webhook_service: String,
    /// The install's ClusterRole of the webhook configurations' rights, which owns them:
    /// deleting the install deletes them. The install sets it, like WEBHOOK_SERVICE.
    #[arg(long, env = "WEBHOOK_OWNER_CLUSTER_ROLE", default_value = loki_zone_operator::model::names::WEBHOOK_CONFIGURATION_CLUSTER_ROLE)]
    webhook_owner_cluster_role: String,
    /// Call the webhook at this base URL instead of the Service (an operator run outside
    /// the cluster), e.g. https://10.0.0.5:9443.
    #[arg(long, env = "WEBHOOK_URL", conflicts_with = "webhook_cert_dir")]
    webhook_url: Option<String>,
    /// Serve the tls.crt and tls.key of this directory (OLM mounts them) and leave the
    /// webhook configuration to whoever installed it; unset, the operator issues its own
    /// CA and certificate and keeps the configuration current.
    #[arg(long, env = "WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// Serve the pods/eviction webhook that lets one zone's ingesters be evicted at a
    /// time and refuses a second zone (with the operator's own certificates only: OLM
    /// installs keep a one-ingester PodDisruptionBudget). Off, the operator removes its
    /// configuration and the ingester budget goes back to one pod at a time.
    #[arg(long, env = "ZONE_DISRUPTION_WEBHOOK", default_value_t = true, action = clap::ArgAction::Set)]
    zone_disruption_webhook: bool,
}

impl WebhookArgs {
    fn config(self, namespace: &str) -> WebhookConfig {
        let mode = match (self.bind_webhook, self.webhook_cert_dir, self.webhook_url) {
            (false, _, _) => WebhookMode::Off,
            (true, Some(dir), _) => WebhookMode::External { dir },
            (true, None, Some(url)) => WebhookMode::SelfManaged {
                target: ClientTarget::Url(url),
            },
            (true, None, None) => WebhookMode::SelfManaged {
                target: ClientTarget::Service {
                    namespace: namespace.to_string(),
                    name: self.webhook_service,
                },
            },
        };
        WebhookConfig {
            mode,
            disruptions: self.zone_disruption_webhook,
            addr: self.webhook_addr,
            namespace: namespace.to_string(),
            owner_role: self.webhook_owner_cluster_role,
        }
    }
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    Scope::parse(s).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller and the pod zone annotator against the cluster of the current
    /// kubeconfig (or the in-cluster service account).
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions (LokiStack, AlertingRule, RecordingRule,
    /// RulerConfig) as one YAML stream.
    Crd {
        #[arg(long, value_parser = cli::parse_kube_version, help = kube_version_help("printed"))]
        kube_version: Option<KubeVersion>,
        /// Write one file per CRD into this directory (as `manifests/crd/` holds them)
        /// instead of printing them.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Render every object of a LokiStack as a YAML stream for `kubectl apply -f -`.
    Render {
        /// The LokiStack manifest.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// `kubectl get nodes -o yaml` output: evaluate the zone check against these nodes.
        #[arg(long)]
        nodes: Option<PathBuf>,
        /// The stack's storage Secret (`kubectl get secret NAME -o yaml`; `data` or
        /// `stringData`): render what the operator derives from it (for S3: endpoint host,
        /// region, addressing style, plain HTTP, encryption), and check it as the operator
        /// does. Without it, an S3 stack's endpoint is left for Loki to expand at start,
        /// and stderr says so.
        #[arg(long)]
        secret: Option<PathBuf>,
        /// AlertingRules, RecordingRules and a RulerConfig (`kubectl get alertingrules,
        /// recordingrules,rulerconfigs -o yaml`; repeatable): with `spec.rules.selector`
        /// set, render the rule files of those the stack picks in its own namespace, and
        /// its RulerConfig, as the operator does. Wrong rules are named on stderr and
        /// left out.
        #[arg(long = "rules")]
        rules: Vec<PathBuf>,
        /// Namespace of the rendered objects (default: the manifest's, else `default`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        #[arg(long, value_parser = cli::parse_kube_version, help = render_kube_version_help())]
        kube_version: Option<KubeVersion>,
        #[command(flatten)]
        images: ImageArgs,
    },
}

/// The help of `render --kube-version`: what the version changes, and the oldest accepted.
fn render_kube_version_help() -> String {
    format!(
        "Kubernetes version of the target cluster (e.g. 1.35, 1.35+ or v1.35.4). From          {PREFER_SAME_ZONE_SINCE} a zone-aware stack's entry Services ask for          `trafficDistribution: PreferSameZone`, before it and without this option for          `PreferClose` (the same routing; 1.35 warns that PreferClose is deprecated,          servers before {PREFER_SAME_ZONE_SINCE} refuse PreferSameZone), as the operator          does from the server's version; nothing else changes. A version older than          {MIN_KUBE_VERSION}, the oldest supported, is refused (exit 2) with nothing rendered"
    )
}

/// The help of `--kube-version`, naming the oldest supported version from its one constant.
fn kube_version_help(what: &str) -> String {
    format!(
        "Kubernetes version of the target cluster (e.g. 1.35, 1.35+ or v1.35.4). Optional: \
         the output is the same for every supported version; a version older than \
         {MIN_KUBE_VERSION}, the oldest supported, is refused (exit 2) with nothing {what}"
    )
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// No answer for this long ends a request of the main client. Longer than the server's
/// own watch timeout (290 s, after which kube's watcher starts a new watch), so a quiet
/// watch is never cut; a request on a dead connection still fails instead of hanging.
const READ_TIMEOUT: Duration = Duration::from_secs(295);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn run_operator(mut cfg: loki_zone_operator::lead::RunConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let connect =
            |e: &dyn std::fmt::Display| anyhow::anyhow!("cannot connect to Kubernetes: {e}");
        let mut config = kube::Config::infer().await.map_err(|e| connect(&e))?;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        config.reset_reader_on_write = true;
        if let Some(leader) = &cfg.leader {
            // The lease has its own client: its own connections (a stalled connection of
            // the reconciler never holds a renewal up), no retry layer (a throttled
            // renewal fails rather than waits), and timeouts within the renew deadline.
            let mut lease = config.clone();
            lease.default_retry = false;
            lease.connect_timeout = Some(leader.renew_deadline / 2);
            lease.read_timeout = Some(leader.renew_deadline);
            cfg.lease_client = Some(kube::Client::try_from(lease).map_err(|e| connect(&e))?);
        }
        let client = kube::Client::try_from(config).map_err(|e| connect(&e))?;
        loki_zone_operator::lead::run(client, cfg).await?;
        Ok(())
    })
}

impl RunArgs {
    /// This replica's name: `--identity`, else the host name, else one made up.
    fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| {
                format!(
                    "{}-{}",
                    loki_zone_operator::model::names::CONTROLLER_NAME,
                    std::process::id()
                )
            })
    }

    fn config(self) -> loki_zone_operator::lead::RunConfig {
        let identity = self.identity();
        let webhook = self.webhook.config(&self.lease_namespace);
        // NetworkPolicies let the operator's pods, in this namespace, reach ingesters.
        let settings = Settings {
            operator_namespace: self.lease_namespace.clone(),
            ..self.images.settings()
        };
        let leader = self
            .leader_elect
            .then(|| loki_zone_operator::lead::lease::LeaderConfig {
                namespace: self.lease_namespace,
                name: self.lease_name,
                identity: identity.clone(),
                // client-go's defaults: a holder that cannot renew for 10 s steps
                // down, 5 s before a standby may take over.
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                renew_every: Duration::from_secs(2),
                retry_every: Duration::from_secs(2),
            });
        loki_zone_operator::lead::RunConfig {
            settings,
            fs_group: self.images.fs_group,
            resync: self.resync,
            health_addr: self.health_addr,
            metrics_addr: self.metrics_addr,
            leader,
            identity,
            scope: self.watch_namespaces,
            secret_poll: self.secret_poll_interval,
            webhook,
            lease_client: None,
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    init_logging(args.log_format);
    match run_operator(args.config()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--kube-version` has been checked by the parser: the CRDs are the same for every
/// supported version.
fn crd(out_dir: Option<PathBuf>) -> ExitCode {
    let result = match &out_dir {
        None => cli::crds_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(|e| e.to_string()),
        Some(dir) => cli::crd_files()
            .map_err(|e| e.to_string())
            .and_then(|files| {
                files.into_iter().try_for_each(|(file, yaml)| {
                    let path = dir.join(file);
                    std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))
                })
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn render_stack(req: RenderRequest) -> ExitCode {
    match cli::render_files(&req) {
        Ok(out) => {
            if let Some(report) = out.report {
                eprintln!("{report}");
            }
            if let Some(warning) = out.warning {
                eprintln!("warning: {warning}");
            }
            if let Some(unresolved) = out.unresolved {
                eprintln!("warning: {unresolved}");
            }
            for note in out.rule_notes {
                eprintln!("warning: {note}");
            }
            print!("{}", out.yaml);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => run(*args),
        Command::Crd {
            kube_version: _,
            out_dir,
        } => crd(out_dir),
        Command::Render {
            file,
            nodes,
            secret,
            rules,
            namespace,
            kube_version,
            images,
        } => render_stack(RenderRequest {
            stack_file: file,
            nodes_file: nodes,
            secret_file: secret,
            rules_files: rules,
            namespace,
            settings: images.settings().for_server(kube_version),
        }),
    }
}
