//! The namespaced mode: the operator confined to two namespaces by `--watch-namespaces`
//! and by RBAC, installed from the overlay docs/install.md shows (the `namespaced`
//! component, `manifests/watched-namespace` once per namespace) under its own
//! ServiceAccount, while the cluster-wide operator of the other scenarios is stopped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use loki_zone_operator::caches::reflectors::managed_selector;
use loki_zone_operator_tests::bundle;
use loki_zone_operator_tests::harness::write_kubeconfig;
use loki_zone_operator_tests::nodesim::{eventually, ZONE};
use loki_zone_operator_tests::operator::{self, Operator};
use serde_json::{json, Value};

use super::{
    condition, create_stack, get_stack, namespace, nodes_by_name, stack_json, tail, workloads, Env,
    WAIT,
};

const WATCHED: [&str; 2] = ["e2e-scoped-a", "e2e-scoped-b"];
const UNWATCHED: &str = "e2e-scoped-other";
/// kustomize's namePrefix gives the namespaced install its own ServiceAccount, roles and
/// bindings next to the cluster-wide install of `make deploy`.
const PREFIX: &str = "scoped-";

/// Whether `user` (a ServiceAccount) may `verb` `resource`, in `namespace` ("" for
/// every namespace), as the API server's authorizer answers it.
pub(super) async fn allowed(
    env: &Env,
    user: &str,
    rule: (&str, &str, &str),
    namespace: &str,
) -> Result<bool> {
    allowed_named(env, user, rule, namespace, "").await
}

/// [`allowed`] for the object named `name` ("" for any).
async fn allowed_named(
    env: &Env,
    user: &str,
    (resource, group, verb): (&str, &str, &str),
    namespace: &str,
    name: &str,
) -> Result<bool> {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": user, "groups": ["system:serviceaccounts"], "resourceAttributes": {"resource": resource, "group": group, "verb": verb, "namespace": namespace, "name": name}}
    }))?;
    let api: Api<SubjectAccessReview> = Api::all(env.admin.clone());
    Ok(api
        .create(&PostParams::default(), &review)
        .await?
        .status
        .map(|s| s.allowed)
        .unwrap_or(false))
}

/// Checks each (rule, namespace, allowed) for `user`.
pub(super) async fn expect_access(
    env: &Env,
    user: &str,
    cases: &[((&str, &str, &str), &str, bool)],
) -> Result<()> {
    for (rule, ns, want) in cases {
        let got = allowed(env, user, *rule, ns).await?;
        let (resource, _, verb) = rule;
        let scope = if ns.is_empty() { "cluster-wide" } else { ns };
        ensure!(
            got == *want,
            "{user} {verb} {resource} ({scope}): allowed={got}, want {want}"
        );
    }
    Ok(())
}

/// The namespaced overlay for WATCHED, with the zone-outage recovery's Role in each, its
/// ServiceAccount, roles and bindings applied; the Deployment is left out (the operator
/// runs as a local process).
fn install_namespaced_rbac(env: &Env, dir: &Path) -> Result<Vec<Value>> {
    let overlay = dir.join("overlay");
    bundle::write_namespaced_overlay_with(
        &overlay,
        &WATCHED,
        &["watched-namespace/zone-outage-recovery"],
        &format!("namePrefix: {PREFIX}\n"),
    )?;
    let objects = bundle::kustomize(&overlay)?;
    let kinds = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    ];
    let rbac: Vec<Value> = objects
        .into_iter()
        .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
        .collect();
    let mut text = String::new();
    for o in &rbac {
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(o)?);
    }
    let file = dir.join("rbac.yaml");
    std::fs::write(&file, text)?;
    let out = std::process::Command::new("kubectl")
        .args(["apply", "--server-side", "-f"])
        .arg(&file)
        .env("KUBECONFIG", &env.cp.admin_kubeconfig)
        .env("KUBECACHEDIR", env.cp.kubectl_cache_dir())
        .output()
        .context("kubectl apply (kubectl is needed)")?;
    if !out.status.success() {
        bail!(
            "kubectl apply of the namespaced RBAC failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(rbac)
}

/// A kubeconfig authenticating as the namespaced install's ServiceAccount.
async fn kubeconfig_of(env: &Env, sa: &str, dir: &Path) -> Result<PathBuf> {
    let api: Api<ServiceAccount> = Api::namespaced(env.admin.clone(), operator::NAMESPACE);
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 86400}}))?;
    let resp: TokenRequest = api
        .create_subresource("token", sa, &PostParams::default(), &req)
        .await
        .context("TokenRequest")?;
    let token = resp.status.context("token request without status")?.token;
    let path = dir.join("operator.kubeconfig");
    write_kubeconfig(&path, &env.cp.server, &env.cp.ca_file, sa, &token)?;
    Ok(path)
}

