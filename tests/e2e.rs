//! End-to-end scenarios against a real control plane (kube-apiserver, kube-scheduler,
//! kube-controller-manager on loopback: 1.35.4, or the oldest supported 1.31.0 for the
//! [`SMOKE`] scenarios with `LZO_KUBE=oldest`), simulated nodes in three zones, and the
//! operator running as its own process under the ServiceAccount and RBAC of `manifests/`.
//!
//! Run: `make e2e` (or `cargo test -p loki-zone-operator-tests --test e2e -- [filter]`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, PodTemplateSpec, Secret, Service,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::admission;
use loki_zone_operator_tests::harness::{ControlPlane, Kube};
use loki_zone_operator_tests::nodesim::{eventually, NodeSim, Running, ZONE};
use loki_zone_operator_tests::operator::{self, Operator};
use loki_zone_operator_tests::{client_for, namespace_with_storage_secret, repo_root};
use serde_json::{json, Value};

#[path = "e2e/caches.rs"]
mod caches;
use caches::each_kind_is_watched_once_per_process;

#[path = "e2e/disruptions.rs"]
mod disruptions;
use disruptions::{
    an_object_selector_cannot_pick_the_evicted_pod,
    evictions_keep_to_one_zone_and_a_zone_drains_in_one_pass,
    the_per_stack_switch_lets_a_zone_go_while_another_is_down,
    with_the_operator_stopped_only_ingesters_are_guarded,
};
#[path = "e2e/failover.rs"]
mod failover;
use failover::{
    a_paused_control_plane_takes_no_zone_out, a_silent_zone_leaves_its_services_until_it_renews,
};
#[path = "e2e/migrate.rs"]
mod migrate;
use migrate::a_stack_left_by_the_go_operator_is_taken_over;
#[path = "e2e/namespaced.rs"]
mod namespaced;
use namespaced::namespaced_mode_runs_only_the_watched_namespaces;
#[path = "e2e/outage.rs"]
mod outage;
use outage::{
    a_cordoned_zone_is_never_recovered, a_lost_zones_nodes_deleted_while_volumes_are_pinned_there,
    compactor_is_moved_out_of_a_lost_zone_when_opted_in, one_zone_down_keeps_the_stack_ready,
    runbook_commands_move_the_compactor_out_of_a_lost_zone, two_zones_down_lose_write_quorum,
    zone_goes_dark_the_way_nodes_fail, zones_come_back_and_tolerance_is_restored,
};
#[path = "e2e/render_secret.rs"]
mod render_secret;
use render_secret::render_with_the_secret_is_what_the_operator_applies;
#[path = "e2e/restart.rs"]
mod restart;
#[path = "e2e/rules.rs"]
mod rules;
use rules::{
    network_policies_are_applied_and_removed, rule_objects_never_hold_back_the_workloads,
    rules_are_loaded_per_tenant_reported_and_removed,
};
#[path = "e2e/stalled_leader.rs"]
mod stalled_leader;
use stalled_leader::a_stalled_leader_stops_before_a_standby_takes_over;

#[path = "e2e/rollout.rs"]
mod rollout;
use restart::api_server_restarts_never_stop_the_operator;
use rollout::ingester_rollout_goes_zone_by_zone_and_pauses_for_a_lost_zone;

#[path = "e2e/scale_down.rs"]
mod scale_down;
use scale_down::ingesters_removed_by_a_scale_down_leave_the_ring_first;
#[path = "e2e/webhook.rs"]
mod webhook;
use webhook::{
    a_broken_webhook_never_blocks_scheduling,
    a_namespace_without_zone_aware_stacks_never_reaches_the_webhook,
    pods_are_zoned_in_the_event_that_binds_them,
    pods_read_the_zone_label_kubernetes_copies_at_binding,
};

#[path = "e2e/pod_security.rs"]
mod pod_security;
use pod_security::pods_start_under_the_restricted_pod_security_standard;

#[path = "e2e/upgrade.rs"]
mod upgrade;
use upgrade::an_upgrade_restarts_only_what_the_new_release_renders_differently;

#[path = "e2e/zone_switch.rs"]
mod zone_switch;
use zone_switch::zones_turn_on_write_path_first_and_off_read_path_first;

const WAIT: Duration = Duration::from_secs(120);
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

struct Env {
    admin: Client,
    sim: NodeSim,
    /// The simulator's loops; dropped before `cp`, so they end before the control plane.
    _sim_loops: Running,
    cp: ControlPlane,
    operator_kubeconfig: std::path::PathBuf,
    operator: Option<Operator>,
    /// Kubernetes minor version of the control plane.
    minor: u32,
}

impl Env {
    async fn start_operator(&mut self) -> Result<()> {
        // A short resync makes the idle scenario see several resyncs in a few seconds.
        self.start_operator_with(&["--resync", "2s"]).await
    }

    async fn start_operator_with(&mut self, args: &[&str]) -> Result<()> {
        let mut op = Operator::start(&self.operator_kubeconfig, &self.cp.dir, args)?;
        op.wait_ready(Duration::from_secs(60)).await?;
        self.operator = Some(op);
        Ok(())
    }

    fn stop_operator(&mut self) {
        if let Some(mut op) = self.operator.take() {
            op.stop();
        }
    }

    fn operator_log(&self) -> String {
        std::fs::read_to_string(self.cp.dir.join("operator.log")).unwrap_or_default()
    }
}

async fn setup() -> Result<Env> {
    let dir = repo_root().join(".e2e/suite");
    let cp = ControlPlane::start(&dir)?;
    let admin = client_for(&cp.admin_kubeconfig).await?;
    let version = admin.apiserver_version().await?;
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    // The CRD, RBAC and operator Deployment exactly as `make deploy` applies them.
    operator::deploy(&cp.admin_kubeconfig)?;
    wait_crd_established(&admin).await?;
    let sim = NodeSim::new(admin.clone());
    sim.install_storage_class().await?;
    sim.create_zones(&ZONES, 2).await?;
    let sim_loops = sim.run();
    let operator_kubeconfig = operator::service_account_kubeconfig(&admin, &cp).await?;
    let mut env = Env {
        admin,
        sim,
        _sim_loops: sim_loops,
        cp,
        operator_kubeconfig,
        operator: None,
        minor,
    };
    env.start_operator().await?;
    Ok(env)
}

async fn wait_crd_established(client: &Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually("CRD established", WAIT, || async {
        let crd = api.get("lokistacks.loki.grafana.com").await?;
        let ok = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        Ok(ok.then_some(()))
    })
    .await
}

async fn namespace(env: &Env, name: &str) -> Result<()> {
    namespace_with_storage_secret(&env.admin, name).await
}

fn stack_json(name: &str, size: &str, replication: Value) -> Value {
    let mut spec = json!({"size": size, "storage": {"secret": {"name": "loki-s3", "type": "s3"}}});
    if !replication.is_null() {
        spec["replication"] = replication;
    }
    json!({"apiVersion": "loki.grafana.com/v1", "kind": "LokiStack", "metadata": {"name": name}, "spec": spec})
}

/// `body` (a stack) with its pods zoned by the operator (the zone-at-bind webhook, the
/// annotator) where Kubernetes would copy the zone label itself: for the scenarios that
/// prove that path on the current server.
fn zoned_by_the_operator(mut body: Value) -> Value {
    body["metadata"]["annotations"][names::ANNOTATION_ZONE_FROM_POD_LABEL] = json!("false");
    body
}

/// The zone the pod's Loki reads: its label or its annotation, as it was rendered.
fn zone_as_read(p: &Pod) -> Option<String> {
    loki_zone_operator::checks::podzone::zone_as_read(p).map(str::to_string)
}

async fn create_stack(env: &Env, ns: &str, body: Value) -> Result<LokiStack> {
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    Ok(api
        .create(&PostParams::default(), &serde_json::from_value(body)?)
        .await?)
}

async fn get_stack(env: &Env, ns: &str, name: &str) -> Result<LokiStack> {
    Ok(Api::<LokiStack>::namespaced(env.admin.clone(), ns)
        .get(name)
        .await?)
}

fn condition<'a>(
    s: &'a LokiStack,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.status.as_ref()?.conditions.iter().find(|c| c.type_ == t)
}

