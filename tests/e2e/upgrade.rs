//! An upgrade of the operator (issues 37 and 52): the previous release runs two stacks,
//! one zone-aware and one not; this release takes over from it. Where the render of a
//! child did not change, nothing restarts: the plain stack keeps every pod. Where it did
//! (the previous release ran its own image as the zone init container; this one runs
//! loki-zone-wait, an image of its own), the zone-aware stack's ingesters restart zone by
//! zone, as any rollout. (Upgrading from the previous release rewrites the applied-hash
//! annotation of every child once, since its hash function was Rust's `DefaultHasher`:
//! metadata only, and no pod restarts for it.)
//!
//! Then a release that changes only operator code takes over from this one: what it is
//! configured with differs only in the operator's own image, which nothing rendered
//! names any more (the init container's image stays, its digest changing only with
//! zone-wait/: hack/release-check.sh checks that). Counted: 0 pods restarted, 0
//! StatefulSet or Deployment changed (pod template and generation), after the new
//! operator has reconciled every stack several times.
//!
//! The previous release is built from [`operator::PREVIOUS_RELEASE`] in a worktree. Both
//! releases run narrowed to the scenario's namespace (`--watch-namespaces`), so that the
//! new image does not roll the stacks of the other scenarios.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::ResourceExt;
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::nodesim::eventually;
use loki_zone_operator_tests::operator::{self, Operator};
use serde_json::Value;

use super::rollout::{ingesters_in, ready_stack_in, zones_in_turn, PodWatch};
use super::{create_stack, stack_json, wait_condition, workloads, Env, WAIT};

const NS: &str = "e2e-upgrade";
/// The zone init container's image this release renders (the previous one rendered its
/// own image, `loki-zone-operator:e2e`).
const ZONE_WAIT_IMAGE: &str = "loki-zone-wait:e2e-next";

/// Pod name → uid, of every pod of the namespace with `selector`.
async fn pods(env: &Env, selector: &str) -> Result<BTreeMap<String, String>> {
    Ok(Api::<Pod>::namespaced(env.admin.clone(), NS)
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

/// The applied-hash annotation of every workload of `stack`.
async fn applied_hashes(env: &Env, stack: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let hash = |m: &kube::api::ObjectMeta| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(names::ANNOTATION_APPLIED_HASH))
            .cloned()
            .unwrap_or_default()
    };
    let selector = format!("app.kubernetes.io/instance={stack}");
    for d in Api::<Deployment>::namespaced(env.admin.clone(), NS)
        .list(&ListParams::default().labels(&selector))
        .await?
    {
        out.insert(d.name_any(), hash(&d.metadata));
    }
    for s in Api::<StatefulSet>::namespaced(env.admin.clone(), NS)
        .list(&ListParams::default().labels(&selector))
        .await?
    {
        out.insert(s.name_any(), hash(&s.metadata));
    }
    Ok(out)
}

async fn start(env: &mut Env, bin: &std::path::Path, image: &[&str]) -> Result<()> {
    let mut args = vec!["--resync", "2s", "--watch-namespaces", NS];
    args.extend(image);
    let mut op = Operator::start_bin(bin, &env.operator_kubeconfig, &env.cp.dir, &args)?;
    op.wait_ready(Duration::from_secs(60)).await?;
    env.operator = Some(op);
    Ok(())
}

pub(super) async fn an_upgrade_restarts_only_what_the_new_release_renders_differently(
    env: &mut Env,
) -> Result<()> {
    let previous = match operator::previous_release_bin() {
        Ok(bin) => bin,
        Err(e) => {
            // Said loudly and recorded, as make test does for the checks it cannot run.
            let why = format!("{e:#}");
            println!("    !! the upgrade was NOT tested: {why}");
            let _ = std::fs::write(
                loki_zone_operator_tests::repo_root().join("target/upgrade.missing"),
                &why,
            );
            return Ok(());
        }
    };
    let result = upgrade(env, &previous).await;
    env.stop_operator();
    let _ = Api::<Namespace>::all(env.admin.clone())
        .delete(NS, &DeleteParams::default())
        .await;
    env.start_operator().await?;
    result
}

