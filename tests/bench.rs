//! `make bench`: the operator's speed, memory and API cost, measured on the local control
//! plane with the release binary. Each figure is printed as a table row beside its target.
//!
//! 0. The size of the operator image `make image` writes.
//! 1. Bind → zoned: 300 zone-aware pods over 30 nodes in 3 zones; per pod, the time
//!    from the watch event where `spec.nodeName` appears to the one where the zone
//!    annotation appears (0 when the same event carries both). Three paths, in one run:
//!    the zone-at-bind webhook (share zoned in the binding event, its response time, the
//!    operator's extra writes per pod from the audit log); the webhook switched off (the
//!    annotator alone, with its own time per step); and a bare client that patches the
//!    instant it sees a bind, as the floor, with the operator's own credentials (and once
//!    as the admin, to show what the credentials cost the API server). `bench annotator`
//!    runs this section alone. Throughput is the annotator catching up on 300 bound
//!    pods; its floor is the same 300 conditional merge patches sent by a bare client
//!    loop (same concurrency) against the same API server.
//! 2. Memory: resident set of the operator (webhooks on, as deployed) with one
//!    zone-aware stack, then after 1,000 more nodes and 20,000 unrelated pods.
//!    Then (2b) with one stack with rules enabled, after 1,000 AlertingRules of 100 KB
//!    that no stack picks (any namespace's editor can create them), and the peak of a
//!    replica started beside them. `bench memory` runs this section alone, `bench
//!    rules` 2b alone.
//! 3. Idle API cost: requests by verb over ten resync periods with nothing changing, from
//!    the API server's audit log filtered on the operator's ServiceAccount.
//! 4. Apply time: from creating a LokiStack to all its children existing, over 20 stacks.
//! 5. Rollout: a change to the ingesters of a 3-zone stack with 3 ingesters per zone
//!    (zone by zone, OnDelete driven by the operator) against the same change to a stack
//!    without zones (the StatefulSet's rolling update, one pod at a time); simulated pods
//!    turn Ready [`READY_AFTER`] after they start. A watch on the ingesters records the
//!    most zones that ever had an ingester down at once.
//! 6. Scale: N zone-aware stacks (default 1,000) on their own control plane; see
//!    `bench_scale.rs`. `bench scale [N]` runs this section alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator_tests::harness::ControlPlane;
use loki_zone_operator_tests::nodesim::{eventually, NodeSim, ZONE};
use loki_zone_operator_tests::operator::{self, Operator};
use loki_zone_operator_tests::{client_for, namespace_with_storage_secret, repo_root};
use serde_json::{json, Value};

#[path = "bench_scale.rs"]
mod scale;

const PODS: usize = 300;
const CONCURRENCY: usize = 32;
const RESYNC_SECS: u64 = 3;
/// How long a simulated pod takes from start to Ready: an ingester replaying its WAL and
/// joining the ring, in miniature.
const READY_AFTER: Duration = Duration::from_secs(3);
/// Ingesters of the rollout section: 3 per zone over 3 zones.
const ROLLOUT_INGESTERS: usize = 9;

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
            // The operator copies onto a pod only its stack's topology keys.
            "labels": {"loki.grafana.com/zone-aware": "enabled", "app.kubernetes.io/instance": "bench", "bench": "annotate"},
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
    watch_labelled(client, ns, "bench=annotate")
}

/// Records, per pod labelled `labels`, when the bench's watch first saw it bound and
/// first saw its zone; both are the same instant when the bind event carried the zone.
fn watch_labelled(client: &Client, ns: &str, labels: &str) -> Seen {
    let seen: Seen = Arc::default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let s = seen.clone();
    let config = watcher::Config::default().labels(labels);
    tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().applied_objects();
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
    create_pods_of(client, ns, prefix, zone_aware_pod).await
}

async fn create_pods_of(
    client: &Client,
    ns: &str,
    prefix: &str,
    make: fn(&str) -> Result<Pod>,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let results: Vec<Result<()>> = stream::iter(0..PODS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &make(&format!("{prefix}-{i}"))?)
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
    histogram_quantile_of(text, name, "", q)
}

/// [`histogram_quantile`] over the bucket lines that also carry `label` (`key="value"`:
/// one series of a family).
fn histogram_quantile_of(text: &str, name: &str, label: &str, q: f64) -> (f64, u64) {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(label))
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
    status_kib(pid, "VmRSS")
}

/// The most resident memory the process has had (what a memory limit must allow).
fn peak_rss_kib(pid: u32) -> Result<u64> {
    status_kib(pid, "VmHWM")
}

fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))
        .with_context(|| field.to_string())?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("{field} value"))?
        .parse()?)
}

