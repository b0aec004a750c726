//! The reconcile's glue against a fake API server (`testing::cluster`): each scenario
//! runs `reconcile` as the controller would and asserts the exact requests it sent.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::model::api::{LokiStackSize, LokiStackSpec};
use serde_json::{json, Value};

use crate::testing;
use crate::testing::cluster::{self, Call, FakeCluster, Key};

const NS: &str = "logging";

struct World {
    cluster: FakeCluster,
    ctx: Arc<Context>,
}

impl World {
    /// A current server with the stack's StorageClass and storage Secret.
    fn new() -> World {
        let cluster = FakeCluster::new();
        cluster.put_storage(NS);
        let ctx = term(&cluster);
        World { cluster, ctx }
    }

    /// Runs the stack's reconcile as the controller does (its Secret read first), and
    /// returns what it sent.
    async fn reconcile(&self, name: &str) -> (Result<Action, ReconcileError>, Vec<Call>) {
        let obj = self.cluster.stack(NS, name);
        self.ctx.caches.secret_reader.ensure_for(&obj).await;
        let result = reconcile(obj, self.ctx.clone()).await;
        (result, self.cluster.take_calls())
    }
}

/// The context of a new leadership term over `cluster`: nothing remembered.
fn term(cluster: &FakeCluster) -> Arc<Context> {
    let client = cluster.client.clone();
    Arc::new(Context {
        client: client.clone(),
        caches: cluster.caches.clone(),
        applier: Applier::new(client),
        settings: Settings::default(),
        notify: cluster.notifier(),
        metrics: Arc::new(Metrics::default()),
        resync: Duration::from_secs(300),
        webhook_coverage: WebhookCoverage::default(),
        forgotten_at: Default::default(),
        backoff: Default::default(),
    })
}

/// The operator's writes, as `verb target`, sorted (applies of one wave run at once),
/// without its Events, which [`events`] lists.
fn writes(calls: &[Call]) -> Vec<String> {
    let mut w: Vec<String> = calls
        .iter()
        .filter(|c| c.is_write() && !is_event(c))
        .map(Call::line)
        .collect();
    w.sort();
    w
}

fn is_event(c: &Call) -> bool {
    c.target.split('/').nth(1) == Some("events")
}

/// The reasons of the Events it published, in order.
fn events(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| is_event(c))
        .map(|c| {
            let reason = c
                .body
                .as_ref()
                .and_then(|b| b.get("reason"))
                .and_then(Value::as_str);
            let series = c.verb == "merge";
            format!(
                "{}{}",
                reason.unwrap_or("?"),
                if series { " (again)" } else { "" }
            )
        })
        .collect()
}

fn reads(calls: &[Call]) -> Vec<String> {
    let mut r: Vec<String> = calls
        .iter()
        .filter(|c| !c.is_write())
        .map(Call::line)
        .collect();
    r.sort();
    r
}

/// `apply logging/{path}` for each path.
fn applies(paths: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = paths.iter().map(|p| format!("apply {NS}/{p}")).collect();
    a.sort();
    a
}

/// What a 1x.demo stack `s` without zones renders, as `plural/name`.
const DEMO_CHILDREN: &[&str] = &[
    "serviceaccounts/s",
    "configmaps/s-config",
    "services/s-gossip-ring",
    "services/s-distributor-http",
    "services/s-distributor-grpc",
    "deployments/s-distributor",
    "poddisruptionbudgets/s-distributor",
    "services/s-ingester-http",
    "services/s-ingester-grpc",
    "statefulsets/s-ingester",
    "poddisruptionbudgets/s-ingester",
    "services/s-querier-http",
    "services/s-querier-grpc",
    "deployments/s-querier",
    "poddisruptionbudgets/s-querier",
    "services/s-query-frontend-http",
    "services/s-query-frontend-grpc",
    "deployments/s-query-frontend",
    "poddisruptionbudgets/s-query-frontend",
    "services/s-compactor-http",
    "services/s-compactor-grpc",
    "statefulsets/s-compactor",
    "poddisruptionbudgets/s-compactor",
    "services/s-index-gateway-http",
    "services/s-index-gateway-grpc",
    "statefulsets/s-index-gateway",
    "poddisruptionbudgets/s-index-gateway",
];

