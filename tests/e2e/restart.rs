//! kube-apiserver restarts while the cluster is busy: the operator must outlive every one
//! of them in the same process, lead again, and leave no pod unannotated and no stack
//! status behind.
//!
//! An API server that restarts is gone for a while, then answers 403 to ServiceAccounts
//! until its RBAC caches are filled. The operator renews its 15 s Lease every 2 s and
//! steps down when it could not for 10 s; a term that ends so is followed by a campaign
//! in the same process, never by an exit. The downtimes below sit on both sides of those
//! two durations, and the restarts alternate SIGTERM (a rolling restart) and SIGKILL (a
//! crash), while pods of a zone-aware stack come and go and its components scale.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::harness::Stop;
use loki_zone_operator_tests::nodesim::{eventually, ZONE};
use loki_zone_operator_tests::operator::NAMESPACE as OPERATOR_NAMESPACE;
use serde_json::json;
use tokio::sync::watch;

use super::outage::ready_stacks;
use super::{create_stack, namespace, nodes_by_name, stack_json, Env, WAIT};

const NS: &str = "e2e-apiserver-restarts";
const STACK: &str = "restarts";
/// The operator's default `--lease-name`.
const LEASE: &str = "loki-zone-operator";
/// Pods the churn keeps alive at a time: each new one deletes the one this many before.
const CHURN_WINDOW: u32 = 6;
/// A restarted API server is ready in seconds; on a loaded 2-core machine it may take
/// half a minute.
const APISERVER_READY: Duration = Duration::from_secs(120);
/// After the API server is ready again, the operator renews (2 s) or, after a term that
/// ended, campaigns (every 2 s) and starts its caches again.
const LEADS_AGAIN: Duration = Duration::from_secs(60);
/// Pods of every stack that were evicted or rolled meanwhile start again.
const SETTLE: Duration = Duration::from_secs(300);

/// One restart: how kube-apiserver is stopped, how long it stays down after it exited,
/// and how long the cluster runs before the next restart once the operator renewed its
/// Lease (`None`: the next restart follows as soon as the server is ready, while the
/// operator still meets the 403s of RBAC warming up and relists its caches).
struct Restart {
    how: Stop,
    down: Duration,
    up: Option<Duration>,
}

/// Outages (downtime plus a start of about 7 s, more under load) on both sides of the
/// 10 s renew deadline and the 15 s lease; a SIGTERMed server refuses connections for
/// up to 30 s before it exits (see the harness), longer than the lease.
fn restarts() -> [Restart; 5] {
    let r = |how, down, up: Option<u64>| Restart {
        how,
        down: Duration::from_secs(down),
        up: up.map(Duration::from_secs),
    };
    [
        r(Stop::Term, 2, Some(6)),
        r(Stop::Kill, 4, None),
        r(Stop::Kill, 0, Some(8)),
        r(Stop::Term, 0, Some(4)),
        r(Stop::Kill, 16, Some(5)),
    ]
}

/// kube-apiserver restarts five times during churn; the same operator process leads
/// afterwards, every zone-aware pod carries its node's zone and the stack is current.
pub async fn api_server_restarts_never_stop_the_operator(env: &mut Env) -> Result<()> {
    let ready_before = ready_stacks(env).await?;
    let log_from = env.operator_log().len();
    let pid = env
        .operator
        .as_ref()
        .and_then(|o| o.pid())
        .context("no operator")?;
    let identity = identity_of(pid);
    wait_leading(env, &identity, "before the restarts").await?;
    start_stack(env).await?;

    let (stop_churn, stopped) = watch::channel(false);
    let counts = Arc::new(ChurnCounts::default());
    let churn = tokio::spawn(churn(env.admin.clone(), stopped, counts.clone()));
    let outcome = restart_five_times(env, pid, &identity).await;
    let _ = stop_churn.send(true);
    let last_pod = churn.await.context("the churn task")?;
    outcome?;
    println!("    churn: {}", counts.describe());
    ensure!(
        counts.created.load(Ordering::Relaxed) >= 20 && counts.scaled.load(Ordering::Relaxed) >= 3,
        "too little churn to prove anything: {}",
        counts.describe()
    );

    ensure_alive(pid)?;
    wait_leading(env, &identity, "after the restarts").await?;
    // Work after the last restart: the caches and watches are live again.
    let generation = scale(&env.admin, 2, 1).await?;
    create_pods(&env.admin, "after", 0..4).await?;
    wait_annotated(env).await?;
    wait_stack_current(env, generation).await?;
    let (queriers, distributors) = (
        replicas(env, "querier").await?,
        replicas(env, "distributor").await?,
    );
    ensure!(
        (queriers, distributors) == (Some(2), Some(1)),
        "the last scale was not applied: querier {queriers:?}, distributor {distributors:?}"
    );
    ensure_alive(pid)?;
    check_log(&env.operator_log()[log_from..], last_pod)?;
    settle(env, &ready_before).await?;
    wait_statuses_still(env).await
}