async fn run() -> Result<Vec<Row>> {
    if std::env::args().nth(1).as_deref() == Some("scale") {
        return scale::run(scale::stacks_from_args()?).await;
    }
    let mut rows = Vec::new();
    image_row(&mut rows)?;
    let cp = ControlPlane::start(&repo_root().join(".e2e/bench"))?;
    let admin = client_for(&cp.admin_kubeconfig).await?;
    operator::deploy(&cp.admin_kubeconfig)?;
    let sim = NodeSim::new(admin.clone()).with_ready_after(READY_AFTER);
    sim.install_storage_class().await?;
    sim.create_zones(&["zone-a", "zone-b", "zone-c"], 10)
        .await?;
    // Declared after `cp`, so dropped before it: the simulator stops before the control
    // plane does, instead of heartbeating a stopped API server.
    let _sim = sim.run();
    let op_kubeconfig = operator::service_account_kubeconfig(&admin, &cp).await?;
    let resync = format!("{RESYNC_SECS}s");
    let mut op = Operator::start(&op_kubeconfig, &cp.dir, &["--resync", &resync])?;
    op.wait_ready(Duration::from_secs(60)).await?;

    let no_webhook = ["--resync", resync.as_str(), "--bind-webhook=false"];
    let start_operator =
        || -> Result<Operator> { Operator::start(&op_kubeconfig, &cp.dir, &no_webhook) };
    // `bench memory` runs the memory section alone (against any operator binary, through
    // LOKI_ZONE_OPERATOR_BIN), e.g. to compare two commits.
    let memory_only = std::env::args().nth(1).as_deref() == Some("memory");
    // `bench annotator` runs section 1 alone.
    let annotator_only = std::env::args().nth(1).as_deref() == Some("annotator");
    // `bench rules` runs section 2b alone (also against any operator binary).
    let rules_only = std::env::args().nth(1).as_deref() == Some("rules");
    if !memory_only && !rules_only {
        // 1a. Zone at bind: the webhook path.
        println!("1. bind -> zoned, {PODS} pods over 30 nodes in 3 zones");
        let hook = webhook_path(&admin, &cp).await?;
        bind_rows(&mut rows, "webhook", &hook);
        let share = 100.0 * hook.at_bind as f64 / PODS as f64;
        row(
            &mut rows,
            "webhook: share zoned in the binding event",
            format!("{share:.1}%"),
            "≥ 99%",
            Some(share >= 99.0),
        );
        row(
            &mut rows,
            "webhook: extra API writes per pod (target row)",
            format!("{:.2}", hook.writes_per_pod),
            "0",
            Some(hook.writes_per_pod == 0.0),
        );
        let text = op.metrics().await?;
        let (r50, _) =
            histogram_quantile(&text, "loki_zone_operator_webhook_response_seconds", 0.5);
        let (r99, answered) =
            histogram_quantile(&text, "loki_zone_operator_webhook_response_seconds", 0.99);
        row(
            &mut rows,
            "webhook: response p50 / p99 (operator-side histogram)",
            format!(
                "≤ {:.1} / ≤ {:.1} ms over {answered} reviews",
                r50 * 1000.0,
                r99 * 1000.0
            ),
            "p99 < 10 ms",
            Some(r99 < 0.010),
        );

        // 1b. The webhook switched off: the annotator alone.
        op.stop();
        op = start_operator()?;
        op.wait_ready(Duration::from_secs(60)).await?;
        let ns = "bench-annotate";
        namespace_with_storage_secret(&admin, ns).await?;
        unmanaged_zoned_stack(&admin, ns).await?;
        let seen = watch_pods(&admin, ns);
        let from = audit_len(&cp);
        // The floor with the operator's own credentials, at the same time, so both see
        // the same load: the API server authenticates them as a ServiceAccount,
        // authorizes them through RBAC and writes them to the audit log (where the bench
        // counts the operator's requests), as it does the annotator's.
        let sa = client_for(&op_kubeconfig).await?;
        let floor_ns = "bench-floor-sa";
        namespace_with_storage_secret(&admin, floor_ns).await?;
        let floor_seen = watch_labelled(&admin, floor_ns, "bench=floor");
        let floor_client = floor_client(&sa, floor_ns);
        let both = tokio::try_join!(
            create_pods(&admin, ns, "live"),
            create_pods_of(&admin, floor_ns, "floor", floor_pod)
        );
        let floor = finish_floor(&floor_seen, floor_client).await;
        both?;
        let floor = floor?;
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

        let (lat, at_bind) = bind_latencies(&seen, "live-");
        let off = BindPath {
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            at_bind,
            writes_per_pod: pod_patches(&cp, ns, from) as f64 / PODS as f64,
        };
        bind_rows(&mut rows, "webhook off", &off);
        // 1c. The floor: a bare bind-time patch client, run beside the annotator above;
        // and alone as the admin, to show what the credentials cost the API server.
        bind_rows(
            &mut rows,
            "floor (bare bind-time patch client, operator's credentials)",
            &floor,
        );
        let floor_admin = bind_time_floor(&admin, &admin, "bench-floor").await?;
        bind_rows(&mut rows, "floor as the admin, alone", &floor_admin);
        row(
            &mut rows,
            "  floor as the operator's credentials ÷ as the admin, p99",
            format!("{:.2}x", floor.p99 / floor_admin.p99),
            "-",
            None,
        );
        let ratio = off.p99 / floor.p99;
        row(
            &mut rows,
            "webhook off p99 ÷ floor p99 (same credentials)",
            format!("{ratio:.2}x"),
            "≤ 1.5x",
            Some(ratio <= 1.5),
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
        annotator_step_rows(&mut rows, &op.metrics().await?);

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
        if annotator_only {
            op.stop();
            return Ok(rows);
        }

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
            kube::api::ApiResource::erase::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(&()),
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

        // 5. Zone-by-zone rollout against the one-pod-at-a-time rolling update.
        println!("5. rollout of {ROLLOUT_INGESTERS} ingesters, ready {READY_AFTER:?} after start");
        rollout_rows(&admin, &mut rows).await?;

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
    }

    if rules_only {
        op.stop();
        rules_memory(&admin, &op_kubeconfig, &cp, &resync, &mut rows).await?;
        refused_rules_memory(&admin, &op_kubeconfig, &cp, &resync, &mut rows).await?;
        return Ok(rows);
    }

    // 2. Memory: a fresh operator with one zone-aware stack, then more nodes and pods.
    println!("2. memory");
    op.stop();
    // Every namespace an earlier section made (they all start with `bench-`).
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for n in namespaces.list(&ListParams::default()).await?.items {
        if n.name_any().starts_with("bench-") {
            namespaces
                .delete(&n.name_any(), &Default::default())
                .await?;
        }
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
    // As deployed: both webhooks on, so every cache the process holds is in the figure.
    op = Operator::start(&op_kubeconfig, &cp.dir, &["--resync", &resync])?;
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
    rules_memory(&admin, &op_kubeconfig, &cp, &resync, &mut rows).await?;
    refused_rules_memory(&admin, &op_kubeconfig, &cp, &resync, &mut rows).await?;
    if !memory_only {
        // 6. Scale, on a control plane of its own: this one stops first.
        drop((_sim, cp));
        rows.extend(scale::run(scale::stacks_from_args()?).await?);
    }
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
        "\nmachine: {cores} cores; control plane: Kubernetes {} on loopback; run took {:.0?}",
        kube_version(),
        started.elapsed()
    );
    std::process::ExitCode::SUCCESS
}

/// The Kubernetes version of the control plane the bench starts (`LZO_KUBE`, the
/// current one by default), from its module's go.mod.
fn kube_version() -> String {
    use loki_zone_operator_tests::harness::Kube;
    let module = match Kube::from_env() {
        Kube::Current => "hack/k8s-current/go.mod",
        Kube::Oldest => "hack/k8s-oldest/go.mod",
    };
    std::fs::read_to_string(loki_zone_operator_tests::repo_root().join(module))
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("require k8s.io/kubernetes v")
                    .map(str::to_string)
            })
        })
        .unwrap_or_else(|| "(unknown)".into())
}

