//! Zone-aware disruptions (issue 15, items 3 and 4): on a 3-zone stack with 2 ingesters
//! per zone, evictions through the Eviction API (what `kubectl drain` and autoscalers
//! use) may take a whole zone, never a second one; while the operator is down they are
//! refused, not allowed; and `kubectl drain` of every node of a zone succeeds in one
//! pass, waiting on the webhook's refusals as it waits on a PodDisruptionBudget.
//!
//! A watch on the ingesters checks, over the whole scenario, that no two zones ever had
//! an ingester down at once.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, EvictParams, GroupVersionKind};
use loki_zone_operator::model::names;
use loki_zone_operator_tests::client_without_retries;
use loki_zone_operator_tests::harness::control_plane_bin;
use loki_zone_operator_tests::nodesim::eventually;

use super::rollout::{ingesters_in, ready_stack_in, zones_in_turn, PodWatch};
use super::{Env, WAIT};

const NS: &str = "e2e-disruptions";
const STACK: &str = "drain";

/// An eviction's outcome: allowed, or refused with the HTTP code and message.
type Evicted = std::result::Result<(), (u16, String)>;

async fn evict(env: &Env, pod: &str) -> Result<Evicted> {
    let client = client_without_retries(&env.cp.admin_kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(client, NS);
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(e)) => Ok(Err((e.code, e.message))),
        Err(e) => Err(e.into()),
    }
}

/// Evicts, retrying while the operator's leader is not ready to decide (just started).
async fn evict_once_decided(env: &Env, pod: &str) -> Result<Evicted> {
    eventually(&format!("a decision on evicting {pod}"), WAIT, || async {
        let r = evict(env, pod).await?;
        let undecided = matches!(&r, Err((429, m)) if m.contains("not the leader"));
        Ok((!undecided).then_some(r))
    })
    .await
}

fn in_zone(zone_of: &BTreeMap<String, String>, zone: &str) -> Vec<String> {
    zone_of
        .iter()
        .filter(|(_, z)| z.as_str() == zone)
        .map(|(p, _)| p.clone())
        .collect()
}

async fn all_ready(env: &Env) -> Result<()> {
    eventually("all 6 ingesters Ready", WAIT, || async {
        let now = ingesters_in(env, NS).await?;
        Ok((now.len() == 6 && now.values().all(|(_, _, up)| *up)).then_some(()))
    })
    .await
}

/// The ingester budget allows a zone's share once the disruption webhook covers the
/// namespace, and the disruption controller has counted it; the webhook fails closed.
/// (Before 1.21 the server serves PodDisruptionBudgets as `policy/v1beta1` only.)
async fn budget_and_configuration(env: &Env) -> Result<()> {
    let version = if env.minor >= 21 { "v1" } else { "v1beta1" };
    let gvk = GroupVersionKind::gvk("policy", version, "PodDisruptionBudget");
    let pdbs: Api<DynamicObject> =
        Api::namespaced_with(env.admin.clone(), NS, &ApiResource::from_gvk(&gvk));
    let name = format!("{STACK}-ingester");
    eventually(
        "the ingester budget at 2 (a zone's share)",
        WAIT,
        || async {
            let pdb = pdbs.get(&name).await?;
            let max = pdb.data.pointer("/spec/maxUnavailable").cloned();
            let allowed = pdb.data.pointer("/status/disruptionsAllowed").cloned();
            let two = Some(serde_json::json!(2));
            Ok((max == two && allowed == two).then_some(()))
        },
    )
    .await?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.admin.clone());
    let c = configs.get(names::WEBHOOK_DISRUPTION_CONFIGURATION).await?;
    let w = c.webhooks.unwrap_or_default();
    let w = w.first().context("no webhook in the configuration")?;
    ensure!(
        w.failure_policy.as_deref() == Some("Fail"),
        "failure policy {:?}",
        w.failure_policy
    );
    let covers = serde_json::to_string(&w.namespace_selector)?.contains(NS);
    ensure!(covers, "the configuration does not cover {NS}");
    let metrics = env.operator.as_ref().context("operator")?.metrics().await?;
    for line in [
        "loki_zone_operator_webhook_configuration_applied{webhook=\"zone-disruption\"} 1",
        "loki_zone_operator_webhook_certificate_ready 1",
    ] {
        ensure!(metrics.contains(line), "/metrics lacks {line}");
    }
    Ok(())
}

/// Starts the operator and waits until the disruption webhook's configuration calls it:
/// each run of the test operator serves on a new port (in a cluster the Service stays).
async fn start_operator(env: &mut Env) -> Result<()> {
    env.start_operator().await?;
    let port = env
        .operator
        .as_ref()
        .map(|o| o.webhook_port)
        .context("operator")?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.admin.clone());
    eventually(
        "the disruption webhook pointing at the operator",
        WAIT,
        || async {
            let c = configs.get(names::WEBHOOK_DISRUPTION_CONFIGURATION).await?;
            let url = c
                .webhooks
                .unwrap_or_default()
                .first()
                .and_then(|w| w.client_config.url.clone())
                .unwrap_or_default();
            Ok(url.contains(&format!(":{port}/")).then_some(()))
        },
    )
    .await
}

/// Runs kubectl against the test cluster; its output on failure.
fn kubectl(env: &Env, args: &[&str]) -> Result<String> {
    let bin = control_plane_bin()?.join("kubectl");
    let out = Command::new(&bin)
        .arg(format!(
            "--kubeconfig={}",
            env.cp.admin_kubeconfig.display()
        ))
        .args(args)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("kubectl {} failed:\n{text}", args.join(" "));
    }
    Ok(text)
}