/// Restarts kube-apiserver as [`restarts`] says; after each, the operator process is
/// alive and renews the Lease under its identity within [`LEADS_AGAIN`].
async fn restart_five_times(env: &mut Env, pid: u32, identity: &str) -> Result<()> {
    for (i, r) in restarts().iter().enumerate() {
        let n = i + 1;
        let version = lease(env).await?.metadata.resource_version;
        let exited = tokio::task::block_in_place(|| env.cp.stop_apiserver(r.how))
            .with_context(|| format!("restart {n}: stopping kube-apiserver"))?;
        tokio::time::sleep(r.down).await;
        let started = tokio::task::block_in_place(|| env.cp.start_apiserver(APISERVER_READY))
            .with_context(|| format!("restart {n}: starting kube-apiserver"))?;
        let since_ready = Instant::now();
        ensure_alive(pid).with_context(|| format!("restart {n} ({:?})", r.how))?;
        let Some(up) = r.up else {
            println!(
                "    restart {n} ({:?}): exited in {exited:.1?}, down {:?}, ready {started:.1?} \
                 after start; restarting again at once",
                r.how, r.down
            );
            continue;
        };
        eventually(
            &format!("restart {n}: the operator renewing its Lease"),
            LEADS_AGAIN,
            || async {
                ensure_alive(pid)?;
                let l = lease(env).await?;
                Ok(
                    (holder(&l) == identity && l.metadata.resource_version != version)
                        .then_some(()),
                )
            },
        )
        .await?;
        println!(
            "    restart {n} ({:?}): exited in {:.1?}, down {:?}, ready {:.1?} after start, \
             operator renewed {:.1?} after ready",
            r.how,
            exited,
            r.down,
            started,
            since_ready.elapsed()
        );
        tokio::time::sleep(up).await;
    }
    Ok(())
}

/// The identity the operator takes without `--identity`, as `main.rs` derives it.
fn identity_of(pid: u32) -> String {
    std::env::var("HOSTNAME").unwrap_or_else(|_| format!("{}-{pid}", names::CONTROLLER_NAME))
}

/// Fails unless process `pid` runs (an exited child that was not reaped yet is a zombie).
fn ensure_alive(pid: u32) -> Result<()> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| anyhow!("the operator process {pid} is gone: {e}"))?;
    // The state follows the command name in parentheses, which may hold spaces.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    ensure!(
        !matches!(state, Some("Z" | "X")),
        "the operator process {pid} exited (state {state:?})"
    );
    Ok(())
}

async fn lease(env: &Env) -> Result<Lease> {
    Ok(
        Api::<Lease>::namespaced(env.admin.clone(), OPERATOR_NAMESPACE)
            .get(LEASE)
            .await?,
    )
}

fn holder(l: &Lease) -> String {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// Waits until `identity` holds the Lease and renews it: the Lease changes under it.
async fn wait_leading(env: &Env, identity: &str, when: &str) -> Result<()> {
    let first = eventually(
        &format!("{identity} to hold the Lease {when}"),
        LEADS_AGAIN,
        || async {
            let l = lease(env).await?;
            Ok((holder(&l) == identity).then_some(l.metadata.resource_version))
        },
    )
    .await?;
    eventually(
        &format!("{identity} to renew the Lease {when}"),
        LEADS_AGAIN,
        || async {
            let l = lease(env).await?;
            ensure!(
                holder(&l) == identity,
                "the Lease is held by {:?}",
                holder(&l)
            );
            Ok((l.metadata.resource_version != first).then_some(()))
        },
    )
    .await
}

/// A zone-aware stack whose pods the annotator must annotate, Ready before the restarts.
async fn start_stack(env: &Env) -> Result<()> {
    namespace(env, NS).await?;
    create_stack(
        env,
        NS,
        // Zoned by the operator (not by the server's label copy): the restarts are
        // against its webhook and annotator.
        super::zoned_by_the_operator(stack_json(
            STACK,
            "1x.demo",
            json!({"factor": 1, "zones": [{"topologyKey": ZONE}]}),
        )),
    )
    .await?;
    let generation = get(env).await?.metadata.generation;
    wait_stack_current(env, generation).await
}

async fn get(env: &Env) -> Result<LokiStack> {
    Ok(Api::<LokiStack>::namespaced(env.admin.clone(), NS)
        .get(STACK)
        .await?)
}

/// Waits until the stack's status is of its current generation and Ready.
async fn wait_stack_current(env: &Env, generation: Option<i64>) -> Result<()> {
    eventually("the stack current and Ready", SETTLE, || async {
        let s = get(env).await?;
        let observed = s.status.as_ref().and_then(|st| st.observed_generation);
        let ready = s.status.as_ref().is_some_and(|st| {
            st.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "ReadyComponents")
        });
        ensure!(
            s.metadata.generation == generation,
            "the stack changed under the test: generation {:?}, expected {generation:?}",
            s.metadata.generation
        );
        Ok((observed == generation && ready).then_some(()))
    })
    .await
}

