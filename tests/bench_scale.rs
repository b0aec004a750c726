//! The scale section of `make bench`: many zone-aware stacks on one operator.
//!
//! N stacks of size 1x.demo (default [`DEFAULT_STACKS`], the 1,000 the targets are set
//! for; 10 per namespace), each
//! zone-aware on `topology.kubernetes.io/zone` with the size's replication factor, over
//! three zones of simulated nodes (one node per 50 stacks per zone, at least 3 per zone).
//! The nodes renew only their Leases, every [`LEASE_EVERY`], and the control plane's
//! node lifecycle controller allows [`NODE_GRACE`] without one (production's 40 s), so the
//! nodes cost the API server little: they are not what is measured here. The controller
//! manager and the scheduler may send [`CONTROL_PLANE_QPS`] requests per second, so that
//! they, not their client rate limits, set the pace. The operator runs as deployed
//! (default resync and Secret poll, both webhooks, leader election); a second replica
//! joins as a standby once every stack is Ready.
//!
//! Rows, in order:
//! 1. time from the first create until every stack is Ready; the leader's CPU seconds
//!    and resident set (`/proc/<pid>/stat` and `status`) at that point;
//! 2. idle: the operator's requests (both replicas, from the API server's audit log
//!    filtered on its ServiceAccount, completed requests only) over [`IDLE_WINDOW`], per
//!    second and per stack per minute, and the leader's CPU seconds over that minute;
//! 3. one node moved to a new zone: time until every stack's `status.replication.zones`
//!    shows it, and until none does after it is moved back;
//! 4. failover: the leader is stopped; the new leader's writes and requests until it is
//!    quiet (it has reconciled every stack once and written nothing for [`QUIET`]);
//! 5. zone outage: zone-a's nodes go dark; time until every stack's `zoneStatus` shows
//!    zone-a unavailable, and until every stack's stateless components (distributor,
//!    querier, query-frontend) have a Ready pod outside it again.
//!
//! `make bench BENCH_ARGS=scale` runs this section alone; `make bench BENCH_ARGS="scale
//! 200"` (or `LZO_BENCH_STACKS=200`) sets N. The full `make bench` runs it last, with N
//! from `LZO_BENCH_STACKS` or the default. `LZO_BENCH_HOLD=FILE` holds the cluster once
//! every stack is Ready, for profiling by hand (see [`hold`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator_tests::harness::{ControlPlane, Tuning};
use loki_zone_operator_tests::nodesim::{Heartbeats, NodeSim, PodIps, Running, ZONE};
use loki_zone_operator_tests::operator::{self, Operator};
use loki_zone_operator_tests::{client_for, namespace_with_storage_secret, repo_root};
use serde_json::{json, Value};

use super::{row, Row};

/// Stacks when neither the command line nor `LZO_BENCH_STACKS` says: the count the
/// targets are set for. The project's 2-core machine carries it (every row printed; all
/// Ready in about 11 minutes, the section about 20: docs/performance.md); `scale 400`
/// is the quicker run.
pub const DEFAULT_STACKS: usize = TARGET_STACKS;
/// The count the targets are set for.
const TARGET_STACKS: usize = 1000;
const STACKS_PER_NAMESPACE: usize = 10;
/// One node per this many stacks in each zone (a 1x.demo stack runs 6 pods).
const STACKS_PER_NODE: usize = 50;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// How often a simulated node renews its Lease (a kubelet: 10 s).
const LEASE_EVERY: Duration = Duration::from_secs(10);
/// `--node-monitor-grace-period` of this section's control plane (production: 40 s).
const NODE_GRACE: Duration = Duration::from_secs(40);
/// `--kube-api-qps` and `--kube-api-burst` of the controller manager and the scheduler.
const CONTROL_PLANE_QPS: (u32, u32) = (300, 600);
const IDLE_WINDOW: Duration = Duration::from_secs(60);
/// A new leader is quiet once it has written nothing for this long.
const QUIET: Duration = Duration::from_secs(30);
/// How often the bench looks at its caches, and prints progress.
const POLL: Duration = Duration::from_secs(2);
const PROGRESS: Duration = Duration::from_secs(30);
const STATELESS: [&str; 3] = ["distributor", "querier", "query-frontend"];