/// Section 0: the size of the OCI archive `make image` wrote (`make bench` builds it
/// first), as pulled or loaded. Without the archive (the bench binary run by hand), the
/// row says so rather than failing the rest.
fn image_row(rows: &mut Vec<Row>) -> Result<()> {
    let path = std::env::var_os("IMAGE_ARCHIVE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/image/loki-zone-operator.oci.tar"));
    let path = if path.is_absolute() {
        path
    } else {
        repo_root().join(path)
    };
    match std::fs::metadata(&path) {
        Ok(m) => {
            let mb = m.len() as f64 / 1e6;
            row(
                rows,
                "operator image (OCI archive, compressed)",
                format!("{mb:.1} MB ({} bytes)", m.len()),
                "≤ 20 MB",
                Some(mb <= 20.0),
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => row(
            rows,
            "operator image (OCI archive, compressed)",
            format!("not built: no {} (make image)", path.display()),
            "≤ 20 MB",
            None,
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    Ok(())
}

/// The zone-aware stack "bench" whose pods [`zone_aware_pod`] makes: Unmanaged, so the
/// operator writes nothing else in `ns`.
async fn unmanaged_zoned_stack(admin: &Client, ns: &str) -> Result<()> {
    let mut s = stack("bench", "1x.demo", true)?;
    s.spec.management_state = loki_zone_operator::model::api::ManagementState::Unmanaged;
    Api::<LokiStack>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

/// A pod no operator zones: the bare bind-time client of [`bind_time_floor`] does.
fn floor_pod(name: &str) -> Result<Pod> {
    let mut p = zone_aware_pod(name)?;
    p.metadata.labels = Some([("bench".to_string(), "floor".to_string())].into());
    Ok(p)
}

/// Per pod of a [`Seen`] map whose name starts with `prefix`: the bind→zoned latencies
/// (ms, sorted) and how many pods carried their zone in the event that bound them.
fn bind_latencies(seen: &Seen, prefix: &str) -> (Vec<f64>, usize) {
    let m = seen.lock().unwrap_or_else(|e| e.into_inner());
    let pairs: Vec<(Instant, Instant)> = m
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .filter_map(|(_, (b, a))| Some(((*b)?, (*a)?)))
        .collect();
    let at_bind = pairs.iter().filter(|(b, a)| a == b).count();
    let mut lat: Vec<f64> = pairs
        .iter()
        .map(|(b, a)| a.saturating_duration_since(*b).as_secs_f64() * 1000.0)
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    (lat, at_bind)
}

async fn wait_zoned(seen: &Seen, prefix: &str, what: &str) -> Result<()> {
    eventually(what, Duration::from_secs(180), || async {
        let m = seen.lock().unwrap_or_else(|e| e.into_inner());
        let n = m
            .iter()
            .filter(|(k, v)| k.starts_with(prefix) && v.0.is_some() && v.1.is_some())
            .count();
        Ok((n == PODS).then_some(()))
    })
    .await
}

/// The operator's pod patches in `ns` since byte `from` of the audit log.
fn pod_patches(cp: &ControlPlane, ns: &str, from: usize) -> usize {
    let text = std::fs::read_to_string(cp.dir.join("audit.log")).unwrap_or_default();
    let user = operator::service_account_user();
    text[from.min(text.len())..]
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["user"]["username"] == user.as_str()
                && e["verb"] == "patch"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == ns
        })
        .count()
}

fn audit_len(cp: &ControlPlane) -> usize {
    std::fs::metadata(cp.dir.join("audit.log")).map_or(0, |m| m.len() as usize)
}

/// The annotator's own steps (its `annotator_step_seconds` histogram), p50 and p99 each:
/// where the time between a pod event and its zone written goes inside the operator.
fn annotator_step_rows(rows: &mut Vec<Row>, metrics: &str) {
    for step in ["queued", "decided", "permit", "patch", "finished"] {
        let (name, label) = (
            "loki_zone_operator_annotator_step_seconds",
            format!("step=\"{step}\""),
        );
        let (p50, n) = histogram_quantile_of(metrics, name, &label, 0.5);
        let (p99, _) = histogram_quantile_of(metrics, name, &label, 0.99);
        row(
            rows,
            &format!("  annotator step {step}: p50 / p99 (operator-side)"),
            format!("≤ {:.1} / ≤ {:.1} ms over {n}", p50 * 1000.0, p99 * 1000.0),
            "-",
            None,
        );
    }
}

/// What one bind-time path measured.
struct BindPath {
    p50: f64,
    p99: f64,
    at_bind: usize,
    writes_per_pod: f64,
}

fn bind_rows(rows: &mut Vec<Row>, label: &str, m: &BindPath) {
    row(
        rows,
        &format!("{label}: bind→zoned p50 / p99"),
        format!("{:.1} / {:.1} ms", m.p50, m.p99),
        "-",
        None,
    );
    row(
        rows,
        &format!("{label}: zoned in the binding event"),
        format!("{} of {PODS}", m.at_bind),
        "-",
        None,
    );
    row(
        rows,
        &format!("{label}: extra API writes per pod"),
        format!("{:.2}", m.writes_per_pod),
        "-",
        None,
    );
}

/// 1a. The zone-at-bind webhook: pods of a namespace with a zone-aware stack, named like
/// that stack's pods (as the configuration's matchConditions require). The stack is
/// Unmanaged, so the operator writes nothing else there.
async fn webhook_path(admin: &Client, cp: &ControlPlane) -> Result<BindPath> {
    let ns = "bench-bind";
    namespace_with_storage_secret(admin, ns).await?;
    unmanaged_zoned_stack(admin, ns).await?;
    let configs: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(admin.clone());
    eventually(
        "the webhook covers bench-bind",
        Duration::from_secs(60),
        || async {
            let c = configs
                .get_opt(loki_zone_operator::model::names::WEBHOOK_CONFIGURATION)
                .await?;
            let text = serde_json::to_string(&c)?;
            Ok(text.contains(&format!("\"{ns}\"")).then_some(()))
        },
    )
    .await?;
    let seen = watch_pods(admin, ns);
    let from = audit_len(cp);
    create_pods(admin, ns, "bench-bind").await?;
    wait_zoned(&seen, "bench-bind-", "pods zoned (webhook)").await?;
    let (lat, at_bind) = bind_latencies(&seen, "bench-bind-");
    // The annotator may still be finishing a patch for a pod the webhook missed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = pod_patches(cp, ns, from);
    Ok(BindPath {
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        at_bind,
        writes_per_pod: writes as f64 / PODS as f64,
    })
}

/// 1c. The floor: a bare client that watches the pods and sends the conditional zone
/// patch the instant it sees a bind (what the annotator does, with nothing else to do),
/// with `patcher`'s credentials; the operator runs beside it with nothing to do.
async fn bind_time_floor(admin: &Client, patcher: &Client, ns: &str) -> Result<BindPath> {
    namespace_with_storage_secret(admin, ns).await?;
    let seen = watch_labelled(admin, ns, "bench=floor");
    let client = floor_client(patcher, ns);
    let created = create_pods_of(admin, ns, "floor", floor_pod).await;
    let floor = finish_floor(&seen, client).await;
    created?;
    floor
}

/// The bare bind-time patch client, and how many patches it sent.
struct FloorClient {
    task: tokio::task::JoinHandle<()>,
    patches: Arc<std::sync::atomic::AtomicUsize>,
}

/// The bare bind-time patch client on the pods labelled `bench=floor` in `ns`, patching
/// with `patcher`'s credentials, until aborted.
fn floor_client(patcher: &Client, ns: &str) -> FloorClient {
    let api: Api<Pod> = Api::namespaced(patcher.clone(), ns);
    let patched: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let patches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sent = patches.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(
            api.clone(),
            watcher::Config::default().labels("bench=floor"),
        )
        .default_backoff()
        .applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let fresh = patched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(p.name_any());
            if !bound || !fresh {
                if !bound {
                    patched
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&p.name_any());
                }
                continue;
            }
            let api = api.clone();
            sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let patch = json!({"metadata": {"resourceVersion": p.resource_version(), "annotations": {"loki.grafana.com/availability-zone": "zone"}}});
                let _ = api
                    .patch(
                        &p.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
            });
        }
    });
    FloorClient { task, patches }
}