/// Sets the querier and distributor replicas; the stack's new generation.
async fn scale(admin: &Client, queriers: i32, distributors: i32) -> Result<Option<i64>> {
    let patch = json!({"spec": {"template": {
        "querier": {"replicas": queriers},
        "distributor": {"replicas": distributors},
    }}});
    let s = Api::<LokiStack>::namespaced(admin.clone(), NS)
        .patch(STACK, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(s.metadata.generation)
}

async fn replicas(env: &Env, component: &str) -> Result<Option<i32>> {
    let name = format!("{STACK}-{component}");
    let d = Api::<Deployment>::namespaced(env.admin.clone(), NS)
        .get(&name)
        .await
        .with_context(|| format!("Deployment {name}"))?;
    Ok(d.spec.and_then(|s| s.replicas))
}

/// A pod the annotator must annotate, as a zone-aware component's pod looks to it.
fn zone_aware_pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {names::LABEL_ZONE_AWARE: names::LABEL_ZONE_AWARE_VALUE, names::LABEL_INSTANCE: STACK},
            "annotations": {names::ANNOTATION_ZONE_LABELS: ZONE},
        },
        "spec": {
            "automountServiceAccountToken": false,
            "initContainers": [{"name": names::INIT_CONTAINER_ZONE, "image": "loki-zone-wait:e2e"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }))?)
}

async fn create_pods(admin: &Client, prefix: &str, range: std::ops::Range<u32>) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    for i in range {
        pods.create(
            &PostParams::default(),
            &zone_aware_pod(&format!("{prefix}-{i}"))?,
        )
        .await?;
    }
    Ok(())
}

#[derive(Default)]
struct ChurnCounts {
    created: AtomicU32,
    deleted: AtomicU32,
    scaled: AtomicU32,
    /// Requests that failed or timed out: the API server was down or warming up.
    failed: AtomicU32,
}

impl ChurnCounts {
    fn describe(&self) -> String {
        let n = |a: &AtomicU32| a.load(Ordering::Relaxed);
        format!(
            "{} pods created, {} deleted, {} scales, {} requests failed during restarts",
            n(&self.created),
            n(&self.deleted),
            n(&self.scaled),
            n(&self.failed)
        )
    }
}

/// Until told to stop: a zone-aware pod created every half second, the one
/// [`CHURN_WINDOW`] before it deleted, and the querier and distributor scaled up and down
/// every few seconds. Failed requests are counted and not retried. Returns the number of
/// the last pod it tried.
async fn churn(admin: Client, mut stop: watch::Receiver<bool>, counts: Arc<ChurnCounts>) -> u32 {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let count = |ok: bool, counter: &AtomicU32| {
        let c = if ok { counter } else { &counts.failed };
        c.fetch_add(1, Ordering::Relaxed);
    };
    let bounded = Duration::from_secs(5);
    let mut i: u32 = 0;
    while !*stop.borrow() {
        let pod = zone_aware_pod(&format!("churn-{i}")).ok();
        if let Some(pod) = pod {
            let created =
                tokio::time::timeout(bounded, pods.create(&PostParams::default(), &pod)).await;
            count(matches!(created, Ok(Ok(_))), &counts.created);
        }
        if let Some(old) = i.checked_sub(CHURN_WINDOW) {
            let gone = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let name = format!("churn-{old}");
            let ok = match tokio::time::timeout(bounded, pods.delete(&name, &gone)).await {
                Ok(Ok(_)) => true,
                Ok(Err(kube::Error::Api(e))) => e.code == 404,
                _ => false,
            };
            count(ok, &counts.deleted);
        }
        if i % 8 == 7 {
            let step = i / 8;
            let (queriers, distributors) = (1 + (step % 3) as i32, 1 + (step % 2) as i32);
            let scaled = tokio::time::timeout(bounded, scale(&admin, queriers, distributors)).await;
            count(matches!(scaled, Ok(Ok(_))), &counts.scaled);
        }
        i += 1;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => {}
        }
    }
    i
}

