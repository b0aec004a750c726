//! `make bench`: the operator's speed, memory and API cost, measured on the local control
//! plane with the release binary. Each figure is printed as a table row beside its target.
//!
//! 1. Bind → annotated: 300 zone-aware pods over 30 nodes in 3 zones; per pod, the time
//!    from the watch event where `spec.nodeName` appears to the one where the zone
//!    annotation appears. Throughput is the annotator catching up on 300 bound pods;
//!    the floor is the same 300 conditional merge patches sent by a bare client loop
//!    (same concurrency) against the same API server.
//! 2. Memory: resident set of the operator with one zone-aware stack, then after 1,000
//!    more nodes and 20,000 unrelated pods.
//! 3. Idle API cost: requests by verb over ten resync periods with nothing changing, from
//!    the API server's audit log filtered on the operator's ServiceAccount.
//! 4. Apply time: from creating a LokiStack to all its children existing, over 20 stacks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use loki_zone_operator::api::LokiStack;
use loki_zone_operator_tests::harness::ControlPlane;
use loki_zone_operator_tests::nodesim::{eventually, NodeSim, ZONE};
use loki_zone_operator_tests::operator::{self, Operator};
use loki_zone_operator_tests::{client_for, namespace_with_storage_secret, repo_root};
use serde_json::{json, Value};

const PODS: usize = 300;
const CONCURRENCY: usize = 32;
const RESYNC_SECS: u64 = 3;

struct Row {
    name: String,
    value: String,
    target: String,
    pass: Option<bool>,
}

fn row(rows: &mut Vec<Row>, name: &str, value: String, target: &str, pass: Option<bool>) {
    println!("  {name}: {value} (target {target})");
    rows.push(Row {
        name: name.into(),
        value,
        target: target.into(),
        pass,
    });
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn stack(name: &str, size: &str, zones: bool) -> Result<LokiStack> {
    let mut spec = json!({"size": size, "storage": {"secret": {"name": "loki-s3", "type": "s3"}}});
    if zones {
        spec["replication"] = json!({"factor": 2, "zones": [{"topologyKey": ZONE}]});
    }
    Ok(serde_json::from_value(
        json!({"apiVersion": "loki.grafana.com/v1", "kind": "LokiStack", "metadata": {"name": name}, "spec": spec}),
    )?)
}

fn zone_aware_pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"loki.grafana.com/zone-aware": "enabled", "bench": "annotate"},
            "annotations": {"loki.grafana.com/availability-zone-labels": ZONE},
        },
        "spec": {
            // No token to mount: a new namespace's default ServiceAccount may not have one yet.
            "automountServiceAccountToken": false,
            "initContainers": [{"name": "az-annotation-check", "image": "loki-zone-operator:bench"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }))?)
}

/// Per pod: when the bench's own watch first saw it bound, and annotated.
type Seen = Arc<Mutex<HashMap<String, (Option<Instant>, Option<Instant>)>>>;

fn watch_pods(client: &Client, ns: &str) -> Seen {
    let seen: Seen = Arc::default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let s = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default().labels("bench=annotate"))
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let now = Instant::now();
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let annotated = p
                .annotations()
                .contains_key("loki.grafana.com/availability-zone");
            let mut map = s.lock().unwrap_or_else(|e| e.into_inner());
            let e = map.entry(p.name_any()).or_default();
            if bound && e.0.is_none() {
                e.0 = Some(now);
            }
            if annotated && e.1.is_none() {
                e.1 = Some(now);
            }
        }
    });
    seen
}

async fn create_pods(client: &Client, ns: &str, prefix: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let results: Vec<Result<()>> = stream::iter(0..PODS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &zone_aware_pod(&format!("{prefix}-{i}"))?,
                )
                .await?;
                Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The upper bound of the first histogram bucket holding quantile `q`, and the count.
fn histogram_quantile(text: &str, name: &str, q: f64) -> (f64, u64) {
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = buckets.last().map(|b| b.1).unwrap_or(0.0);
    let le = buckets
        .iter()
        .find(|b| b.1 >= q * count)
        .map(|b| b.0)
        .unwrap_or(f64::NAN);
    (le, count as u64)
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?)
}

