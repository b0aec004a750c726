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
        let test_only = name.ends_with("_tests.rs") || name == "tests.rs";
        if test_only || name == "testdata" || name == "snapshots" || name.ends_with(".jsonl") {
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

/// Installs the operator exactly as a user does: `make deploy`, from the committed
/// manifests, with no Rust toolchain on PATH (it must need kubectl only).
pub fn deploy(admin_kubeconfig: &Path) -> Result<()> {
    let path = path_without_cargo()?;
    let out = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(repo_root())
        .arg("deploy")
        .env("KUBECONFIG", admin_kubeconfig)
        .env(
            "KUBECACHEDIR",
            crate::harness::kubectl_cache_for(admin_kubeconfig),
        )
        .env("PATH", &path)
        .env_remove("CARGO")
        .output()
        .context("running make deploy")?;
    if !out.status.success() {
        bail!(
            "make deploy (PATH without cargo: {}) failed:\n{}{}",
            path.to_string_lossy(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// PATH without any directory that holds `cargo`, `rustc` or `rustup`, checked: a
/// shell with it finds none of them.
pub fn path_without_cargo() -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| {
            !["cargo", "rustc", "rustup"]
                .iter()
                .any(|b| d.join(b).exists())
        })
        .collect();
    let joined = std::env::join_paths(&kept)?;
    let found = Command::new("sh")
        .args([
            "-c",
            "command -v cargo || command -v rustc || command -v rustup",
        ])
        .env("PATH", &joined)
        .output()?;
    if found.status.success() {
        bail!(
            "a Rust tool is still on the PATH without cargo: {}",
            String::from_utf8_lossy(&found.stdout)
        );
    }
    Ok(joined)
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

/// The release an upgrade is tested from: the last commit before the first release
/// (v0.1.0), what users of a source build run. Once v0.1.0 is tagged, the next release
/// names that tag here.
pub const PREVIOUS_RELEASE: &str = "5e3ef8e4a4d50cf5407fea18ee5780c343aac386";

/// The operator binary of [`PREVIOUS_RELEASE`], built once from a worktree of that
/// commit into `target/previous/` (a target directory of its own: built in this
/// workspace's, it would overwrite the current binary of the same name). Err, saying
/// why, where this clone does not hold the commit (a shallow clone).
pub fn previous_release_bin() -> Result<PathBuf> {
    let root = repo_root();
    let dir = root.join("target/previous");
    let bin = dir.join(format!("loki-zone-operator-{}", &PREVIOUS_RELEASE[..12]));
    if bin.is_file() {
        return Ok(bin);
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .context("running git")
    };
    if !git(&["cat-file", "-e", &format!("{PREVIOUS_RELEASE}^{{commit}}")])?
        .status
        .success()
    {
        bail!("the previous release {PREVIOUS_RELEASE} is not in this clone (a shallow clone?): `git fetch --unshallow` gets it");
    }
    let src = dir.join("src");
    let _ = git(&["worktree", "remove", "--force", &src.to_string_lossy()]);
    let _ = fs::remove_dir_all(&src);
    let added = git(&[
        "worktree",
        "add",
        "--detach",
        &src.to_string_lossy(),
        PREVIOUS_RELEASE,
    ])?;
    if !added.status.success() {
        bail!(
            "git worktree add: {}",
            String::from_utf8_lossy(&added.stderr)
        );
    }
    let built = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&src)
        .args([
            "build",
            "--locked",
            "-p",
            "loki-zone-operator",
            "--bin",
            "loki-zone-operator",
        ])
        .env("CARGO_TARGET_DIR", dir.join("target"))
        // No debug info: faster to build, and nobody debugs the previous release here.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .output()
        .context("building the previous release")?;
    let _ = git(&["worktree", "remove", "--force", &src.to_string_lossy()]);
    if !built.status.success() {
        bail!(
            "building {PREVIOUS_RELEASE}: {}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    fs::copy(dir.join("target/debug/loki-zone-operator"), &bin)?;
    Ok(bin)
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
        Self::start_bin(&operator_bin()?, kubeconfig, dir, extra)
    }

    /// The operator of binary `bin` (another release's, for an upgrade).
    pub fn start_bin(
        bin: &Path,
        kubeconfig: &Path,
        dir: &Path,
        extra: &[&str],
    ) -> Result<Operator> {
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
        // The images unless the scenario names its own (an upgrade's; the previous
        // release takes the init container's image as `--operator-image`).
        let mut images = vec!["--loki-image", "grafana/loki:e2e"];
        if !extra
            .iter()
            .any(|a| a.starts_with("--zone-wait-image") || a.starts_with("--operator-image"))
        {
            images.extend(["--zone-wait-image", "loki-zone-wait:e2e"]);
        }
        let child = Command::new(bin)
            .args([
                "run",
                "--health-addr",
                &addr,
                "--metrics-addr",
                &addr,
                "--lease-namespace",
                NAMESPACE,
            ])
            .args(&images)
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