async fn upgrade(env: &mut Env, previous: &std::path::Path) -> Result<()> {
    // 1. The previous release runs a zone-aware stack and a plain one.
    env.stop_operator();
    start(
        env,
        previous,
        &["--operator-image", "loki-zone-operator:e2e"],
    )
    .await?;
    let zone_of = ready_stack_in(env, NS, "zoned").await?;
    create_stack(env, NS, stack_json("plain", "1x.demo", Value::Null)).await?;
    wait_condition(env, NS, "plain", "Ready", Some("ReadyComponents")).await?;
    let plain_pods = pods(env, "app.kubernetes.io/instance=plain").await?;
    let plain_templates: Vec<_> = workloads(env, NS)
        .await?
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("plain-"))
        .collect();
    ensure!(plain_pods.len() >= 6, "plain stack pods: {plain_pods:?}");
    let old_hashes = applied_hashes(env, "plain").await?;
    ensure!(
        old_hashes
            .values()
            .all(|h| !h.is_empty() && !h.starts_with("sha256:")),
        "the previous release's applied hashes: {old_hashes:?}"
    );
    let ingesters_before = ingesters_in(env, NS).await?;
    let zoned_before = ingesters_before
        .iter()
        .filter(|(n, _)| n.starts_with("zoned-"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect::<BTreeMap<_, _>>();

    // 2. This release, with the init container's own image, takes over.
    env.stop_operator();
    let watch = PodWatch::start(env.admin.clone(), NS);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    start(
        env,
        &operator::operator_bin()?,
        &["--zone-wait-image", ZONE_WAIT_IMAGE],
    )
    .await?;

    // The zone-aware stack: every ingester replaced, zone by zone, with the init
    // container's new image.
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), NS);
    eventually(
        "the zone-aware stack rolled to the new image",
        WAIT,
        || async {
            let now = ingesters_in(env, NS).await?;
            let replaced = zoned_before
                .iter()
                .all(|(n, (uid, _, _))| now.get(n).is_some_and(|(u, _, up)| *up && u != uid));
            let s = stacks.get("zoned").await?;
            let rollout = s
                .status
                .as_ref()
                .and_then(|st| st.rollout.as_ref())
                .is_some();
            Ok((replaced && !rollout).then_some(()))
        },
    )
    .await?;
    let (order, _) = zones_in_turn(&watch.since(started), &zone_of)?;
    ensure!(order.len() == 3, "zones restarted: {order:?}");
    for (name, t, _) in workloads(env, NS).await? {
        if !name.starts_with("zoned-") {
            continue;
        }
        let init = t
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.image.clone());
        ensure!(
            init.as_deref() == Some(ZONE_WAIT_IMAGE),
            "{name}: init image {init:?}"
        );
    }
    println!(
        "    zone-aware stack rolled zone by zone ({order:?}) in {:.1?}",
        started.elapsed()
    );

    // The plain stack renders the same under both releases: the new one rewrites only
    // its applied-hash annotations (the previous release's hash function differs), and
    // no pod restarts, no pod template changes.
    eventually(
        "the plain stack's children carry the new hash",
        WAIT,
        || async {
            let h = applied_hashes(env, "plain").await?;
            Ok(h.values().all(|v| v.starts_with("sha256:")).then_some(h))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = pods(env, "app.kubernetes.io/instance=plain").await?;
    ensure!(
        now == plain_pods,
        "the plain stack's pods changed: before {plain_pods:?}, after {now:?}"
    );
    let templates: Vec<_> = workloads(env, NS)
        .await?
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("plain-"))
        .collect();
    // Generations may move: a Deployment's bumps with its annotations (the new applied
    // hash), which the API server copies to its ReplicaSet. What restarts pods is the
    // template, and that must be the same.
    for ((name, before, _), (_, after, _)) in plain_templates.iter().zip(&templates) {
        ensure!(
            before == after,
            "{name}: the pod template changed:\n{}\n->\n{}",
            serde_json::to_string(before).unwrap_or_default(),
            serde_json::to_string(after).unwrap_or_default()
        );
    }
    let s = stacks.get("plain").await?;
    ensure!(
        s.status
            .as_ref()
            .map(|st| st
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"))
            .unwrap_or(false),
        "the plain stack is not Ready after the upgrade"
    );
    println!(
        "    plain stack: {} pods kept, {} workloads with the same pod template",
        now.len(),
        templates.len()
    );
    wait_until_rolled(env).await?;
    an_operator_only_release_restarts_nothing(env).await
}

/// Every ingester of the zone-aware stack up after its rollout, and no pod of the
/// namespace on its way out: the state a new release must leave as it is.
async fn wait_until_rolled(env: &Env) -> Result<()> {
    eventually("the namespace settled after the rollout", WAIT, || async {
        let all = Api::<Pod>::namespaced(env.admin.clone(), NS)
            .list(&ListParams::default())
            .await?;
        let settled = all.items.iter().all(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        Ok(settled.then_some(()))
    })
    .await
}

/// 3. A release that changes only operator code: 0 pods restarted, 0 workloads changed.
async fn an_operator_only_release_restarts_nothing(env: &mut Env) -> Result<()> {
    let every_stack = format!("{}={}", names::LABEL_NAME, names::LABEL_NAME_VALUE);
    let pods_before = pods(env, &every_stack).await?;
    let workloads_before = workloads(env, NS).await?;
    ensure!(
        pods_before.len() >= 12,
        "pods of both stacks: {pods_before:?}"
    );
    env.stop_operator();
    start(
        env,
        &operator::operator_bin()?,
        &["--zone-wait-image", ZONE_WAIT_IMAGE],
    )
    .await?;
    // Several resyncs (2 s) of both stacks by the new operator.
    let started = super::reconciles(env).await?;
    eventually(
        "the new operator reconciled every stack 3 times",
        WAIT,
        || async { Ok((super::reconciles(env).await? >= started + 6).then_some(())) },
    )
    .await?;
    let pods_after = pods(env, &every_stack).await?;
    let workloads_after = workloads(env, NS).await?;
    let restarted: Vec<_> = pods_before
        .iter()
        .filter(|(n, uid)| pods_after.get(*n) != Some(uid))
        .map(|(n, _)| n)
        .collect();
    let changed: Vec<_> = workloads_before
        .iter()
        .zip(&workloads_after)
        .filter(|(b, a)| b != a)
        .map(|(b, _)| &b.0)
        .collect();
    ensure!(
        workloads_before.len() == workloads_after.len(),
        "workloads before {} and after {}",
        workloads_before.len(),
        workloads_after.len()
    );
    ensure!(
        restarted.is_empty() && changed.is_empty(),
        "an operator-only upgrade restarted pods {restarted:?} and changed workloads {changed:?}"
    );
    println!(
        "    operator-only release: 0 of {} pods restarted, 0 of {} StatefulSets and Deployments changed (template and generation)",
        pods_before.len(),
        workloads_before.len()
    );
    Ok(())
}
