//! The node simulator: nodes without kubelets, and the parts of a kubelet and a cloud
//! volume provisioner the tests need.
//!
//! - Nodes are created with zone, region and hostname labels and room for every stack
//!   size. Like kubelets, the simulator renews each node's Lease in `kube-node-lease` and
//!   the Ready condition's heartbeat every [`HEARTBEAT`], so the control plane's node
//!   lifecycle controller sees live nodes, and sees a node die when its heartbeats stop.
//!   [`NodeSim::with_heartbeats`] makes them rarer, or Lease renewals only (the bench's
//!   scale section, where the nodes are not what is measured).
//! - [`NodeSim::zone_down`] cuts a zone's nodes off, as a lost zone does: no heartbeats
//!   and no pod updates. The lifecycle controller then marks the nodes unreachable,
//!   taints them and evicts their pods, which stay Terminating since no kubelet confirms.
//!   [`NodeSim::zone_up`] reconnects them: Ready again, evicted pods removed, the others
//!   reported Running and Ready again.
//! - Bound pods become Running and Ready, with the pod IP 127.0.0.1 (see [`PodIps`]),
//!   except a pod with the zone init container, which stays Pending until its zone
//!   annotation is set, as the real init container would. Pods being deleted are
//!   removed at once, as a kubelet would once they stop.
//! - Claims of the simulated zonal StorageClass (`WaitForFirstConsumer`) get a
//!   PersistentVolume bound to them, with node affinity to the zone of the node the
//!   scheduler selected, the way a cloud disk behaves.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use loki_zone_operator::model::names;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const STORAGE_CLASS: &str = "zonal";
pub const PROVISIONER: &str = "e2e.loki-zone-operator.dev/zonal";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// How often a simulated kubelet renews its node's Lease and Ready heartbeat; well inside
/// the harness's `--node-monitor-grace-period`.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Heartbeats sent at once: enough for a thousand nodes within one [`HEARTBEAT`].
const HEARTBEAT_CONCURRENCY: usize = 16;

/// Names of the nodes whose kubelets are cut off.
type Dark = Arc<Mutex<BTreeSet<String>>>;

fn is_dark(dark: &Dark, node: &str) -> bool {
    dark.lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(node)
}

/// How the simulated kubelets heartbeat.
#[derive(Clone, Copy, Debug)]
pub struct Heartbeats {
    /// How often every live node is renewed.
    pub every: Duration,
    /// Whether each heartbeat also posts the node's status (the Ready condition's
    /// heartbeat), or only renews its Lease, as kubelets since 1.17 do between status
    /// reports; the node lifecycle controller takes either as a sign of life.
    pub status: bool,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Heartbeats {
            every: HEARTBEAT,
            status: true,
        }
    }
}

#[derive(Clone)]
pub struct NodeSim {
    client: Client,
    dark: Dark,
    ready_after: Duration,
    heartbeats: Heartbeats,
    pod_ips: PodIps,
}

/// The IP a simulated kubelet reports for a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodIps {
    /// 127.0.0.1 for every pod, so that what the operator sends to a pod (an ingester's
    /// flush before a scale-down) stays on this machine, where a scenario can answer it.
    /// Endpoints validation refuses loopback addresses, so the endpoints controller
    /// fails on every Service with a ready pod, retries and records a Warning each time.
    #[default]
    Loopback,
    /// A distinct address per pod from 198.18.0.0/15, the block RFC 2544 sets aside for
    /// benchmarks, so the endpoints controller writes Endpoints as it does in a cluster.
    /// Only where nothing dials a pod: the bench's scale section never resizes a stack,
    /// so the operator never calls an ingester, and nothing else here calls pods.
    Distinct,
}

/// Addresses handed out under [`PodIps::Distinct`], in this process.
static NEXT_POD_IP: AtomicU32 = AtomicU32::new(0);

