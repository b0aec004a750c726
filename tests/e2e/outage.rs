//! Zones that go dark the way real nodes fail: the node simulator stops a zone's
//! heartbeats, and the control plane's own node lifecycle controller marks its nodes
//! unreachable, taints them and evicts their pods, with the harness's shortened periods.
//!
//! The first scenario checks the Kubernetes side only. The others check what the stack
//! says about the outage: a `ZoneUnavailable` Warning while writes keep their quorum,
//! `WriteQuorumLost` when they do not, and everything restored when the zones return.
//! Each scenario brings back the zones it took down and waits until every stack that was
//! Ready before is Ready again, so later scenarios start from a whole cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::harness::UNREACHABLE_TOLERATION;
use loki_zone_operator_tests::nodesim::{eventually, ZONE};
use serde_json::{json, Value};

use super::{create_stack, namespace, nodes_by_name, stack_json, Env, WAIT, ZONES};

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// After an outage every stack's evicted pods are recreated, scheduled, annotated and
/// started again; with a dozen stacks on a 2-core machine that takes minutes.
const RECOVERY: std::time::Duration = std::time::Duration::from_secs(300);
pub(super) const OUTAGE_NS: &str = "e2e-outage";
pub(super) const OUTAGE_STACK: &str = "outage";

// --- The Kubernetes side ---------------------------------------------------------------

/// The Ready condition's status of a node ("True", "False", "Unknown"), if it has one.
fn node_ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The node's taints as (key, effect, timeAdded).
fn taints(n: &Node) -> Vec<(String, String, Option<Timestamp>)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect, t.time_added.map(|t| t.0)))
        .collect()
}

fn describe_node(n: &Node) -> String {
    let t: Vec<String> = taints(n)
        .into_iter()
        .map(|(k, e, _)| format!("{k}:{e}"))
        .collect();
    format!(
        "{} Ready={} taints=[{}]",
        n.name_any(),
        node_ready(n).unwrap_or_else(|| "<none>".into()),
        t.join(", ")
    )
}

/// Waits until the lifecycle controller has marked every node of `names` Ready=Unknown
/// and tainted it unreachable (NoSchedule and NoExecute). Returns when the NoExecute
/// taint went on, per node.
async fn wait_unreachable(env: &Env, names: &[String]) -> Result<BTreeMap<String, Timestamp>> {
    let api: Api<Node> = Api::all(env.admin.clone());
    eventually("the dark nodes marked unreachable", WAIT, || async {
        let mut added = BTreeMap::new();
        let mut pending = Vec::new();
        for name in names {
            let n = api.get(name).await?;
            let t = taints(&n);
            let has = |effect: &str| t.iter().find(|(k, e, _)| k == UNREACHABLE && e == effect);
            match (
                node_ready(&n).as_deref(),
                has("NoSchedule"),
                has("NoExecute"),
            ) {
                (Some("Unknown"), Some(_), Some((_, _, Some(at)))) => {
                    added.insert(name.clone(), *at);
                }
                _ => pending.push(describe_node(&n)),
            }
        }
        if pending.is_empty() {
            Ok(Some(added))
        } else {
            Err(anyhow!("not yet: {}", pending.join("; ")))
        }
    })
    .await
}

/// Waits until every node of `names` is Ready and carries no taint the lifecycle
/// controller adds (it removes them itself once the kubelet reports again).
async fn wait_reachable(env: &Env, names: &[String]) -> Result<()> {
    let api: Api<Node> = Api::all(env.admin.clone());
    eventually("the nodes Ready and untainted", WAIT, || async {
        let mut pending = Vec::new();
        for name in names {
            let n = api.get(name).await?;
            let tainted = taints(&n)
                .iter()
                .any(|(k, _, _)| k.starts_with("node.kubernetes.io/"));
            if node_ready(&n).as_deref() != Some("True") || tainted {
                pending.push(describe_node(&n));
            }
        }
        if pending.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("not yet: {}", pending.join("; ")))
        }
    })
    .await
}

/// Stacks (namespace, name) whose Ready condition is True now.
pub(super) async fn ready_stacks(env: &Env) -> Result<BTreeSet<(String, String)>> {
    Ok(Api::<LokiStack>::all(env.admin.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|s| {
            s.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
        .collect())
}

/// Takes `zones` down; returns their nodes.
async fn zones_down(env: &Env, zones: &[&str]) -> Result<Vec<String>> {
    let mut nodes = Vec::new();
    for z in zones {
        nodes.extend(env.sim.zone_down(z).await?);
    }
    ensure!(!nodes.is_empty(), "no nodes in {zones:?}");
    Ok(nodes)
}

/// Brings `zones` back and waits for the cluster to be whole again: their nodes Ready
/// and untainted, no pod left Terminating, and every stack of `ready_before` Ready.
pub(super) async fn restore(
    env: &Env,
    zones: &[&str],
    ready_before: &BTreeSet<(String, String)>,
) -> Result<()> {
    let mut nodes = Vec::new();
    for z in zones {
        env.sim.zone_up(z).await?;
        nodes.extend(env.sim.nodes_in_zone(z).await?);
    }
    wait_reachable(env, &nodes).await?;
    let pods: Api<Pod> = Api::all(env.admin.clone());
    eventually("no pod left Terminating", WAIT, || async {
        let terminating: Vec<String> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        if terminating.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("still Terminating: {terminating:?}"))
        }
    })
    .await?;
    eventually("every stack Ready again", RECOVERY, || async {
        let now = ready_stacks(env).await?;
        let missing: Vec<_> = ready_before.difference(&now).collect();
        if missing.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("not Ready yet: {missing:?}"))
        }
    })
    .await
}

