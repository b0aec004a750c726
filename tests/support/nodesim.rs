//! The node simulator: nodes without kubelets, and the parts of a kubelet and a cloud
//! volume provisioner the tests need.
//!
//! - Nodes are created with zone, region and hostname labels and room for every stack
//!   size; they are marked Ready without the `not-ready` taint, since no kubelet runs.
//! - Bound pods become Running and Ready, except a pod with the zone init container,
//!   which stays Pending until its zone annotation is set, as the real init container
//!   would. Pods being deleted are removed at once, as a kubelet would once they stop.
//! - Claims of the simulated zonal StorageClass (`WaitForFirstConsumer`) get a
//!   PersistentVolume bound to them, with node affinity to the zone of the node the
//!   scheduler selected, the way a cloud disk behaves.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use loki_zone_operator::names;
use serde_json::json;
use tokio::task::JoinHandle;

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const STORAGE_CLASS: &str = "zonal";
pub const PROVISIONER: &str = "e2e.loki-zone-operator.dev/zonal";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

#[derive(Clone)]
pub struct NodeSim {
    client: Client,
}

fn ready_status(ready: bool) -> serde_json::Value {
    let capacity =
        json!({"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "500Gi"});
    json!({"status": {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": if ready { "KubeletReady" } else { "NodeStatusUnknown" },
            "message": "simulated",
            "lastHeartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }],
    }})
}

impl NodeSim {
    pub fn new(client: Client) -> Self {
        NodeSim { client }
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

    /// Creates a Ready node with these labels (plus hostname).
    pub async fn create_node(&self, name: &str, labels: &[(&str, &str)]) -> Result<()> {
        let mut l: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.insert(HOSTNAME.into(), name.into());
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": l}}))?;
        self.nodes()
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        self.set_ready(name, true).await
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

    /// Ready, or down the way a lost node looks: NotReady with the `unreachable` taint.
    pub async fn set_ready(&self, name: &str, ready: bool) -> Result<()> {
        self.nodes()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&ready_status(ready)),
            )
            .await
            .with_context(|| format!("node {name} status"))?;
        let taints = if ready {
            json!([])
        } else {
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}, {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}])
        };
        self.nodes()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"taints": taints}})),
            )
            .await?;
        Ok(())
    }

    async fn nodes_in_zone(&self, zone: &str) -> Result<Vec<String>> {
        let list = self
            .nodes()
            .list(&kube::api::ListParams::default().labels(&format!("{ZONE}={zone}")))
            .await?;
        Ok(list.items.iter().map(|n| n.name_any()).collect())
    }

    pub async fn zone_down(&self, zone: &str) -> Result<()> {
        for n in self.nodes_in_zone(zone).await? {
            self.set_ready(&n, false).await?;
        }
        Ok(())
    }

    pub async fn zone_up(&self, zone: &str) -> Result<()> {
        for n in self.nodes_in_zone(zone).await? {
            self.set_ready(&n, true).await?;
        }
        Ok(())
    }

    pub async fn cordon(&self, name: &str, cordoned: bool) -> Result<()> {
        self.nodes()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"unschedulable": cordoned}})),
            )
            .await?;
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

    /// Starts the kubelet and provisioner loops.
    pub fn run(&self) -> Vec<JoinHandle<()>> {
        vec![
            tokio::spawn(kubelet(self.client.clone())),
            tokio::spawn(provisioner(self.client.clone())),
        ]
    }
}

fn waits_for_zone(pod: &Pod) -> bool {
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|ics| ics.iter().any(|c| c.name == names::INIT_CONTAINER_ZONE));
    let zone = pod
        .annotations()
        .get(names::ANNOTATION_ZONE)
        .is_some_and(|z| !z.is_empty());
    has_init && !zone
}

fn is_running_ready(pod: &Pod) -> bool {
    let st = pod.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn kubelet(client: Client) {
    let all: Api<Pod> = Api::all(client.clone());
    let stream = watcher(all, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let Ok(pod) = ev else { continue };
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if pod.metadata.deletion_timestamp.is_some() {
            let _ = api
                .delete(
                    &pod.name_any(),
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await;
            continue;
        }
        if is_running_ready(&pod) || waits_for_zone(&pod) {
            continue;
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        let status = json!({"status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "startTime": now,
            "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        }});
        if let Err(e) = api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
        {
            eprintln!("[nodesim] pod {ns}/{} on {node}: {e}", pod.name_any());
        }
    }
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
