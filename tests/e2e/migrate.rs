//! Moving a stack from the Go Loki Operator: its fields survive our CRD, its children
//! are taken over under the same names, and what does not change restarts nothing.
//!
//! The Go operator cannot run here, so the scenario leaves the cluster as it would: the
//! stack carries Go-only fields, every child is owned by the stack and written by the
//! Go operator's field manager (`manager`, operation Update), one child has a field our
//! render does not set, and a gateway Deployment exists that we do not render at all.

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use loki_zone_operator::model::names;
use loki_zone_operator_tests::nodesim::eventually;
use loki_zone_operator_tests::{operator, repo_root};
use serde_json::{json, Value};

use super::{condition, create_stack, namespace, stack_json, wait_condition, Env, WAIT};

const NS: &str = "e2e-migrate";
const STACK: &str = "go";
const GO_MANAGER: &str = names::GO_OPERATOR_FIELD_MANAGER;

/// Fields of the Go operator's LokiStack that this operator keeps without acting on.
fn go_only_fields() -> Value {
    json!({
        "tenants": {"mode": "static", "authentication": [{"tenantName": "app", "tenantId": "app", "oidc": {"secret": {"name": "oidc"}, "issuerURL": "https://issuer.example"}}]},
        "template": {"gateway": {"replicas": 2}},
    })
}

/// Fields of the Go operator's LokiStack that this operator acts on (the memberlist
/// address, OTLP rules): the stack has them from the start, so the take-over changes no
/// pod template.
fn acted_on_fields() -> Value {
    json!({
        "hashRing": {"type": "memberlist", "memberlist": {"instanceAddrType": "podIP"}},
        "limits": {"global": {"otlp": {"streamLabels": {"resourceAttributes": [{"name": "k8s.namespace.name"}]}}}},
    })
}

async fn set_management(env: &Env, state: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), NS, &stack_resource());
    let patch = json!({"spec": {"managementState": state}});
    api.patch(STACK, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn stack_resource() -> kube::api::ApiResource {
    loki_zone_operator::caches::stacks::resource()
}

/// Rewrites an object's managed fields as the Go operator would have left them: what
/// this operator applied becomes an Update of the `manager` field manager.
async fn as_written_by_go(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let obj = api.get(name).await?;
    let entries: Vec<Value> = obj
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            let mut v = serde_json::to_value(e)?;
            if e.manager.as_deref() == Some(names::FIELD_MANAGER) {
                v["manager"] = json!(GO_MANAGER);
                v["operation"] = json!("Update");
            }
            Ok(v)
        })
        .collect::<Result<_>>()?;
    let patch =
        json!({"metadata": {"resourceVersion": obj.resource_version(), "managedFields": entries}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn managers(obj: &DynamicObject) -> Vec<(String, String)> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or_default().is_empty())
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Pod name → uid, for pods of one component.
async fn pod_uids(env: &Env, component: &str) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), NS);
    let lp = ListParams::default().labels(&format!(
        "{}={component},{}={STACK}",
        names::LABEL_COMPONENT,
        names::LABEL_INSTANCE
    ));
    Ok(pods
        .list(&lp)
        .await?
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

/// The Go operator's gateway: owned by the stack, with its labels, not rendered by us.
async fn create_go_gateway(env: &Env, stack_uid: &str) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(env.admin.clone(), NS);
    let labels = json!({
        names::LABEL_NAME: names::LABEL_NAME_VALUE,
        names::LABEL_INSTANCE: STACK,
        names::LABEL_MANAGED_BY: names::LABEL_CONTROLLER_VALUE,
        names::LABEL_COMPONENT: "lokistack-gateway",
    });
    let gateway: Deployment = serde_json::from_value(json!({
        "metadata": {"name": format!("{STACK}-gateway"), "labels": labels,
            "ownerReferences": [{"apiVersion": "loki.grafana.com/v1", "kind": "LokiStack", "name": STACK, "uid": stack_uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "gateway", "image": "quay.io/observatorium/api:latest"}]}}},
    }))?;
    let pp = PostParams {
        field_manager: Some(GO_MANAGER.into()),
        ..Default::default()
    };
    deployments.create(&pp, &gateway).await?;
    Ok(())
}

/// Untyped StatefulSet and Deployment APIs of the namespace, for their managed fields.
fn workload_apis(env: &Env) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let api = |r: &kube::api::ApiResource| Api::namespaced_with(env.admin.clone(), NS, r);
    (
        api(&kube::api::ApiResource::erase::<StatefulSet>(&())),
        api(&kube::api::ApiResource::erase::<Deployment>(&())),
    )
}

/// Leaves the stack's children as the Go operator would: its field manager, one extra
/// env var on the distributor, and its gateway.
async fn leave_as_the_go_operator_would(env: &Env, stack_uid: &str) -> Result<()> {
    let (sts, deps) = workload_apis(env);
    as_written_by_go(&sts, &format!("{STACK}-ingester")).await?;
    as_written_by_go(&deps, &format!("{STACK}-querier")).await?;
    let distributor = format!("{STACK}-distributor");
    as_written_by_go(&deps, &distributor).await?;
    let pp = PatchParams {
        field_manager: Some(GO_MANAGER.into()),
        ..Default::default()
    };
    let env_patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "loki-distributor", "env": [{"name": "GO_OPERATOR_ONLY", "value": "1"}]}
    ]}}}});
    let typed: Api<Deployment> = Api::namespaced(env.admin.clone(), NS);
    typed
        .patch(&distributor, &pp, &Patch::Strategic(&env_patch))
        .await?;
    create_go_gateway(env, stack_uid).await
}