/// Waits until the floor's pods are zoned, stops its client and measures it.
async fn finish_floor(seen: &Seen, client: FloorClient) -> Result<BindPath> {
    let done = wait_zoned(seen, "floor-", "pods zoned (bare client)").await;
    client.task.abort();
    done?;
    let (lat, at_bind) = bind_latencies(seen, "floor-");
    Ok(BindPath {
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        at_bind,
        writes_per_pod: client.patches.load(std::sync::atomic::Ordering::Relaxed) as f64
            / PODS as f64,
    })
}

/// One ingester observation: when, which pod, its zone, and whether it was up.
type Timeline = Arc<Mutex<Vec<(Instant, String, Option<String>, bool)>>>;

fn watch_ingesters(client: &Client, ns: &str) -> (Timeline, tokio::task::JoinHandle<()>) {
    let seen: Timeline = Arc::default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().labels("app.kubernetes.io/component=ingester");
        let stream = watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let (p, deleted) = match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                Ok(watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let up = !deleted && p.metadata.deletion_timestamp.is_none() && ready;
            let zone = p
                .annotations()
                .get("loki.grafana.com/availability-zone")
                .cloned();
            let mut v = out.lock().unwrap_or_else(|e| e.into_inner());
            v.push((Instant::now(), p.name_any(), zone, up));
        }
    });
    (seen, task)
}