/// Waits for condition `t` to be True with `reason` (any reason when `None`).
async fn wait_condition(
    env: &Env,
    ns: &str,
    name: &str,
    t: &str,
    reason: Option<&str>,
) -> Result<LokiStack> {
    eventually(&format!("{ns}/{name} {t}={reason:?}"), WAIT, || async {
        let s = get_stack(env, ns, name).await?;
        let ok = condition(&s, t)
            .is_some_and(|c| c.status == "True" && reason.is_none_or(|r| c.reason == r));
        Ok(ok.then_some(s))
    })
    .await
    .map_err(|e| {
        anyhow!(
            "{e:#}\nlast operator log lines:\n{}",
            tail(&env.operator_log(), 25)
        )
    })
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Every pod template of the stack's workloads: (workload name, template).
async fn workloads(env: &Env, ns: &str) -> Result<Vec<(String, PodTemplateSpec, Option<i64>)>> {
    let mut out = Vec::new();
    for d in Api::<Deployment>::namespaced(env.admin.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        let g = d.metadata.generation;
        out.push((d.name_any(), d.spec.context("spec")?.template, g));
    }
    for s in Api::<StatefulSet>::namespaced(env.admin.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        let g = s.metadata.generation;
        out.push((s.name_any(), s.spec.context("spec")?.template, g));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

async fn nodes_by_name(env: &Env) -> Result<BTreeMap<String, Node>> {
    Ok(Api::<Node>::all(env.admin.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect())
}

// ---------------------------------------------------------------------------------------

/// Scenario 1: The CRD from manifests/ installs; a 1x.demo stack without zones becomes Ready.
async fn demo_stack_without_zones_becomes_ready(env: &mut Env) -> Result<()> {
    let ns = "e2e-demo";
    namespace(env, ns).await?;
    create_stack(env, ns, stack_json("demo", "1x.demo", Value::Null)).await?;
    let s = wait_condition(env, ns, "demo", "Ready", Some("ReadyComponents")).await?;
    ensure!(condition(&s, "Degraded").map(|c| c.status.as_str()) == Some("False"));
    let wl = workloads(env, ns).await?;
    ensure!(wl.len() == 6, "six workloads, got {}", wl.len());
    for (name, t, _) in &wl {
        ensure!(
            t.spec
                .as_ref()
                .and_then(|s| s.topology_spread_constraints.as_ref())
                .is_none(),
            "{name} has spread constraints without zones"
        );
    }
    // `kubectl get pods` counts ready containers from the container statuses the
    // kubelet (here the node simulator) reports: every pod shows all of its ready.
    let table = disruptions::kubectl(env, &["get", "pods", "-n", ns, "--no-headers"])?;
    let columns: Vec<(&str, &str)> = table
        .lines()
        .filter_map(|l| {
            let mut c = l.split_whitespace();
            Some((c.next()?, c.next()?))
        })
        .collect();
    ensure!(
        columns.len() >= 6 && columns.iter().all(|(_, ready)| *ready == "1/1"),
        "kubectl get pods READY column: {columns:?}"
    );
    Ok(())
}

/// Scenario 2: A zone-aware 1x.small stack (RF 2) over 3 zones x 2 nodes.
async fn zone_aware_small_stack_spreads_over_three_zones(env: &mut Env) -> Result<()> {
    let ns = "e2e-zones";
    namespace(env, ns).await?;
    create_stack(
        env,
        ns,
        stack_json(
            "zones",
            "1x.small",
            json!({"factor": 2, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]}),
        ),
    )
    .await?;
    let s = wait_condition(env, ns, "zones", "Ready", Some("ReadyComponents")).await?;
    let w = condition(&s, "Warning").context("Warning condition")?;
    ensure!(
        w.status == "True" && w.reason == "NoZoneFailureTolerance",
        "warning: {w:?}"
    );
    let r = s
        .status
        .as_ref()
        .and_then(|st| st.replication.clone())
        .context("status.replication")?;
    ensure!(
        r.zones == ZONES.iter().map(|z| z.to_string()).collect::<Vec<_>>(),
        "zones {:?}",
        r.zones
    );
    ensure!(
        (r.factor, r.write_quorum, r.zone_failures_tolerated) == (2, 2, Some(0)),
        "replication {r:?}"
    );

    for (name, t, _) in workloads(env, ns).await? {
        let spec = t.spec.context("pod spec")?;
        let tsc = spec
            .topology_spread_constraints
            .context(format!("{name}: no spread constraints"))?;
        // The zones are hard; the nodes within a zone soft, so the small cluster (two
        // nodes per zone) still schedules every pod below.
        ensure!(
            tsc.len() == 2
                && tsc[0].topology_key == ZONE
                && tsc[0].when_unsatisfiable == "DoNotSchedule"
                && tsc[1].topology_key == "kubernetes.io/hostname"
                && tsc[1].when_unsatisfiable == "ScheduleAnyway",
            "{name}: {tsc:?}"
        );
        ensure!(
            spec.init_containers
                .is_some_and(|ic| ic.iter().any(|c| c.name == "az-annotation-check")),
            "{name}: no init container"
        );
    }
    // The entry Services ask kube-proxy for endpoints in the client's zone, by the name
    // the server takes without a warning (PreferSameZone from 1.34): the server kept the
    // field, so it knows it.
    let want = if env.minor >= 34 {
        "PreferSameZone"
    } else {
        "PreferClose"
    };
    for svc in ["zones-distributor-http", "zones-query-frontend-http"] {
        let s = Api::<Service>::namespaced(env.admin.clone(), ns)
            .get(svc)
            .await?;
        let asked = s.spec.and_then(|s| s.traffic_distribution);
        ensure!(
            asked.as_deref() == Some(want),
            "{svc}: trafficDistribution {asked:?} on 1.{}, want {want}",
            env.minor
        );
    }
    let nodes = nodes_by_name(env).await?;
    let pods = Api::<Pod>::namespaced(env.admin.clone(), ns)
        .list(&ListParams::default())
        .await?;
    ensure!(
        pods.items.len() == 12,
        "12 pods expected, got {}",
        pods.items.len()
    );
    let mut per_component: BTreeMap<String, BTreeMap<String, i32>> = BTreeMap::new();
    for p in &pods.items {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .context("unscheduled pod")?;
        let node_zone = nodes[&node].labels()[ZONE].clone();
        let annotated = zone_as_read(p);
        ensure!(
            annotated.as_deref() == Some(node_zone.as_str()),
            "{}: zone {annotated:?} but node {node} is in {node_zone}",
            p.name_any()
        );
        let component = p.labels()["app.kubernetes.io/component"].clone();
        *per_component
            .entry(component)
            .or_default()
            .entry(node_zone)
            .or_default() += 1;
    }
    for (component, counts) in per_component {
        let counts: Vec<i32> = ZONES
            .iter()
            .map(|z| counts.get(*z).copied().unwrap_or(0))
            .collect();
        let (max, min) = (
            counts.iter().max().copied().unwrap_or(0),
            counts.iter().min().copied().unwrap_or(0),
        );
        ensure!(
            max - min <= 1,
            "{component}: pods per zone {counts:?} exceed maxSkew 1"
        );
    }
    Ok(())
}

/// Scenario 3: RF 3 with only 2 zones: ZonesInsufficient and nothing applied; nodes of a third
/// zone make the operator apply it with no user action.
async fn rf3_over_two_zones_waits_then_applies(env: &mut Env) -> Result<()> {
    const RACK: &str = "e2e.loki-zone-operator.dev/rack";
    let ns = "e2e-rf3";
    namespace(env, ns).await?;
    // Two "racks" (failure domains of this scenario's own key) over the zone-a/b nodes.
    for (node, rack) in [
        ("node-zone-a-0", "r1"),
        ("node-zone-a-1", "r1"),
        ("node-zone-b-0", "r2"),
        ("node-zone-b-1", "r2"),
    ] {
        env.sim.relabel(node, RACK, Some(rack)).await?;
    }
    create_stack(
        env,
        ns,
        stack_json(
            "rf3",
            "1x.small",
            json!({"factor": 3, "zones": [{"topologyKey": RACK, "maxSkew": 1}]}),
        ),
    )
    .await?;
    let s = wait_condition(env, ns, "rf3", "Degraded", Some("ZonesInsufficient")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("replication factor 3") && msg.contains("r1, r2"),
        "message: {msg}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        workloads(env, ns).await?.is_empty(),
        "workloads were applied while ZonesInsufficient"
    );
    ensure!(
        Api::<ConfigMap>::namespaced(env.admin.clone(), ns)
            .get_opt("rf3-config")
            .await?
            .is_none(),
        "config applied while held back"
    );
    // A third rack appears: applied without any user action.
    env.sim
        .create_node("node-r3-0", &[(ZONE, "zone-c"), (RACK, "r3")])
        .await?;
    env.sim
        .create_node("node-r3-1", &[(ZONE, "zone-c"), (RACK, "r3")])
        .await?;
    let s = wait_condition(env, ns, "rf3", "Ready", Some("ReadyComponents")).await?;
    let r = s
        .status
        .and_then(|st| st.replication)
        .context("replication")?;
    ensure!(
        (r.zones.len(), r.write_quorum, r.zone_failures_tolerated) == (3, 2, Some(1)),
        "replication {r:?}"
    );
    Ok(())
}

/// Scenario 5: An edit while the zone check is Degraded leaves every running workload unchanged;
/// when the zones come back, the edit is applied with no user action.
async fn edit_while_degraded_changes_nothing_running(env: &mut Env) -> Result<()> {
    const RACK: &str = "e2e.loki-zone-operator.dev/rack";
    let (ns, name) = ("e2e-rf3", "rf3");
    let before = workloads(env, ns).await?;
    ensure!(!before.is_empty(), "scenario 3 must have applied the stack");
    for n in ["node-r3-0", "node-r3-1"] {
        env.sim.relabel(n, RACK, None).await?;
    }
    wait_condition(env, ns, name, "Degraded", Some("ZonesInsufficient")).await?;
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    let edited = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"querier": {"replicas": 3}}}})),
        )
        .await?;
    let generation = edited.metadata.generation;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = workloads(env, ns).await?;
    ensure!(before.len() == after.len(), "workloads added or removed");
    for ((n1, t1, g1), (_, t2, g2)) in before.iter().zip(after.iter()) {
        ensure!(
            g1 == g2,
            "{n1}: generation changed from {g1:?} to {g2:?} while Degraded"
        );
        ensure!(t1 == t2, "{n1}: pod template changed while Degraded");
    }
    let s = get_stack(env, ns, name).await?;
    let observed = s.status.as_ref().and_then(|st| st.observed_generation);
    ensure!(
        observed < generation,
        "observedGeneration {observed:?} caught up with {generation:?} while held back"
    );
    for n in ["node-r3-0", "node-r3-1"] {
        env.sim.relabel(n, RACK, Some("r3")).await?;
    }
    eventually("the held-back edit to be applied", WAIT, || async {
        let d = Api::<Deployment>::namespaced(env.admin.clone(), ns)
            .get("rf3-querier")
            .await?;
        Ok((d.spec.and_then(|s| s.replicas) == Some(3)).then_some(()))
    })
    .await?;
    // The status is written after the apply, so it may trail the Deployment briefly.
    eventually("observedGeneration to catch up", WAIT, || async {
        let s = get_stack(env, ns, name).await?;
        Ok((s.status.and_then(|st| st.observed_generation) == generation).then_some(()))
    })
    .await
}