impl PodIps {
    /// The pod's address: the one it reports already (a pod reported Ready again after
    /// its node came back keeps its IP), else a new one.
    fn for_pod(self, pod: &Pod) -> String {
        let reported = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty());
        match self {
            PodIps::Loopback => Ipv4Addr::LOCALHOST.to_string(),
            PodIps::Distinct => reported.unwrap_or_else(|| {
                // 2^17 - 2 host addresses in the /15; wrapping is harmless at bench scale.
                let n = NEXT_POD_IP.fetch_add(1, Ordering::Relaxed) % ((1 << 17) - 2) + 1;
                Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + n).to_string()
            }),
        }
    }
}

/// The node status a kubelet posts: capacity and the conditions the lifecycle controller
/// reads (it marks every one of them Unknown when the heartbeats stop). `ready_since` is
/// kept across heartbeats, as a kubelet keeps a condition's lastTransitionTime.
fn node_status(ready_since: &str) -> serde_json::Value {
    let capacity =
        json!({"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "500Gi"});
    let now = Timestamp::now().to_string();
    let condition = |t: &str, status: &str, reason: &str| {
        json!({
            "type": t, "status": status, "reason": reason, "message": "simulated kubelet",
            "lastHeartbeatTime": now, "lastTransitionTime": ready_since,
        })
    };
    json!({"status": {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", "True", "KubeletReady"),
        ],
    }})
}

/// When the node's Ready condition last became True, if it is True.
fn ready_since(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
}

/// One heartbeat of a node's kubelet: its Lease renewed (created the first time) and,
/// with `status`, its status posted with a fresh Ready heartbeat. Taints are left to the
/// lifecycle controller, which removes those it added once the node is Ready again.
async fn heartbeat(client: &Client, node: &Node, how: Heartbeats) -> Result<()> {
    let name = node.name_any();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let spec = json!({
        "holderIdentity": name,
        // A kubelet renews its Lease every quarter of the duration, which is what the
        // operator's fast failover expects of it: four heartbeats.
        "leaseDurationSeconds": (how.every.as_secs() * 4).max(1),
        "renewTime": MicroTime(Timestamp::now()),
    });
    let renewed = leases
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await;
    match renewed {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            // Owned by its node, as a kubelet's Lease is: deleting the node collects it.
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name, "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": name, "uid": node.uid(),
                }]},
                "spec": spec,
            }))?;
            match leases.create(&PostParams::default(), &lease).await {
                // Created by a concurrent heartbeat of the same node.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                other => {
                    other.with_context(|| format!("creating the Lease of node {name}"))?;
                }
            }
        }
        other => {
            other.with_context(|| format!("renewing the Lease of node {name}"))?;
        }
    }
    if !how.status {
        return Ok(());
    }
    let since = ready_since(node).unwrap_or_else(|| Timestamp::now().to_string());
    Api::<Node>::all(client.clone())
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(&node_status(&since)),
        )
        .await
        .with_context(|| format!("node {name} status"))?;
    Ok(())
}

impl NodeSim {
    pub fn new(client: Client) -> Self {
        NodeSim {
            client,
            dark: Dark::default(),
            ready_after: Duration::ZERO,
            heartbeats: Heartbeats::default(),
            pod_ips: PodIps::default(),
        }
    }

    /// Pod IPs other than 127.0.0.1 for every pod: see [`PodIps::Distinct`] for where
    /// that is safe.
    pub fn with_pod_ips(mut self, pod_ips: PodIps) -> Self {
        self.pod_ips = pod_ips;
        self
    }

    /// Heartbeats other than the default (every [`HEARTBEAT`], Lease and status): the
    /// bench's scale section renews Leases only, and seldom, so that the nodes cost the
    /// API server little when they are not what is measured. The control plane's
    /// `--node-monitor-grace-period` must then hold several periods.
    pub fn with_heartbeats(mut self, heartbeats: Heartbeats) -> Self {
        self.heartbeats = heartbeats;
        self
    }

