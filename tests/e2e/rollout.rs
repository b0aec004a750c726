//! Zone-by-zone rollouts: a change to the ingesters of a 3-zone stack with 2 ingesters
//! per zone restarts every zone as a whole, one zone at a time, the next only after the
//! previous is Ready; while a zone is unavailable the rollout pauses, and it resumes
//! once the zone is back.
//!
//! A watch on the ingester pods records when each goes down (Terminating, deleted, not
//! Ready) and comes back (Ready). From that timeline the scenario checks that no two
//! zones ever have an ingester down at once, and in which order the zones restarted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use loki_zone_operator::checks::taint_evictions::RETURN_SETTLE;
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator_tests::harness::UNREACHABLE_TOLERATION;
use loki_zone_operator_tests::nodesim::eventually;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::{create_stack, namespace, stack_json, wait_condition, Env, WAIT, ZONE, ZONES};

const NS: &str = "e2e-rollout";
const STACK: &str = "rollout";
const INGESTER_SELECTOR: &str = "app.kubernetes.io/component=ingester";

/// One observation of an ingester pod.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    at: Instant,
    pod: String,
    up: bool,
    /// Marked for deletion by Kubernetes' taint-eviction controller (a `DisruptionTarget`
    /// condition, reason `DeletionByTaintManager`), not by the operator.
    evicted_by_kubernetes: bool,
}

/// Whether Kubernetes' taint-eviction controller marked the pod for deletion. It deletes
/// by name: a zone that returns within the toleration of its pods' evictions can see a
/// StatefulSet pod recreated under that name deleted once more (the work item of the
/// pod before it, keyed by name, fires on the new one), whatever the operator does.
fn evicted_by_kubernetes(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("DeletionByTaintManager")
            })
        })
}

/// Records every change of the stack's ingester pods, in the API server's order.
pub(super) struct PodWatch {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

fn is_up(p: &Pod) -> bool {
    let st = p.status.as_ref();
    p.metadata.deletion_timestamp.is_none()
        && st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl PodWatch {
    pub(super) fn start(client: Client, ns: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = seen.clone();
        let api: Api<Pod> = Api::namespaced(client, ns);
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default().labels(INGESTER_SELECTOR))
                .default_backoff();
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let (pod, deleted) = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                let s = Seen {
                    at: Instant::now(),
                    pod: pod.name_any(),
                    up: !deleted && is_up(&pod),
                    evicted_by_kubernetes: evicted_by_kubernetes(&pod),
                };
                out.lock().unwrap_or_else(|e| e.into_inner()).push(s);
            }
        });
        PodWatch { seen, task }
    }

    pub(super) fn since(&self, from: Instant) -> Vec<Seen> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter().filter(|s| s.at >= from).cloned().collect()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Walks the timeline: at no point may ingesters of two zones be down by the operator's
/// doing (a pod Kubernetes' taint-eviction controller deletes is named, not counted:
/// nothing the operator does prevents it). Returns the zones in the order their first
/// ingester went down, and how long each zone had one down.
pub(super) fn zones_in_turn(
    seen: &[Seen],
    zone_of: &BTreeMap<String, String>,
) -> Result<(Vec<String>, BTreeMap<String, Duration>)> {
    let mut down: BTreeMap<String, Instant> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut spans: BTreeMap<String, Duration> = BTreeMap::new();
    for s in seen {
        let zone = zone_of
            .get(&s.pod)
            .with_context(|| format!("pod {} of no known zone", s.pod))?;
        if s.up {
            if let Some(since) = down.remove(&s.pod) {
                *spans.entry(zone.clone()).or_default() += s.at - since;
            }
        } else if s.evicted_by_kubernetes && !down.contains_key(&s.pod) {
            // Down by Kubernetes' doing, not the rollout's: see `evicted_by_kubernetes`.
            println!(
                "    {} ({zone}) deleted by Kubernetes' taint-eviction controller, not the operator",
                s.pod
            );
        } else {
            down.entry(s.pod.clone()).or_insert(s.at);
            if !order.contains(zone) {
                order.push(zone.clone());
            }
        }
        let zones: BTreeSet<&String> = down.keys().filter_map(|p| zone_of.get(p)).collect();
        if zones.len() > 1 {
            bail!(
                "ingesters of {zones:?} down at once after {} changed: down {:?}",
                s.pod,
                down.keys().collect::<Vec<_>>()
            );
        }
    }
    Ok((order, spans))
}

