//! Zone-aware disruptions (issue 15, items 3 and 4; issue 26, item 3): on a 3-zone
//! stack with 2 ingesters per zone, evictions through the Eviction API (what `kubectl
//! drain` and autoscalers use) may take a whole zone, never a second one; `kubectl
//! drain` of every node of a zone succeeds in one pass, waiting on the webhook's
//! refusals as it waits on a PodDisruptionBudget. While the operator is down nothing
//! but the ingesters is held, and a per-stack switch lets a drain through a stuck zone.
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
use loki_zone_operator_tests::harness::kubectl_bin;
use loki_zone_operator_tests::nodesim::eventually;

use super::rollout::{ingesters_in, ready_stack_in, zones_in_turn, PodWatch};
use super::{Env, WAIT};

const NS: &str = "e2e-disruptions";
const STACK: &str = "drain";

/// An eviction's outcome: allowed, or refused with the HTTP code and message.
type Evicted = std::result::Result<(), (u16, String)>;

async fn evict(env: &Env, pod: &str) -> Result<Evicted> {
    evict_in(env, NS, pod).await
}

async fn evict_in(env: &Env, ns: &str, pod: &str) -> Result<Evicted> {
    let client = client_without_retries(&env.cp.admin_kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(client, ns);
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(e)) => Ok(Err((e.code, e.message))),
        Err(e) => Err(e.into()),
    }
}

/// Evicts, retrying while the operator's leader is not ready to decide (just started).
async fn evict_once_decided(env: &Env, pod: &str) -> Result<Evicted> {
    evict_once_decided_in(env, NS, pod).await
}

fn in_zone(zone_of: &BTreeMap<String, String>, zone: &str) -> Vec<String> {
    zone_of
        .iter()
        .filter(|(_, z)| z.as_str() == zone)
        .map(|(p, _)| p.clone())
        .collect()
}

async fn all_ready(env: &Env) -> Result<()> {
    all_ready_in(env, NS).await
}

async fn all_ready_in(env: &Env, ns: &str) -> Result<()> {
    eventually("all 6 ingesters Ready", WAIT, || async {
        let now = ingesters_in(env, ns).await?;
        Ok((now.len() == 6 && now.values().all(|(_, _, up)| *up)).then_some(()))
    })
    .await
}