/// `hack/deploy.sh <action>` against the test cluster, as `make <action>` runs it.
fn deploy_script(env: &Env, action: &str) -> Result<()> {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("hack/deploy.sh"))
        .arg(action)
        .env("KUBECONFIG", &env.cp.admin_kubeconfig)
        .env("KUBECACHEDIR", env.cp.kubectl_cache_dir())
        .env("BIN", operator::operator_bin()?)
        .output()
        .context("running hack/deploy.sh")?;
    ensure!(
        out.status.success(),
        "hack/deploy.sh {action} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn has_env(d: &Deployment, name: &str) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| {
            s.containers
                .iter()
                .flat_map(|c| c.env.iter().flatten())
                .any(|e| e.name == name)
        })
        .unwrap_or(false)
}

/// Scenario 27: A stack and children as the Go Loki Operator leaves them are taken over: Go-only
/// fields survive our CRD and are named in a Warning, the children keep their names and
/// end managed by this operator alone, a field only the Go operator set is removed, pods
/// whose template does not change keep running, and the Go gateway is left running.
pub async fn a_stack_left_by_the_go_operator_is_taken_over(env: &mut Env) -> Result<()> {
    namespace(env, NS).await?;
    let mut body = stack_json(STACK, "1x.demo", Value::Null);
    for (k, v) in acted_on_fields().as_object().into_iter().flatten() {
        body["spec"][k] = v.clone();
    }
    let created = create_stack(env, NS, body).await?;
    let uid = created.uid().context("uid")?;
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    set_management(env, "Unmanaged").await?;
    let stacks: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), NS, &stack_resource());
    let go_fields = go_only_fields();
    stacks
        .patch(
            STACK,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": go_fields})),
        )
        .await?;
    leave_as_the_go_operator_would(env, &uid).await?;
    // The CRD steps of docs/migrate.md on stored stacks with Go-only fields: the replace,
    // then the forced apply of `make deploy`, which must not conflict with it.
    deploy_script(env, "replace-crd")?;
    deploy_script(env, "install")?;
    let deployments: Api<Deployment> = Api::namespaced(env.admin.clone(), NS);
    let distributor = deployments.get(&format!("{STACK}-distributor")).await?;
    ensure!(
        has_env(&distributor, "GO_OPERATOR_ONLY"),
        "setup: the Go-only env var is set"
    );
    // Pods of templates that do not change, once the distributor has rolled for its env.
    let (ingesters, queriers) = eventually("pods settled before the take-over", WAIT, || async {
        let i = pod_uids(env, "ingester").await?;
        let q = pod_uids(env, "querier").await?;
        Ok((!i.is_empty() && !q.is_empty()).then_some((i, q)))
    })
    .await?;

    set_management(env, "Managed").await?;
    let s = eventually("the take-over applied", WAIT, || async {
        let d = deployments.get(&format!("{STACK}-distributor")).await?;
        Ok((!has_env(&d, "GO_OPERATOR_ONLY")).then_some(()))
    })
    .await;
    s.context("the Go operator's env var was not removed by the take-over")?;
    let s = wait_condition(env, NS, STACK, "Warning", Some("UnsupportedFields")).await?;
    let w = &condition(&s, "Warning").context("warning")?.message;
    for part in [
        "spec.tenants",
        "spec.template.gateway",
        "Deployment go-gateway",
    ] {
        ensure!(w.contains(part), "{part:?} not in the Warning: {w}");
    }
    // Acted on, so not named: the pod-IP ring address and the OTLP stream labels reach
    // Loki's config.
    for part in ["spec.hashRing", "spec.limits.global.otlp"] {
        ensure!(
            !w.contains(part),
            "{part:?} is acted on, yet named in the Warning: {w}"
        );
    }
    let config = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.admin.clone(), NS)
        .get(&names::config_map_name(STACK))
        .await?;
    let text = config
        .data
        .and_then(|d| d.get(names::CONFIG_FILE).cloned())
        .unwrap_or_default();
    for key in ["otlp_config", "k8s.namespace.name", "instance_addr"] {
        ensure!(
            text.contains(key),
            "{key} not in the rendered Loki config:\n{text}"
        );
    }
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;

    let stored = stacks.get(STACK).await?;
    let acted_on = acted_on_fields();
    for (key, want) in [
        ("tenants", &go_fields["tenants"]),
        ("hashRing", &acted_on["hashRing"]),
    ] {
        ensure!(
            &stored.data["spec"][key] == want,
            "spec.{key} changed: {}",
            stored.data["spec"][key]
        );
    }
    ensure!(stored.data["spec"]["template"]["gateway"] == go_fields["template"]["gateway"]);
    ensure!(
        stored.data["spec"]["limits"]["global"]["otlp"] == acted_on["limits"]["global"]["otlp"]
    );

    let (sts, deps) = workload_apis(env);
    for (api, name) in [
        (&sts, "ingester"),
        (&deps, "querier"),
        (&deps, "distributor"),
    ] {
        let obj: DynamicObject = api.get(&format!("{STACK}-{name}")).await?;
        let m = managers(&obj);
        ensure!(
            m.contains(&(names::FIELD_MANAGER.to_string(), "Apply".to_string()))
                && !m.iter().any(|(who, _)| who == GO_MANAGER),
            "{name}: managed fields not taken over: {m:?}"
        );
    }
    ensure!(
        pod_uids(env, "ingester").await? == ingesters,
        "ingesters restarted although their template did not change"
    );
    ensure!(
        pod_uids(env, "querier").await? == queriers,
        "queriers restarted although their template did not change"
    );
    ensure!(
        deployments
            .get_opt(&format!("{STACK}-gateway"))
            .await?
            .is_some(),
        "the Go operator's gateway was removed"
    );
    Ok(())
}