async fn run() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let cp = ControlPlane::start(&repo_root().join(".e2e/bench"))?;
    let admin = client_for(&cp.admin_kubeconfig).await?;
    operator::deploy(&cp.admin_kubeconfig)?;
    let sim = NodeSim::new(admin.clone());
    sim.install_storage_class().await?;
    sim.create_zones(&["zone-a", "zone-b", "zone-c"], 10)
        .await?;
    let _sim = sim.run();
    let op_kubeconfig = operator::service_account_kubeconfig(&admin, &cp).await?;
    let resync = format!("{RESYNC_SECS}s");
    let start_operator =
        || -> Result<Operator> { Operator::start(&op_kubeconfig, &cp.dir, &["--resync", &resync]) };
    let mut op = start_operator()?;
    op.wait_ready(Duration::from_secs(60)).await?;

    // 1. Bind -> annotated.
    println!("1. bind -> annotated, {PODS} pods over 30 nodes in 3 zones");
    let ns = "bench-annotate";
    namespace_with_storage_secret(&admin, ns).await?;
    let seen = watch_pods(&admin, ns);
    create_pods(&admin, ns, "live").await?;
    eventually("live pods annotated", Duration::from_secs(180), || async {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        Ok((m
            .iter()
            .filter(|(k, v)| k.starts_with("live-") && v.1.is_some())
            .count()
            == PODS)
            .then_some(()))
    })
    .await?;
    let mut latencies: Vec<f64> = {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|(k, _)| k.starts_with("live-"))
            .filter_map(|(_, (b, a))| {
                Some(
                    a.as_ref()?
                        .saturating_duration_since(*b.as_ref()?)
                        .as_secs_f64()
                        * 1000.0,
                )
            })
            .collect()
    };
    latencies.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99, max) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(f64::NAN),
    );
    let binds: Vec<Instant> = {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|(k, _)| k.starts_with("live-"))
            .filter_map(|(_, v)| v.0)
            .collect()
    };
    let spread = binds
        .iter()
        .max()
        .zip(binds.iter().min())
        .map(|(a, b)| a.duration_since(*b).as_millis())
        .unwrap_or(0);
    println!("  ({PODS} binds arrived over {spread} ms)");
    row(
        &mut rows,
        "bind→annotated p50",
        format!("{p50:.1} ms"),
        "-",
        None,
    );
    row(
        &mut rows,
        "bind→annotated p99 (watch to watch)",
        format!("{p99:.1} ms"),
        "≤ 100 ms",
        Some(p99 <= 100.0),
    );
    row(
        &mut rows,
        "bind→annotated max",
        format!("{max:.1} ms"),
        "-",
        None,
    );

    let (le, count) = histogram_quantile(
        &op.metrics().await?,
        "loki_zone_operator_bind_to_annotated_seconds",
        0.99,
    );
    row(
        &mut rows,
        "  operator-side p99 (its own bind→patch histogram)",
        format!("≤ {:.0} ms over {count} pods", le * 1000.0),
        "≤ 100 ms",
        Some(le <= 0.1),
    );

    // Throughput: the annotator catching up on pods bound while it was down.
    op.stop();
    create_pods(&admin, ns, "backlog").await?;
    eventually("backlog pods bound", Duration::from_secs(180), || async {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        Ok((m
            .iter()
            .filter(|(k, v)| k.starts_with("backlog-") && v.0.is_some())
            .count()
            == PODS)
            .then_some(()))
    })
    .await?;
    op = start_operator()?;
    op.wait_ready(Duration::from_secs(60)).await?;
    eventually(
        "backlog pods annotated",
        Duration::from_secs(180),
        || async {
            let m = seen.lock().unwrap_or_else(|e| e.into_inner());
            Ok((m
                .iter()
                .filter(|(k, v)| k.starts_with("backlog-") && v.1.is_some())
                .count()
                == PODS)
                .then_some(()))
        },
    )
    .await?;
    let annotated: Vec<Instant> = {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|(k, _)| k.starts_with("backlog-"))
            .filter_map(|(_, v)| v.1)
            .collect()
    };
    let span = annotated
        .iter()
        .max()
        .zip(annotated.iter().min())
        .map(|(a, b)| a.duration_since(*b).as_secs_f64())
        .unwrap_or(f64::NAN);
    let ours = (PODS as f64 - 1.0) / span;
    row(
        &mut rows,
        "annotator throughput",
        format!("{ours:.0} pods/s"),
        "≥ 100 pods/s",
        Some(ours >= 100.0),
    );

    // Floor: the same conditional merge patches from a bare client loop, once the node
    // simulator has marked every pod Running (its status writes would make them conflict).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    eventually("backlog pods Running", Duration::from_secs(120), || async {
        let l = pods
            .list(&ListParams::default().labels("bench=annotate"))
            .await?;
        let running = l
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        Ok((running == 2 * PODS).then_some(()))
    })
    .await?;
    let backlog: Vec<Pod> = pods
        .list(&ListParams::default().labels("bench=annotate"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.name_any().starts_with("backlog-"))
        .collect();
    let started = Instant::now();
    let mut floor_lat: Vec<f64> = stream::iter(backlog)
        .map(|p| {
            let pods = pods.clone();
            async move {
                let t = Instant::now();
                let patch = json!({"metadata": {"resourceVersion": p.resource_version(), "annotations": {"bench.loki-zone-operator.dev/floor": "zone"}}});
                pods.patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| t.elapsed().as_secs_f64() * 1000.0)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|r| async move { r.ok() })
        .collect()
        .await;
    let floor_span = started.elapsed().as_secs_f64();
    ensure!(
        floor_lat.len() == PODS,
        "floor: {} of {PODS} patches succeeded",
        floor_lat.len()
    );
    floor_lat.sort_by(|a, b| a.total_cmp(b));
    let floor = PODS as f64 / floor_span;
    row(
        &mut rows,
        "floor (bare client, same patches)",
        format!(
            "{floor:.0} pods/s, patch p50 {:.1} ms",
            percentile(&floor_lat, 0.5)
        ),
        "-",
        None,
    );
    let ratio = floor / ours;
    row(
        &mut rows,
        "floor ÷ annotator throughput",
        format!("{ratio:.2}x"),
        "≤ 2x",
        Some(ratio <= 2.0),
    );

    // 4. Apply time, over 20 stacks.
    println!("4. apply time, 20 stacks");
    let ns = "bench-apply";
    namespace_with_storage_secret(&admin, ns).await?;
    let first_seen: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let ar_list = [
        kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
        kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
        kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&()),
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "policy",
            "v1beta1",
            "PodDisruptionBudget",
        )),
    ];
    for ar in ar_list {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
        let fs = first_seen.clone();
        let kind = ar.kind.clone();
        tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(Ok(o)) = stream.next().await {
                fs.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry((kind.clone(), o.name_any()))
                    .or_insert_with(Instant::now);
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stacks: Api<LokiStack> = Api::namespaced(admin.clone(), ns);
    let mut apply_times = Vec::new();
    for i in 0..20 {
        let name = format!("s{i}");
        let t0 = Instant::now();
        stacks
            .create(&PostParams::default(), &stack(&name, "1x.demo", false)?)
            .await?;
        // SA, ConfigMap, gossip Service, and per component http + grpc Service,
        // workload and PDB: 3 + 6 * 4.
        let done = eventually("stack children", Duration::from_secs(30), || async {
            let m = first_seen.lock().unwrap_or_else(|e| e.into_inner());
            let mine: Vec<&Instant> = m
                .iter()
                .filter(|((_, n), _)| *n == name || n.starts_with(&format!("{name}-")))
                .map(|(_, t)| t)
                .collect();
            Ok((mine.len() >= 27)
                .then(|| mine.into_iter().max().copied())
                .flatten())
        })
        .await?;
        apply_times.push(done.duration_since(t0).as_secs_f64() * 1000.0);
    }
    apply_times.sort_by(|a, b| a.total_cmp(b));
    let median = percentile(&apply_times, 0.5);
    row(
        &mut rows,
        "create → all children (median of 20)",
        format!(
            "{median:.0} ms (max {:.0} ms)",
            apply_times.last().copied().unwrap_or(f64::NAN)
        ),
        "≤ 1000 ms",
        Some(median <= 1000.0),
    );

    // 3. Idle API cost over ten resync periods.
    println!("3. idle API cost, 10 resyncs of {RESYNC_SECS}s");
    // Idle means nothing changes: every stack Ready, every pod settled.
    eventually("every stack Ready", Duration::from_secs(300), || async {
        let all = stacks.list(&ListParams::default()).await?.items;
        let ready = all
            .iter()
            .filter(|s| {
                s.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count();
        Ok((ready == all.len()).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let audit = cp.dir.join("audit.log");
    let offset = std::fs::metadata(&audit)?.len() as usize;
    tokio::time::sleep(Duration::from_secs(10 * RESYNC_SECS)).await;
    let text = std::fs::read_to_string(&audit)?;
    let mut by_verb: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut writes, mut lease_writes) = (0, 0);
    for line in text[offset.min(text.len())..].lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let verb = ev["verb"].as_str().unwrap_or_default().to_string();
        let resource = ev["objectRef"]["resource"].as_str().unwrap_or_default();
        if matches!(verb.as_str(), "create" | "update" | "patch" | "delete") {
            if resource == "leases" {
                lease_writes += 1;
            } else {
                writes += 1;
            }
        }
        *by_verb.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    let verbs = by_verb
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        &mut rows,
        "idle writes over 10 resyncs",
        format!("{writes} (requests: {verbs}; {lease_writes} are leader-lease renewals)"),
        "0 writes",
        Some(writes == 0),
    );

    // 2. Memory: a fresh operator with one zone-aware stack, then more nodes and pods.
    println!("2. memory");
    op.stop();
    for ns in ["bench-annotate", "bench-apply"] {
        Api::<Namespace>::all(admin.clone())
            .delete(ns, &Default::default())
            .await?;
    }
    eventually(
        "bench namespaces gone",
        Duration::from_secs(180),
        || async {
            let left = Api::<Namespace>::all(admin.clone())
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|n| n.name_any().starts_with("bench-"))
                .count();
            Ok((left == 0).then_some(()))
        },
    )
    .await?;
    let ns = "bench-memory";
    namespace_with_storage_secret(&admin, ns).await?;
    Api::<LokiStack>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &stack("zones", "1x.small", true)?)
        .await?;
    op = start_operator()?;
    op.wait_ready(Duration::from_secs(60)).await?;
    let stacks: Api<LokiStack> = Api::namespaced(admin.clone(), ns);
    eventually(
        "the zone-aware stack Ready",
        Duration::from_secs(120),
        || async {
            let s = stacks.get("zones").await?;
            Ok(s.status
                .is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
                .then_some(()))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = op.pid().context("operator pid")?;
    let base = rss_kib(pid)?;
    row(
        &mut rows,
        "RSS, one zone-aware stack",
        format!("{:.1} MiB", base as f64 / 1024.0),
        "≤ 40 MiB",
        Some(base <= 40 * 1024),
    );
    let nodes = stream::iter(0..1000)
        .map(|i| {
            let sim = sim.clone();
            async move {
                sim.create_node(
                    &format!("extra-{i}"),
                    &[(ZONE, ["zone-a", "zone-b", "zone-c"][i % 3])],
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    nodes.into_iter().collect::<Result<Vec<_>>>()?;
    let unrelated = "bench-unrelated";
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": unrelated}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), unrelated);
    let created = Instant::now();
    let results = stream::iter(0..20_000)
        .map(|i| {
            let pods = pods.clone();
            async move {
                // Never scheduled: the default scheduler ignores another scheduler's pods.
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("unrelated-{i}"), "labels": {"app": "unrelated"}},
                    "spec": {"schedulerName": "not-scheduled", "automountServiceAccountToken": false, "containers": [{"name": "c", "image": "busybox"}]},
                }))?;
                pods.create(&PostParams::default(), &p).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    results.into_iter().collect::<Result<Vec<_>>>()?;
    println!(
        "  created 1,000 nodes and 20,000 pods in {:.0?}",
        created.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = rss_kib(pid)?;
    let growth = after.saturating_sub(base);
    row(
        &mut rows,
        "RSS after +1,000 nodes, +20,000 pods",
        format!(
            "{:.1} MiB (+{:.1} MiB)",
            after as f64 / 1024.0,
            growth as f64 / 1024.0
        ),
        "≤ 5 MiB growth",
        Some(growth <= 5 * 1024),
    );
    op.stop();
    Ok(rows)
}

fn main() -> std::process::ExitCode {
    let runtime = match loki_zone_operator_tests::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let rows = match runtime.block_on(run()) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("bench failed: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!("\n| measure | value | target | result |\n|---|---|---|---|");
    for r in &rows {
        let result = match r.pass {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "",
        };
        println!("| {} | {} | {} | {result} |", r.name, r.value, r.target);
    }
    println!(
        "\nmachine: {cores} cores; control plane: Kubernetes 1.20.2 on loopback; run took {:.0?}",
        started.elapsed()
    );
    std::process::ExitCode::SUCCESS
}
