//! A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC, token
//! authentication, service-account signing keys), kube-controller-manager and
//! kube-scheduler.
//!
//! The node lifecycle controller runs, fed by the node simulator's heartbeats, with its
//! periods shortened so a lost zone is noticed, tainted and evicted in seconds rather
//! than minutes: see [`NODE_MONITOR_GRACE`] and [`UNREACHABLE_TOLERATION`].
//!
//! The binaries are built once by `hack/build-k8s.sh` (see [`Kube`]) and cached outside the
//! repository. Every process is started by this harness and stopped by PID when the
//! [`ControlPlane`] is dropped, also when a test panics.
//!
//! kube-apiserver can be restarted in place ([`ControlPlane::stop_apiserver`], then
//! [`ControlPlane::start_apiserver`]): same flags, port, certificates and etcd, so every
//! client reconnects to the address it had, as after a real restart.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::repo_root;

pub const ADMIN_TOKEN: &str = "e2e-admin-token";

/// Without a heartbeat for this long a node is marked Ready=Unknown and tainted
/// `node.kubernetes.io/unreachable` (production: 40 s). Four simulator heartbeats fit in
/// it, so a busy machine does not make a live node look lost.
pub const NODE_MONITOR_GRACE: std::time::Duration = std::time::Duration::from_secs(8);
/// How long a pod stays on an unreachable or not-ready node before the taint manager
/// evicts it, for pods that set no toleration of their own (production: 300 s).
pub const UNREACHABLE_TOLERATION: std::time::Duration = std::time::Duration::from_secs(10);

/// What a caller may change in the control plane it starts; the default is the e2e
/// suite's (see [`NODE_MONITOR_GRACE`]).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// The node lifecycle controller's `--node-monitor-grace-period`.
    pub node_monitor_grace: Duration,
    /// `--kube-api-qps` and `--kube-api-burst` of the controller manager and the
    /// scheduler; `None` keeps their defaults (20/30 and 50/100).
    pub api_qps: Option<(u32, u32)>,
    /// Which Kubernetes; by default the one `LZO_KUBE` names ([`Kube::from_env`]).
    pub kube: Kube,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            node_monitor_grace: NODE_MONITOR_GRACE,
            api_qps: None,
            kube: Kube::from_env(),
        }
    }
}

impl Tuning {
    /// The client rate flags of the controller manager and the scheduler.
    fn qps_args(&self) -> Vec<String> {
        self.api_qps
            .iter()
            .flat_map(|(qps, burst)| {
                [
                    format!("--kube-api-qps={qps}"),
                    format!("--kube-api-burst={burst}"),
                ]
            })
            .collect()
    }
}

/// Which Kubernetes a control plane runs. Both are built here from the Go module proxy by
/// `hack/build-k8s.sh` (once, cached outside the repository); the README's supported
/// range is exactly these two and what lies between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kube {
    /// The newest supported Kubernetes (`hack/k8s-current`): every e2e scenario runs on it.
    Current,
    /// The oldest supported Kubernetes (`hack/k8s-oldest`, a control plane without
    /// kubelet): the CRD admission table and the smoke scenarios run on it too.
    Oldest,
}

impl Kube {
    /// `LZO_KUBE=oldest` asks for the oldest; anything else is the current one.
    pub fn from_env() -> Kube {
        match std::env::var("LZO_KUBE").as_deref() {
            Ok("oldest") => Kube::Oldest,
            _ => Kube::Current,
        }
    }

    /// The argument `hack/build-k8s.sh` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kube::Current => "current",
            Kube::Oldest => "oldest",
        }
    }

    /// Where its binaries are, building them the first time.
    pub fn bin_dir(self) -> Result<PathBuf> {
        self.built(false)
    }

    /// Where its binaries are if they are built already; else an error that says how.
    pub fn cached_bin_dir(self) -> Result<PathBuf> {
        self.built(true)
    }

    fn built(self, cached_only: bool) -> Result<PathBuf> {
        let script = repo_root().join("hack/build-k8s.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(self.name())
            .args(cached_only.then_some("--cached"))
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "{} {} failed; see its output above",
                script.display(),
                self.name()
            );
        }
        let dir = String::from_utf8(out.stdout)?
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        Ok(PathBuf::from(dir))
    }
}