    /// Pods turn Running and Ready this long after they are bound, as an ingester does
    /// once it has replayed its WAL and joined the ring (default: at once).
    pub fn with_ready_after(mut self, delay: Duration) -> Self {
        self.ready_after = delay;
        self
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// The zonal StorageClass, marked default so claims without a class use it too.
    pub async fn install_storage_class(&self) -> Result<()> {
        let sc: StorageClass = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        }))?;
        let api: Api<StorageClass> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &sc).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a node with these labels (plus hostname) and reports it Ready at once, as
    /// a kubelet registers its node, so the lifecycle controller never finds it without
    /// a heartbeat. [`NodeSim::run`] keeps it alive from then on.
    pub async fn create_node(&self, name: &str, labels: &[(&str, &str)]) -> Result<()> {
        let mut l: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.insert(HOSTNAME.into(), name.into());
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": l}}))?;
        let node = self
            .nodes()
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        let how = Heartbeats {
            status: true,
            ..self.heartbeats
        };
        heartbeat(&self.client, &node, how).await
    }

    /// `per_zone` nodes in each zone, named `node-<zone>-<i>`.
    pub async fn create_zones(&self, zones: &[&str], per_zone: usize) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for z in zones {
            for i in 0..per_zone {
                let name = format!("node-{z}-{i}");
                self.create_node(&name, &[(ZONE, z), (REGION, "e2e-region")])
                    .await?;
                names.push(name);
            }
        }
        Ok(names)
    }

    /// The names of the nodes labelled with `zone`.
    pub async fn nodes_in_zone(&self, zone: &str) -> Result<Vec<String>> {
        let list = self
            .nodes()
            .list(&ListParams::default().labels(&format!("{ZONE}={zone}")))
            .await?;
        Ok(list.items.iter().map(|n| n.name_any()).collect())
    }

    /// The zone goes dark: its nodes' kubelets stop heartbeating and stop updating their
    /// pods. Everything else is left to the control plane. Returns the nodes cut off.
    pub async fn zone_down(&self, zone: &str) -> Result<Vec<String>> {
        let nodes = self.nodes_in_zone(zone).await?;
        self.dark
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(nodes.iter().cloned());
        Ok(nodes)
    }

    /// The zone reconnects: each kubelet reports its node Ready at once, removes the pods
    /// that were evicted meanwhile and reports the others Running and Ready again.
    pub async fn zone_up(&self, zone: &str) -> Result<()> {
        for name in self.nodes_in_zone(zone).await? {
            self.dark
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            let node = self.nodes().get(&name).await?;
            let how = Heartbeats {
                status: true,
                ..self.heartbeats
            };
            heartbeat(&self.client, &node, how).await?;
            let pods: Api<Pod> = Api::all(self.client.clone());
            let on_node = ListParams::default().fields(&format!("spec.nodeName={name}"));
            for pod in pods.list(&on_node).await? {
                sync_pod(&self.client, &self.dark, &pod, self.pod_ips).await;
            }
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) a label.
    pub async fn relabel(&self, name: &str, key: &str, value: Option<&str>) -> Result<()> {
        self.nodes()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {key: value}}})),
            )
            .await?;
        Ok(())
    }

    pub async fn delete_node(&self, name: &str) -> Result<()> {
        self.nodes().delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    /// Starts the kubelet (heartbeats and pods) and provisioner loops. They run until
    /// the returned [`Running`] is dropped: hold it for as long as the API server runs,
    /// and drop it before the control plane stops for good (declared after the
    /// [`ControlPlane`](crate::harness::ControlPlane), it is dropped first). An API server
    /// that stops and starts again meanwhile (a restart) only pauses them.
    pub fn run(&self) -> Running {
        let (stop, stopped) = watch::channel(false);
        let loops: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = vec![
            Box::pin(heartbeats(
                self.client.clone(),
                self.dark.clone(),
                self.heartbeats,
            )),
            Box::pin(kubelet(
                self.client.clone(),
                self.dark.clone(),
                self.ready_after,
                self.pod_ips,
            )),
            Box::pin(provisioner(self.client.clone())),
        ];
        let handles = loops
            .into_iter()
            .map(|l| {
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        // Asked first: a loop told to stop never prints one more line.
                        biased;
                        _ = stopped.wait_for(|s| *s) => {}
                        () = l => {}
                    }
                })
            })
            .collect();
        Running { stop, handles }
    }
}