fn stack_key(name: &str) -> Key {
    cluster::key(&stacks::resource(), Some(NS), name)
}

fn condition(world: &World, stack: &str, type_: &str) -> (String, String) {
    let obj = world.cluster.stack(NS, stack);
    let conditions = obj.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = conditions
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:?}"));
    (
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// A new stack: its storage Secret read, each child read once (is the name free?) and
/// applied, the ServiceAccount and ConfigMap before every other child (its pods need
/// both), the status written once, and one Event; nothing deleted.
#[tokio::test]
async fn a_new_stack_applies_every_child_once_then_its_status() {
    let w = World::new();
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    let mut want = applies(DEMO_CHILDREN);
    want.push(format!("apply {NS}/lokistacks/s/status"));
    want.sort();
    assert_eq!(writes(&calls), want);
    let mut gets: Vec<String> = DEMO_CHILDREN
        .iter()
        .map(|p| format!("get {NS}/{p}"))
        .collect();
    gets.push(format!("get {NS}/secrets/loki-s3"));
    gets.sort();
    assert_eq!(reads(&calls), gets);
    assert_eq!(events(&calls), ["PendingComponents"]);
    let order = lines(&calls);
    let at = |l: String| order.iter().position(|o| *o == l).expect("sent");
    let first_wave = at(format!("apply {NS}/serviceaccounts/s"))
        .max(at(format!("apply {NS}/configmaps/s-config")));
    for p in &DEMO_CHILDREN[2..] {
        assert!(
            at(format!("apply {NS}/{p}")) > first_wave,
            "{p} after the ServiceAccount and ConfigMap"
        );
    }
    assert!(
        at(format!("apply {NS}/lokistacks/s/status"))
            > at(format!("apply {NS}/statefulsets/s-index-gateway"))
    );
    assert_eq!(
        condition(&w, "s", "Pending"),
        ("True".into(), "PendingComponents".into())
    );
    assert_eq!(
        condition(&w, "s", "Degraded"),
        ("False".into(), "NoIssues".into())
    );
}

/// A stack whose spec and children are unchanged since the last reconcile sends nothing:
/// not one request.
#[tokio::test]
async fn an_unchanged_stack_sends_nothing() {
    let w = World::new();
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    w.reconcile("s").await.0.expect("first");
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(lines(&calls), Vec::<String>::new());
}

/// A new leader (a new term: nothing remembered) reads the storage Secret again, and
/// each child once, to compare it with what it renders, and writes nothing: each child's
/// applied-hash annotation matches and the live object holds what is rendered.
#[tokio::test]
async fn a_failover_writes_nothing() {
    let mut w = World::new();
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    w.reconcile("s").await.0.expect("first");
    w.ctx = term(&w.cluster);
    w.ctx.caches.secret_reader.new_term();
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(writes(&calls), Vec::<String>::new());
    let mut gets: Vec<String> = DEMO_CHILDREN
        .iter()
        .map(|p| format!("get {NS}/{p}"))
        .collect();
    gets.push(format!("get {NS}/secrets/loki-s3"));
    gets.sort();
    assert_eq!(reads(&calls), gets);
    // Once read, a child is known for the rest of the term.
    let (_, calls) = w.reconcile("s").await;
    assert_eq!(lines(&calls), Vec::<String>::new());
}

/// An edit made before a failover that only removes a field (here the ingesters'
/// topology spread constraints, as `kubectl patch --type=json` with `remove` does) leaves
/// no other field manager behind and the applied-hash as it was: the new leader still
/// sees it on its live read and applies the StatefulSet again, and only it.
#[tokio::test]
async fn a_failover_repairs_a_field_removed_before_it() {
    let mut w = World::new();
    running_zone_aware_stack(&w).await;
    let set = Key {
        group: "apps".into(),
        plural: "statefulsets".into(),
        namespace: Some(NS.into()),
        name: "s-ingester".into(),
    };
    let constraints = |w: &World| {
        w.cluster.get(&set).expect("the set")["spec"]["template"]["spec"]
            ["topologySpreadConstraints"]
            .clone()
    };
    let applied = constraints(&w);
    assert!(
        applied.is_array(),
        "a zone-aware ingester spreads over zones"
    );
    w.cluster.edit(&set, |s| {
        s["spec"]["template"]["spec"]
            .as_object_mut()
            .map(|spec| spec.remove("topologySpreadConstraints"));
    });
    w.ctx = term(&w.cluster);
    w.ctx.caches.secret_reader.new_term();
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(writes(&calls), applies(&["statefulsets/s-ingester"]));
    assert_eq!(constraints(&w), applied);
}

/// An edit of the spec applies what it changes, and the status observes the new
/// generation.
#[tokio::test]
async fn a_spec_change_applies_what_it_changes() {
    let w = World::new();
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    w.reconcile("s").await.0.expect("first");
    w.cluster.edit(&stack_key("s"), |s| {
        s["spec"]["template"] = json!({"querier": {"replicas": 2}});
    });
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    // The querier's budget allows one pod down at any count: unchanged.
    assert_eq!(
        writes(&calls),
        applies(&["deployments/s-querier", "lokistacks/s/status"])
    );
    // The edited stack's Secret is read again; its children are known to be its own.
    assert_eq!(reads(&calls), [format!("get {NS}/secrets/loki-s3")]);
    let obj = w.cluster.stack(NS, "s");
    assert_eq!(obj.data["status"]["observedGeneration"], 2);
}

/// A child the stack no longer renders is deleted (here its NetworkPolicies, once
/// switched off); children it still renders are left alone.
#[tokio::test]
async fn a_child_no_longer_rendered_is_pruned() {
    let w = World::new();
    let mut spec = testing::stack_spec(LokiStackSize::Demo);
    spec.network_policies = Some(crate::model::api::NetworkPoliciesSpec {
        rule_set: crate::model::api::NetworkPolicyRuleSet::RestrictIngressEgress,
    });
    w.cluster.put(testing::stack("s", spec));
    w.reconcile("s").await.0.expect("first");
    let policies: Vec<String> = w
        .cluster
        .list("networkpolicies", NS)
        .iter()
        .map(|p| {
            format!(
                "delete {NS}/networkpolicies/{}",
                p["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert!(!policies.is_empty(), "the policies were applied");
    w.cluster.edit(&stack_key("s"), |s| {
        s["spec"]["networkPolicies"] = json!({"ruleSet": "None"});
    });
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    let mut want = policies;
    want.push(format!("apply {NS}/lokistacks/s/status"));
    want.sort();
    assert_eq!(writes(&calls), want);
    assert!(w.cluster.list("networkpolicies", NS).is_empty());
}

/// A name the stack renders that someone else's object holds: the stack's objects up to
/// it are applied, that one is left untouched, the status says what to rename, and the
/// reconcile fails (so it is retried with a backoff) with a Warning.
#[tokio::test]
async fn a_name_held_by_someone_else_is_left_and_reported() {
    let w = World::new();
    w.cluster.put(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "s-config", "namespace": NS},
        "data": {"mine": "yes"},
    }));
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    let (result, calls) = w.reconcile("s").await;
    assert!(
        matches!(
            result,
            Err(ReconcileError::Apply(ApplyError::NameConflict { .. }))
        ),
        "{result:?}"
    );
    assert_eq!(
        writes(&calls),
        applies(&["serviceaccounts/s", "lokistacks/s/status"])
    );
    assert_eq!(events(&calls), ["NameConflict"]);
    assert_eq!(
        condition(&w, "s", "Degraded"),
        ("True".into(), "NameConflict".into())
    );
    let theirs = w
        .cluster
        .get(&Key::core("configmaps", Some(NS), "s-config"));
    assert_eq!(theirs.expect("kept")["data"], json!({"mine": "yes"}));
}

fn lines(calls: &[Call]) -> Vec<String> {
    calls.iter().map(Call::line).collect()
}

/// Three nodes, one in each of zone-a, zone-b and zone-c.
fn three_zones(w: &World) {
    for z in ["a", "b", "c"] {
        w.cluster.put(testing::node(
            &format!("n-{z}"),
            &[(testing::ZONE, &format!("zone-{z}"))],
        ));
    }
}

/// Pod `{set}-{i}` on the node of zone a, b, c for i modulo 3, at 127.0.0.{60 + i}.
fn by_index(pod: &str) -> (String, String) {
    let i: usize = pod
        .rsplit_once('-')
        .and_then(|(_, i)| i.parse().ok())
        .unwrap_or(0);
    (
        format!("n-{}", ["a", "b", "c"][i % 3]),
        format!("127.0.0.{}", 60 + i),
    )
}

/// A zone-aware 1x.demo stack `s` (replication factor 2) with three ingesters, applied
/// and running, its pods Ready and zoned.
async fn running_zone_aware_stack(w: &World) {
    running_zone_aware_stack_with(w, |_| {}).await
}

/// The same, with `change` made to its spec first.
async fn running_zone_aware_stack_with(w: &World, change: impl FnOnce(&mut LokiStackSpec)) {
    three_zones(w);
    let mut spec = testing::zoned_spec(LokiStackSize::Demo, 2, &[testing::ZONE]);
    spec.template = Some(crate::model::api::LokiTemplateSpec {
        ingester: Some(crate::model::api::LokiComponentSpec {
            replicas: Some(3),
            ..Default::default()
        }),
        ..Default::default()
    });
    change(&mut spec);
    w.cluster.put(testing::stack("s", spec));
    w.reconcile("s").await.0.expect("applied");
    w.cluster.run_statefulsets(&by_index);
    w.reconcile("s").await.0.expect("running");
    w.cluster.take_calls();
}

/// A write the server refuses (here a quota's 403) fails the reconcile after the
/// status says which object and why: nothing after the failed wave is sent, and no
/// second Event repeats the one the status change announced. The retry, once the server
/// accepts, applies what is left and clears the condition.
#[tokio::test]
async fn a_refused_write_is_reported_and_retried() {
    let w = World::new();
    w.cluster.put(testing::stack(
        "s",
        testing::stack_spec(LokiStackSize::Demo),
    ));
    w.cluster.fail_next(
        "apply",
        &format!("{NS}/configmaps/s-config"),
        403,
        "Forbidden",
    );
    let (result, calls) = w.reconcile("s").await;
    assert!(
        matches!(result, Err(ReconcileError::Apply(ApplyError::Apply { .. }))),
        "{result:?}"
    );
    assert_eq!(
        writes(&calls),
        applies(&[
            "configmaps/s-config",
            "lokistacks/s/status",
            "serviceaccounts/s"
        ])
    );
    assert_eq!(events(&calls), ["ApplyFailed"]);
    assert_eq!(
        condition(&w, "s", "Degraded"),
        ("True".into(), "ApplyFailed".into())
    );
    let obj = w.cluster.stack(NS, "s");
    let message = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Degraded"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("ConfigMap s-config"), "{message}");
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    let mut want = applies(&DEMO_CHILDREN[1..]);
    want.push(format!("apply {NS}/lokistacks/s/status"));
    want.sort();
    assert_eq!(
        writes(&calls),
        want,
        "the ServiceAccount was applied already"
    );
    assert_eq!(
        condition(&w, "s", "Degraded"),
        ("False".into(), "NoIssues".into())
    );
}

fn deletes_of(calls: &[Call]) -> Vec<&Call> {
    calls.iter().filter(|c| c.verb == "delete").collect()
}

/// One step of the zone-by-zone rollout: once the StatefulSets have taken a change of
/// every pod template (the config hash), the pods of the first zone, and only those, are
/// deleted, each on the precondition of the uid and version the plan saw; the status
/// names the zone and an Event announces it. Once they are back, updated and Ready, the
/// next zone follows.
#[tokio::test]
async fn a_rollout_deletes_one_zone_at_a_time() {
    let w = World::new();
    running_zone_aware_stack(&w).await;
    w.cluster.edit(&stack_key("s"), |s| {
        s["spec"]["limits"] = json!({"global": {"ingestion": {"ingestionRate": 8}}});
    });
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert!(
        deletes_of(&calls).is_empty(),
        "nothing is deleted before the StatefulSets have seen their new spec"
    );
    w.cluster.run_statefulsets(&by_index);
    let before: Vec<Value> = ["s-compactor-0", "s-index-gateway-0", "s-ingester-0"]
        .iter()
        .map(|p| w.cluster.get(&pod_key(p)).expect("running"))
        .collect();
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        writes(&calls),
        [
            format!("apply {NS}/lokistacks/s/status"),
            format!("delete {NS}/pods/s-compactor-0"),
            format!("delete {NS}/pods/s-index-gateway-0"),
            format!("delete {NS}/pods/s-ingester-0"),
        ]
    );
    for (d, pod) in deletes_of(&calls).into_iter().zip(&before) {
        let preconditions = &d.body.as_ref().expect("a body")["preconditions"];
        assert_eq!(preconditions["uid"], pod["metadata"]["uid"], "{}", d.target);
        assert_eq!(
            preconditions["resourceVersion"], pod["metadata"]["resourceVersion"],
            "{}",
            d.target
        );
    }
    assert_eq!(events(&calls), ["RolloutZoneStarted"]);
    let status = &w.cluster.stack(NS, "s").data["status"]["rollout"];
    assert_eq!(status["zone"], "zone-a");
    // zone-a's pods come back updated: zone-b's ingester is next, alone.
    w.cluster.run_statefulsets(&by_index);
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        writes(&calls),
        [
            format!("apply {NS}/lokistacks/s/status"),
            format!("delete {NS}/pods/s-ingester-1"),
        ]
    );
    assert_eq!(
        w.cluster.stack(NS, "s").data["status"]["rollout"]["zone"],
        "zone-b"
    );
}