/// Scenario 4: Nodes missing the key, and a node with an empty value, are named.
async fn missing_and_empty_labels_are_reported(env: &mut Env) -> Result<()> {
    let ns = "e2e-labels";
    namespace(env, ns).await?;
    create_stack(
        env,
        ns,
        stack_json(
            "missing",
            "1x.demo",
            json!({"zones": [{"topologyKey": "e2e.loki-zone-operator.dev/nowhere"}]}),
        ),
    )
    .await?;
    let s = wait_condition(env, ns, "missing", "Degraded", Some("ZoneLabelMissing")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("node-zone-a-0 (label e2e.loki-zone-operator.dev/nowhere is missing)"),
        "message: {msg}"
    );

    const KEY: &str = "e2e.loki-zone-operator.dev/aisle";
    for (i, n) in ["node-zone-a-0", "node-zone-b-0", "node-zone-c-0"]
        .iter()
        .enumerate()
    {
        env.sim.relabel(n, KEY, Some(&format!("aisle-{i}"))).await?;
    }
    env.sim.relabel("node-zone-c-1", KEY, Some("")).await?;
    create_stack(
        env,
        ns,
        stack_json("empty", "1x.demo", json!({"zones": [{"topologyKey": KEY}]})),
    )
    .await?;
    let s = wait_condition(env, ns, "empty", "Degraded", Some("ZoneLabelEmpty")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("node-zone-c-1 (label e2e.loki-zone-operator.dev/aisle is empty)"),
        "message: {msg}"
    );
    // Removing the empty label lets the stack through.
    env.sim.relabel("node-zone-c-1", KEY, None).await?;
    wait_condition(env, ns, "empty", "Ready", Some("ReadyComponents")).await?;
    Ok(())
}