/// The simulator's loops, from [`NodeSim::run`] until this is dropped: then they end at
/// once, their requests under way cancelled, so a control plane stopped next hears
/// nothing more from them and they print nothing.
pub struct Running {
    stop: watch::Sender<bool>,
    handles: Vec<JoinHandle<()>>,
}

impl Running {
    /// Runs the loops for as long as the process does (the demo's simulator).
    pub async fn forever(mut self) {
        futures::future::join_all(std::mem::take(&mut self.handles)).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Where in each heartbeat period the `i`th of `total` nodes (by name) beats: spread
/// evenly over the first three quarters of it, so that a round ends within its period.
fn phase(i: usize, total: usize, every: Duration) -> Duration {
    let spread = every.mul_f64(0.75);
    spread.mul_f64(i as f64 / total.max(1) as f64)
}

/// Every `how.every`, a heartbeat for every node that is not cut off, including nodes
/// created since the last round, each at its own phase of the period ([`phase`]).
async fn heartbeats(client: Client, dark: Dark, how: Heartbeats) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut tick = tokio::time::interval(how.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut listed, mut beating) = (true, true);
    loop {
        tick.tick().await;
        let list = match nodes.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(e) => {
                // Once per failure streak: the API server also goes away at the end.
                if std::mem::replace(&mut listed, false) {
                    eprintln!("[nodesim] listing nodes: {e}");
                }
                continue;
            }
        };
        listed = true;
        let live: Vec<Node> = list
            .into_iter()
            .filter(|n| !is_dark(&dark, &n.name_any()))
            .collect();
        let total = live.len();
        // Each node at its own phase of the period, as kubelets renew: a stalled view of
        // the Leases then sees one zone late before another, as it would with kubelets.
        let mut live = live;
        live.sort_by_key(ResourceExt::name_any);
        let round = tokio::time::Instant::now();
        let results: Vec<Result<()>> = futures::stream::iter(live.into_iter().enumerate())
            .then(|(i, n)| async move {
                tokio::time::sleep_until(round + phase(i, total, how.every)).await;
                n
            })
            .map(|n| {
                let client = client.clone();
                async move { heartbeat(&client, &n, how).await }
            })
            .buffer_unordered(HEARTBEAT_CONCURRENCY)
            .collect()
            .await;
        // A node deleted by a test between the list and its heartbeat is no failure.
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(Result::err)
            .map(|e| format!("{e:#}"))
            .filter(|e| !e.contains("not found"))
            .collect();
        // One line per failure streak, not one per node: an API server restarting under
        // a thousand nodes would otherwise print a thousand lines a round.
        match failed.first() {
            Some(first) if std::mem::replace(&mut beating, false) => {
                eprintln!(
                    "[nodesim] heartbeat: {} of {total} nodes failed, e.g. {first}",
                    failed.len()
                );
            }
            Some(_) => {}
            None => beating = true,
        }
    }
}

fn waits_for_zone(pod: &Pod) -> bool {
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|ics| ics.iter().any(|c| c.name == names::INIT_CONTAINER_ZONE));
    // Where the pod reads its zone: the annotation, or the label (`zone-source`).
    let zone = loki_zone_operator::checks::podzone::zone_as_read(pod).is_some();
    has_init && !zone
}

fn is_running_ready(pod: &Pod) -> bool {
    let st = pod.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn kubelet(client: Client, dark: Dark, ready_after: Duration, ips: PodIps) {
    let all: Api<Pod> = Api::all(client.clone());
    let stream = watcher(all, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    // Pods whose delayed start is under way, by UID, so each starts once.
    let starting: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    while let Some(ev) = stream.next().await {
        let Ok(pod) = ev else { continue };
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let immediate = ready_after.is_zero() || !bound || is_running_ready(&pod);
        if immediate || pod.metadata.deletion_timestamp.is_some() {
            sync_pod(&client, &dark, &pod, ips).await;
            continue;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !starting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.clone())
        {
            continue;
        }
        let (client, dark, starting) = (client.clone(), dark.clone(), starting.clone());
        tokio::spawn(async move {
            tokio::time::sleep(ready_after).await;
            // The pod as it is now: it may have been deleted, or got its zone, meanwhile.
            let api: Api<Pod> =
                Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            let now = api.get_opt(&pod.name_any()).await.ok().flatten();
            starting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
            if let Some(p) = now.filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str())) {
                sync_pod(&client, &dark, &p, ips).await;
            }
        });
    }
}