fn pod_key(name: &str) -> Key {
    Key::core("pods", Some(NS), name)
}

/// An ingester's prepare-shutdown endpoint at `ip`:3100, answering the status the
/// returned cell holds; what it was asked, as `METHOD path`.
struct Endpoint {
    answer: Arc<std::sync::atomic::AtomicU16>,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Endpoint {
    fn asked(&self) -> Vec<String> {
        std::mem::take(&mut *self.asked.lock().expect("lock"))
    }
}

async fn ingester_endpoint(ip: &str, status: u16) -> Endpoint {
    use axum::routing::any;
    use std::sync::atomic::{AtomicU16, Ordering};
    let endpoint = Endpoint {
        answer: Arc::new(AtomicU16::new(status)),
        asked: Arc::default(),
    };
    let (answer, seen) = (endpoint.answer.clone(), endpoint.asked.clone());
    let app = axum::Router::new().route(
        crate::model::names::PREPARE_SHUTDOWN_PATH,
        any(move |req: axum::extract::Request| {
            let (answer, seen) = (answer.clone(), seen.clone());
            async move {
                seen.lock()
                    .expect("lock")
                    .push(format!("{} {}", req.method(), req.uri().path()));
                axum::http::StatusCode::from_u16(answer.load(Ordering::SeqCst)).expect("a status")
            }
        }),
    );
    let port = crate::model::names::PORT_HTTP;
    let listener = tokio::net::TcpListener::bind((ip, port as u16))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "bind {ip}:{port} (is something listening on port {port} of every address?): {e}"
            )
        });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    endpoint
}