/// Scenario 6: Turning zones off removes every zone piece from the workloads.
async fn turning_zones_off_removes_every_zone_piece(env: &mut Env) -> Result<()> {
    let (ns, name) = ("e2e-zones", "zones");
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    let s = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replication": {"zones": null}}})),
        )
        .await?;
    let generation = s.metadata.generation;
    eventually("zones removed from every workload", WAIT, || async {
        let s = get_stack(env, ns, name).await?;
        if s.status.and_then(|st| st.observed_generation) != generation {
            return Ok(None);
        }
        let wl = workloads(env, ns).await?;
        let text = serde_json::to_string(&wl.iter().map(|(_, t, _)| t).collect::<Vec<_>>())?;
        for trace in [
            "topologySpreadConstraints",
            "az-annotation",
            "loki.grafana.com/zone-aware",
            "INSTANCE_AVAILABILITY_ZONE",
            "availability-zone-labels",
        ] {
            if text.contains(trace) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let cm = Api::<ConfigMap>::namespaced(env.admin.clone(), ns)
        .get("zones-config")
        .await?;
    let config = cm
        .data
        .context("data")?
        .remove("config.yaml")
        .context("config.yaml")?;
    ensure!(
        !config.contains("zone_awareness_enabled"),
        "ring still zone-aware"
    );
    wait_condition(env, ns, name, "Ready", Some("ReadyComponents")).await?;
    Ok(())
}

/// Scenario 7: The operator runs as the ServiceAccount of manifests/, whose RBAC is exactly
/// enough: every other scenario passes with it, and it cannot delete nodes or PVCs (it
/// deletes pods only for the zone-by-zone rollout, see e2e/rollout.rs).
/// Secrets it may only read by name: it can neither list nor watch them anywhere, and
/// writes only its webhook certificate, in its own namespace.
async fn operator_runs_with_least_privilege(env: &mut Env) -> Result<()> {
    let user = operator::service_account_user();
    let ns = "e2e-zones";
    namespaced::expect_access(
        env,
        &user,
        &[
            (("pods", "", "delete"), ns, true),
            (("pods", "", "patch"), ns, true),
            (("nodes", "", "delete"), ns, false),
            (("nodes", "", "patch"), ns, false),
            (("nodes", "", "watch"), ns, true),
            (("persistentvolumeclaims", "", "delete"), ns, false),
            (("persistentvolumeclaims", "", "create"), ns, false),
            (("statefulsets", "apps", "patch"), ns, true),
            (("secrets", "", "create"), ns, false),
            // The zone-at-bind webhook's certificate, in the operator's own namespace.
            (("secrets", "", "create"), operator::NAMESPACE, true),
            (("secrets", "", "update"), operator::NAMESPACE, false),
            (("secrets", "", "get"), ns, true),
            (("secrets", "", "list"), ns, false),
            (("secrets", "", "watch"), ns, false),
            (("secrets", "", "list"), "", false),
            (("secrets", "", "watch"), "", false),
            (("persistentvolumes", "", "patch"), "", false),
            (("storageclasses", "storage.k8s.io", "delete"), "", false),
        ],
    )
    .await?;
    // The operator's own requests are audited under that user; it made some, and no
    // Secret was listed or watched.
    let audit = std::fs::read_to_string(env.cp.dir.join("audit.log")).unwrap_or_default();
    ensure!(
        audit.contains(&user),
        "no request by {user} in the audit log"
    );
    for line in audit.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let verb = ev["verb"].as_str().unwrap_or_default();
        let own_certificate = ev["objectRef"]["namespace"] == operator::NAMESPACE
            && ev["objectRef"]["name"] == names::WEBHOOK_CERT_SECRET;
        ensure!(
            !(ev["objectRef"]["resource"] == "secrets" && verb != "get" && !own_certificate),
            "the operator did {verb} on Secrets: {line}"
        );
    }
    Ok(())
}

/// Scenario 8: Pods created while the operator was down get their zone once it starts.
async fn pods_created_while_down_are_annotated_on_start(env: &mut Env) -> Result<()> {
    let ns = "e2e-restart";
    namespace(env, ns).await?;
    // The stack the pods claim to belong to: only its topology keys are copied onto
    // them. Its storage Secret is absent, so it is held back and creates no pods.
    let mut stack = stack_json(
        "restart",
        "1x.demo",
        json!({"factor": 1, "zones": [{"topologyKey": ZONE}]}),
    );
    stack["spec"]["storage"]["secret"]["name"] = json!("absent");
    create_stack(env, ns, stack).await?;
    wait_condition(
        env,
        ns,
        "restart",
        "Degraded",
        Some("MissingObjectStorageSecret"),
    )
    .await?;
    env.stop_operator();
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    // Enough pods that the annotator sees them before the node cache has listed,
    // which it must wait for (a race the annotator once lost).
    for i in 0..30 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": format!("zone-aware-{i}"),
                "labels": {"loki.grafana.com/zone-aware": "enabled", "app.kubernetes.io/instance": "restart"},
                "annotations": {"loki.grafana.com/availability-zone-labels": ZONE},
            },
            "spec": {
                "automountServiceAccountToken": false,
                "initContainers": [{"name": "az-annotation-check", "image": "loki-zone-wait:e2e"}],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }))?;
        pods.create(&PostParams::default(), &p).await?;
    }
    eventually(
        "pods scheduled while the operator is down",
        WAIT,
        || async {
            let l = pods.list(&ListParams::default()).await?;
            Ok(l.items
                .iter()
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .then_some(()))
        },
    )
    .await?;
    let l = pods.list(&ListParams::default()).await?;
    ensure!(
        l.items.iter().all(|p| !p
            .annotations()
            .contains_key("loki.grafana.com/availability-zone")),
        "annotated while the operator was down"
    );
    env.start_operator().await?;
    let nodes = nodes_by_name(env).await?;
    eventually("pods annotated after start", WAIT, || async {
        let l = pods.list(&ListParams::default()).await?;
        for p in &l.items {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let want = nodes.get(&node).map(|n| n.labels()[ZONE].clone());
            if p.annotations().get("loki.grafana.com/availability-zone") != want.as_ref() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
}

/// Scenario 9: Deleting the stack garbage-collects its children; PVCs remain.
async fn deleting_a_stack_collects_children_but_keeps_pvcs(env: &mut Env) -> Result<()> {
    let (ns, name) = ("e2e-zones", "zones");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.admin.clone(), ns);
    let before: BTreeSet<String> = pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    ensure!(
        before.len() >= 5,
        "expected the ingester, compactor and index-gateway claims, got {before:?}"
    );
    Api::<LokiStack>::namespaced(env.admin.clone(), ns)
        .delete(name, &DeleteParams::foreground())
        .await?;
    eventually("children garbage-collected", WAIT, || async {
        let left = workloads(env, ns).await?.len()
            + Api::<Service>::namespaced(env.admin.clone(), ns)
                .list(&ListParams::default().labels("app.kubernetes.io/instance=zones"))
                .await?
                .items
                .len()
            + Api::<ConfigMap>::namespaced(env.admin.clone(), ns)
                .get_opt("zones-config")
                .await?
                .map_or(0, |_| 1);
        Ok((left == 0).then_some(()))
    })
    .await?;
    let after: BTreeSet<String> = pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    ensure!(
        before == after,
        "PVCs changed: before {before:?}, after {after:?}"
    );
    Ok(())
}

/// Scenario 10: Invalid specs are rejected by the API server with the field named, CEL rules
/// included (a case whose rule this server predates would be accepted and must then be
/// reported by the reconciler). Valid specs (the samples, values at every bound) are
/// admitted. The table is shared with `tests/admission.rs`, which runs it on both ends of
/// the supported range.
async fn invalid_specs_are_rejected_with_the_field_named(env: &mut Env) -> Result<()> {
    let ns = "e2e-invalid";
    namespace(env, ns).await?;
    let mut left_to_reconciler = Vec::new();
    let invalid = admission::invalid_cases();
    let total = invalid.len();
    for case in invalid {
        let created = admission::create(&env.admin, ns, &case.body, false).await;
        if env.minor >= case.rejected_since {
            admission::expect_rejected(&case, env.minor, created)?;
        } else {
            created.with_context(|| {
                format!(
                    "{}: 1.{} should accept what only CEL rejects",
                    case.name, env.minor
                )
            })?;
            left_to_reconciler.push(case);
        }
    }
    for case in &left_to_reconciler {
        let s = wait_condition(env, ns, &case.name, "Degraded", Some("InvalidSpec")).await?;
        let msg = &condition(&s, "Degraded").context("degraded")?.message;
        ensure!(
            admission::names_field(msg, &case.field),
            "{}: message does not name {}: {msg}",
            case.name,
            case.field
        );
    }
    ensure!(
        workloads(env, ns).await?.is_empty(),
        "an invalid spec was applied"
    );
    // A dry run: admitted, validated, never stored, so the operator starts nothing.
    let valid = admission::valid_cases()?;
    for case in &valid {
        admission::create(&env.admin, ns, &case.body, true)
            .await
            .with_context(|| format!("{}: a valid spec was rejected", case.name))?;
    }
    println!(
        "    on 1.{}: {} invalid specs rejected at admission, {} accepted and reported by the reconciler, {} valid specs admitted",
        env.minor,
        total - left_to_reconciler.len(),
        left_to_reconciler.len(),
        valid.len()
    );
    Ok(())
}

/// The operator's writes (but Lease renewals, the leader's heartbeat) and its number of
/// reads in the audit log after byte `start`.
fn audit_since(audit: &std::path::Path, start: usize) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let mut writes = Vec::new();
    let mut reads = 0;
    let operator = operator::service_account_user();
    for line in text[start.min(text.len())..].lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        // The log also holds the scheduler's bindings (for the webhook scenarios).
        if ev["user"]["username"] != operator.as_str() {
            continue;
        }
        match ev["verb"].as_str().unwrap_or_default() {
            "create" | "update" | "patch" | "delete" | "deletecollection" => {
                let resource = ev["objectRef"]["resource"].as_str().unwrap_or_default();
                if resource != "leases" {
                    writes.push(format!(
                        "{} {} {}",
                        ev["verb"], resource, ev["objectRef"]["name"]
                    ));
                }
            }
            _ => reads += 1,
        }
    }
    (writes, reads)
}