async fn wait_ready(env: &Env, op: &Operator, ns: &str, name: &str) -> Result<()> {
    eventually(&format!("{ns}/{name} Ready"), WAIT, || async {
        let s = get_stack(env, ns, name).await?;
        Ok(condition(&s, "Ready")
            .is_some_and(|c| c.status == "True")
            .then_some(()))
    })
    .await
    .map_err(|e| {
        let log = std::fs::read_to_string(&op.log).unwrap_or_default();
        anyhow!("{e:#}\nnamespaced operator log:\n{}", tail(&log, 25))
    })
}

/// Every pod of `ns` carries the zone of its node.
async fn pods_annotated_with_their_zone(env: &Env, ns: &str) -> Result<usize> {
    let nodes = nodes_by_name(env).await?;
    let pods = Api::<Pod>::namespaced(env.admin.clone(), ns)
        .list(&ListParams::default())
        .await?;
    for p in &pods.items {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .context("unscheduled pod")?;
        let zone = nodes.get(&node).map(|n| n.labels()[ZONE].clone());
        let annotated = super::zone_as_read(p);
        ensure!(
            annotated.is_some() && annotated == zone,
            "{}: zone {annotated:?}, node {node} in {zone:?}",
            p.name_any()
        );
    }
    Ok(pods.items.len())
}

/// Nothing of a stack in `ns`: no workload, ConfigMap, Service or status.
async fn untouched(env: &Env, ns: &str, name: &str) -> Result<()> {
    let managed = ListParams::default().labels(&managed_selector());
    let configmaps = Api::<ConfigMap>::namespaced(env.admin.clone(), ns)
        .list(&managed)
        .await?
        .items
        .len();
    let services = Api::<Service>::namespaced(env.admin.clone(), ns)
        .list(&managed)
        .await?
        .items
        .len();
    let workloads = workloads(env, ns).await?.len();
    let status = get_stack(env, ns, name).await?.status;
    ensure!(
        (workloads, configmaps, services) == (0, 0, 0) && status.is_none(),
        "the stack in unwatched {ns} was touched: {workloads} workloads, {configmaps} ConfigMaps, {services} Services, status {status:?}"
    );
    Ok(())
}

/// The operator confined to two namespaces runs the stacks there and never touches
/// one elsewhere; its ServiceAccount can neither list Secrets nor write outside them.
pub async fn namespaced_mode_runs_only_the_watched_namespaces(env: &mut Env) -> Result<()> {
    for ns in WATCHED.iter().chain([&UNWATCHED]) {
        namespace(env, ns).await?;
    }
    let dir = env.cp.dir.join("namespaced");
    std::fs::create_dir_all(&dir)?;
    let rbac = install_namespaced_rbac(env, &dir)?;
    let sa = format!("{PREFIX}{}", operator::SERVICE_ACCOUNT);
    let cluster_roles: Vec<&str> = rbac
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    // The cluster reads, and the one cluster-scoped object it writes: the webhook
    // configuration (by name).
    ensure!(
        cluster_roles
            == [
                format!("{PREFIX}loki-zone-operator-cluster-reader"),
                format!("{PREFIX}loki-zone-operator-webhook-configuration"),
            ],
        "ClusterRoles of the namespaced install: {cluster_roles:?}"
    );
    let kubeconfig = kubeconfig_of(env, &sa, &dir).await?;

    env.stop_operator();
    let watch = WATCHED.join(",");
    // As the prefixed install's Deployment tells it (manifests/operator/names.yaml): the
    // ClusterRole that owns the webhook configurations, which grants `get` on itself
    // under its prefixed name only.
    let owner = format!("{PREFIX}loki-zone-operator-webhook-configuration");
    let args = [
        "--resync",
        "2s",
        "--watch-namespaces",
        watch.as_str(),
        "--webhook-owner-cluster-role",
        owner.as_str(),
    ];
    let mut op = Operator::start(&kubeconfig, &dir, &args)?;
    let result = run_confined(env, &mut op, &sa).await;
    op.stop();
    // The cluster-wide operator comes back as the other scenarios had it, and runs the
    // stack the namespaced one left alone.
    env.start_operator().await?;
    result?;
    super::wait_condition(env, UNWATCHED, "other", "Ready", Some("ReadyComponents")).await?;
    Ok(())
}