/// N: the second argument after `scale`, else `LZO_BENCH_STACKS`, else [`DEFAULT_STACKS`].
pub fn stacks_from_args() -> Result<usize> {
    let arg = std::env::args().nth(2);
    let env = std::env::var("LZO_BENCH_STACKS").ok();
    match arg.or(env) {
        Some(n) => {
            let n: usize = n
                .parse()
                .with_context(|| format!("stack count {n:?} is not a number"))?;
            ensure!(n > 0, "the stack count must be at least 1");
            Ok(n)
        }
        None => Ok(DEFAULT_STACKS),
    }
}

/// The cluster of this section. Fields drop in order: the simulator and the operators
/// stop before the control plane does.
struct Scale {
    _sim_loops: Running,
    sim: NodeSim,
    leader: Operator,
    standby: Option<Operator>,
    admin: Client,
    op_kubeconfig: std::path::PathBuf,
    stacks: Store<LokiStack>,
    n: usize,
    nodes: usize,
    cp: ControlPlane,
}

pub async fn run(n: usize) -> Result<Vec<Row>> {
    println!("scale: {n} zone-aware 1x.demo stacks");
    let mut rows = Vec::new();
    let mut s = Scale::start(n).await?;
    ready_rows(&s, &mut rows).await?;
    hold(&s).await?;
    idle_rows(&mut s, &mut rows).await?;
    relabel_rows(&s, &mut rows).await?;
    failover_rows(&mut s, &mut rows).await?;
    outage_rows(&s, &mut rows).await?;
    Ok(rows)
}

impl Scale {
    async fn start(n: usize) -> Result<Scale> {
        let tuning = Tuning {
            node_monitor_grace: NODE_GRACE,
            api_qps: Some(CONTROL_PLANE_QPS),
            ..Tuning::default()
        };
        let cp = ControlPlane::start_with(&repo_root().join(".e2e/bench-scale"), &tuning)?;
        let admin = client_for(&cp.admin_kubeconfig).await?;
        operator::deploy(&cp.admin_kubeconfig)?;
        let sim = NodeSim::new(admin.clone())
            .with_heartbeats(Heartbeats {
                every: LEASE_EVERY,
                status: false,
            })
            .with_pod_ips(PodIps::Distinct);
        sim.install_storage_class().await?;
        let per_zone = n.div_ceil(STACKS_PER_NODE).max(3);
        sim.create_zones(&ZONES, per_zone).await?;
        let sim_loops = sim.run();
        let op_kubeconfig = operator::service_account_kubeconfig(&admin, &cp).await?;
        let mut leader = start_operator(&op_kubeconfig, &cp.dir, "scale-a")?;
        leader.wait_ready(Duration::from_secs(60)).await?;
        let stacks = cache(
            Api::<LokiStack>::all(admin.clone()),
            watcher::Config::default(),
        );
        Ok(Scale {
            _sim_loops: sim_loops,
            sim,
            leader,
            standby: None,
            admin,
            op_kubeconfig,
            stacks,
            n,
            nodes: per_zone * ZONES.len(),
            cp,
        })
    }

    fn stack_list(&self) -> Vec<Arc<LokiStack>> {
        self.stacks.state()
    }
}

/// An operator replica as deployed (defaults but for the addresses of an operator outside
/// the cluster), logging into its own directory under the control plane's.
fn start_operator(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    id: &str,
) -> Result<Operator> {
    let dir = dir.join(id);
    std::fs::create_dir_all(&dir)?;
    Operator::start(kubeconfig, &dir, &["--identity", id])
}