/// Scenario 11: Idle is free: with nothing changing, resyncs send no write request.
async fn idle_resyncs_write_nothing(env: &mut Env) -> Result<()> {
    // Earlier scenarios (zone outages among them) may still be rolling pods: idle means
    // every stack settled (Ready, or held back on purpose) and no status changing.
    eventually("every stack settled before idling", WAIT, || async {
        let stacks = statuses(env).await?;
        let settled = stacks.values().all(|s| {
            let is_true = |t: &str| {
                s["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == t && c["status"] == "True")
            };
            is_true("Ready") || is_true("Degraded") || s.is_null()
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok((settled && statuses(env).await? == stacks).then_some(()))
    })
    .await?;
    let audit = env.cp.dir.join("audit.log");
    let audit_len = || std::fs::read_to_string(&audit).unwrap_or_default().len();
    // Stacks a scenario just created still converge after their status settles: wait
    // for a quiet spell. A write on every resync never gives one.
    eventually(
        "the operator stopped writing before idling",
        WAIT,
        || async {
            let from = audit_len();
            tokio::time::sleep(Duration::from_secs(4)).await;
            let (writes, _) = audit_since(&audit, from);
            Ok(writes.is_empty().then_some(()))
        },
    )
    .await?;
    let reconciles_before = reconciles(env).await?;
    let start = audit_len();
    let begin = Instant::now();
    // The operator runs with --resync 2s: this spans several resyncs of every stack.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let reconciles_after = reconciles(env).await?;
    let stacks = Api::<LokiStack>::all(env.admin.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len();
    // Without resyncs, "no writes" would prove nothing.
    ensure!(
        reconciles_after - reconciles_before >= 3 * stacks as u64,
        "expected at least 3 resyncs of each of {stacks} stacks, saw {} reconciles",
        reconciles_after - reconciles_before
    );
    let (writes, reads) = audit_since(&audit, start);
    if !writes.is_empty() {
        // What keeps changing: two reads of every status a resync apart, diffed.
        let a = statuses(env).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let b = statuses(env).await?;
        let changed: Vec<String> = a
            .iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, v)| {
                format!(
                    "{k}: {v}\n  then: {}",
                    b.get(k).cloned().unwrap_or_default()
                )
            })
            .collect();
        bail!(
            "{} writes in {:?} of idle: {writes:?}\nstatuses that changed:\n{}",
            writes.len(),
            begin.elapsed(),
            changed.join("\n")
        );
    }
    println!(
        "    idle for {:?}: {} reconciles, 0 writes, {reads} reads",
        begin.elapsed(),
        reconciles_after - reconciles_before
    );
    Ok(())
}

/// 11b. A failover is free: a new leader (a new process, which remembers nothing of what
/// was applied) finds every child as it would apply it, from the applied-hash each
/// carries, and the webhook configurations in place: with nothing changed it writes
/// nothing, through several resyncs of every stack. Runs after the idle scenario, so
/// every stack has settled.
async fn a_new_leader_writes_nothing_when_nothing_changed(env: &mut Env) -> Result<()> {
    let audit = env.cp.dir.join("audit.log");
    let audit_len = || std::fs::read_to_string(&audit).unwrap_or_default().len();
    env.stop_operator();
    let start = audit_len();
    env.start_operator().await?;
    let stacks = Api::<LokiStack>::all(env.admin.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len() as u64;
    // The operator runs with --resync 2s: wait for three passes over every stack.
    let passes = eventually("three reconciles of every stack", WAIT, || async {
        let n = reconciles(env).await?;
        Ok((n >= 3 * stacks).then_some(n))
    })
    .await?;
    let (writes, reads) = audit_since(&audit, start);
    // The window holds the new leader's requests: at least its taking of the Lease.
    let text = std::fs::read_to_string(&audit).unwrap_or_default();
    let window = &text[start.min(text.len())..];
    ensure!(
        window.contains(&operator::service_account_user()) && window.contains("\"leases\""),
        "the audit log shows nothing of the new leader: the check proves nothing"
    );
    // Allowed, and nothing else: the test operator runs outside the cluster and serves
    // its webhooks on a new port each time it starts, so its two webhook configurations
    // do change (in a cluster the Service's name stays); and a new leader reports a
    // standing problem of a pod once more, as an Event (what a term reported is not
    // remembered across terms).
    let (events, writes): (Vec<&String>, Vec<&String>) = writes
        .iter()
        .filter(|w| !w.contains("webhookconfigurations"))
        // audit_since writes "<verb> <resource> <name>", the resource unquoted.
        .partition(|w| w.split(' ').nth(1) == Some("events"));
    ensure!(
        writes.is_empty(),
        "a new leader wrote {} times although nothing changed: {writes:?}",
        writes.len()
    );
    println!(
        "    new leader: {passes} reconciles of {stacks} stacks, 0 writes to objects, {} Events of standing problems, {reads} reads",
        events.len()
    );
    Ok(())
}

/// Scenario 11c: Drift made before a failover is repaired by the new leader. An edit that
/// only removes a field (`kubectl patch --type=json` removing the ingesters' topology
/// spread constraints) leaves no other field manager on the StatefulSet and its
/// applied-hash as it was; the leader, which remembers what it applied, puts it back at
/// once, so the test stops the operator first, edits, and starts a new leader, which must
/// find the drift on its own (its first reconcile reads each child live) and apply the
/// constraints again.
async fn a_failover_repairs_a_field_removed_before_it(env: &mut Env) -> Result<()> {
    let ns = "e2e-drift";
    namespace(env, ns).await?;
    create_stack(
        env,
        ns,
        stack_json(
            "drift",
            "1x.demo",
            json!({"factor": 1, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]}),
        ),
    )
    .await?;
    let sets: Api<StatefulSet> = Api::namespaced(env.admin.clone(), ns);
    let spread = |s: &StatefulSet| {
        s.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.topology_spread_constraints.clone())
            .unwrap_or_default()
    };
    let applied = eventually("the ingesters spread over zones", WAIT, || async {
        let set = sets.get_opt("drift-ingester").await?;
        Ok(set.map(|s| spread(&s)).filter(|c| !c.is_empty()))
    })
    .await?;
    env.stop_operator();
    let remove = json!([{"op": "remove", "path": "/spec/template/spec/topologySpreadConstraints"}]);
    let patch: json_patch::Patch = serde_json::from_value(remove)?;
    sets.patch(
        "drift-ingester",
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await?;
    ensure!(
        spread(&sets.get("drift-ingester").await?).is_empty(),
        "the edit did not remove the constraints"
    );
    let started = Instant::now();
    env.start_operator().await?;
    let back = eventually("the constraints back under a new leader", WAIT, || async {
        let c = spread(&sets.get("drift-ingester").await?);
        Ok((!c.is_empty()).then_some(c))
    })
    .await?;
    ensure!(
        back == applied,
        "put back otherwise: {back:?}, applied {applied:?}"
    );
    println!(
        "    removed before a failover, back {:?} after the new leader started",
        started.elapsed()
    );
    Ok(())
}

/// Every stack's status, by namespace/name (null for an unmanaged or new stack).
async fn statuses(env: &Env) -> Result<BTreeMap<String, Value>> {
    let list = Api::<LokiStack>::all(env.admin.clone())
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|s| {
            let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
            let managed =
                s.spec.management_state == loki_zone_operator::model::api::ManagementState::Managed;
            let status = if managed {
                serde_json::to_value(&s.status).unwrap_or_default()
            } else {
                Value::Null
            };
            (key, status)
        })
        .collect())
}

/// Reconciles the operator has finished, from its /metrics.
/// The running operator's `/metrics` text.
async fn operator_metrics(env: &Env) -> Result<String> {
    env.operator
        .as_ref()
        .context("operator not running")?
        .metrics()
        .await
}

async fn reconciles(env: &Env) -> Result<u64> {
    let text = operator_metrics(env).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("loki_zone_operator_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// Scenario 12: A missing storage Secret, then one lacking keys, are reported with what to
/// change; fixing the Secret applies the stack with no change to the stack. Once the
/// stack runs, a Secret edit is read at once when the stack is annotated.
async fn storage_secret_errors_are_reported_and_fixing_the_secret_applies(
    env: &mut Env,
) -> Result<()> {
    let ns = "e2e-secret";
    let api: Api<Namespace> = Api::all(env.admin.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await?;
    let mut body = stack_json("s", "1x.demo", Value::Null);
    body["spec"]["storage"]["secret"]["name"] = json!("later");
    create_stack(env, ns, body).await?;
    let s = wait_condition(env, ns, "s", "Degraded", Some("MissingObjectStorageSecret")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("\"later\"") && msg.contains("bucketnames"),
        "message: {msg}"
    );
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    let partial: Secret = serde_json::from_value(
        json!({"metadata": {"name": "later"}, "stringData": {"bucketnames": "b", "endpoint": "e"}}),
    )?;
    secrets.create(&PostParams::default(), &partial).await?;
    let s = wait_condition(env, ns, "s", "Degraded", Some("InvalidObjectStorageSecret")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("access_key_id, access_key_secret"),
        "message does not name the missing keys: {msg}"
    );
    ensure!(
        workloads(env, ns).await?.is_empty(),
        "applied with an invalid secret"
    );
    secrets
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"access_key_id": "a", "access_key_secret": "s"}})),
        )
        .await?;
    wait_condition(env, ns, "s", "Ready", Some("ReadyComponents")).await?;
    annotating_the_stack_rereads_its_secret(env, ns).await
}