/// The deletes and bindings of the pods of `ns`, from the control plane's audit log, one
/// line each (time, verb, pod, user agent's last part, code), to explain a failed
/// timeline: a pod that Kubernetes' own controllers deleted names them
/// (`.../node-controller`), one the operator deleted its ServiceAccount.
pub(super) fn pod_history(env: &Env, ns: &str) -> String {
    let text = std::fs::read_to_string(env.cp.dir.join("audit.log")).unwrap_or_default();
    let mut lines = vec![format!("deletes and bindings of the pods of {ns}:")];
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let o = &ev["objectRef"];
        let verb = ev["verb"].as_str().unwrap_or_default();
        if o["namespace"] != ns || o["resource"] != "pods" || !matches!(verb, "delete" | "create") {
            continue;
        }
        let agent = ev["userAgent"].as_str().unwrap_or_default();
        let who = if ev["user"]["username"] == super::operator::service_account_user().as_str() {
            "operator"
        } else {
            agent.rsplit('/').next().unwrap_or(agent)
        };
        lines.push(format!(
            "  {} {verb} {}{} by {who}: {}",
            ev["stageTimestamp"].as_str().unwrap_or_default(),
            o["name"].as_str().unwrap_or_default(),
            o["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            ev["responseStatus"]["code"]
        ));
    }
    lines.join("\n")
}

/// The ingesters now: name → (uid, zone, Ready).
async fn ingesters(env: &Env) -> Result<BTreeMap<String, (String, String, bool)>> {
    ingesters_in(env, NS).await
}

/// The ingesters of namespace `ns` now: name → (uid, zone as Loki reads it, Ready).
pub(super) async fn ingesters_in(
    env: &Env,
    ns: &str,
) -> Result<BTreeMap<String, (String, String, bool)>> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(INGESTER_SELECTOR))
        .await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let zone = super::zone_as_read(p).unwrap_or_default();
            (p.name_any(), (p.uid().unwrap_or_default(), zone, is_up(p)))
        })
        .collect())
}

/// Sets the ingesters' tolerations (a pod template change that restarts only them).
async fn change_ingesters(env: &Env, key: &str) -> Result<()> {
    let toleration = json!([{"key": key, "operator": "Exists", "effect": "NoSchedule"}]);
    Api::<LokiStack>::namespaced(env.admin.clone(), NS)
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"template": {"ingester": {"tolerations": toleration}}}}),
            ),
        )
        .await?;
    Ok(())
}

fn raw_rollout(s: &LokiStack) -> Value {
    s.status
        .as_ref()
        .and_then(|st| st.rollout.as_ref())
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .unwrap_or(Value::Null)
}

/// Waits until every ingester was replaced since `before` and is Ready, and the stack
/// shows no rollout any more.
async fn rollout_done(env: &Env, before: &BTreeMap<String, (String, String, bool)>) -> Result<()> {
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), NS);
    eventually(
        "every ingester replaced, Ready, and the rollout over",
        WAIT,
        || async {
            let now = ingesters(env).await?;
            let replaced = now.len() == before.len()
                && now
                    .iter()
                    .all(|(n, (uid, _, up))| *up && before.get(n).is_some_and(|b| b.0 != *uid));
            let s = stacks.get(STACK).await?;
            Ok((replaced && raw_rollout(&s).is_null()).then_some(()))
        },
    )
    .await
}

/// The rollout Events of the stack: reason → messages.
async fn rollout_events(env: &Env) -> Result<BTreeMap<String, Vec<String>>> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), NS);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events.list(&ListParams::default()).await?.items {
        let reason = e.reason.unwrap_or_default();
        if e.involved_object.name.as_deref() == Some(STACK) && reason.starts_with("Rollout") {
            out.entry(reason)
                .or_default()
                .push(e.message.unwrap_or_default());
        }
    }
    Ok(out)
}

async fn ready_stack(env: &Env) -> Result<BTreeMap<String, String>> {
    ready_stack_in(env, NS, STACK).await
}

/// A 1x.demo stack with replication factor 3 over the three zones and two ingesters per
/// zone, Ready: its ingesters' zones by pod name.
pub(super) async fn ready_stack_in(
    env: &Env,
    ns: &str,
    stack: &str,
) -> Result<BTreeMap<String, String>> {
    namespace(env, ns).await?;
    let mut body = stack_json(
        stack,
        "1x.demo",
        json!({"factor": 3, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]}),
    );
    body["spec"]["template"] = json!({"ingester": {"replicas": 6}});
    create_stack(env, ns, body).await?;
    wait_condition(env, ns, stack, "Ready", Some("ReadyComponents")).await?;
    let sets: Api<StatefulSet> = Api::namespaced(env.admin.clone(), ns);
    let ingester = sets.get(&format!("{stack}-ingester")).await?;
    let strategy = ingester
        .spec
        .and_then(|s| s.update_strategy)
        .and_then(|u| u.type_);
    ensure!(
        strategy.as_deref() == Some("OnDelete"),
        "ingester strategy {strategy:?}"
    );
    let pods = ingesters_in(env, ns).await?;
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, zone, _) in pods.values() {
        *per_zone.entry(zone.as_str()).or_default() += 1;
    }
    ensure!(
        per_zone == ZONES.iter().map(|z| (*z, 2)).collect(),
        "2 ingesters per zone expected: {per_zone:?}"
    );
    Ok(pods.into_iter().map(|(n, (_, z, _))| (n, z)).collect())
}

