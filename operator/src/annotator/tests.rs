//! The annotator's glue against a fake API server (`testing::cluster`): pods and nodes
//! change as their watches would report them, and each test asserts the exact requests.
//! Time is paused: the runtime moves the clock only once every task waits, so "after a
//! while" means "once nothing more happens".

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::model::api::LokiStackSize;
use crate::testing::cluster::{Call, FakeCluster, Key};
use crate::testing::{self, ZONE};

const NS: &str = "logging";

/// A cluster with nodes n-a (zone-a) and n-b (zone-b) and a zone-aware stack `s`, and
/// the annotator of a term running over it.
fn start() -> (FakeCluster, tokio::task::JoinHandle<()>) {
    let cluster = FakeCluster::new();
    for z in ["a", "b"] {
        cluster.put(testing::node(
            &format!("n-{z}"),
            &[(ZONE, &format!("zone-{z}"))],
        ));
    }
    cluster.put(testing::stack(
        "s",
        testing::zoned_spec(LokiStackSize::Demo, 2, &[ZONE]),
    ));
    let task = run_annotator(&cluster);
    (cluster, task)
}

fn run_annotator(cluster: &FakeCluster) -> tokio::task::JoinHandle<()> {
    let inputs = Inputs::from_caches(
        &cluster.caches,
        cluster.taps.zone_aware_pods.attach(),
        cluster.taps.nodes.attach(),
    );
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(run(
        cluster.client.clone(),
        inputs,
        cluster.notifier(),
        metrics,
    ))
}

/// A zone-aware pod of stack `s` that reads its zone from `ZONE`.
fn pod(name: &str) -> crate::testing::PodBuilder {
    testing::pod(name)
        .namespace(NS)
        .stack("s")
        .zone_aware()
        .zone_keys(ZONE)
}

fn pod_key(name: &str) -> Key {
    Key::core("pods", Some(NS), name)
}

/// Lets every task run until all wait (the clock then jumps, which ends this).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(30)).await;
}

fn lines(calls: &[Call]) -> Vec<String> {
    calls.iter().map(Call::line).collect()
}

fn version(cluster: &FakeCluster, name: &str) -> Value {
    cluster.get(&pod_key(name)).expect("the pod")["metadata"]["resourceVersion"].clone()
}

fn zone(cluster: &FakeCluster, name: &str) -> Value {
    cluster.get(&pod_key(name)).expect("the pod")["metadata"]["annotations"][names::ANNOTATION_ZONE]
        .clone()
}

/// A pod bound to a node gets the node's zone in one merge patch, conditional on the
/// version it was read at; the pod's change that the write brings back sends nothing.
#[tokio::test(start_paused = true)]
async fn a_bound_pod_gets_its_nodes_zone_once() {
    let (cluster, _annotator) = start();
    settle().await;
    cluster.put(pod("p").on("n-b").build());
    let read_at = version(&cluster, "p");
    settle().await;
    let calls = cluster.take_calls();
    assert_eq!(lines(&calls), [format!("merge {NS}/pods/p")]);
    assert_eq!(
        calls[0].body,
        Some(json!({"metadata": {"resourceVersion": read_at,
                                 "annotations": {names::ANNOTATION_ZONE: "zone-b"}}}))
    );
    assert_eq!(zone(&cluster, "p"), "zone-b");
}

/// A pod that reads its zone from the label Kubernetes copies at binding (1.35) and was
/// bound with it is left alone: no write at all. One bound without it (a server with the
/// copy switched off) gets the label, where its Loki reads it, not the annotation.
#[tokio::test(start_paused = true)]
async fn a_pod_reading_the_zone_label_is_left_alone_or_gets_the_label() {
    let (cluster, _annotator) = start();
    settle().await;
    let reads_label = |name: &str| {
        pod(name)
            .on("n-b")
            .annotation(names::ANNOTATION_ZONE_SOURCE, names::ZONE_SOURCE_POD_LABEL)
    };
    cluster.put(reads_label("copied").label(ZONE, "zone-b").build());
    settle().await;
    assert!(lines(&cluster.take_calls()).is_empty());
    cluster.put(reads_label("missing").build());
    let read_at = version(&cluster, "missing");
    settle().await;
    let calls = cluster.take_calls();
    assert_eq!(lines(&calls), [format!("merge {NS}/pods/missing")]);
    assert_eq!(
        calls[0].body,
        Some(json!({"metadata": {"resourceVersion": read_at, "labels": {ZONE: "zone-b"}}}))
    );
}