fn pod_on(name: &str, node: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }))?)
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When the pod was deleted: its deletionTimestamp is that moment plus its grace period.
fn deleted_at(p: &Pod) -> Option<Timestamp> {
    let ts = p.metadata.deletion_timestamp.as_ref()?.0;
    let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
    ts.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(grace))
        .ok()
}

/// The Kubernetes side of a lost zone, on the real control plane: once zone-c's
/// heartbeats stop, its nodes become Ready=Unknown with the `unreachable` NoSchedule and
/// NoExecute taints; its pods are marked not Ready, then evicted (marked for deletion)
/// only after the default toleration of [`UNREACHABLE_TOLERATION`], and stay Terminating
/// while no kubelet confirms. Zone-a is untouched. When the zone returns, the taints go
/// and the evicted pods are removed.
pub(super) async fn zone_goes_dark_the_way_nodes_fail(env: &mut Env) -> Result<()> {
    let ns = "e2e-dark";
    namespace(env, ns).await?;
    let ready_before = ready_stacks(env).await?;
    let zone_c = env.sim.nodes_in_zone("zone-c").await?;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut dark_pods = Vec::new();
    for n in &zone_c {
        let name = format!("on-{n}");
        pods.create(&PostParams::default(), &pod_on(&name, n)?)
            .await?;
        dark_pods.push(name);
    }
    let healthy = "on-node-zone-a-0";
    pods.create(&PostParams::default(), &pod_on(healthy, "node-zone-a-0")?)
        .await?;
    eventually("the pods Running and Ready", WAIT, || async {
        let l = pods.list(&ListParams::default()).await?;
        Ok((l.items.len() == zone_c.len() + 1 && l.items.iter().all(is_ready)).then_some(()))
    })
    .await?;
    // The API server's admission gave every pod the shortened default toleration.
    let p = pods.get(healthy).await?;
    let tolerated = p
        .spec
        .and_then(|s| s.tolerations)
        .unwrap_or_default()
        .into_iter()
        .find(|t| t.key.as_deref() == Some(UNREACHABLE))
        .and_then(|t| t.toleration_seconds);
    ensure!(
        tolerated == Some(UNREACHABLE_TOLERATION.as_secs() as i64),
        "default unreachable toleration {tolerated:?}"
    );

    let went_dark = Instant::now();
    env.sim.zone_down("zone-c").await?;
    let outage = async {
        let tainted_at = wait_unreachable(env, &zone_c).await?;
        let noticed = went_dark.elapsed();
        let nodes = nodes_by_name(env).await?;
        for n in ["node-zone-a-0", "node-zone-a-1"] {
            let node = &nodes[n];
            ensure!(
                node_ready(node).as_deref() == Some("True") && taints(node).is_empty(),
                "a node of a live zone was touched: {}",
                describe_node(node)
            );
        }
        let evicted = eventually("the dark zone's pods evicted", WAIT, || async {
            let mut out = Vec::new();
            for name in &dark_pods {
                let p = pods.get(name).await?;
                if p.metadata.deletion_timestamp.is_none() {
                    return Ok(None);
                }
                out.push(p);
            }
            Ok(Some(out))
        })
        .await?;
        let evicted_after = went_dark.elapsed();
        for p in &evicted {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let at = deleted_at(p).context("deletion time")?;
            let taint = tainted_at.get(&node).context("taint time")?;
            let waited = at.duration_since(*taint);
            // timeAdded and deletionTimestamp have whole seconds.
            ensure!(
                waited.as_secs() + 1 >= UNREACHABLE_TOLERATION.as_secs() as i64,
                "{} evicted {waited:?} after the taint, before its toleration",
                p.name_any()
            );
            ensure!(!is_ready(p), "{} still Ready on a lost node", p.name_any());
        }
        let h = pods.get(healthy).await?;
        ensure!(
            h.metadata.deletion_timestamp.is_none() && is_ready(&h),
            "the pod of a live zone was evicted or marked not Ready"
        );
        println!(
            "    zone-c unreachable and tainted {noticed:.1?} after its heartbeats stopped; \
             its pods evicted {evicted_after:.1?} after"
        );
        Ok(())
    }
    .await;
    let back = restore(env, &["zone-c"], &ready_before).await;
    outage?;
    back?;
    // The reconnected kubelets finished what the eviction began.
    for name in &dark_pods {
        ensure!(
            pods.get_opt(name).await?.is_none(),
            "{name} still exists after its zone came back"
        );
    }
    Ok(())
}

// --- What the stack says ---------------------------------------------------------------

/// The stack's status as the API server stores it, without the typed API dropping
/// fields this operator build does not know.
async fn raw_status(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let ar = ApiResource::erase::<LokiStack>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let s = api.get(name).await?;
    Ok(s.data.get("status").cloned().unwrap_or(Value::Null))
}

fn raw_condition<'a>(status: &'a Value, t: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn is_true(status: &Value, t: &str, reason: &str) -> bool {
    raw_condition(status, t).is_some_and(|c| c["status"] == "True" && c["reason"] == reason)
}