/// A cache of `api`, filled by a watch for as long as the bench runs.
fn cache<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader
}

/// Polls `done` every [`POLL`] until it counts `total`, printing progress; the time it
/// took from `since`.
async fn until_all<F, Fut>(
    what: &str,
    total: usize,
    since: Instant,
    timeout: Duration,
    mut done: F,
) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    let mut printed = Instant::now();
    loop {
        let count = done().await?;
        if count >= total {
            let took = since.elapsed();
            println!("  {what}: {total} of {total} after {took:.0?}");
            return Ok(took);
        }
        ensure!(
            since.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}: {count} of {total}"
        );
        if printed.elapsed() >= PROGRESS {
            println!("  {what}: {count} of {total} after {:.0?}", since.elapsed());
            printed = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How many cached stacks `pred` holds for, as [`until_all`] takes it.
fn count_stacks(s: &Scale, pred: impl Fn(&LokiStack) -> bool) -> std::future::Ready<Result<usize>> {
    std::future::ready(Ok(s.stack_list().iter().filter(|x| pred(x)).count()))
}

/// Generous: ten minutes plus two seconds a stack.
fn timeout_for(n: usize) -> Duration {
    Duration::from_secs(600 + 2 * n as u64)
}

fn is_ready(s: &LokiStack) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn zone_aware_demo(name: &str) -> Result<LokiStack> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "loki.grafana.com/v1", "kind": "LokiStack", "metadata": {"name": name},
        "spec": {
            "size": "1x.demo",
            "storage": {"secret": {"name": loki_zone_operator_tests::STORAGE_SECRET, "type": "s3"}},
            "replication": {"zones": [{"topologyKey": ZONE}]},
        },
    }))?)
}

/// The namespaces (with their storage Secret), then the stacks, 16 requests in flight.
async fn create_stacks(admin: &Client, n: usize) -> Result<()> {
    let namespaces: Vec<String> = (0..n.div_ceil(STACKS_PER_NAMESPACE))
        .map(|i| format!("bench-scale-{i}"))
        .collect();
    let made: Vec<Result<()>> = stream::iter(&namespaces)
        .map(|ns| namespace_with_storage_secret(admin, ns))
        .buffer_unordered(16)
        .collect()
        .await;
    made.into_iter().collect::<Result<()>>()?;
    let made: Vec<Result<()>> = stream::iter(0..n)
        .map(|i| {
            let api: Api<LokiStack> =
                Api::namespaced(admin.clone(), &namespaces[i / STACKS_PER_NAMESPACE]);
            async move {
                api.create(&PostParams::default(), &zone_aware_demo(&format!("s{i}"))?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    made.into_iter().collect()
}

/// The CPU seconds used so far by each process that shares the machine in this section:
/// the control plane's, the leader, and this one (the node simulator and the bench's
/// watches). What else runs on the machine is not counted.
fn machine_cpu(s: &Scale, leader: u32) -> Result<Vec<(&'static str, f64)>> {
    let mut procs = s.cp.named_pids();
    procs.push(("operator (leader)", leader));
    procs.push(("bench and node simulator", std::process::id()));
    procs
        .into_iter()
        .map(|(name, pid)| Ok((name, cpu_seconds(pid)?)))
        .collect()
}

/// Where the machine's CPU went between two [`machine_cpu`] readings over `wall`: the
/// total against what 2 cores give in that time, then each process, largest first.
fn cpu_shares(before: &[(&str, f64)], after: &[(&str, f64)], wall: Duration) -> String {
    let mut used: Vec<(&str, f64)> = after
        .iter()
        .zip(before)
        .map(|((name, a), (_, b))| (*name, a - b))
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = used.iter().map(|(_, s)| s).sum();
    let each = used
        .iter()
        .map(|(name, s)| format!("{name} {s:.0} s ({:.0} %)", 100.0 * s / total))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{total:.0} s over {:.0} s, {:.2} cores busy: {each}",
        wall.as_secs_f64(),
        total / wall.as_secs_f64()
    )
}

/// The CPU seconds (user and system) a process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(')')
        .context("/proc stat without a command")?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields.get(i).context("short /proc stat")?.parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) / clock_ticks()?)
}

