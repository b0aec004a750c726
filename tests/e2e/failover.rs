//! The fast failover (`operator/src/plan/failover.rs`) against the real control plane:
//! the node simulator stops a zone's heartbeats, its node Leases with them, and the
//! operator marks the zone's pods unready (what takes them out of their Services) before
//! Kubernetes' node lifecycle controller marks the nodes; the zone comes back before
//! anything is evicted (a partition that heals), and the pods return. With the stack's
//! switch off, nothing is written.
//!
//! The Endpoints are not looked at here: the simulator gives every pod 127.0.0.1, which
//! an Endpoints object may not hold. The real-node scenario watches the Services drop
//! the pods (hack/real-node/loki.sh).
//!
//! The simulator's Leases last 8 s and are renewed every 2 s (as a kubelet renews a
//! quarter into the duration), each node at its own phase; a zone of two nodes is late
//! 6 s after its last renewal (one missed renewal tolerated) and taken out once another
//! zone's prompt renewal has settled; the harness's lifecycle controller waits 8 s. The ordering is printed, not asserted (a
//! loaded machine may delay the operator's reconcile); the real-node scenario measures
//! it with production timings (docs/performance.md).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::nodesim::eventually;
use serde_json::json;

use super::outage::{outage_stack, ready_stacks, restore, stack_pods, OUTAGE_NS, OUTAGE_STACK};
use super::{Env, WAIT};

const ZONE: &str = "zone-a";

/// The status of the pod's condition of `type_`, and its reason.
fn condition(p: &Pod, type_: &str) -> Option<(String, Option<String>)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// The outage stack's pods in `ZONE` now, by name, with their UIDs.
async fn zone_pods(env: &Env) -> Result<BTreeMap<String, String>> {
    Ok(stack_pods(env)
        .await?
        .into_iter()
        .filter(|(_, (_, zone, _, _))| zone == ZONE)
        .map(|(name, (_, _, _, uid))| (name, uid))
        .collect())
}

/// The pods of `want` (same UID, not being deleted) and each one's (Ready,
/// zone-available) statuses.
async fn states(env: &Env, want: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    let mut out = BTreeMap::new();
    for p in pods.list(&ListParams::default()).await?.items {
        let name = p.name_any();
        if want.get(&name) != p.metadata.uid.as_ref() || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ready = condition(&p, "Ready").map_or("-".into(), |c| c.0);
        let zone = condition(&p, names::POD_CONDITION_ZONE_AVAILABLE)
            .map_or("-".into(), |(s, r)| {
                format!("{s}/{}", r.unwrap_or_default())
            });
        out.insert(name, format!("Ready={ready} zone-available={zone}"));
    }
    Ok(out)
}

/// The Ready condition of each of `nodes`.
async fn node_readiness(env: &Env, nodes: &[String]) -> Result<String> {
    let api: Api<Node> = Api::all(env.admin.clone());
    let mut out = Vec::new();
    for n in nodes {
        let node = api.get(n).await?;
        let ready = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map_or("-".into(), |c| c.status);
        out.push(format!("{n} Ready={ready}"));
    }
    Ok(out.join(", "))
}

async fn switch(env: &Env, value: Option<&str>) -> Result<()> {
    Api::<LokiStack>::namespaced(env.admin.clone(), OUTAGE_NS)
        .patch(
            OUTAGE_STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                names::ANNOTATION_ZONE_FAST_FAILOVER: value,
            }}})),
        )
        .await?;
    Ok(())
}

pub(super) async fn a_silent_zone_leaves_its_services_until_it_renews(env: &mut Env) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let pods = zone_pods(env).await?;
    ensure!(!pods.is_empty(), "no pod of the stack in {ZONE}");

    let stopped = Instant::now();
    let nodes = env.sim.zone_down(ZONE).await?;
    let seen = std::sync::Mutex::new(Vec::new());
    let out = eventually(
        "every pod of the silent zone taken out (Ready=False, zone-available=False/ZoneUnavailable)",
        WAIT,
        || async {
            let s = states(env, &pods).await?;
            let want = format!(
                "Ready=False zone-available=False/{}",
                names::POD_REASON_ZONE_UNAVAILABLE
            );
            // Those still there: a pod of the zone may be replaced meanwhile (a rollout
            // of an earlier scenario finishing), and the ones marked are what counts.
            if !s.is_empty() && s.values().all(|v| *v == want) {
                return Ok(Some((stopped.elapsed(), s.len())));
            }
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.last() != Some(&s) {
                seen.push(s.clone());
            }
            Err(anyhow!("{s:?}"))
        },
    )
    .await
    .with_context(|| {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        format!("the zone's pods {pods:?}, their states as they changed: {seen:#?}")
    })?;
    let (out, marked) = out;
    let nodes_then = node_readiness(env, &nodes).await?;
    println!(
        "    fast failover: {marked} pods of {ZONE} out of service {out:.1?} after the stop; the nodes then: {nodes_then}"
    );
    // The zone comes back before the lifecycle controller evicts anything (its
    // toleration is 10 s after the nodes are marked): the same pods return.
    env.sim.zone_up(ZONE).await?;
    let back = eventually(
        "every pod of the zone back: zone-available=True, Ready=True",
        WAIT,
        || async {
            let s = states(env, &pods).await?;
            let want = format!(
                "Ready=True zone-available=True/{}",
                names::POD_REASON_ZONE_RENEWING
            );
            if !s.is_empty() && s.values().all(|v| *v == want) {
                Ok(Some(stopped.elapsed()))
            } else {
                Err(anyhow!(
                    "{s:?} (evicted pods are not waited for: {} of {})",
                    s.len(),
                    pods.len()
                ))
            }
        },
    )
    .await?;
    println!("    back in service {back:.1?} after the stop");
    restore(env, &[ZONE], &ready_before).await?;

    // Switched off: the zone goes silent again, and no pod is taken out by the operator
    // (the lifecycle controller marks them unready itself, 8 s after the stop).
    switch(env, Some("false")).await?;
    let result = async {
        let pods = zone_pods(env).await?;
        env.sim.zone_down(ZONE).await?;
        tokio::time::sleep(Duration::from_secs(12)).await;
        let s = states(env, &pods).await?;
        let written: Vec<_> = s
            .iter()
            .filter(|(_, v)| v.contains("zone-available=False"))
            .collect();
        ensure!(
            written.is_empty(),
            "pods written with the fast failover switched off: {written:?}"
        );
        Ok(())
    }
    .await;
    let restored = restore(env, &[ZONE], &ready_before).await;
    switch(env, None).await.context("removing the switch")?;
    result?;
    restored
}

