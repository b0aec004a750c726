use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use loki_zone_operator::cli::{self, RenderRequest};
use loki_zone_operator::render::{self, ServerCapabilities, Settings};
use loki_zone_operator::waitzone;

/// Kubernetes operator for Grafana Loki replicated across availability zones.
#[derive(Parser)]
#[command(name = "loki-zone-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct ImageArgs {
    /// Loki image of every component.
    #[arg(long, env = "LOKI_IMAGE", default_value = render::DEFAULT_LOKI_IMAGE)]
    loki_image: String,
    /// Image of the zone init container: this operator's own image.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = render::DEFAULT_OPERATOR_IMAGE)]
    operator_image: String,
    /// How long the zone init container waits for the pod's zone annotation.
    #[arg(long, env = "ZONE_WAIT_TIMEOUT", default_value = render::DEFAULT_ZONE_WAIT_TIMEOUT, value_parser = parse_timeout)]
    zone_wait_timeout: String,
}

impl ImageArgs {
    fn settings(&self) -> Settings {
        Settings {
            loki_image: self.loki_image.clone(),
            operator_image: self.operator_image.clone(),
            zone_wait_timeout: self.zone_wait_timeout.clone(),
        }
    }
}

fn parse_timeout(s: &str) -> Result<String, String> {
    waitzone::parse_duration(s).map(|_| s.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Print the LokiStack CustomResourceDefinition as YAML.
    Crd,
    /// Render every object of a LokiStack as a YAML stream for `kubectl apply -f -`.
    Render {
        /// The LokiStack manifest.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// `kubectl get nodes -o yaml` output: evaluate the zone check against these nodes.
        #[arg(long)]
        nodes: Option<PathBuf>,
        /// Namespace of the rendered objects (default: the manifest's, else `default`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Kubernetes version of the target cluster (e.g. 1.30); older versions get no
        /// spread-constraint fields they would reject.
        #[arg(long, value_parser = parse_kube_version)]
        kube_version: Option<ServerCapabilities>,
        #[command(flatten)]
        images: ImageArgs,
    },
    /// Init container: wait until the pod's zone annotation is projected into FILE.
    WaitForZone {
        /// The downward-API file that mirrors the zone annotation.
        #[arg(long, default_value_t = loki_zone_operator::names::zone_file_path())]
        file: String,
        /// Give up after this long (e.g. 10m, 30s).
        #[arg(long, default_value = render::DEFAULT_ZONE_WAIT_TIMEOUT, value_parser = waitzone::parse_duration)]
        timeout: Duration,
        /// How often to look at the file.
        #[arg(long, default_value = "1s", value_parser = waitzone::parse_duration)]
        interval: Duration,
    },
}

fn parse_kube_version(s: &str) -> Result<ServerCapabilities, String> {
    ServerCapabilities::parse(s)
        .ok_or_else(|| format!("invalid Kubernetes version {s:?}: expected e.g. 1.30"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match cli::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Render {
            file,
            nodes,
            namespace,
            kube_version,
            images,
        } => {
            let req = RenderRequest {
                stack_file: file,
                nodes_file: nodes,
                namespace,
                settings: images.settings(),
                capabilities: kube_version.unwrap_or(ServerCapabilities::MODERN),
            };
            match cli::render_files(&req) {
                Ok(out) => {
                    if let Some(report) = out.report {
                        eprintln!("{report}");
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
        Command::WaitForZone {
            file,
            timeout,
            interval,
        } => match waitzone::wait_for_zone(std::path::Path::new(&file), timeout, interval) {
            Ok(zone) => {
                println!("{zone}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