/// The ingester budget allows a zone's share once the disruption webhook covers the
/// namespace, and the disruption controller has counted it; the webhook, scoped to the
/// ingesters by its matchConditions, fails closed.
async fn budget_and_configuration(env: &Env) -> Result<()> {
    let gvk = GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget");
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
pub(super) fn kubectl(env: &Env, args: &[&str]) -> Result<String> {
    let bin = kubectl_bin()?;
    let out = Command::new(&bin)
        .arg(format!(
            "--kubeconfig={}",
            env.cp.admin_kubeconfig.display()
        ))
        .env("KUBECACHEDIR", env.cp.kubectl_cache_dir())
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
    //    429 (retry) naming the disrupted zone. Zone-a is cordoned first, as `kubectl
    //    drain` does: otherwise a simulated ingester (Ready the instant it is bound) can be
    //    back before the second eviction, and zone-a whole again.
    cordon(env, "zone-a").await?;
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
    uncordon(env, "zone-a").await?;
    all_ready(env).await?;

    // 2. `kubectl drain` of every node of zone-b succeeds in one pass; a drain of zone-c
    //    meanwhile waits on the webhook's 429s (here until its timeout).
    let t = Instant::now();
    let out = drain(env, "zone-b", "180s").await;
    let result = match out {
        Ok(out) => drained(env, &out, &a, t, zone_of.len()).await,
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
    let mut args = vec!["drain", "--ignore-daemonsets", "--delete-emptydir-data"];
    args.extend([selector.as_str(), timeout.as_str()]);
    args.extend(nodes.iter().map(String::as_str));
    kubectl(env, &args)
}

async fn cordon(env: &Env, zone: &str) -> Result<()> {
    cordoning(env, zone, "cordon").await
}

async fn uncordon(env: &Env, zone: &str) -> Result<()> {
    cordoning(env, zone, "uncordon").await
}

/// `kubectl cordon` or `uncordon` of every node of `zone`.
async fn cordoning(env: &Env, zone: &str, verb: &str) -> Result<()> {
    let nodes = env.sim.nodes_in_zone(zone).await?;
    let mut args = vec![verb];
    args.extend(nodes.iter().map(String::as_str));
    kubectl(env, &args).map(|_| ())
}

/// After the drain of zone-b: its ingesters wait, Pending, on their volumes. A drain of
/// zone-c now waits on the webhook (kubectl retries its 429s) and never takes zone-c's
/// ingesters. An operator restarted now (its memory of what it allowed gone) still knows
/// zone-b's ingesters' zone from their volumes, and refuses an eviction in zone-a.
async fn drained(
    env: &mut Env,
    out: &str,
    a: &[String],
    t: Instant,
    ingesters: usize,
) -> Result<()> {
    let waits = out.matches("will retry after").count();
    println!(
        "    kubectl drain of zone-b in {:.1?}, {waits} eviction(s) retried",
        t.elapsed()
    );
    // kubectl returns once the evicted pods are gone; the StatefulSet controller recreates
    // them a moment later (under load, after kubectl has returned).
    eventually(
        "zone-b's ingesters recreated and waiting",
        Duration::from_secs(30),
        || async {
            let now = ingesters_in(env, NS).await?;
            let pending = now.values().filter(|(_, _, up)| !*up).count();
            ensure!(
                now.len() == ingesters && pending == 2,
                "zone-b's ingesters not all waiting: {now:?}"
            );
            Ok(Some(()))
        },
    )
    .await?;
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

const OFF_NS: &str = "e2e-evictions-off";
const OFF_STACK: &str = "off";

/// The second stack of these scenarios, Ready with 2 ingesters per zone: created by the
/// first scenario that needs it.
async fn off_stack(env: &Env) -> Result<BTreeMap<String, String>> {
    let stacks: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        OFF_NS,
        &ApiResource::erase::<loki_zone_operator::model::api::LokiStack>(&()),
    );
    if Api::<k8s_openapi::api::core::v1::Namespace>::all(env.admin.clone())
        .get_opt(OFF_NS)
        .await?
        .is_none()
        || stacks.get_opt(OFF_STACK).await?.is_none()
    {
        return ready_stack_in(env, OFF_NS, OFF_STACK).await;
    }
    all_ready_in(env, OFF_NS).await?;
    let now = ingesters_in(env, OFF_NS).await?;
    Ok(now.into_iter().map(|(n, (_, z, _))| (n, z)).collect())
}

/// Issue 26 (c): with no replica of the operator answering, the webhook blocks nothing
/// but what it guards. A querier in the stack's namespace is evicted; an ingester is
/// refused (the configuration's matchConditions call the webhook for the ingesters of
/// zone-aware stacks only, and it fails closed).
pub(super) async fn with_the_operator_stopped_only_ingesters_are_guarded(
    env: &mut Env,
) -> Result<()> {
    let zone_of = off_stack(env).await?;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), OFF_NS);
    let selector = format!("{}=querier", names::LABEL_COMPONENT);
    let querier = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .context("no querier")?;
    let ingester = in_zone(&zone_of, "zone-a")[0].clone();
    env.stop_operator();
    let result = async {
        let q = evict_in(env, OFF_NS, &querier).await?;
        ensure!(
            q == Ok(()),
            "evicting querier {querier} with the operator stopped: {q:?}"
        );
        let i = evict_in(env, OFF_NS, &ingester).await?;
        match i {
            Err((_, m)) if m.contains(names::WEBHOOK_ZONE_DISRUPTIONS) => {
                println!("    operator stopped: querier evicted, ingester refused ({m})")
            }
            other => bail!("evicting ingester {ingester} with the operator stopped: {other:?}"),
        }
        anyhow::Ok(())
    }
    .await;
    start_operator(env).await?;
    result?;
    all_ready_in(env, OFF_NS).await
}

/// Issue 26 (d): an ingester that cannot come back in zone-c (its zone cordoned, its
/// replacement Pending on its volume) holds every other zone's ingesters. Annotating the
/// stack `zone-aware-evictions=false` lets one go at once, without a restart; removing
/// the annotation puts the guard back.
pub(super) async fn the_per_stack_switch_lets_a_zone_go_while_another_is_down(
    env: &mut Env,
) -> Result<()> {
    let zone_of = off_stack(env).await?;
    let (a, b, c) = (
        in_zone(&zone_of, "zone-a"),
        in_zone(&zone_of, "zone-b"),
        in_zone(&zone_of, "zone-c"),
    );
    let zone_c = env.sim.nodes_in_zone("zone-c").await?;
    let mut args = vec!["cordon"];
    args.extend(zone_c.iter().map(String::as_str));
    kubectl(env, &args)?;
    let result = stuck_zone_then_switch(env, &a, &b, &c).await;
    switch(env, None).await?;
    uncordon(env, "zone-c").await?;
    result?;
    all_ready_in(env, OFF_NS).await
}