/// The most zones that had an ingester down at the same moment, after `from`.
fn most_zones_down(timeline: &Timeline, from: Instant) -> usize {
    let events = timeline.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut up: HashMap<String, bool> = HashMap::new();
    let mut zone_of: HashMap<String, String> = HashMap::new();
    let mut most = 0;
    for (at, pod, zone, is_up) in events {
        if let Some(z) = zone {
            zone_of.insert(pod.clone(), z);
        }
        up.insert(pod, is_up);
        if at < from {
            continue;
        }
        let down: std::collections::BTreeSet<&String> = up
            .iter()
            .filter(|(_, u)| !**u)
            .filter_map(|(p, _)| zone_of.get(p))
            .collect();
        most = most.max(down.len());
    }
    most
}

/// Creates `name` with 9 ingesters (zones or not) and waits until they all run Ready.
async fn rollout_stack(admin: &Client, ns: &str, name: &str, zones: bool) -> Result<()> {
    namespace_with_storage_secret(admin, ns).await?;
    let mut s = stack(name, "1x.small", zones)?;
    s.spec.template = Some(serde_json::from_value(
        json!({"ingester": {"replicas": ROLLOUT_INGESTERS}}),
    )?);
    Api::<LokiStack>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(admin.clone(), ns);
    eventually("ingesters Ready", Duration::from_secs(300), || async {
        let s = sts.get_opt(&format!("{name}-ingester")).await?;
        let ready = s.and_then(|s| s.status).and_then(|st| st.ready_replicas);
        Ok((ready == Some(ROLLOUT_INGESTERS as i32)).then_some(()))
    })
    .await
}