pub(super) async fn evictions_keep_to_one_zone_and_a_zone_drains_in_one_pass(
    env: &mut Env,
) -> Result<()> {
    let zone_of = ready_stack_in(env, NS, STACK).await?;
    let watch = PodWatch::start(env.admin.clone(), NS);
    let started = Instant::now();
    budget_and_configuration(env).await?;
    let (a, b, c) = (
        in_zone(&zone_of, "zone-a"),
        in_zone(&zone_of, "zone-b"),
        in_zone(&zone_of, "zone-c"),
    );

    // 1. A whole zone may go; an eviction in a second zone meanwhile is refused, with a
    //    429 (retry) naming the disrupted zone.
    ensure!(
        evict_once_decided(env, &a[0]).await? == Ok(()),
        "evicting {} refused",
        a[0]
    );
    match evict(env, &b[0]).await? {
        Err((429, m)) if m.contains("zone zone-a is disrupted") => {
            println!("    second zone refused: {m}")
        }
        other => bail!(
            "evicting {} in zone-b while zone-a is disrupted: {other:?}",
            b[0]
        ),
    }
    ensure!(
        evict(env, &a[1]).await? == Ok(()),
        "the rest of zone-a refused"
    );
    all_ready(env).await?;

    // 2. With the operator down, evictions of the stack's ingesters are refused.
    env.stop_operator();
    let down = evict(env, &c[0]).await?;
    start_operator(env).await?;
    match down {
        Err((code, m)) if m.contains(names::WEBHOOK_ZONE_DISRUPTIONS) => {
            println!("    operator down: refused with {code}")
        }
        other => bail!("evicting {} with the operator down: {other:?}", c[0]),
    }

    // 3. `kubectl drain` of every node of zone-b succeeds in one pass; a drain of zone-c
    //    meanwhile waits on the webhook's 429s (here until its timeout).
    let t = Instant::now();
    let out = drain(env, "zone-b", "180s").await;
    let result = match out {
        Ok(out) => drained(env, &out, &a, t).await,
        Err(e) => Err(e),
    };
    uncordon(env, "zone-b").await?;
    uncordon(env, "zone-c").await?;
    result?;
    all_ready(env).await?;
    // The webhook's pod cache may see zone-b's last ingester Ready a moment after this
    // client does; a 429 naming zone-b meanwhile is retried, as `kubectl drain` would.
    // Any other answer fails at the timeout with that answer.
    eventually(
        "zone-c evictable once zone-b is back",
        Duration::from_secs(30),
        || async {
            match evict(env, &c[0]).await? {
                Ok(()) => Ok(Some(())),
                Err((429, m)) if m.contains("zone zone-b is disrupted") => Ok(None),
                Err(other) => bail!("evicting {}: {other:?}", c[0]),
            }
        },
    )
    .await?;
    all_ready(env).await?;
    zones_in_turn(&watch.since(started), &zone_of)?;
    Ok(())
}

/// `kubectl drain` of every node of `zone`, limited to the stack's pods (the nodes are
/// shared with the other scenarios' stacks).
async fn drain(env: &Env, zone: &str, timeout: &str) -> Result<String> {
    let nodes = env.sim.nodes_in_zone(zone).await?;
    let selector = format!("--pod-selector={}={STACK}", names::LABEL_INSTANCE);
    let timeout = format!("--timeout={timeout}");
    let mut args = vec!["drain", "--ignore-daemonsets", "--delete-local-data"];
    args.extend([selector.as_str(), timeout.as_str()]);
    args.extend(nodes.iter().map(String::as_str));
    kubectl(env, &args)
}

async fn uncordon(env: &Env, zone: &str) -> Result<()> {
    let nodes = env.sim.nodes_in_zone(zone).await?;
    let mut args = vec!["uncordon"];
    args.extend(nodes.iter().map(String::as_str));
    kubectl(env, &args).map(|_| ())
}

/// After the drain of zone-b: its ingesters wait, Pending, on their volumes. A drain of
/// zone-c now waits on the webhook (kubectl retries its 429s) and never takes zone-c's
/// ingesters. An operator restarted now (its memory of what it allowed gone) still knows
/// zone-b's ingesters' zone from their volumes, and refuses an eviction in zone-a.
async fn drained(env: &mut Env, out: &str, a: &[String], t: Instant) -> Result<()> {
    let waits = out.matches("will retry after").count();
    println!(
        "    kubectl drain of zone-b in {:.1?}, {waits} eviction(s) retried",
        t.elapsed()
    );
    let now = ingesters_in(env, NS).await?;
    let pending = now.values().filter(|(_, _, up)| !*up).count();
    ensure!(pending == 2, "zone-b's ingesters not all waiting: {now:?}");
    match drain(env, "zone-c", "8s").await {
        Ok(out) => bail!("zone-c drained while zone-b is down:\n{out}"),
        Err(e) => {
            let text = format!("{e:#}");
            ensure!(
                text.contains("will retry after") && text.contains("zone zone-b is disrupted"),
                "the drain of zone-c did not wait on the webhook:\n{text}"
            );
            println!("    a drain of zone-c meanwhile waited until its timeout");
        }
    }
    env.stop_operator();
    start_operator(env).await?;
    match evict_once_decided(env, &a[0]).await? {
        Err((429, m)) if m.contains("zone zone-b is disrupted") => {
            println!("    after a restart, zone-a refused: {m}");
            Ok(())
        }
        other => bail!("evicting {} while zone-b is drained: {other:?}", a[0]),
    }
}