/// Nothing waits on the Secret of the running stack "s" in `ns` any more, so it is polled
/// every couple of minutes; an annotation of the stack has it read again at once.
async fn annotating_the_stack_rereads_its_secret(env: &Env, ns: &str) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    secrets
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"region": "eu-north-9"}})),
        )
        .await?;
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    stacks
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"example.com/reread": "1"}}})),
        )
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), ns);
    let asked = Instant::now();
    eventually(
        "the annotated stack's config has the Secret's new region",
        Duration::from_secs(30),
        || async {
            let cm = cms.get_opt("s-config").await?;
            let text = serde_json::to_string(&cm.and_then(|c| c.data))?;
            Ok(text.contains("eu-north-9").then_some(()))
        },
    )
    .await?;
    println!(
        "  Secret edit seen {:.1?} after annotating the stack",
        asked.elapsed()
    );
    Ok(())
}

/// A zone-aware pod of `stack` bound to node-zone-b-1 that names `keys` as its
/// topology keys.
fn zone_aware_pod(name: &str, stack: &str, keys: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "lokistack", "app.kubernetes.io/instance": stack,
                "app.kubernetes.io/component": "querier", "loki.grafana.com/zone-aware": "enabled",
            },
            "annotations": {"loki.grafana.com/availability-zone-labels": keys},
        },
        "spec": {
            "nodeName": "node-zone-b-1",
            "automountServiceAccountToken": false,
            "initContainers": [{"name": "az-annotation-check", "image": "loki-zone-wait:e2e"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }))?)
}

/// Scenario 13: A pod on a node that lacks a topology label waits without a zone, is named in
/// its stack's status, and gets its zone as soon as the node is labelled. A pod that
/// names node labels that are not its stack's topology keys never gets them copied.
async fn pod_on_unlabelled_node_is_named_then_annotated_when_labelled(env: &mut Env) -> Result<()> {
    const BAY: &str = "e2e.loki-zone-operator.dev/bay";
    let (ns, stack) = ("e2e-bay", "bay");
    namespace(env, ns).await?;
    // Zoned by a key no node has yet: held back (ZoneLabelMissing), it creates nothing.
    create_stack(
        env,
        ns,
        stack_json(stack, "1x.demo", json!({"zones": [{"topologyKey": BAY}]})),
    )
    .await?;
    wait_condition(env, ns, stack, "Degraded", Some("ZoneLabelMissing")).await?;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    pods.create(
        &PostParams::default(),
        &zone_aware_pod("waiting-for-bay", stack, BAY)?,
    )
    .await?;
    let foreign = zone_aware_pod("foreign-keys", stack, "kubernetes.io/hostname")?;
    pods.create(&PostParams::default(), &foreign).await?;
    let s = wait_condition(env, ns, stack, "Warning", Some("PodZoneUnknown")).await?;
    let msg = &condition(&s, "Warning").context("warning")?.message;
    ensure!(
        msg.contains("waiting-for-bay") && msg.contains("is missing"),
        "Warning does not name the pod: {msg}"
    );
    let named = s
        .status
        .clone()
        .and_then(|st| st.replication)
        .map(|r| r.pods_without_zone)
        .unwrap_or_default();
    ensure!(
        named.iter().any(|n| n.starts_with("waiting-for-bay")),
        "status.replication.podsWithoutZone: {named:?}"
    );
    ensure!(!pods
        .get("waiting-for-bay")
        .await?
        .annotations()
        .contains_key("loki.grafana.com/availability-zone"));
    env.sim.relabel("node-zone-b-1", BAY, Some("bay-7")).await?;
    eventually(
        "the pod annotated once its node is labelled",
        WAIT,
        || async {
            let p = pods.get("waiting-for-bay").await?;
            Ok((p
                .annotations()
                .get("loki.grafana.com/availability-zone")
                .map(String::as_str)
                == Some("bay-7"))
            .then_some(()))
        },
    )
    .await?;
    foreign_keys_are_never_copied(env, ns).await?;
    Api::<LokiStack>::namespaced(env.admin.clone(), ns)
        .delete(stack, &DeleteParams::default())
        .await?;
    for p in ["waiting-for-bay", "foreign-keys"] {
        pods.delete(p, &DeleteParams::default()).await?;
    }
    env.sim.relabel("node-zone-b-1", BAY, None).await?;
    Ok(())
}

/// The pod that names `kubernetes.io/hostname` (not a key of its stack) is bound to a
/// node that has it, yet has no zone, and an Event says why.
async fn foreign_keys_are_never_copied(env: &Env, ns: &str) -> Result<()> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    eventually(
        "the ZoneKeysNotAllowed Event on foreign-keys",
        WAIT,
        || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .iter()
                .find(|e| {
                    e.involved_object.name.as_deref() == Some("foreign-keys")
                        && e.reason.as_deref() == Some("ZoneKeysNotAllowed")
                })
                .map(|e| e.message.clone().unwrap_or_default()))
        },
    )
    .await?;
    let p = Api::<Pod>::namespaced(env.admin.clone(), ns)
        .get("foreign-keys")
        .await?;
    ensure!(
        !p.annotations()
            .contains_key("loki.grafana.com/availability-zone"),
        "a node label that is not the stack's topology key was copied: {:?}",
        p.annotations()
    );
    Ok(())
}

/// Scenario 14: Disabling the ruler removes its objects (claims stay); an Unmanaged stack is left
/// exactly as it is.
async fn disabled_ruler_is_pruned_and_unmanaged_stacks_are_left_alone(env: &mut Env) -> Result<()> {
    let ns = "e2e-ruler";
    namespace(env, ns).await?;
    let mut body = stack_json("r", "1x.demo", Value::Null);
    body["spec"]["rules"] = json!({"enabled": true});
    create_stack(env, ns, body).await?;
    wait_condition(env, ns, "r", "Ready", Some("ReadyComponents")).await?;
    let sts: Api<StatefulSet> = Api::namespaced(env.admin.clone(), ns);
    ensure!(
        sts.get_opt("r-ruler").await?.is_some(),
        "ruler not rendered"
    );
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    api.patch(
        "r",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"rules": {"enabled": false}}})),
    )
    .await?;
    eventually("the ruler's objects pruned", WAIT, || async {
        let gone = sts.get_opt("r-ruler").await?.is_none()
            && Api::<Service>::namespaced(env.admin.clone(), ns)
                .get_opt("r-ruler-http")
                .await?
                .is_none();
        Ok(gone.then_some(()))
    })
    .await?;
    let claims = Api::<PersistentVolumeClaim>::namespaced(env.admin.clone(), ns)
        .list(&ListParams::default())
        .await?;
    ensure!(
        claims
            .items
            .iter()
            .any(|c| c.name_any().contains("-r-ruler-")),
        "the ruler's claims must stay"
    );

    api.patch("r", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"managementState": "Unmanaged", "template": {"querier": {"replicas": 4}}}})))
        .await?;
    let deploys: Api<Deployment> = Api::namespaced(env.admin.clone(), ns);
    deploys
        .patch(
            "r-querier",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"edited-by": "admin"}}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let q = deploys.get("r-querier").await?;
    ensure!(
        q.spec.and_then(|s| s.replicas) == Some(1),
        "an Unmanaged stack was scaled"
    );
    ensure!(
        q.metadata
            .labels
            .is_some_and(|l| l.get("edited-by").map(String::as_str) == Some("admin")),
        "an admin's edit was reverted"
    );
    Ok(())
}

/// Scenario 15: Two operator replicas: one leads; when it stops, the standby takes over and
/// reconciles.
async fn standby_replica_takes_over_when_the_leader_stops(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(env.admin.clone(), operator::NAMESPACE);
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    let first = holder(leases.get("loki-zone-operator").await?);
    ensure!(!first.is_empty(), "no leader");
    let standby_dir = env.cp.dir.join("standby");
    std::fs::create_dir_all(&standby_dir)?;
    let mut standby = Operator::start(&env.operator_kubeconfig, &standby_dir, &["--resync", "2s"])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        holder(leases.get("loki-zone-operator").await?) == first,
        "the standby took the lease from a live leader"
    );
    env.stop_operator();
    let second = eventually("the standby to lead", WAIT, || async {
        let h = holder(leases.get("loki-zone-operator").await?);
        Ok((!h.is_empty() && h != first).then_some(h))
    })
    .await?;
    // The new leader reconciles: a new stack becomes Ready.
    let ns = "e2e-failover";
    namespace(env, ns).await?;
    create_stack(env, ns, stack_json("f", "1x.demo", Value::Null)).await?;
    wait_condition(env, ns, "f", "Ready", Some("ReadyComponents")).await?;
    println!("    leader {first} stopped; {second} took over");
    standby.stop();
    env.start_operator().await
}