/// Ready is True, whatever its reason.
fn is_ready_stack(status: &Value) -> bool {
    raw_condition(status, "Ready").is_some_and(|c| c["status"] == "True")
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// Waits until `check` accepts the stack's status; on timeout the error carries the
/// whole last status and what `check` found wrong with it.
async fn wait_status<T>(env: &Env, what: &str, check: impl Fn(&Value) -> Result<T>) -> Result<T> {
    let start = Instant::now();
    loop {
        let status = raw_status(&env.admin, OUTAGE_NS, OUTAGE_STACK).await?;
        match check(&status) {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() > WAIT => {
                return Err(anyhow!(
                    "timed out after {WAIT:?} waiting for {what}: {e:#}\nstatus: {}",
                    pretty(&status)
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The zone-aware RF 3 stack of the outage scenarios, Ready over zone-a/b/c.
pub(super) async fn outage_stack(env: &Env) -> Result<()> {
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    if api.get_opt(OUTAGE_STACK).await.ok().flatten().is_none() {
        if Api::<k8s_openapi::api::core::v1::Namespace>::all(env.admin.clone())
            .get_opt(OUTAGE_NS)
            .await?
            .is_none()
        {
            namespace(env, OUTAGE_NS).await?;
        }
        let replication = json!({"factor": 3, "zones": [{"topologyKey": ZONE}]});
        create_stack(
            env,
            OUTAGE_NS,
            stack_json(OUTAGE_STACK, "1x.small", replication),
        )
        .await?;
    }
    wait_status(env, "the outage stack Ready", |s| {
        ensure!(is_true(s, "Ready", "ReadyComponents"), "not Ready");
        Ok(())
    })
    .await?;
    deployments_rolled_out(env).await
}

/// Every Deployment of the outage stack runs its current template alone. A zone that
/// comes back rolls the stateless pods back (on servers without `nodeTaintsPolicy` their
/// template keeps them off an unavailable zone), and the stack is Ready again before that
/// rollout ends; a test that starts then would measure the tail of the last one's rollout
/// overlapping its own, three ReplicaSets of a Deployment at once.
async fn deployments_rolled_out(env: &Env) -> Result<()> {
    let deploys: Api<Deployment> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    eventually("the stack's Deployments rolled out", WAIT, || async {
        let mut rolling = Vec::new();
        for d in deploys.list(&ListParams::default()).await?.items {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let st = d.status.clone().unwrap_or_default();
            let current = st.observed_generation >= d.metadata.generation
                && st.replicas == Some(want)
                && st.updated_replicas == Some(want)
                && st.available_replicas == Some(want);
            if !current {
                rolling.push(d.name_any());
            }
        }
        if rolling.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("still rolling: {rolling:?}"))
        }
    })
    .await
}

/// The stack's pods: name -> (node, zone of the node, component, uid).
pub(super) async fn stack_pods(
    env: &Env,
) -> Result<BTreeMap<String, (String, String, String, String)>> {
    let nodes = nodes_by_name(env).await?;
    let mut out = BTreeMap::new();
    for p in Api::<Pod>::namespaced(env.admin.clone(), OUTAGE_NS)
        .list(&ListParams::default())
        .await?
    {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let zone = nodes
            .get(&node)
            .and_then(|n| n.labels().get(ZONE).cloned())
            .unwrap_or_default();
        let component = p
            .labels()
            .get("app.kubernetes.io/component")
            .cloned()
            .unwrap_or_default();
        out.insert(
            p.name_any(),
            (node, zone, component, p.uid().unwrap_or_default()),
        );
    }
    Ok(out)
}

/// Polls the stack's Ready condition in the background and keeps every poll that did not
/// find it True, so "Ready stays True" covers the whole outage, not the moments a check
/// happened to look.
struct ReadyWatch {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<(usize, Vec<String>)>>,
}

impl ReadyWatch {
    fn start(client: Client) -> ReadyWatch {
        let seen = Arc::new(Mutex::new((0, Vec::new())));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let found = match raw_status(&client, OUTAGE_NS, OUTAGE_STACK).await {
                    Ok(s) if is_ready_stack(&s) => None,
                    Ok(s) => Some(format!(
                        "{}: {}\nthe stack's pods as the API server has them then:\n{}",
                        Timestamp::now(),
                        pretty(&s),
                        pod_table(&client).await
                    )),
                    Err(e) => Some(format!("{}: reading the stack: {e:#}", Timestamp::now())),
                };
                {
                    let mut r = record.lock().unwrap_or_else(|e| e.into_inner());
                    r.0 += 1;
                    r.1.extend(found);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        ReadyWatch { task, seen }
    }

    /// Stops watching; fails with the first status that was not Ready.
    fn finish(self) -> Result<()> {
        self.task.abort();
        let (polls, bad) = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ensure!(
            polls >= 2,
            "the Ready condition was polled only {polls} times"
        );
        ensure!(
            bad.is_empty(),
            "Ready was not True in {} of {polls} polls during the outage; first:\n{}",
            bad.len(),
            bad[0]
        );
        Ok(())
    }
}

/// One line per pod of the outage namespace: what a status that was not Ready is checked
/// against, to tell a pod really gone from one the operator did not see.
async fn pod_table(client: &Client) -> String {
    let pods = match Api::<Pod>::namespaced(client.clone(), OUTAGE_NS)
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => return format!("  (listing pods: {e})"),
    };
    let mut out = String::new();
    for p in pods {
        let status = p.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map_or("-", |c| c.status.as_str());
        out.push_str(&format!(
            "  {} phase={} ready={} node={} deleting={} created={}\n",
            p.name_any(),
            status.and_then(|s| s.phase.as_deref()).unwrap_or("-"),
            ready,
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("-"),
            p.metadata.deletion_timestamp.is_some(),
            p.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
        ));
    }
    out
}

/// The contract of one lost zone out of three with RF 3, checked on a status.
fn one_zone_down_status(
    s: &Value,
    dark_nodes: &[String],
    stranded: &BTreeSet<String>,
) -> Result<()> {
    let w = raw_condition(s, "Warning").context("no Warning condition")?;
    ensure!(
        w["status"] == "True" && w["reason"] == "ZoneUnavailable",
        "Warning is not ZoneUnavailable"
    );
    let msg = w["message"].as_str().unwrap_or_default();
    ensure!(msg.contains("zone-c"), "the Warning does not name zone-c");
    for n in dark_nodes {
        ensure!(
            msg.contains(n.as_str()),
            "the Warning does not name node {n}"
        );
    }
    ensure!(
        stranded.iter().any(|p| msg.contains(p.as_str())),
        "the Warning names none of the stranded pods {stranded:?}"
    );
    ensure!(is_ready_stack(s), "not Ready");
    let r = &s["replication"];
    ensure!(r["writeQuorumMet"] == true, "writeQuorumMet is not true");
    ensure!(
        strings(&r["zonesAvailable"]) == ["zone-a", "zone-b"],
        "zonesAvailable is not [zone-a, zone-b]"
    );
    ensure!(
        strings(&r["zones"]) == ZONES,
        "zones does not list all three"
    );
    let zone_status = r["zoneStatus"].as_array().context("no zoneStatus")?;
    for z in ZONES {
        let e = zone_status
            .iter()
            .find(|e| e["zone"] == z)
            .with_context(|| format!("zoneStatus has no {z}"))?;
        let dark = z == "zone-c";
        ensure!(e["available"] == !dark, "zoneStatus {z}: available");
        for key in ["nodesReady", "nodes", "ingestersReady", "ingesters"] {
            ensure!(e[key].is_i64(), "zoneStatus {z}: {key} is not a number");
        }
        if dark {
            ensure!(
                e["nodesReady"] == 0 && e["nodes"] == dark_nodes.len() as i64,
                "zoneStatus zone-c: want 0/{} nodes ready",
                dark_nodes.len()
            );
            ensure!(
                e["ingestersReady"] == 0,
                "zoneStatus zone-c: ingesters Ready"
            );
        }
    }
    // A stranded pod that still exists is shown as Unknown, never Running or Ready.
    let components = s["components"].as_object().context("no components")?;
    for pods in components.values() {
        for phase in ["Ready", "Running"] {
            let listed = strings(&pods[phase]);
            if let Some(p) = listed.iter().find(|p| stranded.contains(*p)) {
                return Err(anyhow!("{p}, on a lost node, is listed as {phase}"));
            }
        }
    }
    let unknown: BTreeSet<String> = components
        .values()
        .flat_map(|pods| strings(&pods["Unknown"]))
        .collect();
    ensure!(
        stranded.iter().any(|p| unknown.contains(p)),
        "no stranded pod is listed under Unknown"
    );
    Ok(())
}

/// (a) One of three zones goes dark under an RF 3 stack: it keeps serving and says so.
/// Ready stays True for the whole outage, a `ZoneUnavailable` Warning names the zone,
/// its nodes and the stack's pods there, the per-zone status is right, pods on the lost
/// nodes are shown as Unknown, an edit is applied during the outage, and no ingester of
/// a healthy zone is replaced.
///
/// The edit scales the queriers 2 → 3: the one moment not held to Ready is that
/// scale-up's own, from the edit until the new querier is Ready (a component short of
/// its replicas is not ready, outage or not, as the Go operator reports it; the 1.20
/// suite never polled that moment, the 1.35 one did, twice in three runs).
/// Ready is checked from before the zone goes dark until the edit, and again from once
/// the stack is Ready with 3 queriers until the stranded pods are evicted.
pub(super) async fn one_zone_down_keeps_the_stack_ready(env: &mut Env) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let before = stack_pods(env).await?;
    let healthy_ingesters: BTreeMap<String, String> = before
        .iter()
        .filter(|(_, (_, zone, c, _))| c == "ingester" && zone != "zone-c")
        .map(|(name, (_, _, _, uid))| (name.clone(), uid.clone()))
        .collect();
    ensure!(
        !healthy_ingesters.is_empty(),
        "no ingester in zone-a or zone-b: {before:?}"
    );
    let mut watch = Some(ReadyWatch::start(env.admin.clone()));
    let dark_nodes = zones_down(env, &["zone-c"]).await?;
    let mut held = Vec::new();
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        let stranded: BTreeSet<String> = stack_pods(env)
            .await?
            .into_iter()
            .filter(|(_, (node, _, _, _))| dark_nodes.contains(node))
            .map(|(name, _)| name)
            .collect();
        ensure!(
            !stranded.is_empty(),
            "none of the stack's pods is in zone-c"
        );
        wait_status(env, "ZoneUnavailable for zone-c", |s| {
            one_zone_down_status(s, &dark_nodes, &stranded)
        })
        .await?;
        held.extend(watch.take().map(|w| w.finish().context("before the edit")));

        let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
        let edited = api
            .patch(
                OUTAGE_STACK,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"template": {"querier": {"replicas": 3}}}})),
            )
            .await?;
        let generation = edited.metadata.generation.context("generation")?;
        wait_status(env, "the edit applied during the outage", |s| {
            ensure!(
                s["observedGeneration"] == generation,
                "observedGeneration is not {generation}"
            );
            Ok(())
        })
        .await?;
        let querier = format!("{OUTAGE_STACK}-querier");
        let deploys: Api<Deployment> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
        eventually("the querier Deployment at 3 replicas", WAIT, || async {
            let d = deploys.get(&querier).await?;
            Ok((d.spec.and_then(|s| s.replicas) == Some(3)).then_some(()))
        })
        .await?;
        wait_status(env, "Ready with the third querier", |s| {
            ensure!(is_ready_stack(s), "not Ready");
            Ok(())
        })
        .await?;
        watch = Some(ReadyWatch::start(env.admin.clone()));

        // The outage lasts through the evictions, and Ready holds through them.
        let pods: Api<Pod> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
        eventually("the stranded pods evicted", WAIT, || async {
            for name in &stranded {
                if let Some(p) = pods.get_opt(name).await? {
                    if p.metadata.deletion_timestamp.is_none() {
                        return Ok(None);
                    }
                }
            }
            Ok(Some(()))
        })
        .await?;
        let now = stack_pods(env).await?;
        for (name, uid) in &healthy_ingesters {
            let kept = now.get(name).is_some_and(|(_, _, _, u)| u == uid);
            ensure!(
                kept,
                "ingester {name} of a healthy zone was replaced during the outage"
            );
        }
        anyhow::Ok(())
    }
    .await;
    held.extend(watch.map(|w| w.finish().context("after the edit")));
    let back = restore(env, &["zone-c"], &ready_before).await;
    outage?;
    held.into_iter().collect::<Result<Vec<()>>>()?;
    back
}