/// Changes the ingesters' tolerations and times until every ingester runs the new
/// revision and is Ready.
async fn roll(admin: &Client, ns: &str, name: &str) -> Result<Duration> {
    let stacks: Api<LokiStack> = Api::namespaced(admin.clone(), ns);
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let set = format!("{name}-ingester");
    let before = sts.get(&set).await?.status.and_then(|s| s.update_revision);
    let toleration = json!([{"key": "bench.loki-zone-operator.dev/roll", "operator": "Exists", "effect": "NoSchedule"}]);
    let patch = json!({"spec": {"template": {"ingester": {"tolerations": toleration}}}});
    let started = Instant::now();
    stacks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually(
        "every ingester updated and Ready",
        Duration::from_secs(600),
        || async {
            let revision = sts.get(&set).await?.status.and_then(|s| s.update_revision);
            if revision.is_none() || revision == before {
                return Ok(None);
            }
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/component=ingester"))
                .await?;
            let done = list.items.iter().filter(|p| {
                let rev = p.labels().get("controller-revision-hash");
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                rev == revision.as_ref() && ready && p.metadata.deletion_timestamp.is_none()
            });
            Ok((done.count() == ROLLOUT_INGESTERS).then(|| started.elapsed()))
        },
    )
    .await
}

async fn rollout_rows(admin: &Client, rows: &mut Vec<Row>) -> Result<()> {
    let (zoned_ns, plain_ns) = ("bench-rollout-zones", "bench-rollout-plain");
    rollout_stack(admin, zoned_ns, "zoned", true).await?;
    rollout_stack(admin, plain_ns, "plain", false).await?;
    let (timeline, watch) = watch_ingesters(admin, zoned_ns);
    let from = Instant::now();
    let zoned = roll(admin, zoned_ns, "zoned").await?;
    let most = most_zones_down(&timeline, from);
    watch.abort();
    let plain = roll(admin, plain_ns, "plain").await?;
    row(
        rows,
        "rollout, 3 zones × 3 ingesters, zone by zone",
        format!("{:.1} s", zoned.as_secs_f64()),
        "-",
        None,
    );
    row(
        rows,
        "rollout, 9 ingesters, one pod at a time (no zones)",
        format!("{:.1} s", plain.as_secs_f64()),
        "-",
        None,
    );
    let speedup = plain.as_secs_f64() / zoned.as_secs_f64();
    row(
        rows,
        "zone by zone ÷ one at a time",
        format!("{speedup:.1}x faster"),
        "≥ 2x",
        Some(speedup >= 2.0),
    );
    row(
        rows,
        "most zones with an ingester down at once (zone by zone)",
        most.to_string(),
        "1",
        Some(most == 1),
    );
    Ok(())
}

/// AlertingRules of section 2b, none of which a stack picks.
const UNPICKED_RULES: usize = 1_000;
/// The size of each, as stored (JSON).
const RULE_BYTES: usize = 100_000;

fn rule_resource() -> kube::api::ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("loki.grafana.com", "v1", "AlertingRule");
    kube::api::ApiResource::from_gvk_with_plural(&gvk, "alertingrules")
}