fn clock_ticks() -> Result<f64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("getconf CLK_TCK")?;
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

fn pid_of(op: &Operator) -> Result<u32> {
    op.pid().context("the operator is not running")
}

/// How often the operator stopped leading because it could not renew its Lease in time,
/// from its log (a loaded API server answering 429, or too slowly).
fn terms_lost(op: &Operator) -> usize {
    std::fs::read_to_string(&op.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("stopped leading"))
        .count()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// With `LZO_BENCH_HOLD=FILE`, once every stack is Ready: writes the operator's
/// kubeconfig and the control plane's directory into FILE and waits while FILE exists,
/// so that replicas can be started and profiled by hand beside N stacks (how the
/// standby's memory was taken apart: docs/performance.md).
async fn hold(s: &Scale) -> Result<()> {
    let Some(file) = std::env::var_os("LZO_BENCH_HOLD") else {
        return Ok(());
    };
    let file = std::path::PathBuf::from(file);
    let what = format!("{}\n{}\n", s.op_kubeconfig.display(), s.cp.dir.display());
    std::fs::write(&file, what)?;
    println!("  holding the cluster while {} exists", file.display());
    while file.exists() {
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// 1. Every stack Ready: the time, the leader's CPU seconds and RSS.
async fn ready_rows(s: &Scale, rows: &mut Vec<Row>) -> Result<()> {
    let n = s.n;
    let pid = pid_of(&s.leader)?;
    let (cpu_before, rss_before) = (cpu_seconds(pid)?, super::rss_kib(pid)?);
    let machine_before = machine_cpu(s, pid)?;
    let started = Instant::now();
    create_stacks(&s.admin, n).await?;
    println!("  created {n} stacks in {:.0?}", started.elapsed());
    let took = until_all("stacks Ready", n, started, timeout_for(n), || {
        count_stacks(s, is_ready)
    })
    .await?;
    let cpu = cpu_seconds(pid)? - cpu_before;
    let machine = machine_cpu(s, pid)?;
    let (rss, peak) = (super::rss_kib(pid)?, super::peak_rss_kib(pid)?);
    let lost = terms_lost(&s.leader);
    let (ns, nodes) = (n.div_ceil(STACKS_PER_NAMESPACE), s.nodes);
    let at_1000 = n >= TARGET_STACKS;
    row(
        rows,
        &format!("scale: {n} stacks in {ns} namespaces on {nodes} nodes, all Ready"),
        format!("{:.0} s", took.as_secs_f64()),
        "≤ 10 min at 1,000 stacks on 2 cores",
        at_1000.then_some(took <= Duration::from_secs(600)),
    );
    row(
        rows,
        "scale: leader terms lost until all Ready (Lease not renewed in time)",
        lost.to_string(),
        "-",
        None,
    );
    row(
        rows,
        "scale: leader CPU until all Ready",
        format!("{cpu:.1} s ({:.0} ms per stack)", 1000.0 * cpu / n as f64),
        "-",
        None,
    );
    row(
        rows,
        "scale: CPU until all Ready, by process",
        cpu_shares(&machine_before, &machine, took),
        "-",
        None,
    );
    row(
        rows,
        &format!("scale: leader RSS at {n} stacks"),
        format!(
            "{} ({} with no stack: {:.1} KiB more per stack; peak {})",
            mib(rss),
            mib(rss_before),
            rss.saturating_sub(rss_before) as f64 / n as f64,
            mib(peak)
        ),
        "recorded",
        None,
    );
    Ok(())
}

/// The operator's completed requests (both replicas) from byte `from` of the audit log.
fn operator_requests(cp: &ControlPlane, from: u64) -> Result<Vec<Value>> {
    let mut file = std::fs::File::open(cp.dir.join("audit.log"))?;
    file.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let user = operator::service_account_user();
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user.as_str() && e["stage"] == "ResponseComplete")
        .collect())
}

fn audit_offset(cp: &ControlPlane) -> u64 {
    std::fs::metadata(cp.dir.join("audit.log")).map_or(0, |m| m.len())
}

fn is_write(e: &Value) -> bool {
    matches!(
        e["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}

/// "verb resource: count" for the most frequent pairs, most first.
fn by_verb(events: &[Value], most: usize) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let key = format!(
            "{} {}",
            e["verb"].as_str().unwrap_or("?"),
            e["objectRef"]["resource"].as_str().unwrap_or("?")
        );
        *counts.entry(key).or_default() += 1;
    }
    let mut pairs: Vec<(String, usize)> = counts.into_iter().collect();
    pairs.sort_by_key(|p| std::cmp::Reverse(p.1));
    pairs
        .iter()
        .take(most)
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// 2. Idle: a standby joins, then a minute with nothing changing.
async fn idle_rows(s: &mut Scale, rows: &mut Vec<Row>) -> Result<()> {
    let mut standby = start_operator(&s.op_kubeconfig, &s.cp.dir, "scale-b")?;
    standby.wait_ready(Duration::from_secs(300)).await?;
    s.standby = Some(standby);
    // Let status writes of the last stacks to turn Ready, and the standby's lists, end.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let pid = pid_of(&s.leader)?;
    let (from, cpu_before) = (audit_offset(&s.cp), cpu_seconds(pid)?);
    tokio::time::sleep(IDLE_WINDOW).await;
    let cpu = cpu_seconds(pid)? - cpu_before;
    let events = operator_requests(&s.cp, from)?;
    // Leader election costs the same whatever the number of stacks: counted apart.
    let (leases, per_stack): (Vec<Value>, Vec<Value>) = events
        .into_iter()
        .partition(|e| e["objectRef"]["resource"] == "leases");
    let minutes = IDLE_WINDOW.as_secs_f64() / 60.0;
    let per_stack_min = per_stack.len() as f64 / s.n as f64 / minutes;
    let writes = per_stack.iter().filter(|e| is_write(e)).count();
    row(
        rows,
        "scale: idle requests over 60 s, leader and standby, Lease apart",
        format!(
            "{per_stack_min:.3} per stack per minute ({} requests, {writes} writes: {}; and {} Lease requests)",
            per_stack.len(),
            by_verb(&per_stack, 6),
            leases.len()
        ),
        "≤ 1 per stack per minute",
        Some(per_stack_min <= 1.0),
    );
    row(
        rows,
        "scale: leader CPU idle over 60 s",
        format!("{cpu:.2} s"),
        "-",
        None,
    );
    // A standby starts beside every stack, as any replica of a real install does: its
    // first lists, not a stream of creations, fill its caches.
    let standby = pid_of(s.standby.as_ref().context("no standby")?)?;
    let (rss, peak) = (super::rss_kib(standby)?, super::peak_rss_kib(standby)?);
    row(
        rows,
        "scale: standby RSS (started beside every stack)",
        format!("{} (peak {})", mib(rss), mib(peak)),
        "recorded",
        None,
    );
    Ok(())
}

fn lists_zone(s: &LokiStack, zone: &str) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.replication.as_ref())
        .is_some_and(|r| r.zones.iter().any(|z| z == zone))
}

/// 3. One node moves to a zone of its own, then back.
async fn relabel_rows(s: &Scale, rows: &mut Vec<Row>) -> Result<()> {
    let node = format!("node-{}-0", ZONES[2]);
    let moved = "zone-moved";
    let started = Instant::now();
    s.sim.relabel(&node, ZONE, Some(moved)).await?;
    let there = until_all(
        "stacks showing the moved node's zone",
        s.n,
        started,
        timeout_for(s.n),
        || count_stacks(s, |x| lists_zone(x, moved)),
    )
    .await?;
    let started = Instant::now();
    s.sim.relabel(&node, ZONE, Some(ZONES[2])).await?;
    let back = until_all(
        "stacks no longer showing it",
        s.n,
        started,
        timeout_for(s.n),
        || count_stacks(s, |x| !lists_zone(x, moved)),
    )
    .await?;
    row(
        rows,
        "scale: one node's zone label changed → every stack's status shows it",
        format!(
            "{:.1} s (moved back: {:.1} s)",
            there.as_secs_f64(),
            back.as_secs_f64()
        ),
        "-",
        None,
    );
    Ok(())
}

/// Reconciles an operator has finished, from its `/metrics`.
async fn reconciles(op: &Operator) -> Result<usize> {
    let text = op.metrics().await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("loki_zone_operator_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize)
}

fn received(e: &Value) -> Option<Timestamp> {
    e["requestReceivedTimestamp"].as_str()?.parse().ok()
}

/// What a new leader sent, by kind of write.
#[derive(Default)]
struct Writes {
    /// Writes to objects: none is wanted when nothing changed.
    objects: Vec<String>,
    /// Its webhook configurations, which name the new replica's URL (outside a cluster
    /// every replica serves on a port of its own).
    webhooks: usize,
    /// Events of standing problems, which a new term reports once more.
    events: usize,
    /// Its taking and renewing of the leader Lease.
    leases: usize,
}

fn sort_writes(events: &[Value]) -> Writes {
    let mut w = Writes::default();
    for e in events.iter().filter(|e| is_write(e)) {
        match e["objectRef"]["resource"].as_str().unwrap_or_default() {
            "leases" => w.leases += 1,
            "events" => w.events += 1,
            r if r.ends_with("webhookconfigurations") => w.webhooks += 1,
            r => w.objects.push(format!(
                "{} {r} {}/{}",
                e["verb"].as_str().unwrap_or("?"),
                e["objectRef"]["namespace"].as_str().unwrap_or(""),
                e["objectRef"]["name"].as_str().unwrap_or("")
            )),
        }
    }
    w
}

/// Waits until the operator has written nothing but Lease renewals for [`QUIET`], the
/// wait starting at `pass_done`; the end of its busy time: the later of `pass_done` and
/// its last such write.
async fn until_quiet(cp: &ControlPlane, from: u64, pass_done: Timestamp) -> Result<Timestamp> {
    let quiet = k8s_openapi::jiff::SignedDuration::try_from(QUIET)?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let events = operator_requests(cp, from)?;
        let last_write = events
            .iter()
            .filter(|e| is_write(e) && e["objectRef"]["resource"] != "leases")
            .filter_map(received)
            .max();
        let busy_until = last_write.map_or(pass_done, |w| w.max(pass_done));
        if Timestamp::now().duration_since(busy_until) >= quiet {
            return Ok(busy_until);
        }
        ensure!(Instant::now() < deadline, "the new leader never went quiet");
        tokio::time::sleep(POLL).await;
    }
}

/// 4. The leader stops; the standby takes over. Its writes and requests until quiet.
async fn failover_rows(s: &mut Scale, rows: &mut Vec<Row>) -> Result<()> {
    let standby = s.standby.as_ref().context("no standby")?;
    let before = reconciles(standby).await?;
    let (from, stopped, stopped_at) = (audit_offset(&s.cp), Instant::now(), Timestamp::now());
    s.leader.stop();
    until_all(
        "stacks reconciled by the new leader",
        s.n,
        stopped,
        timeout_for(s.n),
        || async { Ok(reconciles(standby).await?.saturating_sub(before)) },
    )
    .await?;
    let busy_until = until_quiet(&s.cp, from, Timestamp::now()).await?;
    let events: Vec<Value> = operator_requests(&s.cp, from)?
        .into_iter()
        .filter(|e| received(e).is_some_and(|t| t >= stopped_at && t <= busy_until))
        .collect();
    let w = sort_writes(&events);
    let busy = busy_until.duration_since(stopped_at).as_secs_f64();
    row(
        rows,
        "scale: failover, new leader's writes until quiet",
        format!(
            "{} writes to objects{} ({} Events of standing problems, {} webhook configurations naming its URL, {} Lease writes) in {busy:.0} s",
            w.objects.len(),
            sample(&w.objects),
            w.events,
            w.webhooks,
            w.leases,
        ),
        "0 writes when nothing changed",
        Some(w.objects.is_empty()),
    );
    row(
        rows,
        "scale: failover, new leader's requests until quiet",
        format!("{} ({})", events.len(), by_verb(&events, 6)),
        "-",
        None,
    );
    Ok(())
}

/// The first few of `writes`, to name in a row.
fn sample(writes: &[String]) -> String {
    if writes.is_empty() {
        return String::new();
    }
    let first: Vec<&str> = writes.iter().take(3).map(String::as_str).collect();
    format!(" (e.g. {})", first.join("; "))
}

fn zone_unavailable(s: &LokiStack, zone: &str) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.replication.as_ref())
        .is_some_and(|r| r.zone_status.iter().any(|z| z.zone == zone && !z.available))
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Stacks whose every stateless component has a Ready pod, not being deleted, on a node
/// outside `dark`.
fn stateless_back(pods: &Store<Pod>, dark: &BTreeSet<String>) -> usize {
    let mut up: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for p in pods.state() {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_ref());
        let live = node.is_some_and(|n| !dark.contains(n))
            && p.metadata.deletion_timestamp.is_none()
            && pod_ready(&p);
        let labels = p.labels();
        let (Some(stack), Some(component)) = (
            labels.get("app.kubernetes.io/instance"),
            labels.get("app.kubernetes.io/component"),
        ) else {
            continue;
        };
        if live {
            up.entry((p.namespace().unwrap_or_default(), stack.clone()))
                .or_default()
                .insert(component.clone());
        }
    }
    up.values().filter(|c| c.len() == STATELESS.len()).count()
}

