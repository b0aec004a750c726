//! `render --secret` prints what the operator applies: a stack and its S3 Secret (an AWS
//! URL, which Loki refuses as given) are applied by the operator, then rendered offline
//! from the same stack and Secret as `kubectl get -o yaml` prints them, and every
//! rendered field must be on the applied object with the same value. What the API server
//! adds (uid, resourceVersion, managedFields, status, defaults) is not rendered, so it is
//! not compared; a rendered field missing or different fails.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::ResourceExt;
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::render::kinds::ChildKind;
use loki_zone_operator_tests::operator::operator_bin;
use serde_json::{json, Value};

use super::{create_stack, namespace, stack_json, wait_condition, Env};

const NS: &str = "e2e-render-secret";
const STACK: &str = "rendered";
const SECRET: &str = "rendered-s3";

/// The objects `render --secret` prints for the stack and Secret the operator applied
/// are the objects it applied, field by field.
pub async fn render_with_the_secret_is_what_the_operator_applies(env: &mut Env) -> Result<()> {
    namespace(env, NS).await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": SECRET},
        "stringData": {
            "bucketnames": "loki-chunks",
            "endpoint": "https://s3.eu-west-1.amazonaws.com",
            "access_key_id": "id",
            "access_key_secret": "secret",
            "sse_type": "SSE-S3",
        },
    }))?;
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), NS);
    secrets.create(&PostParams::default(), &secret).await?;
    let mut body = stack_json(STACK, "1x.demo", Value::Null);
    body["spec"]["storage"]["secret"]["name"] = json!(SECRET);
    create_stack(env, NS, body).await?;
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;

    // As `kubectl get -o yaml` prints them: the stack with its uid and status, the
    // Secret with base64 `data`.
    let dir = env.cp.dir.join("render-secret");
    std::fs::create_dir_all(&dir)?;
    let stack = Api::<LokiStack>::namespaced(env.admin.clone(), NS)
        .get(STACK)
        .await?;
    let stack_file = dir.join("stack.yaml");
    std::fs::write(&stack_file, serde_yaml_ng::to_string(&stack)?)?;
    let secret_file = dir.join("secret.yaml");
    let mut live_secret = serde_json::to_value(secrets.get(SECRET).await?)?;
    live_secret["apiVersion"] = json!("v1");
    live_secret["kind"] = json!("Secret");
    std::fs::write(&secret_file, serde_yaml_ng::to_string(&live_secret)?)?;

    let version = format!("1.{}", env.minor);
    let (rendered, stderr) = render(&stack_file, Some(&secret_file), &version)?;
    ensure!(
        !stderr.contains("warning"),
        "render --secret warned: {stderr}"
    );
    let config = rendered
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["config.yaml"].is_string())
        .context("no ConfigMap with config.yaml rendered")?;
    let text = config["data"]["config.yaml"].as_str().unwrap_or_default();
    ensure!(
        text.contains("endpoint: \"s3.eu-west-1.amazonaws.com\"")
            && !text.contains("LOKI_STORAGE_ENDPOINT"),
        "the endpoint is not resolved in the rendered config:\n{text}"
    );
    compare_with_cluster(env, &stack, &rendered).await?;

    // Without the Secret, the render says on stderr what it could not resolve.
    let (_, stderr) = render(&stack_file, None, &version)?;
    ensure!(
        stderr.contains("${LOKI_STORAGE_ENDPOINT}") && stderr.contains("--secret"),
        "render without --secret of an S3 stack did not say what it left unresolved: {stderr}"
    );
    Ok(())
}

/// Runs `render` as the e2e operator runs (its images, `--kube-version` this server's
/// version, which a supported server passes) and returns
/// the documents it printed and its stderr.
fn render(
    stack: &std::path::Path,
    secret: Option<&std::path::Path>,
    version: &str,
) -> Result<(Vec<Value>, String)> {
    let mut cmd = Command::new(operator_bin()?);
    cmd.arg("render").arg("-f").arg(stack);
    if let Some(secret) = secret {
        cmd.arg("--secret").arg(secret);
    }
    let out = cmd
        .args(["--kube-version", version])
        .args(["--zone-wait-image", "loki-zone-wait:e2e"])
        .args(["--loki-image", "grafana/loki:e2e"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(out.status.success(), "render failed: {stderr}");
    let stdout = String::from_utf8(out.stdout)?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&stdout) {
        let v = <Value as serde::Deserialize>::deserialize(doc)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    ensure!(!docs.is_empty(), "render printed nothing");
    Ok((docs, stderr))
}

/// Every rendered object exists with every rendered field, and the operator applied no
/// object for the stack that the render lacks.
async fn compare_with_cluster(env: &Env, stack: &LokiStack, rendered: &[Value]) -> Result<()> {
    let mut differences = Vec::new();
    let mut names = BTreeSet::new();
    for obj in rendered {
        let (kind, name) = (
            obj["kind"].as_str().unwrap_or_default(),
            obj["metadata"]["name"].as_str().unwrap_or_default(),
        );
        names.insert((kind.to_string(), name.to_string()));
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let (group, ver) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, ver, kind));
        let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), NS, &resource);
        let live = api
            .get_opt(name)
            .await?
            .with_context(|| format!("{kind} {name} was rendered but not applied"))?;
        subset(
            obj,
            &serde_json::to_value(live)?,
            &format!("{kind}/{name}"),
            &mut differences,
        );
    }
    let uid = stack.uid().unwrap_or_default();
    for kind in ChildKind::ALL {
        let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), NS, &kind.resource());
        for o in api.list(&ListParams::default()).await? {
            let owned = o.owner_references().iter().any(|r| r.uid == uid);
            if owned && !names.contains(&(kind.as_str().to_string(), o.name_any())) {
                differences.push(format!("{kind}/{}: applied but not rendered", o.name_any()));
            }
        }
    }
    if !differences.is_empty() {
        bail!(
            "render --secret differs from the cluster in {} places:\n  {}",
            differences.len(),
            differences.join("\n  ")
        );
    }
    println!(
        "    {} rendered objects equal the applied ones",
        rendered.len()
    );
    Ok(())
}

/// Each field of `rendered` that is not on `live`, or differs there, as `path: why`.
/// Lists must have the same length, element by element (the server keeps their order).
fn subset(rendered: &Value, live: &Value, path: &str, out: &mut Vec<String>) {
    match (rendered, live) {
        (Value::Object(r), Value::Object(l)) => {
            for (k, v) in r {
                match l.get(k) {
                    Some(lv) => subset(v, lv, &format!("{path}.{k}"), out),
                    None if v.is_null() => {}
                    None => out.push(format!("{path}.{k}: rendered {v}, not on the cluster")),
                }
            }
        }
        (Value::Array(r), Value::Array(l)) if r.len() == l.len() => {
            for (i, (rv, lv)) in r.iter().zip(l).enumerate() {
                subset(rv, lv, &format!("{path}[{i}]"), out);
            }
        }
        (r, l) if r == l => {}
        (r, l) => out.push(format!("{path}: rendered {r}, the cluster has {l}")),
    }
}