/// Waits until every zone-aware pod of the namespace is scheduled and annotated with its
/// node's zone.
async fn wait_annotated(env: &Env) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), NS);
    let zone_aware = ListParams::default().labels(&format!(
        "{}={}",
        names::LABEL_ZONE_AWARE,
        names::LABEL_ZONE_AWARE_VALUE
    ));
    let nodes = nodes_by_name(env).await?;
    let count = eventually(
        "every zone-aware pod annotated with its node's zone",
        WAIT,
        || async {
            let mut wrong = Vec::new();
            let list = pods.list(&zone_aware).await?;
            for p in &list.items {
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let want = nodes.get(&node).and_then(|n| n.labels().get(ZONE));
                let got = p.annotations().get(names::ANNOTATION_ZONE);
                if want.is_none() || got != want {
                    wrong.push(format!("{} on {node:?}: {got:?}", p.name_any()));
                }
            }
            if wrong.is_empty() {
                Ok(Some(list.items.len()))
            } else {
                Err(anyhow!("not yet: {}", wrong.join("; ")))
            }
        },
    )
    .await?;
    println!("    {count} zone-aware pods annotated with their node's zone");
    Ok(())
}

/// Drops ANSI colour sequences from a log line.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The operator's log of this scenario: no shutdown, no exit, and how often it stepped
/// down and led again.
fn check_log(log: &str, churned: u32) -> Result<()> {
    let lines: Vec<String> = log.lines().map(plain).collect();
    let ended: Vec<&String> = lines
        .iter()
        .filter(|l| {
            // main.rs logs why `run` returned at ERROR under the binary's own target.
            l.ends_with(": stopped")
                || l.contains("shutdown requested")
                || l.contains(" ERROR loki_zone_operator: ")
        })
        .collect();
    ensure!(
        ended.is_empty(),
        "the operator log shows it ending: {ended:?}"
    );
    let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    println!(
        "    operator log: {} terms ended and {} began, {} failed renewals retried, {} \
         requests forbidden (RBAC warming up), {churned} churn rounds",
        count("stopped leading; campaigning again"),
        count("became leader"),
        count("lease renewal failed; retrying"),
        count("is forbidden"),
    );
    Ok(())
}

// --- Leave the cluster as the next scenarios expect -----------------------------------

/// Waits until every node is Ready without a lifecycle taint (an outage may have marked
/// them unreachable) and every stack that was Ready before is Ready again.
async fn settle(env: &Env, ready_before: &BTreeSet<(String, String)>) -> Result<()> {
    let nodes: Api<Node> = Api::all(env.admin.clone());
    eventually("every node Ready and untainted", SETTLE, || async {
        let not_ready: BTreeMap<String, String> = nodes
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|n| !node_healthy(n))
            .map(|n| {
                (
                    n.name_any(),
                    format!("{:?}", n.spec.as_ref().and_then(|s| s.taints.clone())),
                )
            })
            .collect();
        if not_ready.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("not yet: {not_ready:?}"))
        }
    })
    .await?;
    eventually(
        "every stack Ready again that was before",
        SETTLE,
        || async {
            let now = ready_stacks(env).await?;
            let missing: Vec<_> = ready_before.difference(&now).collect();
            if missing.is_empty() {
                Ok(Some(()))
            } else {
                bail!("not Ready yet: {missing:?}")
            }
        },
    )
    .await
}

/// Waits until no stack's status changes across a few of the operator's 2 s resyncs: the
/// last scale's pods have started and been counted, so the idle scenario after this one
/// sees no status write left over from here.
async fn wait_statuses_still(env: &Env) -> Result<()> {
    let statuses = || async {
        let list = Api::<LokiStack>::all(env.admin.clone())
            .list(&ListParams::default())
            .await?;
        let all: BTreeMap<String, String> = list
            .items
            .iter()
            .map(|s| {
                let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
                (key, format!("{:?}", s.status))
            })
            .collect();
        anyhow::Ok(all)
    };
    eventually("every stack's status to stay the same", SETTLE, || async {
        let before = statuses().await?;
        tokio::time::sleep(Duration::from_secs(6)).await;
        Ok((statuses().await? == before).then_some(()))
    })
    .await
}

fn node_healthy(n: &Node) -> bool {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    ready && !tainted
}