/// What the kubelet of the pod's node does with it, unless that kubelet is cut off: a pod
/// being deleted is removed, a pod not yet Running and Ready (or marked not Ready by the
/// lifecycle controller) is reported Running and Ready.
async fn sync_pod(client: &Client, dark: &Dark, pod: &Pod, ips: PodIps) {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return;
    };
    if is_dark(dark, &node) {
        return;
    }
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if pod.metadata.deletion_timestamp.is_some() {
        // Only this instance, as a kubelet confirms its own pod: a late event of a pod
        // that a StatefulSet already recreated under the same name must not remove the
        // new one.
        let _ = api
            .delete(
                &pod.name_any(),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                },
            )
            .await;
        return;
    }
    if is_running_ready(pod) || waits_for_zone(pod) {
        return;
    }
    let now = Timestamp::now().to_string();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now.clone(), |t| t.0.to_string());
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let (init, containers) = container_statuses(pod, &started, &now);
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": ips.for_pod(pod),
        "startTime": started,
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "initContainerStatuses": init,
        "containerStatuses": containers,
    }});
    // Strategic, as a kubelet's status sync merges: conditions by type, so those others
    // own (the operator's zone-available) are kept.
    if let Err(e) = api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&status),
        )
        .await
    {
        eprintln!("[nodesim] pod {ns}/{} on {node}: {e}", pod.name_any());
    }
}

/// The container statuses a kubelet reports for a started pod: every init container
/// exited 0, every container running and ready (what `kubectl get pods` counts in its
/// READY column).
fn container_statuses(pod: &Pod, started: &str, now: &str) -> (Vec<Value>, Vec<Value>) {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let status = |c: &Container, state: Value, ready: bool| {
        json!({
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "containerID": format!("nodesim://{uid}-{}", c.name),
            "ready": ready,
            "started": ready,
            "restartCount": 0,
            "state": state,
        })
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let done = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}});
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| status(c, done.clone(), false))
        .collect();
    let running = json!({"running": {"startedAt": now}});
    let containers = spec
        .containers
        .iter()
        .map(|c| status(c, running.clone(), true))
        .collect();
    (init, containers)
}

async fn provisioner(client: Client) {
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let stream = watcher(claims, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let Ok(pvc) = ev else { continue };
        let spec = pvc.spec.clone().unwrap_or_default();
        if spec.volume_name.is_some() || spec.storage_class_name.as_deref() != Some(STORAGE_CLASS) {
            continue;
        }
        let Some(selected) = pvc.annotations().get(SELECTED_NODE).cloned() else {
            continue;
        };
        let Ok(node) = nodes.get(&selected).await else {
            continue;
        };
        let Some(zone) = node.labels().get(ZONE).cloned() else {
            continue;
        };
        let size = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned())
            .map(|q| q.0)
            .unwrap_or_else(|| "1Gi".into());
        let name = format!("pv-{}", pvc.uid().unwrap_or_default());
        let pv: PersistentVolume = match serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {ZONE: zone}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "hostPath": {"path": format!("/tmp/{name}")},
                "claimRef": {"namespace": pvc.namespace(), "name": pvc.name_any(), "uid": pvc.uid()},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}},
            },
        })) {
            Ok(pv) => pv,
            Err(e) => {
                eprintln!("[nodesim] building PV: {e}");
                continue;
            }
        };
        match pvs.create(&PostParams::default(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => eprintln!("[nodesim] creating PV for {}: {e}", pvc.name_any()),
        }
    }
}

/// Waits up to `timeout` for `check` to return `Ok(Some(v))`, polling every 250 ms.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = tokio::time::Instant::now();
    loop {
        let last = match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "condition not met".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() > timeout {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