/// An AlertingRule of `alerts` alerts in one group, as a team that keeps its alerts in
/// one object writes it; `threshold` goes into every expression.
fn alerting_rule(
    name: &str,
    labels: Value,
    alerts: usize,
    threshold: usize,
) -> Result<DynamicObject> {
    let rules: Vec<Value> = (0..alerts)
        .map(|i| {
            json!({
                "alert": format!("HighErrorRate{i}"),
                "expr": format!("sum by (app) (rate({{namespace=\"team\", app=\"service-{i}\"}} |= \"error\" [5m])) > {threshold}"),
                "for": "5m",
                "labels": {"severity": "warning", "team": "bench"},
                "annotations": {"summary": format!("service-{i} logs more than {threshold} errors a second"), "runbook": "https://runbooks.example.com/high-error-rate"},
            })
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
        "metadata": {"name": name, "labels": labels},
        "spec": {"tenantID": "application", "groups": [{"name": "errors", "rules": rules}]},
    }))?)
}

/// How many alerts make an AlertingRule of [`RULE_BYTES`].
fn alerts_for_rule_bytes() -> Result<usize> {
    alerts_for(RULE_BYTES)
}

/// How many alerts make an AlertingRule of `bytes` (JSON).
fn alerts_for(bytes: usize) -> Result<usize> {
    let one = serde_json::to_vec(&alerting_rule("r", json!({}), 1, 1)?)?.len();
    let two = serde_json::to_vec(&alerting_rule("r", json!({}), 2, 1)?)?.len();
    Ok((bytes - one) / (two - one) + 1)
}

/// AlertingRules of section 2c, each picked by the stack and refused.
const REFUSED_RULES: usize = 100;
/// The size of each (JSON): near the 1.5 MiB etcd stores at most, and more than one
/// rules ConfigMap holds, so each is refused.
const REFUSED_RULE_BYTES: usize = 1_300_000;

/// Creates `count` AlertingRules `<prefix>-<i>` of `alerts` alerts with `labels`,
/// `concurrency` at a time.
async fn create_rules(
    api: &Api<DynamicObject>,
    prefix: &str,
    labels: &Value,
    alerts: usize,
    count: usize,
    concurrency: usize,
) -> Result<()> {
    let results = stream::iter(0..count)
        .map(|i| async move {
            let r = alerting_rule(&format!("{prefix}-{i}"), labels.clone(), alerts, i)?;
            api.create(&PostParams::default(), &r).await?;
            Ok::<(), anyhow::Error>(())
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(())
}

/// How many of the refused rules have their `InvalidRule` condition.
async fn refused_marked(rules: &Api<DynamicObject>) -> Result<usize> {
    let listed = rules
        .list(&ListParams::default().labels("flood=refused"))
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|r| {
            r.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["reason"] == "InvalidRule")
        })
        .count())
}

/// Section 2c: a fresh operator, then [`REFUSED_RULES`] AlertingRules of
/// [`REFUSED_RULE_BYTES`] that the stack of section 2b picks and must refuse (what one
/// namespace editor can create in the stack's namespace): the bodies' cache keeps only
/// their reasons, so the operator's memory stays about where it was.
async fn refused_rules_memory(
    admin: &Client,
    op_kubeconfig: &std::path::Path,
    cp: &ControlPlane,
    resync: &str,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let mb = REFUSED_RULE_BYTES as f64 / 1e6;
    println!("2c. memory: {REFUSED_RULES} picked AlertingRules of {mb:.1} MB, each refused");
    let mut op = Operator::start(op_kubeconfig, &cp.dir, &["--resync", resync])?;
    op.wait_ready(Duration::from_secs(120)).await?;
    let picked: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "bench-rules", &rule_resource());
    wait_marker(&picked, 2).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = op.pid().context("operator pid")?;
    let base = rss_kib(pid)?;
    let alerts = alerts_for(REFUSED_RULE_BYTES)?;
    let created = Instant::now();
    let labels = json!({"bench": "picked", "flood": "refused"});
    create_rules(&picked, "refused", &labels, alerts, REFUSED_RULES, 4).await?;
    println!("  created them in {:.0?}", created.elapsed());
    eventually(
        "every refused rule's InvalidRule condition",
        Duration::from_secs(600),
        || async { Ok((refused_marked(&picked).await? == REFUSED_RULES).then_some(())) },
    )
    .await?;
    println!(
        "  all refused and marked {:.0?} after the first was created",
        created.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (after, peak) = (rss_kib(pid)?, peak_rss_kib(pid)?);
    let growth = after.saturating_sub(base);
    row(
        rows,
        &format!("RSS after +{REFUSED_RULES} picked, refused AlertingRules of {mb:.1} MB"),
        format!(
            "{:.1} MiB (+{:.1} MiB; peak {:.1} MiB)",
            after as f64 / 1024.0,
            growth as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        "≤ 16 MiB growth, peak ≤ 128 MiB",
        Some(growth <= 16 * 1024 && peak <= 128 * 1024),
    );
    op.stop();
    Ok(())
}

/// Waits until the marker rule's `Ready` condition is `Selected` for its `generation`.
async fn wait_marker(rules: &Api<DynamicObject>, generation: i64) -> Result<()> {
    eventually(
        "the marker rule's status at its generation",
        Duration::from_secs(300),
        || async {
            let r = rules.get("marker").await?;
            let seen = r.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["reason"] == "Selected"
                        && c["observedGeneration"] == generation
                });
            Ok(seen.then_some(()))
        },
    )
    .await
}