/// kubectl's discovery cache (`KUBECACHEDIR`) for the control plane of this kubeconfig:
/// beside it (see [`ControlPlane::kubectl_cache_dir`]).
pub fn kubectl_cache_for(kubeconfig: &Path) -> PathBuf {
    kubeconfig
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("kubectl-cache")
}

/// The current Kubernetes' kubectl, for either control plane (within kubectl's skew).
pub fn kubectl_bin() -> Result<PathBuf> {
    Ok(Kube::Current.bin_dir()?.join("kubectl"))
}

/// A free loopback port for a server the harness starts, below Linux's ephemeral range
/// (32768 and up). A port from `bind(0)` is in that range, and between freeing it and the
/// server binding it, any outgoing connection may take it as its local port: that made a
/// kube-apiserver fail to start once ("address already in use").
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Spread by process so parallel test binaries rarely try the same ports first.
    let start = (std::process::id() % 100) as u16 * 100;
    for _ in 0..10_000 {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % 10_000;
        let port = 20_000 + (start + offset) % 10_000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port in 20000-29999")
}

/// A started process, the file its output goes to, and how to start it again.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
}

/// How kube-apiserver is stopped before it is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: a rolling restart; the server drains and closes its connections.
    Term,
    /// SIGKILL: a crash; connections break mid-request.
    Kill,
}

const APISERVER: &str = "kube-apiserver";
/// A SIGTERMed kube-apiserver that has not exited by then is killed, as the kubelet does
/// after a pod's default grace period. kube-apiserver 1.20 closes its port at once but
/// waits up to 60 s for open watches to end, so a watched server needs the SIGKILL.
const GRACEFUL_STOP: Duration = Duration::from_secs(30);

pub struct ControlPlane {
    pub dir: PathBuf,
    pub server: String,
    /// The apiserver's self-signed serving certificate, which is also its CA.
    pub ca_file: PathBuf,
    pub admin_kubeconfig: PathBuf,
    procs: Vec<Proc>,
    /// Keep processes running after drop (`make demo`).
    detached: bool,
}

fn spawn(name: &'static str, dir: &Path, program: &Path, args: &[String]) -> Result<Proc> {
    let log = dir.join(format!("{name}.log"));
    let out = fs::File::create(&log)?;
    let child = launch(program, args, out)?;
    Ok(Proc {
        name,
        child,
        log,
        program: program.to_path_buf(),
        args: args.to_vec(),
    })
}

fn launch(program: &Path, args: &[String], out: fs::File) -> Result<Child> {
    Command::new(program)
        .args(args)
        .stdout(out.try_clone()?)
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// Waits up to `timeout` for `child` to exit; whether it did.
fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_file: &Path,
    user: &str,
    token: &str,
) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {user}\ncurrent-context: e2e\n",
        ca = ca_file.display()
    );
    fs::write(path, text)?;
    Ok(())
}

impl ControlPlane {
    /// Where kubectl keeps its discovery cache for this control plane (`KUBECACHEDIR`).
    /// Not `~/.kube/cache`: that is keyed by address, and a loopback port a control plane
    /// of another version had would answer with its groups (a 1.20 `policy/v1beta1`,
    /// which 1.35 does not serve, makes `kubectl get pdb` say NotFound).
    pub fn kubectl_cache_dir(&self) -> PathBuf {
        kubectl_cache_for(&self.admin_kubeconfig)
    }

    /// Starts a fresh control plane in `dir` (emptied first), tuned as the e2e suite is.
    pub fn start(dir: &Path) -> Result<ControlPlane> {
        Self::start_with(dir, &Tuning::default())
    }