/// Lowering a zone-aware stack's ingesters asks the one leaving to prepare for shutdown
/// first. While it refuses, the StatefulSet keeps its replicas (the held variant is
/// what was applied, so nothing is sent) and a Warning says why; once it agrees, the
/// StatefulSet is applied with fewer replicas.
#[tokio::test]
async fn a_scale_down_waits_while_a_leaving_ingester_refuses_to_prepare() {
    let w = World::new();
    running_zone_aware_stack(&w).await;
    let ingester = ingester_endpoint("127.0.0.62", 503).await;
    w.cluster.edit(&stack_key("s"), |s| {
        s["spec"]["template"]["ingester"]["replicas"] = json!(2);
    });
    let (result, calls) = w.reconcile("s").await;
    assert_eq!(
        result.ok(),
        Some(Action::requeue(ROLLOUT_RETRY)),
        "it asks again soon"
    );
    assert_eq!(ingester.asked(), ["POST /ingester/prepare_shutdown"]);
    assert_eq!(writes(&calls), applies(&["lokistacks/s/status"]));
    assert_eq!(events(&calls), ["IngesterScaleDownHeld"]);
    let set = Key {
        group: "apps".into(),
        plural: "statefulsets".into(),
        namespace: Some(NS.into()),
        name: "s-ingester".into(),
    };
    assert_eq!(w.cluster.get(&set).expect("kept")["spec"]["replicas"], 3);
    // It agrees: the StatefulSet shrinks.
    ingester
        .answer
        .store(204, std::sync::atomic::Ordering::SeqCst);
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(ingester.asked(), ["POST /ingester/prepare_shutdown"]);
    assert_eq!(writes(&calls), applies(&["statefulsets/s-ingester"]));
    assert_eq!(events(&calls), ["IngestersLeaving"]);
    assert_eq!(w.cluster.get(&set).expect("applied")["spec"]["replicas"], 2);
}