/// The operator's patches of pods' status (the failover's only write) in the audit log
/// from byte `from` on.
fn status_patches(audit: &std::path::Path, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let user = loki_zone_operator_tests::operator::service_account_user();
    text[from.min(text.len())..]
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|ev| {
            ev["user"]["username"] == user.as_str()
                && ev["verb"] == "patch"
                && ev["objectRef"]["resource"] == "pods"
                && ev["objectRef"]["subresource"] == "status"
        })
        .map(|ev| {
            format!(
                "{} at {}",
                ev["objectRef"]["name"], ev["requestReceivedTimestamp"]
            )
        })
        .collect()
}

/// A number from the clock's nanoseconds: the pauses' phases, printed so a failing run
/// can be told apart.
fn jitter(below_ms: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos.wrapping_mul(2_654_435_761) % below_ms.max(1)
}

/// Sends `signal` to the control plane's process `name`.
fn signal(env: &Env, name: &str, signal: &str) -> Result<()> {
    let (_, pid) = env
        .cp
        .named_pids()
        .into_iter()
        .find(|(n, _)| *n == name)
        .with_context(|| format!("no {name} process"))?;
    let sent = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    ensure!(sent.success(), "kill {signal} {pid} ({name}) failed");
    Ok(())
}

/// A few seconds' stall of the whole control plane, as a paused API server or etcd makes
/// it: every kubelet's renewal and the operator's watch wait together, and nothing the
/// operator sees proves a zone silent. The simulator's zones have two nodes and 8 s
/// Leases renewed every 2 s, so a zone is late 6 s after its last renewal: pauses of 4.5
/// to 7.5 s, at random phases of the renewals, make zones late in the operator's view
/// (the earlier rule, late after 4 s with no evidence asked, took one out). Not a single
/// pod's status may be patched. `LZO_PAUSE_RUNS` sets the number of pauses (default 4,
/// apiserver and etcd in turn).
pub(super) async fn a_paused_control_plane_takes_no_zone_out(env: &mut Env) -> Result<()> {
    outage_stack(env).await?;
    let runs: usize = std::env::var("LZO_PAUSE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let audit = env.cp.dir.join("audit.log");
    // Every node renewed a few times since the operator started: its baselines are set.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let from = std::fs::metadata(&audit).map_or(0, |m| m.len() as usize);
    for run in 0..runs {
        let target = if run % 2 == 0 {
            "kube-apiserver"
        } else {
            "etcd"
        };
        let (phase, len) = (jitter(2_000), 4_500 + jitter(3_000));
        tokio::time::sleep(Duration::from_millis(phase)).await;
        signal(env, target, "-STOP")?;
        tokio::time::sleep(Duration::from_millis(len)).await;
        signal(env, target, "-CONT")?;
        println!("    pause {run}: {target} stopped {len} ms at phase {phase} ms of the renewals");
        // A verdict on the stale view would be written within a few seconds of the resume.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let patches = status_patches(&audit, from);
        ensure!(
            patches.is_empty(),
            "the operator patched pods' status after pause {run} ({target}, {len} ms at phase {phase} ms): {patches:?}"
        );
    }
    let marked: Vec<_> = states(env, &zone_pods(env).await?)
        .await?
        .into_iter()
        .filter(|(_, s)| s.contains("zone-available=False"))
        .collect();
    ensure!(marked.is_empty(), "pods marked out: {marked:?}");
    println!("    {runs} pauses of the control plane, no pod's status patched");
    Ok(())
}