/// (b) Two of three zones dark under RF 3: writes have no quorum, and the stack says so
/// plainly with Degraded `WriteQuorumLost`.
pub(super) async fn two_zones_down_lose_write_quorum(env: &mut Env) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let dark_nodes = zones_down(env, &["zone-c", "zone-b"]).await?;
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        wait_status(env, "Degraded WriteQuorumLost", |s| {
            let d = raw_condition(s, "Degraded").context("no Degraded condition")?;
            ensure!(
                d["status"] == "True" && d["reason"] == "WriteQuorumLost",
                "Degraded is not WriteQuorumLost"
            );
            let msg = d["message"].as_str().unwrap_or_default();
            ensure!(
                msg.contains("write quorum"),
                "the message does not say \"write quorum\""
            );
            ensure!(
                s["replication"]["writeQuorumMet"] == false,
                "writeQuorumMet is not false"
            );
            Ok(())
        })
        .await
    }
    .await;
    let back = restore(env, &["zone-c", "zone-b"], &ready_before).await;
    outage?;
    back
}

/// (c) Both lost zones come back: the outage conditions clear, Ready is True again and
/// the stack tolerates one zone failure again, with every zone available.
pub(super) async fn zones_come_back_and_tolerance_is_restored(env: &mut Env) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let dark_nodes = zones_down(env, &["zone-c", "zone-b"]).await?;
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        wait_status(env, "the outage seen: only zone-a available", |s| {
            let available = strings(&s["replication"]["zonesAvailable"]);
            ensure!(available == ["zone-a"], "zonesAvailable is not [zone-a]");
            Ok(())
        })
        .await
    }
    .await;
    let back = restore(env, &["zone-c", "zone-b"], &ready_before).await;
    outage?;
    back?;
    let came_back = Instant::now();
    wait_status(env, "the outage cleared", |s| {
        let w = raw_condition(s, "Warning");
        ensure!(
            !w.is_some_and(|w| w["status"] == "True" && w["reason"] == "ZoneUnavailable"),
            "Warning is still ZoneUnavailable"
        );
        let d = raw_condition(s, "Degraded").context("no Degraded condition")?;
        ensure!(d["status"] == "False", "Degraded is not False");
        ensure!(is_true(s, "Ready", "ReadyComponents"), "not Ready");
        let r = &s["replication"];
        ensure!(
            r["zoneFailuresTolerated"] == 1,
            "zoneFailuresTolerated is not 1"
        );
        ensure!(
            strings(&r["zonesAvailable"]) == ZONES,
            "zonesAvailable does not list every zone"
        );
        ensure!(r["writeQuorumMet"] == true, "writeQuorumMet is not true");
        let zone_status = r["zoneStatus"].as_array().context("no zoneStatus")?;
        ensure!(
            zone_status.len() == ZONES.len() && zone_status.iter().all(|e| e["available"] == true),
            "zoneStatus does not show every zone available"
        );
        Ok(())
    })
    .await?;
    println!(
        "    cleared {:.1?} after the zones were back",
        came_back.elapsed()
    );
    Ok(())
}