async fn stuck_zone_then_switch(env: &Env, a: &[String], b: &[String], c: &[String]) -> Result<()> {
    let r = evict_once_decided_in(env, OFF_NS, &c[0]).await?;
    ensure!(r == Ok(()), "evicting {} in zone-c: {r:?}", c[0]);
    eventually("zone-c's evicted ingester Pending", WAIT, || async {
        let now = ingesters_in(env, OFF_NS).await?;
        Ok(now.get(&c[0]).is_some_and(|(_, _, up)| !*up).then_some(()))
    })
    .await?;
    let second_zone = |m: &str| m.contains("zone zone-c is disrupted");
    match evict_in(env, OFF_NS, &a[0]).await? {
        Err((429, m)) if second_zone(&m) => println!("    zone-c stuck, zone-a refused: {m}"),
        other => bail!("evicting {} while zone-c is down: {other:?}", a[0]),
    }
    switch(env, Some("false")).await?;
    let t = Instant::now();
    eventually("zone-a evictable with the switch off", WAIT, || async {
        match evict_in(env, OFF_NS, &a[0]).await? {
            Ok(()) => Ok(Some(())),
            Err((429, m)) if second_zone(&m) => Ok(None),
            Err(other) => bail!("evicting {} with the switch off: {other:?}", a[0]),
        }
    })
    .await?;
    println!(
        "    switched off: {} evicted {:.1?} after the annotation",
        a[0],
        t.elapsed()
    );
    let status =
        Api::<loki_zone_operator::model::api::LokiStack>::namespaced(env.admin.clone(), OFF_NS);
    eventually(
        "the stack warning that zone-aware evictions are off",
        WAIT,
        || async {
            let s = status.get(OFF_STACK).await?;
            let w = s
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Warning");
            Ok(
                w.filter(|w| w.message.contains(names::ANNOTATION_ZONE_AWARE_EVICTIONS))
                    .map(|_| ()),
            )
        },
    )
    .await?;
    switch(env, None).await?;
    // The budget may refuse while zone-a's ingester restarts; the webhook's own refusal
    // names zone-c.
    eventually(
        "the guard back once the switch is removed",
        WAIT,
        || async {
            match evict_in(env, OFF_NS, &b[0]).await? {
                Err((429, m)) if second_zone(&m) => Ok(Some(())),
                Err((429, _)) => Ok(None),
                other => bail!("evicting {} with the switch removed: {other:?}", b[0]),
            }
        },
    )
    .await
}

async fn evict_once_decided_in(env: &Env, ns: &str, pod: &str) -> Result<Evicted> {
    eventually(&format!("a decision on evicting {pod}"), WAIT, || async {
        let r = evict_in(env, ns, pod).await?;
        let undecided = matches!(&r, Err((429, m)) if m.contains("not the leader"));
        Ok((!undecided).then_some(r))
    })
    .await
}

/// Sets (or with `None` removes) the per-stack switch on the second stack.
async fn switch(env: &Env, value: Option<&str>) -> Result<()> {
    let stacks: Api<loki_zone_operator::model::api::LokiStack> =
        Api::namespaced(env.admin.clone(), OFF_NS);
    let patch = serde_json::json!({"metadata": {"annotations": {names::ANNOTATION_ZONE_AWARE_EVICTIONS: value}}});
    stacks
        .patch(
            OFF_STACK,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Issue 26 (c), the reason the configuration picks ingesters by `matchConditions` (on
/// the request's pod name) and not by `objectSelector`: an `objectSelector` is matched
/// against the Eviction, not the evicted pod, so it cannot pick ingesters. A
/// configuration selecting a pod's label, pointing at nothing and
/// failing closed, lets that pod's eviction through; with an empty selector (matching
/// every Eviction) the same configuration refuses.
pub(super) async fn an_object_selector_cannot_pick_the_evicted_pod(env: &mut Env) -> Result<()> {
    let ns = "e2e-objectselector";
    super::namespace(env, ns).await?;
    // The probe's configurations reach this namespace only (by a label of our own).
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.admin.clone())
        .patch(
            ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"labels": {"e2e-probe": "yes"}}}),
            ),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    for name in ["selected", "control"] {
        let pod = serde_json::json!({
            "metadata": {"name": name, "labels": {"e2e-probe": name}},
            "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "busybox"}]},
        });
        pods.create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(pod)?,
        )
        .await?;
    }
    let selected = probe_eviction(
        env,
        ns,
        "selected",
        serde_json::json!({"matchLabels": {"e2e-probe": "selected"}}),
    )
    .await?;
    ensure!(
        selected == Ok(()),
        "an objectSelector on the pod's label picked its eviction: {selected:?}"
    );
    let control = probe_eviction(env, ns, "control", serde_json::json!({})).await?;
    ensure!(
        matches!(&control, Err((_, m)) if m.contains("failed calling webhook")),
        "the control configuration was not called: {control:?}"
    );
    println!("    1.{}: an objectSelector on the pod's labels let its eviction through; an empty one reached the (absent) webhook", env.minor);
    Ok(())
}

/// Evicts `pod` while a fail-closed configuration with `selector`, pointing at a closed
/// port, is in place; removes the configuration again.
async fn probe_eviction(
    env: &Env,
    ns: &str,
    pod: &str,
    selector: serde_json::Value,
) -> Result<Evicted> {
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.admin.clone());
    let name = format!("e2e-probe-{pod}");
    let config = serde_json::json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "probe.e2e.loki-zone-operator.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 2,
            "clientConfig": {"url": "https://127.0.0.1:1/probe"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/eviction"]}],
            "namespaceSelector": {"matchLabels": {"e2e-probe": "yes"}},
            "objectSelector": selector,
        }],
    });
    configs
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(config)?,
        )
        .await?;
    // The API server picks a new configuration up from its informer.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let result = evict_in(env, ns, pod).await;
    configs
        .delete(&name, &kube::api::DeleteParams::default())
        .await?;
    result
}
