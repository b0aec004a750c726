//! Pods under the Pod Security Standards' `restricted` profile (issue 52, part 3): a
//! namespace whose Pod Security Admission enforces it refuses a pod that breaks it (so
//! enforcement is on), and a zone-aware stack created there still gets every pod, zone
//! init container included, and becomes Ready. (OpenShift's restricted-v2 is checked on
//! the rendered objects: `render::pod_security_tests`.)

use anyhow::{ensure, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::rollout::ingesters_in;
use super::{create_stack, namespace, stack_json, wait_condition, Env, ZONE};

const NS: &str = "e2e-restricted";

pub(super) async fn pods_start_under_the_restricted_pod_security_standard(
    env: &mut Env,
) -> Result<()> {
    namespace(env, NS).await?;
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    Api::<Namespace>::all(env.admin.clone())
        .patch(NS, &PatchParams::default(), &Patch::Merge(&labels))
        .await?;
    // Enforcement is on: a pod with no security context is refused, naming the profile.
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), NS);
    let bare = json!({"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let refused = pods
        .create(&PostParams::default(), &serde_json::from_value(bare)?)
        .await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity \"restricted:latest\"")),
        "a pod without a security context was not refused: {refused:?}"
    );
    let zoned = json!({"factor": 3, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]});
    let mut body = stack_json("restricted", "1x.demo", zoned);
    body["spec"]["template"] = json!({"ingester": {"replicas": 3}});
    create_stack(env, NS, body).await?;
    wait_condition(env, NS, "restricted", "Ready", Some("ReadyComponents")).await?;
    let all = pods.list(&ListParams::default()).await?.items;
    let with_init = all
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .is_some_and(|c| !c.is_empty())
        })
        .count();
    let ingesters = ingesters_in(env, NS).await?;
    ensure!(
        !ingesters.is_empty() && with_init == all.len(),
        "pods {}, of them with the zone init container {with_init}, ingesters {}",
        all.len(),
        ingesters.len()
    );
    println!(
        "    {} pods (each with its zone init container) admitted under restricted:latest; a bare pod refused",
        all.len()
    );
    Ok(())
}