// ---------------------------------------------------------------------------------------

type Scenario = for<'a> fn(&'a mut Env) -> Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

macro_rules! scenarios {
    ($($f:ident),* $(,)?) => {
        vec![$((stringify!($f), (|e| Box::pin($f(e))) as Scenario)),*]
    };
}

/// Scenario 16: A failed apply (a ResourceQuota that forbids Services) shows as Degraded
/// `ApplyFailed` and is retried with the error backoff: once the quota is gone, the stack
/// is applied within seconds, although the operator's resync is 10 minutes and nothing
/// the operator watches changes.
async fn apply_failure_is_retried_with_the_error_backoff(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    env.stop_operator();
    env.start_operator_with(&["--resync", "10m"]).await?;
    let result = async {
        let ns = "e2e-backoff";
        namespace(env, ns).await?;
        let quotas: Api<ResourceQuota> = Api::namespaced(env.admin.clone(), ns);
        let quota =
            json!({"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}});
        quotas
            .create(&PostParams::default(), &serde_json::from_value(quota)?)
            .await?;
        // Admission enforces a quota once its controller has computed the usage.
        eventually("the quota enforced", WAIT, || async {
            let q = quotas.get("no-services").await?;
            Ok(q.status.and_then(|s| s.hard).map(|_| ()))
        })
        .await?;
        create_stack(env, ns, stack_json("s", "1x.demo", Value::Null)).await?;
        let s = wait_condition(env, ns, "s", "Degraded", Some("ApplyFailed")).await?;
        let msg = &condition(&s, "Degraded").context("degraded")?.message;
        ensure!(
            msg.contains("Service"),
            "message does not name the object: {msg}"
        );
        // Writing that condition re-runs the stack once (its own watch event), and that run
        // fails too; only then is the error backoff the one thing left to retry it.
        let failed_runs = || env.operator_log().matches("reconcile failed").count();
        eventually("the re-run after the status write", WAIT, || async {
            Ok((failed_runs() >= 2).then_some(()))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        quotas
            .delete("no-services", &DeleteParams::default())
            .await?;
        let freed = Instant::now();
        wait_condition(env, ns, "s", "Ready", Some("ReadyComponents")).await?;
        let took = freed.elapsed();
        println!("    applied {took:.1?} after the quota was removed (resync 10m)");
        // The stack's backoff is at 10 s or 20 s after two or three failures; a retry at
        // the resync would take 10 minutes.
        ensure!(took < Duration::from_secs(60), "retried after {took:?}");
        Ok(())
    }
    .await;
    env.stop_operator();
    env.start_operator().await?;
    result
}

/// Scenario 17: A LokiStack stored before the CRD bounded a field (here `replication.factor:
/// 2147483648`, which no i32 holds) stops only itself: across an operator restart,
/// another stack is still applied and becomes Ready, and the bad one is told which field
/// to fix.
async fn a_stack_that_does_not_decode_stops_only_itself(env: &mut Env) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let ns = "e2e-undecodable";
    namespace(env, ns).await?;
    // An older CRD without the bound, as a cluster upgraded from one would have stored.
    let crds: Api<CustomResourceDefinition> = Api::all(env.admin.clone());
    let bound = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/replication/properties/factor/maximum";
    let patch = |op: Value| {
        let crds = crds.clone();
        async move {
            let p: json_patch::Patch = serde_json::from_value(json!([op]))?;
            crds.patch(
                "lokistacks.loki.grafana.com",
                &PatchParams::default(),
                &Patch::<()>::Json(p),
            )
            .await?;
            anyhow::Ok(())
        }
    };
    let original = crds.get("lokistacks.loki.grafana.com").await?;
    let max = serde_json::to_value(&original)?
        .pointer(bound)
        .cloned()
        .context("the CRD bounds replication.factor")?;
    patch(json!({"op": "remove", "path": bound})).await?;
    let gvk = GroupVersionKind::gvk("loki.grafana.com", "v1", "LokiStack");
    let stacks: Api<DynamicObject> =
        Api::namespaced_with(env.admin.clone(), ns, &ApiResource::from_gvk(&gvk));
    let mut bad = stack_json("bad", "1x.demo", json!({"factor": 2147483648u64}));
    bad["metadata"]["namespace"] = json!(ns);
    let created = eventually("the unbounded schema served", WAIT, || async {
        Ok(stacks
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad.clone())?,
            )
            .await
            .ok())
    })
    .await;
    patch(json!({"op": "add", "path": bound, "value": max})).await?;
    created?;
    env.stop_operator();
    env.start_operator().await?;
    create_stack(env, ns, stack_json("good", "1x.demo", Value::Null)).await?;
    wait_condition(env, ns, "good", "Ready", Some("ReadyComponents")).await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    eventually("the bad stack told which field to fix", WAIT, || async {
        let told = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.involved_object.name.as_deref() == Some("bad")
                    && e.reason.as_deref() == Some("InvalidSpec")
                    && e.message
                        .is_some_and(|m| m.contains("spec.replication.factor"))
            });
        Ok(told.then_some(()))
    })
    .await?;
    let bad = stacks.get("bad").await?;
    let degraded = bad
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Degraded")
        .cloned();
    println!(
        "    status of the bad stack: {}",
        degraded.map_or("not written (the server rejects it)".into(), |c| c
            ["message"]
            .to_string())
    );
    // Later scenarios list stacks typed, as a user's client would.
    stacks.delete("bad", &DeleteParams::default()).await?;
    Ok(())
}

/// Scenario 18: Never adopt: a user's ConfigMap that has a child's name is left untouched and the
/// stack says NameConflict naming it; deleting the stack leaves it. A stack named
/// `default` does not claim the namespace's `default` ServiceAccount.
async fn objects_of_the_same_name_are_never_adopted(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let ns = "e2e-conflict";
    namespace(env, ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), ns);
    let mine: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "userapp-config"}, "data": {"app.properties": "x=1"}}),
    )?;
    cms.create(&PostParams::default(), &mine).await?;
    create_stack(env, ns, stack_json("userapp", "1x.demo", Value::Null)).await?;
    let s = wait_condition(env, ns, "userapp", "Degraded", Some("NameConflict")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("ConfigMap userapp-config"),
        "message does not name the object: {msg}"
    );
    let cm = cms.get("userapp-config").await?;
    ensure!(
        cm.metadata.owner_references.is_none() && cm.data == mine.data,
        "the user's ConfigMap was changed: {cm:?}"
    );

    create_stack(env, ns, stack_json("default", "1x.demo", Value::Null)).await?;
    wait_condition(env, ns, "default", "Ready", Some("ReadyComponents")).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(env.admin.clone(), ns);
    let default_sa = sas.get("default").await?;
    ensure!(
        default_sa.metadata.owner_references.is_none(),
        "the namespace's default ServiceAccount was claimed"
    );

    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), ns);
    stacks.delete("userapp", &DeleteParams::default()).await?;
    stacks.delete("default", &DeleteParams::default()).await?;
    eventually("stacks deleted", WAIT, || async {
        Ok(stacks
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    ensure!(
        cms.get_opt("userapp-config").await?.is_some() && sas.get_opt("default").await?.is_some(),
        "deleting the stacks deleted what was not theirs"
    );
    Ok(())
}

/// A CA bundle (`spec.storage.tls`) that does not exist holds the stack back with a
/// condition naming it; once it exists the stack is applied by itself, though ConfigMaps
/// are not watched: a held-back stack is looked at again every 30 s.
async fn a_missing_storage_ca_is_named_then_found(env: &mut Env) -> Result<()> {
    let ns = "e2e-ca";
    namespace(env, ns).await?;
    let mut body = stack_json("ca", "1x.demo", Value::Null);
    body["spec"]["storage"]["tls"] = json!({"caName": "minio-ca"});
    create_stack(env, ns, body).await?;
    let s = wait_condition(
        env,
        ns,
        "ca",
        "Degraded",
        Some("MissingObjectStorageCAConfigMap"),
    )
    .await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(
        msg.contains("\"minio-ca\"") && msg.contains("service-ca.crt"),
        "message: {msg}"
    );
    ensure!(
        workloads(env, ns).await?.is_empty(),
        "applied without its CA bundle"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), ns);
    let ca: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "minio-ca"},
        "data": {"service-ca.crt": "-----BEGIN CERTIFICATE-----\n"},
    }))?;
    cms.create(&PostParams::default(), &ca).await?;
    wait_condition(env, ns, "ca", "Ready", Some("ReadyComponents")).await?;
    Ok(())
}