/// Issue 15: a 3-zone stack with 2 ingesters per zone rolls zone by zone, and pauses
/// while a zone is unavailable.
pub(super) async fn ingester_rollout_goes_zone_by_zone_and_pauses_for_a_lost_zone(
    env: &mut Env,
) -> Result<()> {
    let zone_of = ready_stack(env).await?;
    let watch = PodWatch::start(env.admin.clone(), NS);
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. A change rolls zone-a, then zone-b, then zone-c, each as a whole.
    let before = ingesters(env).await?;
    let started = Instant::now();
    change_ingesters(env, "e2e.example.com/first").await?;
    rollout_done(env, &before).await?;
    let (order, spans) =
        zones_in_turn(&watch.since(started), &zone_of).with_context(|| pod_history(env, NS))?;
    ensure!(order == ZONES, "zones restarted in the order {order:?}");
    println!(
        "    rollout of 6 ingesters over 3 zones in {:?}; zone down for {spans:?}",
        started.elapsed()
    );
    let events = rollout_events(env).await?;
    let started_notes = events
        .get("RolloutZoneStarted")
        .cloned()
        .unwrap_or_default();
    for z in ZONES {
        ensure!(
            started_notes
                .iter()
                .any(|n| n.starts_with(&format!("zone {z}:"))),
            "no RolloutZoneStarted Event for {z}: {events:?}"
        );
    }
    ensure!(
        events.contains_key("RolloutCompleted"),
        "no RolloutCompleted Event: {events:?}"
    );

    paused_while_a_zone_is_lost(env, &watch, &zone_of).await
}

/// Scenario 2: zone-a, the first in order, goes dark right after a second change: its ingesters
/// are deleted but no kubelet confirms, then the zone turns unavailable. Zones b and c
/// are left alone for as long as it lasts; once zone-a is back the rollout goes on.
async fn paused_while_a_zone_is_lost(
    env: &mut Env,
    watch: &PodWatch,
    zone_of: &BTreeMap<String, String>,
) -> Result<()> {
    let before = ingesters(env).await?;
    let started = Instant::now();
    let dark = env.sim.zone_down("zone-a").await?;
    change_ingesters(env, "e2e.example.com/second").await?;
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), NS);
    let paused = async {
        let status = eventually(
            "the rollout waiting for zone-a, unavailable",
            WAIT,
            || async {
                let s = stacks.get(STACK).await?;
                let r = raw_rollout(&s);
                let waiting = r["waitingFor"].as_str().unwrap_or_default();
                Ok(waiting.contains("zone zone-a unavailable").then_some(r))
            },
        )
        .await?;
        // The rollout had started on zone-a, whose deleted pods no kubelet confirms.
        ensure!(status["zone"] == "zone-a", "rollout status {status}");
        // The pause holds: nothing of zones b and c goes down meanwhile.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = ingesters(env).await?;
        for (name, (uid, zone, up)) in &now {
            if zone != "zone-a" {
                let kept = before.get(name).is_some_and(|b| b.0 == *uid) && *up;
                ensure!(
                    kept,
                    "{name} in {zone} restarted while zone-a was unavailable"
                );
            }
        }
        println!("    paused: {}", status["waitingFor"]);
        anyhow::Ok(())
    }
    .await;
    let back = Instant::now();
    env.sim.zone_up("zone-a").await?;
    paused?;
    ensure!(!dark.is_empty(), "zone-a has no nodes");
    rollout_done(env, &before).await?;
    let seen = watch.since(started);
    let (order, _) = zones_in_turn(&seen, zone_of).with_context(|| pod_history(env, NS))?;
    ensure!(order == ZONES, "zones restarted in the order {order:?}");
    let next = first_down_in(&seen, zone_of, "zone-b").context("zone-b never restarted")?;
    let waited = next.saturating_duration_since(back);
    ensure!(
        waited >= settle_after_return(),
        "zone-b restarted {waited:?} after zone-a returned: an eviction Kubernetes scheduled \
         while zone-a was lost could still fire on its new pods"
    );
    println!(
        "    resumed after zone-a returned: zone-b restarted {waited:?} after it \
         (its pods' toleration + the settle: {:?}); whole rollout {:?}",
        settle_after_return(),
        started.elapsed()
    );
    Ok(())
}

/// How long after a zone returns the operator counts its pods as ones Kubernetes may
/// still evict: the pods' toleration of the loss taints, then the settle
/// (`checks/taint_evictions.rs`). Less a second: the operator reads the node's Ready
/// time in whole seconds.
fn settle_after_return() -> Duration {
    let settle = Duration::try_from(RETURN_SETTLE).unwrap_or_default();
    (UNREACHABLE_TOLERATION + settle).saturating_sub(Duration::from_secs(1))
}

/// When the first ingester of `zone` went down in `seen`.
fn first_down_in(seen: &[Seen], zone_of: &BTreeMap<String, String>, zone: &str) -> Option<Instant> {
    seen.iter()
        .find(|s| !s.up && zone_of.get(&s.pod).is_some_and(|z| z == zone))
        .map(|s| s.at)
}