/// Pods bound while no term ran are swept when the annotator starts; an unbound pod and
/// a pod of no stack's keys are left; a pod bound later is zoned when it is bound.
#[tokio::test(start_paused = true)]
async fn pods_bound_before_the_start_are_swept_and_unbound_ones_wait() {
    let cluster = FakeCluster::new();
    cluster.put(testing::node("n-a", &[(ZONE, "zone-a")]));
    cluster.put(testing::stack(
        "s",
        testing::zoned_spec(LokiStackSize::Demo, 2, &[ZONE]),
    ));
    cluster.put(pod("early").on("n-a").build());
    cluster.put(pod("unbound").build());
    let _annotator = run_annotator(&cluster);
    settle().await;
    assert_eq!(
        lines(&cluster.take_calls()),
        [format!("merge {NS}/pods/early")]
    );
    cluster.edit(&pod_key("unbound"), |p| {
        p["spec"]["nodeName"] = json!("n-a")
    });
    settle().await;
    assert_eq!(
        lines(&cluster.take_calls()),
        [format!("merge {NS}/pods/unbound")]
    );
    assert_eq!(zone(&cluster, "unbound"), "zone-a");
}

/// A pod that changed after it was read (409) is not overwritten: it is looked at again
/// once its new version arrives, and zoned on that version.
#[tokio::test(start_paused = true)]
async fn a_pod_changed_meanwhile_is_looked_at_again_not_overwritten() {
    let (cluster, _annotator) = start();
    settle().await;
    cluster.fail_next("merge", &format!("{NS}/pods/p"), 409, "Conflict");
    cluster.put(pod("p").on("n-a").build());
    settle().await;
    assert_eq!(lines(&cluster.take_calls()), [format!("merge {NS}/pods/p")]);
    // Its new version (someone labelled it) comes through the watch.
    cluster.edit(&pod_key("p"), |p| {
        p["metadata"]["labels"]["team"] = json!("x")
    });
    let now = version(&cluster, "p");
    settle().await;
    let calls = cluster.take_calls();
    assert_eq!(lines(&calls), [format!("merge {NS}/pods/p")]);
    assert_eq!(
        calls[0]
            .body
            .as_ref()
            .map(|b| b["metadata"]["resourceVersion"].clone()),
        Some(now)
    );
    assert_eq!(zone(&cluster, "p"), "zone-a");
}

/// A node without the zone label: the pod gets one Warning (not one per change) and no
/// write; once the node is labelled, its pod is zoned.
#[tokio::test(start_paused = true)]
async fn a_node_without_its_zone_label_is_reported_once_then_its_pods_zoned() {
    let (cluster, _annotator) = start();
    cluster.put(testing::node("n-x", &[]));
    settle().await;
    cluster.take_calls();
    cluster.put(pod("p").on("n-x").build());
    settle().await;
    cluster.edit(&pod_key("p"), |p| {
        p["metadata"]["labels"]["team"] = json!("x")
    });
    settle().await;
    let calls = cluster.take_calls();
    assert_eq!(lines(&calls), [format!("create {NS}/events")]);
    let event = calls[0].body.as_ref().expect("an Event");
    assert_eq!(event["reason"], "ZoneLabelMissing");
    assert_eq!(event["regarding"]["name"], "p");
    let node = Key::node("n-x");
    cluster.edit(&node, |n| n["metadata"]["labels"][ZONE] = json!("zone-x"));
    settle().await;
    assert_eq!(lines(&cluster.take_calls()), [format!("merge {NS}/pods/p")]);
    assert_eq!(zone(&cluster, "p"), "zone-x");
}

/// A zone once written is never rewritten: when the node's labels later give another
/// zone, the pod keeps its own (Loki read it at start) and a Warning says to restart it.
#[tokio::test(start_paused = true)]
async fn a_written_zone_is_never_rewritten() {
    let (cluster, _annotator) = start();
    cluster.put(pod("p").on("n-a").zone("zone-a").build());
    settle().await;
    assert_eq!(lines(&cluster.take_calls()), Vec::<String>::new());
    let node = Key::node("n-a");
    cluster.edit(&node, |n| n["metadata"]["labels"][ZONE] = json!("zone-c"));
    settle().await;
    let calls = cluster.take_calls();
    assert_eq!(lines(&calls), [format!("create {NS}/events")]);
    assert_eq!(
        calls[0].body.as_ref().map(|b| b["reason"].clone()),
        Some(json!("ZoneLabelChanged"))
    );
    assert_eq!(zone(&cluster, "p"), "zone-a");
}

/// A write the server refuses (RBAC) is retried until it goes through, with one Warning
/// on the pod saying what to check.
#[tokio::test(start_paused = true)]
async fn a_refused_write_is_retried_with_one_warning() {
    let (cluster, _annotator) = start();
    settle().await;
    for _ in 0..3 {
        cluster.fail_next("merge", &format!("{NS}/pods/p"), 403, "Forbidden");
    }
    cluster.put(pod("p").on("n-a").build());
    settle().await;
    let calls = cluster.take_calls();
    let merges = calls
        .iter()
        .filter(|c| c.verb == "merge" && c.target.ends_with("pods/p"))
        .count();
    assert_eq!(
        merges,
        4,
        "three refused, the fourth written: {:?}",
        lines(&calls)
    );
    let warnings: Vec<&Value> = calls
        .iter()
        .filter(|c| c.target == format!("{NS}/events"))
        .filter_map(|c| c.body.as_ref())
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", lines(&calls));
    assert_eq!(warnings[0]["reason"], "ZoneAnnotationFailed");
    assert_eq!(zone(&cluster, "p"), "zone-a");
}