/// Section 2b: a fresh operator with one stack whose ruler picks rules by label (and one
/// small rule it picks, the marker), then [`UNPICKED_RULES`] AlertingRules of
/// [`RULE_BYTES`] in a namespace the stack does not pick (what any namespace's editor can
/// create), then an edit of the marker: once the marker's status names its new
/// generation, the operator's watch of AlertingRules has passed every rule created
/// before it.
async fn rules_memory(
    admin: &Client,
    op_kubeconfig: &std::path::Path,
    cp: &ControlPlane,
    resync: &str,
    rows: &mut Vec<Row>,
) -> Result<()> {
    println!(
        "2b. memory: {UNPICKED_RULES} AlertingRules of {} KB no stack picks",
        RULE_BYTES / 1000
    );
    let (ns, unpicked) = ("bench-rules", "bench-rules-unpicked");
    namespace_with_storage_secret(admin, ns).await?;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": unpicked}}))?,
        )
        .await?;
    let mut ruled = stack("ruled", "1x.demo", false)?;
    ruled.spec.rules = Some(serde_json::from_value(
        json!({"enabled": true, "selector": {"matchLabels": {"bench": "picked"}}}),
    )?);
    let stacks: Api<LokiStack> = Api::namespaced(admin.clone(), ns);
    stacks.create(&PostParams::default(), &ruled).await?;
    let picked: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &rule_resource());
    let marker = alerting_rule("marker", json!({"bench": "picked"}), 1, 1)?;
    picked.create(&PostParams::default(), &marker).await?;
    let mut op = Operator::start(op_kubeconfig, &cp.dir, &["--resync", resync])?;
    op.wait_ready(Duration::from_secs(60)).await?;
    wait_marker(&picked, 1).await?;
    eventually(
        "the stack with rules Ready",
        Duration::from_secs(180),
        || async {
            let s = stacks.get("ruled").await?;
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
    let alerts = alerts_for_rule_bytes()?;
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), unpicked, &rule_resource());
    let created = Instant::now();
    create_rules(
        &api,
        "unpicked",
        &json!({}),
        alerts,
        UNPICKED_RULES,
        CONCURRENCY,
    )
    .await?;
    println!(
        "  created {UNPICKED_RULES} AlertingRules of {} KB in {:.0?}",
        RULE_BYTES / 1000,
        created.elapsed()
    );
    // The marker's new generation comes after every rule above in the watch.
    let edited = alerting_rule("marker", json!({"bench": "picked"}), 1, 2)?;
    picked
        .patch(
            "marker",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": edited.data["spec"]})),
        )
        .await?;
    wait_marker(&picked, 2).await?;
    println!(
        "  the operator saw the last of them {:.0?} after the first was created",
        created.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = rss_kib(pid)?;
    let peak = peak_rss_kib(pid)?;
    let growth = after.saturating_sub(base);
    row(
        rows,
        "RSS, one stack with rules",
        format!("{:.1} MiB", base as f64 / 1024.0),
        "≤ 40 MiB",
        Some(base <= 40 * 1024),
    );
    row(
        rows,
        &format!(
            "RSS after +{UNPICKED_RULES} unpicked AlertingRules of {} KB",
            RULE_BYTES / 1000
        ),
        format!(
            "{:.1} MiB (+{:.1} MiB; peak {:.1} MiB)",
            after as f64 / 1024.0,
            growth as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        "≤ 5 MiB growth",
        Some(growth <= 5 * 1024),
    );
    // A replica started beside them (after a crash, or as the new leader's standby)
    // lists them: the most it holds while it does.
    op.stop();
    let mut op = Operator::start(op_kubeconfig, &cp.dir, &["--resync", resync])?;
    op.wait_ready(Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = op.pid().context("operator pid")?;
    let (now, peak) = (rss_kib(pid)?, peak_rss_kib(pid)?);
    row(
        rows,
        "RSS of an operator started beside them (peak)",
        format!(
            "{:.1} MiB (peak {:.1} MiB)",
            now as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        "peak ≤ 40 MiB",
        Some(peak <= 40 * 1024),
    );
    op.stop();
    Ok(())
}