/// (e) A lost zone's nodes are deleted, as a cluster autoscaler removes nodes that stopped
/// reporting, while the stack's volumes are still pinned there. The zone stays known
/// through those volumes: no `ZonesInsufficient`, Ready holds, and `ZoneUnavailable` says
/// no node is left and names the pinned claims. When nodes of the zone register again
/// (same names, as a replaced node pool would), the stack recovers by itself.
pub(super) async fn a_lost_zones_nodes_deleted_while_volumes_are_pinned_there(
    env: &mut Env,
) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let pinned_claim = format!("storage-{OUTAGE_STACK}-ingester-");
    let dark_nodes = zones_down(env, &["zone-c"]).await?;
    // Earlier scenarios label some of these nodes with keys of their own: they register
    // again with exactly the labels they had.
    let by_name = nodes_by_name(env).await?;
    let labels: BTreeMap<String, BTreeMap<String, String>> = dark_nodes
        .iter()
        .map(|n| {
            (
                n.clone(),
                by_name
                    .get(n)
                    .map(|n| n.labels().clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        for n in &dark_nodes {
            env.sim.delete_node(n).await?;
        }
        wait_status(env, "zone-c known through its volumes only", |s| {
            let r = &s["replication"];
            ensure!(
                strings(&r["zones"]) == ZONES,
                "zones does not list all three"
            );
            ensure!(
                strings(&r["zonesAvailable"]) == ["zone-a", "zone-b"],
                "zonesAvailable is not [zone-a, zone-b]"
            );
            let d = raw_condition(s, "Degraded").context("no Degraded condition")?;
            ensure!(d["status"] == "False", "Degraded: {}", d["reason"]);
            ensure!(is_ready_stack(s), "not Ready");
            let w = raw_condition(s, "Warning").context("no Warning condition")?;
            ensure!(
                w["reason"] == "ZoneUnavailable",
                "Warning is not ZoneUnavailable"
            );
            let msg = w["message"].as_str().unwrap_or_default();
            ensure!(
                msg.contains("zone zone-c is unavailable") && msg.contains("no node is left"),
                "the Warning does not say zone-c has no node left"
            );
            ensure!(
                msg.contains(&pinned_claim),
                "the Warning names no claim {pinned_claim}*"
            );
            Ok(())
        })
        .await
    }
    .await;
    for (n, l) in &labels {
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        env.sim.create_node(n, &l).await?;
    }
    let back = restore(env, &["zone-c"], &ready_before).await;
    outage?;
    back
}

/// Waits until the pod runs Ready outside `lost_zone`; returns its zone.
async fn ready_outside(env: &Env, pod: &str, lost_zone: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    let nodes = nodes_by_name(env).await?;
    let what = format!("{pod} Ready in an available zone");
    eventually(&what, RECOVERY, || async {
        let Some(p) = pods.get_opt(pod).await? else {
            return Ok(None);
        };
        let zone = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| nodes.get(n))
            .and_then(|n| n.labels().get(ZONE).cloned());
        Ok(zone.filter(|z| is_ready(&p) && z != lost_zone))
    })
    .await
}

/// The optional RBAC component of `manifests/components/zone-outage-recovery`, bound to
/// the operator's ServiceAccount as its kustomization binds it.
/// Sets (or, `None`, removes) the outage stack's `zoneOutage.recoverAfter`.
async fn recover_after(env: &Env, after: Option<&str>) -> Result<()> {
    let api: Api<LokiStack> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    let zone_outage = after.map(|a| json!({"recoverAfter": a}));
    let patch = json!({"spec": {"replication": {"zoneOutage": zone_outage}}});
    api.patch(OUTAGE_STACK, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn grant_recovery_rights(env: &Env, grant: bool) -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let dir =
        loki_zone_operator_tests::repo_root().join("manifests/components/zone-outage-recovery");
    let role: ClusterRole =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("cluster_role.yaml"))?)?;
    let mut binding: ClusterRoleBinding = serde_yaml_ng::from_str(&std::fs::read_to_string(
        dir.join("cluster_role_binding.yaml"),
    )?)?;
    for s in binding.subjects.iter_mut().flatten() {
        s.namespace = Some(loki_zone_operator_tests::operator::NAMESPACE.into());
    }
    let roles: Api<ClusterRole> = Api::all(env.admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(env.admin.clone());
    let (role_name, binding_name) = (role.name_any(), binding.name_any());
    if grant {
        roles.create(&PostParams::default(), &role).await?;
        bindings.create(&PostParams::default(), &binding).await?;
    } else {
        bindings.delete(&binding_name, &Default::default()).await?;
        roles.delete(&role_name, &Default::default()).await?;
    }
    Ok(())
}

/// Taints `nodes` out of service (an admin's statement that they are shut down), or
/// removes the taint.
async fn fence(env: &Env, nodes: &[String], on: bool) -> Result<()> {
    let api: Api<Node> = Api::all(env.admin.clone());
    for n in nodes {
        let mut node = api.get(n).await?;
        let spec = node.spec.get_or_insert_with(Default::default);
        let mut taints = spec.taints.take().unwrap_or_default();
        taints.retain(|t| t.key != names::TAINT_OUT_OF_SERVICE);
        if on {
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: names::TAINT_OUT_OF_SERVICE.into(),
                value: Some("nodeshutdown".into()),
                effect: "NoExecute".into(),
                ..Default::default()
            });
        }
        let patch = json!({"spec": {"taints": taints}});
        api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// (d) The opt-in recovery moves the compactor out of a lost zone, once its node is
/// known to be off. The zone that holds the compactor goes dark under a stack with
/// `zoneOutage.recoverAfter`: the compactor is the only one, so while its node is only
/// unreachable (it may still run the compactor behind a partition) the Warning says it is
/// not moved and how to fence the node. The test fences it as told; without the optional
/// delete rights, the Warning then says the pod could not be moved and gives the
/// runbook's commands; once the zone-outage-recovery component is installed, the
/// operator deletes the compactor's claims and pod, and the compactor runs Ready in an
/// available zone while the zone is still dark. Ingesters stay where they are.
pub(super) async fn compactor_is_moved_out_of_a_lost_zone_when_opted_in(
    env: &mut Env,
) -> Result<()> {
    outage_stack(env).await?;
    recover_after(env, Some("15m")).await?;
    let ready_before = ready_stacks(env).await?;
    let compactor = format!("{OUTAGE_STACK}-compactor-0");
    let before = stack_pods(env).await?;
    let (_, lost_zone, _, _) = before
        .get(&compactor)
        .cloned()
        .with_context(|| format!("no {compactor}: {before:?}"))?;
    let ingesters: BTreeMap<String, String> = before
        .iter()
        .filter(|(_, (_, _, c, _))| c == "ingester")
        .map(|(n, (_, _, _, uid))| (n.clone(), uid.clone()))
        .collect();
    let dark_nodes = zones_down(env, &[lost_zone.as_str()]).await?;
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        let (node, _, _, _) = before.get(&compactor).cloned().context("the compactor")?;
        let taint = format!("kubectl taint node {node} {}=nodeshutdown:NoExecute", names::TAINT_OUT_OF_SERVICE);
        wait_status(env, "the Warning says to fence the compactor's node first", |s| {
            let w = raw_condition(s, "Warning").context("no Warning condition")?;
            let msg = w["message"].as_str().unwrap_or_default();
            ensure!(msg.contains("not known to have stopped"), "no \"not known to have stopped\"");
            ensure!(msg.contains(&taint), "the Warning lacks {taint:?}");
            Ok(())
        })
        .await?;
        fence(env, &dark_nodes, true).await?;
        let command = format!("kubectl -n {OUTAGE_NS} delete pvc storage-{compactor} --wait=false && kubectl -n {OUTAGE_NS} delete pod {compactor} --grace-period=0 --force");
        wait_status(env, "the Warning gives the commands it may not run", |s| {
            let w = raw_condition(s, "Warning").context("no Warning condition")?;
            let msg = w["message"].as_str().unwrap_or_default();
            ensure!(msg.contains("could not be moved"), "no \"could not be moved\"");
            ensure!(msg.contains(&command), "the Warning lacks {command:?}");
            Ok(())
        })
        .await?;
        grant_recovery_rights(env, true).await?;
        let moved = ready_outside(env, &compactor, &lost_zone).await?;
        println!("    compactor moved from {lost_zone} to {moved}");
        let now = stack_pods(env).await?;
        for (name, uid) in &ingesters {
            let kept = now.get(name).is_some_and(|(_, _, _, u)| u == uid);
            ensure!(kept, "ingester {name} was moved or replaced");
        }
        anyhow::Ok(())
    }
    .await;
    let revoked = grant_recovery_rights(env, false).await;
    recover_after(env, None).await?;
    // The runbook's way back: the zone's nodes return, and the taint goes.
    let unfenced = fence(env, &dark_nodes, false).await;
    let back = restore(env, &[lost_zone.as_str()], &ready_before).await;
    outage?;
    revoked?;
    unfenced?;
    back
}