/// Scenario 19: A StorageClass that does not exist holds the stack back with a condition that
/// names it; once it exists the stack is applied by itself, and a class that binds at
/// once is a warning for a zone-aware stack.
async fn storage_class_missing_then_immediate(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::storage::v1::StorageClass;
    let ns = "e2e-class";
    namespace(env, ns).await?;
    let mut body = stack_json(
        "sc",
        "1x.demo",
        json!({"factor": 1, "zones": [{"topologyKey": ZONE}]}),
    );
    body["spec"]["storageClassName"] = json!("e2e-immediate");
    create_stack(env, ns, body).await?;
    let s = wait_condition(env, ns, "sc", "Degraded", Some("StorageClassMissing")).await?;
    let msg = &condition(&s, "Degraded").context("degraded")?.message;
    ensure!(msg.contains("\"e2e-immediate\""), "message: {msg}");
    ensure!(
        workloads(env, ns).await?.is_empty(),
        "applied without its StorageClass"
    );
    let classes: Api<StorageClass> = Api::all(env.admin.clone());
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "e2e-immediate"},
        "provisioner": "e2e.loki-zone-operator.dev/none",
        "volumeBindingMode": "Immediate",
    }))?;
    classes.create(&PostParams::default(), &class).await?;
    wait_condition(
        env,
        ns,
        "sc",
        "Warning",
        Some("StorageClassImmediateBinding"),
    )
    .await?;
    eventually("the stack applied once its class exists", WAIT, || async {
        Ok((!workloads(env, ns).await?.is_empty()).then_some(()))
    })
    .await?;
    Api::<LokiStack>::namespaced(env.admin.clone(), ns)
        .delete("sc", &DeleteParams::default())
        .await?;
    classes
        .delete("e2e-immediate", &DeleteParams::default())
        .await?;
    Ok(())
}

/// What runs on the oldest supported Kubernetes (`LZO_KUBE=oldest`) without a filter: the
/// install (setup: CRD, RBAC, webhooks, the operator under its ServiceAccount), a
/// zone-aware stack Ready and spread, a zone lost and back, and a zone drained.
const SMOKE: [&str; 5] = [
    "zone_aware_small_stack_spreads_over_three_zones",
    "operator_runs_with_least_privilege",
    "zone_goes_dark_the_way_nodes_fail",
    "one_zone_down_keeps_the_stack_ready",
    "evictions_keep_to_one_zone_and_a_zone_drains_in_one_pass",
];

fn main() -> std::process::ExitCode {
    let mut filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let kube = Kube::from_env();
    if kube == Kube::Oldest && filter.is_empty() {
        filter = SMOKE.iter().map(|s| s.to_string()).collect();
    }
    // Order matters: later scenarios build on the stacks and nodes of earlier ones.
    let all = scenarios![
        demo_stack_without_zones_becomes_ready,
        zone_aware_small_stack_spreads_over_three_zones,
        rf3_over_two_zones_waits_then_applies,
        edit_while_degraded_changes_nothing_running,
        missing_and_empty_labels_are_reported,
        turning_zones_off_removes_every_zone_piece,
        operator_runs_with_least_privilege,
        each_kind_is_watched_once_per_process,
        pods_created_while_down_are_annotated_on_start,
        deleting_a_stack_collects_children_but_keeps_pvcs,
        invalid_specs_are_rejected_with_the_field_named,
        storage_secret_errors_are_reported_and_fixing_the_secret_applies,
        a_missing_storage_ca_is_named_then_found,
        pod_on_unlabelled_node_is_named_then_annotated_when_labelled,
        disabled_ruler_is_pruned_and_unmanaged_stacks_are_left_alone,
        rules_are_loaded_per_tenant_reported_and_removed,
        rule_objects_never_hold_back_the_workloads,
        network_policies_are_applied_and_removed,
        standby_replica_takes_over_when_the_leader_stops,
        a_stalled_leader_stops_before_a_standby_takes_over,
        apply_failure_is_retried_with_the_error_backoff,
        a_stack_that_does_not_decode_stops_only_itself,
        objects_of_the_same_name_are_never_adopted,
        storage_class_missing_then_immediate,
        zone_goes_dark_the_way_nodes_fail,
        one_zone_down_keeps_the_stack_ready,
        two_zones_down_lose_write_quorum,
        zones_come_back_and_tolerance_is_restored,
        a_lost_zones_nodes_deleted_while_volumes_are_pinned_there,
        runbook_commands_move_the_compactor_out_of_a_lost_zone,
        compactor_is_moved_out_of_a_lost_zone_when_opted_in,
        a_cordoned_zone_is_never_recovered,
        a_silent_zone_leaves_its_services_until_it_renews,
        a_paused_control_plane_takes_no_zone_out,
        pods_are_zoned_in_the_event_that_binds_them,
        pods_read_the_zone_label_kubernetes_copies_at_binding,
        a_namespace_without_zone_aware_stacks_never_reaches_the_webhook,
        a_broken_webhook_never_blocks_scheduling,
        a_stack_left_by_the_go_operator_is_taken_over,
        api_server_restarts_never_stop_the_operator,
        namespaced_mode_runs_only_the_watched_namespaces,
        ingester_rollout_goes_zone_by_zone_and_pauses_for_a_lost_zone,
        evictions_keep_to_one_zone_and_a_zone_drains_in_one_pass,
        with_the_operator_stopped_only_ingesters_are_guarded,
        an_object_selector_cannot_pick_the_evicted_pod,
        the_per_stack_switch_lets_a_zone_go_while_another_is_down,
        ingesters_removed_by_a_scale_down_leave_the_ring_first,
        zones_turn_on_write_path_first_and_off_read_path_first,
        an_upgrade_restarts_only_what_the_new_release_renders_differently,
        pods_start_under_the_restricted_pod_security_standard,
        render_with_the_secret_is_what_the_operator_applies,
        idle_resyncs_write_nothing,
        a_new_leader_writes_nothing_when_nothing_changed,
        a_failover_repairs_a_field_removed_before_it,
    ];
    let runtime = match loki_zone_operator_tests::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let (passed, failed) = runtime.block_on(async {
        println!(
            "e2e: starting the {} Kubernetes control plane (hack/build-k8s.sh {}; the first run builds it, about 15 minutes)",
            kube.name(),
            kube.name()
        );
        let started = Instant::now();
        let mut env = match setup().await {
            Ok(env) => env,
            Err(e) => {
                println!("e2e setup FAILED: {e:#}");
                return (0, all.len());
            }
        };
        let version = env
            .admin
            .apiserver_version()
            .await
            .map_or_else(|e| format!("(version unknown: {e})"), |v| v.git_version);
        println!(
            "e2e: control plane {version}, CRD, RBAC and operator up in {:?}",
            started.elapsed()
        );
        let (mut passed, mut failed) = (0, 0);
        let mut broken = false;
        for (name, f) in all {
            if !filter.is_empty() && !filter.iter().any(|w| name.contains(w.as_str())) {
                continue;
            }
            if broken {
                println!("test {name} ... FAILED (skipped: the control plane died)");
                failed += 1;
                continue;
            }
            let t = Instant::now();
            let result = f(&mut env).await;
            match result {
                Ok(()) => {
                    println!("test {name} ... ok ({:.1?})", t.elapsed());
                    passed += 1;
                }
                Err(e) => {
                    println!("test {name} ... FAILED ({:.1?})\n    {e:#}", t.elapsed());
                    failed += 1;
                }
            }
            if let Err(e) = env.cp.check_alive() {
                println!("control plane died: {e:#}");
                broken = true;
            }
        }
        env.stop_operator();
        (passed, failed)
    });
    println!("\ne2e: {passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