async fn run_confined(env: &Env, op: &mut Operator, sa: &str) -> Result<()> {
    op.wait_ready(Duration::from_secs(60)).await?;
    let zones = json!({"zones": [{"topologyKey": ZONE}]});
    create_stack(env, WATCHED[0], stack_json("zoned", "1x.demo", zones)).await?;
    create_stack(env, WATCHED[1], stack_json("plain", "1x.demo", Value::Null)).await?;
    create_stack(env, UNWATCHED, stack_json("other", "1x.demo", Value::Null)).await?;
    wait_ready(env, op, WATCHED[0], "zoned").await?;
    wait_ready(env, op, WATCHED[1], "plain").await?;
    let annotated = pods_annotated_with_their_zone(env, WATCHED[0]).await?;
    ensure!(annotated > 0, "no pods in {}", WATCHED[0]);
    // The unwatched stack, long after the watched ones were applied and a few resyncs.
    tokio::time::sleep(Duration::from_secs(5)).await;
    untouched(env, UNWATCHED, "other").await?;
    // Its RBAC was exactly enough: not one request refused.
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "a request of the namespaced operator was refused:\n{}",
        tail(&log, 25)
    );
    let user = format!("system:serviceaccount:{}:{sa}", operator::NAMESPACE);
    let (a, other) = (WATCHED[0], UNWATCHED);
    expect_access(
        env,
        &user,
        &[
            (("secrets", "", "list"), "", false),
            (("secrets", "", "watch"), "", false),
            (("secrets", "", "get"), "", false),
            (("secrets", "", "list"), a, false),
            (("secrets", "", "get"), a, true),
            (("secrets", "", "get"), other, false),
            (("lokistacks", "loki.grafana.com", "list"), "", false),
            (("lokistacks", "loki.grafana.com", "list"), a, true),
            (("statefulsets", "apps", "create"), a, true),
            (("statefulsets", "apps", "create"), other, false),
            (("statefulsets", "apps", "create"), "", false),
            (("configmaps", "", "delete"), other, false),
            (("pods", "", "patch"), a, true),
            (("pods", "", "patch"), other, false),
            // The zone-by-zone rollout deletes pods, in the watched namespaces only.
            (("pods", "", "delete"), a, true),
            (("pods", "", "delete"), other, false),
            (("events", "events.k8s.io", "create"), other, false),
            (
                ("lokistacks/status", "loki.grafana.com", "patch"),
                other,
                false,
            ),
            (("nodes", "", "list"), "", true),
            (("nodes", "", "patch"), "", false),
            (("persistentvolumes", "", "watch"), "", true),
            // The zone-outage recovery's Role, in the watched namespaces only: claims
            // read by name and deleted, never listed; nothing elsewhere.
            (("persistentvolumeclaims", "", "delete"), a, true),
            (("persistentvolumeclaims", "", "get"), a, true),
            (("persistentvolumeclaims", "", "list"), a, false),
            (("persistentvolumeclaims", "", "watch"), a, false),
            (("persistentvolumeclaims", "", "delete"), other, false),
            (("persistentvolumeclaims", "", "delete"), "", false),
        ],
    )
    .await?;
    // The leader Lease: its own, by name, in the operator's namespace; no other Lease is
    // written. Leases are read anywhere (the cluster reader: the fast failover watches
    // kube-node-lease, and a ClusterRole cannot name one namespace).
    let lease = |verb| ("leases", "coordination.k8s.io", verb);
    let own = operator::NAMESPACE;
    for (rule, ns, name, want) in [
        (lease("update"), own, "loki-zone-operator", true),
        (lease("get"), own, "loki-zone-operator", true),
        (lease("update"), own, "another-lease", false),
        (
            lease("update"),
            "kube-system",
            "kube-controller-manager",
            false,
        ),
        (lease("update"), "kube-node-lease", "", false),
        (lease("list"), own, "", true),
        (lease("watch"), "kube-node-lease", "", true),
        (lease("delete"), "kube-node-lease", "", false),
        (lease("patch"), "kube-node-lease", "node-a", false),
        (lease("create"), own, "", true),
        (lease("create"), a, "", false),
    ] {
        let got = allowed_named(env, &user, rule, ns, name).await?;
        ensure!(
            got == want,
            "{user} {} leases {ns}/{name}: allowed={got}, want {want}",
            rule.2
        );
    }
    Ok(())
}
