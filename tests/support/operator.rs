//! The operator as its own process, and what it needs from the cluster: the install
//! of `make deploy` and a token of its ServiceAccount.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::json;

use crate::harness::{write_kubeconfig, ControlPlane};
use crate::repo_root;

pub const NAMESPACE: &str = "loki-zone-operator-system";
pub const SERVICE_ACCOUNT: &str = "loki-zone-operator";

/// The user the operator's requests are authenticated as (and audited under).
pub fn service_account_user() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")
}

pub fn operator_bin() -> Result<PathBuf> {
    // Relative to the repository root: cargo runs tests and benches from the package dir.
    let path = repo_root().join(
        std::env::var_os("LOKI_ZONE_OPERATOR_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/debug/loki-zone-operator")),
    );
    if !path.is_file() {
        bail!("{} not found: build it first (`cargo build -p loki-zone-operator`, which `make e2e` does)", path.display());
    }
    // `cargo test -p loki-zone-operator-tests` does not rebuild the operator binary; a
    // stale one would test old code.
    let built = fs::metadata(&path)?.modified()?;
    let root = repo_root();
    for dir in [root.join("operator/src"), root.join("templates")] {
        if let Some(newer) = newest_file(&dir)?.filter(|(t, _)| *t > built) {
            bail!(
                "{} is older than {}: run `cargo build -p loki-zone-operator` (or `make e2e`)",
                path.display(),
                newer.1.display()
            );
        }
    }
    Ok(path)
}

fn newest_file(dir: &Path) -> Result<Option<(std::time::SystemTime, PathBuf)>> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        // Test-only sources never change the binary, so cargo does not relink it for them.
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with("_tests.rs") || name == "testdata" || name == "snapshots" {
            continue;
        }
        let candidate = if path.is_dir() {
            newest_file(&path)?
        } else {
            Some((entry.metadata()?.modified()?, path))
        };
        if let Some(c) = candidate {
            if newest.as_ref().is_none_or(|n| c.0 > n.0) {
                newest = Some(c);
            }
        }
    }
    Ok(newest)
}

/// Installs the operator exactly as `make deploy` does (`hack/deploy.sh deploy`).
pub fn deploy(admin_kubeconfig: &Path) -> Result<()> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/deploy.sh"))
        .arg("deploy")
        .env("KUBECONFIG", admin_kubeconfig)
        .env("BIN", operator_bin()?)
        .output()
        .context("running hack/deploy.sh")?;
    if !out.status.success() {
        bail!(
            "make deploy failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A kubeconfig that authenticates as the operator's ServiceAccount.
pub async fn service_account_kubeconfig(client: &Client, cp: &ControlPlane) -> Result<PathBuf> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 86400}}))?;
    let resp: TokenRequest = api
        .create_subresource("token", SERVICE_ACCOUNT, &PostParams::default(), &req)
        .await
        .context("TokenRequest")?;
    let token = resp.status.context("token request without status")?.token;
    let path = cp.dir.join("operator.kubeconfig");
    write_kubeconfig(&path, &cp.server, &cp.ca_file, SERVICE_ACCOUNT, &token)?;
    Ok(path)
}

/// The operator process; stopped with SIGTERM when dropped.
pub struct Operator {
    child: Option<Child>,
    pub log: PathBuf,
    pub health_port: u16,
    /// The zone-at-bind webhook's port (on 127.0.0.1, where the API server calls it).
    pub webhook_port: u16,
}

impl Operator {
    pub fn start(kubeconfig: &Path, dir: &Path, extra: &[&str]) -> Result<Operator> {
        let health_port = crate::harness::free_port()?;
        let addr = format!("127.0.0.1:{health_port}");
        let webhook_port = crate::harness::free_port()?;
        let webhook_addr = format!("127.0.0.1:{webhook_port}");
        // Outside the cluster, the API server reaches the webhook at a URL, not through
        // the Service. A scenario may point it elsewhere (or switch it off) in `extra`.
        let webhook_url = format!("https://{webhook_addr}");
        let mut webhook = vec!["--webhook-addr", &webhook_addr];
        if !extra.iter().any(|a| a.starts_with("--webhook-url")) {
            webhook.extend(["--webhook-url", &webhook_url]);
        }
        let log = dir.join("operator.log");
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = Command::new(operator_bin()?)
            .args([
                "run",
                "--health-addr",
                &addr,
                "--metrics-addr",
                &addr,
                "--lease-namespace",
                NAMESPACE,
            ])
            .args([
                "--operator-image",
                "loki-zone-operator:e2e",
                "--loki-image",
                "grafana/loki:e2e",
            ])
            .args(&webhook)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .context("starting loki-zone-operator")?;
        Ok(Operator {
            child: Some(child),
            log,
            health_port,
            webhook_port,
        })
    }

    /// Blocks until `/readyz` answers 200 (caches synced).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/readyz", self.health_port);
        crate::nodesim::eventually("operator /readyz", timeout, || {
            let url = url.clone();
            async move {
                let out = tokio::process::Command::new("curl")
                    .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
                    .output()
                    .await?;
                Ok((out.stdout == b"200").then_some(()))
            }
        })
        .await
        .with_context(|| {
            format!(
                "operator log:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            )
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The operator's `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.health_port);
        let out = tokio::process::Command::new("curl")
            .args(["-s", &url])
            .output()
            .await
            .context("curl /metrics")?;
        Ok(String::from_utf8(out.stdout)?)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            for _ in 0..100 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}