/// A zone is lost for good (its node is out of service): the compactor and index gateway
/// pods there are moved out, as the stack opted in to: their claims deleted on the
/// precondition of their uid, then the pods force-deleted. Ingesters stay.
#[tokio::test]
async fn a_lost_zone_moves_the_movable_pods_out() {
    let w = World::new();
    running_zone_aware_stack_with(&w, |spec| {
        if let Some(r) = spec.replication.as_mut() {
            r.zone_outage = Some(crate::model::api::ZoneOutageSpec {
                recover_after: Some("15m".into()),
            });
        }
    })
    .await;
    let node = Key::node("n-a");
    w.cluster.edit(&node, |n| {
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "Unknown",
                                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        n["spec"]["taints"] =
            json!([{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]);
    });
    let uid_of = |plural: &str, name: &str| {
        let key = Key::core(plural, Some(NS), name);
        w.cluster.get(&key).expect("exists")["metadata"]["uid"].clone()
    };
    let claim_uids = [
        uid_of("persistentvolumeclaims", "storage-s-compactor-0"),
        uid_of("persistentvolumeclaims", "storage-s-index-gateway-0"),
    ];
    let pod_uids = [
        uid_of("pods", "s-compactor-0"),
        uid_of("pods", "s-index-gateway-0"),
    ];
    let (result, calls) = w.reconcile("s").await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        writes(&calls),
        [
            format!("apply {NS}/lokistacks/s/status"),
            format!("delete {NS}/persistentvolumeclaims/storage-s-compactor-0"),
            format!("delete {NS}/persistentvolumeclaims/storage-s-index-gateway-0"),
            format!("delete {NS}/pods/s-compactor-0"),
            format!("delete {NS}/pods/s-index-gateway-0"),
        ]
    );
    let deletes = deletes_of(&calls);
    let body = |target: &str| {
        deletes
            .iter()
            .find(|c| c.target.ends_with(target))
            .and_then(|c| c.body.clone())
            .expect("a delete with a body")
    };
    for (claim, uid) in ["storage-s-compactor-0", "storage-s-index-gateway-0"]
        .iter()
        .zip(&claim_uids)
    {
        assert_eq!(body(claim)["preconditions"]["uid"], *uid, "{claim}");
    }
    for (pod, uid) in ["pods/s-compactor-0", "pods/s-index-gateway-0"]
        .iter()
        .zip(&pod_uids)
    {
        assert_eq!(body(pod)["preconditions"]["uid"], *uid, "{pod}");
        assert_eq!(body(pod)["gracePeriodSeconds"], 0, "{pod} is force-deleted");
    }
    // One Event per pod moved, each with its own note.
    assert_eq!(
        events(&calls),
        [
            "ZoneOutageRecovery",
            "ZoneOutageRecovery",
            "NoPendingComponents",
            "WriteQuorumLost",
            "ZoneUnavailable"
        ]
    );
    // The claims are Terminating while the pods' replacements have not let go of them.
    let claim = w.cluster.get(&Key::core(
        "persistentvolumeclaims",
        Some(NS),
        "storage-s-compactor-0",
    ));
    assert!(claim.expect("protected")["metadata"]["deletionTimestamp"].is_string());
}