/// 5. Zone-a goes dark: every stack reports it; the stateless pods come back elsewhere.
async fn outage_rows(s: &Scale, rows: &mut Vec<Row>) -> Result<()> {
    let selector = format!("app.kubernetes.io/component in ({})", STATELESS.join(","));
    let pods = cache(
        Api::<Pod>::all(s.admin.clone()),
        watcher::Config::default().labels(&selector),
    );
    pods.wait_until_ready().await?;
    let dark: BTreeSet<String> = s.sim.zone_down(ZONES[0]).await?.into_iter().collect();
    let started = Instant::now();
    let (n, timeout) = (s.n, timeout_for(s.n));
    let reported = until_all("stacks reporting the outage", n, started, timeout, || {
        count_stacks(s, |x| zone_unavailable(x, ZONES[0]))
    })
    .await?;
    let back = until_all(
        "stacks with stateless pods back",
        n,
        started,
        timeout,
        || std::future::ready(Ok(stateless_back(&pods, &dark))),
    )
    .await?;
    row(
        rows,
        &format!(
            "scale: zone outage ({} of {} nodes) → every stack reports it",
            dark.len(),
            s.nodes
        ),
        format!(
            "{:.0} s (the node lifecycle controller's grace: {} s)",
            reported.as_secs_f64(),
            NODE_GRACE.as_secs()
        ),
        "-",
        None,
    );
    row(
        rows,
        "scale: zone outage → every stack's stateless pods Ready elsewhere",
        format!("{:.0} s", back.as_secs_f64()),
        "-",
        None,
    );
    Ok(())
}