    /// Starts a fresh control plane in `dir` (emptied first), tuned as `tuning` says.
    pub fn start_with(dir: &Path, tuning: &Tuning) -> Result<ControlPlane> {
        let bin = tuning.kube.bin_dir()?;
        let etcd_bin = which("etcd")
            .context("etcd not found: install etcd-server (hack/build-k8s.sh does)")?;
        if dir.exists() {
            fs::remove_dir_all(dir)?;
        }
        fs::create_dir_all(dir.join("certs"))?;
        let dir = dir.canonicalize()?;

        let sa_key = dir.join("sa.key");
        let status = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&sa_key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .context("openssl genrsa")?;
        if !status.success() {
            bail!("openssl genrsa failed");
        }
        let mut tokens = fs::File::create(dir.join("tokens.csv"))?;
        writeln!(tokens, "{ADMIN_TOKEN},e2e-admin,e2e-admin,system:masters")?;

        let mut cp = ControlPlane {
            server: String::new(),
            ca_file: dir.join("certs/apiserver.crt"),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            dir: dir.clone(),
            procs: Vec::new(),
            detached: false,
        };

        let (client_port, peer_port) = (free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        cp.procs.push(spawn(
            "etcd",
            &dir,
            &etcd_bin,
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--log-level=warn".into(),
            ],
        )?);

        let port = free_port()?;
        cp.server = format!("https://127.0.0.1:{port}");
        cp.procs.push(spawn(
            APISERVER,
            &dir,
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", dir.join("certs").display()),
                format!("--token-auth-file={}", dir.join("tokens.csv").display()),
                "--authorization-mode=RBAC".into(),
                format!("--service-account-key-file={}", sa_key.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--allow-privileged=true".into(),
                format!(
                    "--default-not-ready-toleration-seconds={}",
                    UNREACHABLE_TOLERATION.as_secs()
                ),
                format!(
                    "--default-unreachable-toleration-seconds={}",
                    UNREACHABLE_TOLERATION.as_secs()
                ),
                // Audit log: the idle benchmark counts the operator's requests from it.
                format!(
                    "--audit-policy-file={}",
                    write_audit_policy(&dir)?.display()
                ),
                format!("--audit-log-path={}", dir.join("audit.log").display()),
                "--audit-log-format=json".into(),
                "--v=1".into(),
            ],
        )?);
        cp.wait_for_apiserver(Duration::from_secs(90))?;
        write_kubeconfig(
            &cp.admin_kubeconfig,
            &cp.server,
            &cp.ca_file,
            "e2e-admin",
            ADMIN_TOKEN,
        )?;

        let kubeconfig = format!("--kubeconfig={}", cp.admin_kubeconfig.display());
        let mut manager_args = vec![
            kubeconfig.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            // The node lifecycle controller, on the simulator's heartbeats.
            "--node-monitor-period=1s".into(),
            format!(
                "--node-monitor-grace-period={}s",
                tuning.node_monitor_grace.as_secs()
            ),
            // A node created without a heartbeat (the simulator posts one at once).
            "--node-startup-grace-period=10s".into(),
            // The unreachable NoExecute taint goes on one node per 1/rate seconds
            // (production: 0.1, one node every 10 s); a zone's nodes at once here.
            "--node-eviction-rate=100".into(),
            format!("--service-account-private-key-file={}", sa_key.display()),
            format!("--root-ca-file={}", cp.ca_file.display()),
            "--use-service-account-credentials=false".into(),
            "--concurrent-statefulset-syncs=10".into(),
            "--v=1".into(),
        ];
        manager_args.extend(tuning.qps_args());
        cp.procs.push(spawn(
            "kube-controller-manager",
            &dir,
            &bin.join("kube-controller-manager"),
            &manager_args,
        )?);
        let mut scheduler_args = vec![
            kubeconfig,
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        scheduler_args.extend(tuning.qps_args());
        cp.procs.push(spawn(
            "kube-scheduler",
            &dir,
            &bin.join("kube-scheduler"),
            &scheduler_args,
        )?);
        Ok(cp)
    }

    fn wait_for_apiserver(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            for p in &mut self.procs {
                if let Some(status) = p.child.try_wait()? {
                    bail!("{} exited with {status}:\n{}", p.name, tail(&p.log, 30));
                }
            }
            let ok = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
                .arg(format!("{}/readyz", self.server))
                .output()
                .map(|o| o.stdout == b"200")
                .unwrap_or(false);
            if ok && self.ca_file.exists() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                let log = self
                    .procs
                    .iter()
                    .find(|p| p.name == APISERVER)
                    .map(|p| tail(&p.log, 30))
                    .unwrap_or_default();
                bail!("kube-apiserver not ready after {timeout:?}:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Fails if a control-plane process died, with the end of its log.
    pub fn check_alive(&mut self) -> Result<()> {
        for p in &mut self.procs {
            if let Some(status) = p.child.try_wait()? {
                bail!("{} exited with {status}:\n{}", p.name, tail(&p.log, 30));
            }
        }
        Ok(())
    }

    fn apiserver(&mut self) -> Result<&mut Proc> {
        self.procs
            .iter_mut()
            .find(|p| p.name == APISERVER)
            .context("kube-apiserver is not among the started processes")
    }

    /// Stops kube-apiserver as `how` says and waits until it has exited; etcd, the
    /// scheduler and the controller manager keep running. Returns how long it took.
    /// Blocking: call it from `tokio::task::block_in_place` in async code.
    pub fn stop_apiserver(&mut self, how: Stop) -> Result<Duration> {
        let started = Instant::now();
        let p = self.apiserver()?;
        if let Some(status) = p.child.try_wait()? {
            bail!("kube-apiserver had already exited with {status}");
        }
        let stopped = match how {
            Stop::Term => {
                let pid = p.child.id().to_string();
                let sent = Command::new("kill").args(["-TERM", &pid]).status()?;
                ensure!(sent.success(), "kill -TERM {pid} failed");
                wait_exit(&mut p.child, GRACEFUL_STOP)
            }
            Stop::Kill => false,
        };
        if !stopped {
            p.child.kill().context("killing kube-apiserver")?;
        }
        p.child
            .wait()
            .context("waiting for kube-apiserver to exit")?;
        Ok(started.elapsed())
    }

    /// Starts kube-apiserver again after [`ControlPlane::stop_apiserver`], with the flags,
    /// port, certificates and etcd it had, and waits until `/readyz` answers 200. Returns
    /// how long that took. Blocking, like `stop_apiserver`.
    pub fn start_apiserver(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        let p = self.apiserver()?;
        if p.child.try_wait()?.is_none() {
            bail!("kube-apiserver is still running");
        }
        // One log across restarts, each start marked, so a failure shows what came before.
        let mut out = fs::OpenOptions::new().append(true).open(&p.log)?;
        writeln!(out, "=== e2e harness: kube-apiserver started again ===")?;
        p.child = launch(&p.program, &p.args, out)?;
        self.wait_for_apiserver(timeout)?;
        Ok(started.elapsed())
    }

    /// PIDs of the processes, for `make demo-down`.
    pub fn pids(&self) -> Vec<u32> {
        self.named_pids().into_iter().map(|(_, pid)| pid).collect()
    }

    /// Each process by its program's name (etcd, kube-apiserver, ...), in start order.
    pub fn named_pids(&self) -> Vec<(&'static str, u32)> {
        self.procs.iter().map(|p| (p.name, p.child.id())).collect()
    }

    /// Leaves the processes running when dropped.
    pub fn detach(mut self) {
        self.detached = true;
    }

    pub fn stop(&mut self) {
        // Reverse order: the scheduler and controllers before the API server and etcd.
        for p in self.procs.iter_mut().rev() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(p.child.id().to_string())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for p in self.procs.iter_mut().rev() {
            while Instant::now() < deadline {
                if matches!(p.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        self.procs.clear();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if !self.detached {
            self.stop();
        }
    }
}

/// The operator's requests (the idle benchmark counts them), every binding, and every
/// delete of a pod with who asked (a scenario that sees a pod go can tell whose it was:
/// the controllers' user agents name them, e.g. `.../taint-eviction-controller`).
fn write_audit_policy(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("audit-policy.yaml");
    fs::write(
        &path,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  users: [\"{}\"]\n- level: Metadata\n  resources: [{{group: \"\", resources: [pods/binding]}}]\n- level: Metadata\n  verbs: [delete, deletecollection]\n  resources: [{{group: \"\", resources: [pods]}}]\n- level: None\n",
            crate::operator::service_account_user()
        ),
    )?;
    Ok(path)
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}