/// Runs one of the runbook's shell commands as an admin would, with kubectl.
fn admin_sh(env: &Env, command: &str) -> Result<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("KUBECONFIG", &env.cp.admin_kubeconfig)
        .env("KUBECACHEDIR", env.cp.kubectl_cache_dir())
        .output()
        .with_context(|| format!("running {command:?} (kubectl is needed)"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{command:?} failed: {text}");
    Ok(text)
}

/// (d) The runbook without the out-of-service taint, run by hand: the compactor's zone goes dark
/// under a stack without the opt-in; the `ZoneUnavailable` message gives the commands of
/// the runbook's step 1 for the compactor, which the test runs with kubectl as they are
/// printed; then step 2 (once the claim is gone, delete the recreated pod); and the
/// compactor runs Ready in an available zone while its zone is still dark.
pub(super) async fn runbook_commands_move_the_compactor_out_of_a_lost_zone(
    env: &mut Env,
) -> Result<()> {
    outage_stack(env).await?;
    let ready_before = ready_stacks(env).await?;
    let compactor = format!("{OUTAGE_STACK}-compactor-0");
    let claim = format!("storage-{compactor}");
    let before = stack_pods(env).await?;
    let (_, lost_zone, _, _) = before
        .get(&compactor)
        .cloned()
        .with_context(|| format!("no {compactor}: {before:?}"))?;
    let dark_nodes = zones_down(env, &[lost_zone.as_str()]).await?;
    let outage = async {
        wait_unreachable(env, &dark_nodes).await?;
        let start = format!("kubectl -n {OUTAGE_NS} delete pvc {claim} ");
        let step1 = wait_status(env, "the Warning gives the runbook's commands", |s| {
            let w = raw_condition(s, "Warning").context("no Warning condition")?;
            let msg = w["message"].as_str().unwrap_or_default();
            let from = msg.find(&start).context("no command for the compactor")?;
            let end = msg[from..].find(" --force").context("no --force")? + " --force".len();
            Ok(msg[from..from + end].to_string())
        })
        .await?;
        println!("    runbook step 1: {step1}");
        admin_sh(env, &step1)?;
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(env.admin.clone(), OUTAGE_NS);
        eventually("the old claim gone", WAIT, || async {
            Ok(claims.get_opt(&claim).await?.map_or(Some(()), |c| {
                (c.metadata.deletion_timestamp.is_none()).then_some(())
            }))
        })
        .await?;
        // The StatefulSet may not have recreated the pod yet (under load it takes a
        // while): then there is nothing to delete, as for a user.
        admin_sh(
            env,
            &format!("kubectl -n {OUTAGE_NS} delete pod {compactor} --ignore-not-found"),
        )?;
        let moved = ready_outside(env, &compactor, &lost_zone).await?;
        println!("    compactor moved by hand from {lost_zone} to {moved}");
        anyhow::Ok(())
    }
    .await;
    let back = restore(env, &[lost_zone.as_str()], &ready_before).await;
    outage?;
    back
}

/// (e) A cordon is maintenance, not an outage. The zone that holds the compactor is
/// cordoned (every node Ready and running its pods, `spec.unschedulable` set, as `kubectl
/// cordon` and a drain's first step do) under a stack that opted in to recovery, with the
/// delete rights installed. No recovery clock starts (the status announces no move), and
/// nothing recovery could touch is deleted: every pod of the compactor, index gateway,
/// ruler and ingesters keeps its UID, and every claim its UID.
/// What the status of the outage stack says while `zone` is cordoned with its pods
/// serving: maintenance (never an outage), the zone still available, the quorum and the
/// tolerated failures as with every zone up. Returns the Warning's message.
fn maintenance_status(s: &Value, zone: &str, nodes: &[String]) -> Result<String> {
    let warning = raw_condition(s, "Warning").context("no Warning condition")?;
    ensure!(
        warning["status"] == "True" && warning["reason"] == "ZoneMaintenance",
        "Warning is not ZoneMaintenance: {warning}"
    );
    let message = warning["message"].as_str().unwrap_or_default().to_string();
    ensure!(
        message.contains(&format!("zone {zone} is in maintenance"))
            && !message.contains("unavailable"),
        "{message}"
    );
    for n in nodes {
        ensure!(
            message.contains(&format!("{n} (cordoned)")),
            "{n} not named: {message}"
        );
    }
    ensure!(
        !is_true(s, "Degraded", "WriteQuorumLost"),
        "degraded: {}",
        pretty(s)
    );
    let r = &s["replication"];
    ensure!(
        strings(&r["zonesAvailable"]).iter().any(|z| z == zone),
        "{zone} not in zonesAvailable: {}",
        r["zonesAvailable"]
    );
    ensure!(
        r["writeQuorumMet"] == true,
        "writeQuorumMet: {}",
        r["writeQuorumMet"]
    );
    ensure!(
        r["zoneFailuresTolerated"] == 1,
        "zoneFailuresTolerated: {}",
        r["zoneFailuresTolerated"]
    );
    let state = r["zoneStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|z| z["zone"] == zone)
        .with_context(|| format!("no zoneStatus for {zone}"))?;
    ensure!(
        state["state"] == "Maintenance" && state["available"] == true,
        "zoneStatus of {zone}: {state}"
    );
    Ok(message)
}

pub(super) async fn a_cordoned_zone_is_never_recovered(env: &mut Env) -> Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    outage_stack(env).await?;
    recover_after(env, Some("5m")).await?;
    let compactor = format!("{OUTAGE_STACK}-compactor-0");
    let before = stack_pods(env).await?;
    let (_, zone, _, _) = before
        .get(&compactor)
        .cloned()
        .with_context(|| format!("no {compactor}: {before:?}"))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.admin.clone(), OUTAGE_NS);
    let claim_uids = |list: Vec<PersistentVolumeClaim>| -> BTreeMap<String, String> {
        list.into_iter()
            .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
            .collect()
    };
    let claims_before = claim_uids(claims.list(&ListParams::default()).await?.items);
    let nodes: Api<Node> = Api::all(env.admin.clone());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    let in_zone = env.sim.nodes_in_zone(&zone).await?;
    grant_recovery_rights(env, true).await?;
    let result = async {
        let ready = ReadyWatch::start(env.admin.clone());
        for n in &in_zone {
            nodes
                .patch(n, &PatchParams::default(), &Patch::Merge(&cordon(true)))
                .await?;
        }
        let message = wait_status(env, "the zone in maintenance", |s| {
            maintenance_status(s, &zone, &in_zone)
        })
        .await?;
        // A few reconciles of the stack. No recovery clock runs in maintenance: had the
        // cordon started one, the status would announce the move at a time to come.
        tokio::time::sleep(Duration::from_secs(15)).await;
        let status = raw_status(&env.admin, OUTAGE_NS, OUTAGE_STACK).await?;
        maintenance_status(&status, &zone, &in_zone)
            .context("15 s into the cordon, the status no longer says maintenance")?;
        let warning = raw_condition(&status, "Warning")
            .and_then(|w| w["message"].as_str().map(String::from))
            .unwrap_or_default();
        for move_note in ["will be moved", "could not be moved", "not known to have stopped"] {
            ensure!(!warning.contains(move_note), "a cordon announced a move ({move_note:?}): {warning}");
        }
        ready.finish()?;
        println!("    status: {message}");
        let after = stack_pods(env).await?;
        let stateful = ["compactor", "index-gateway", "ruler", "ingester"];
        for (name, (_, _, component, uid)) in &before {
            if !stateful.contains(&component.as_str()) {
                continue;
            }
            let kept = after.get(name).is_some_and(|(_, _, _, u)| u == uid);
            ensure!(kept, "pod {name} was deleted or replaced under a cordon of {zone}");
        }
        let claims_after = claim_uids(claims.list(&ListParams::default()).await?.items);
        for (name, uid) in &claims_before {
            ensure!(
                claims_after.get(name) == Some(uid),
                "claim {name} was deleted under a cordon of {zone}"
            );
        }
        println!(
            "    {zone} cordoned ({} nodes) with recoverAfter 5m: after 15 s, {} pods and {} claims kept",
            in_zone.len(),
            before.len(),
            claims_before.len()
        );
        anyhow::Ok(())
    }
    .await;
    for n in &in_zone {
        nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(&cordon(false)))
            .await?;
    }
    let revoked = grant_recovery_rights(env, false).await;
    recover_after(env, None).await?;
    result?;
    revoked
}
