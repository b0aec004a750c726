//! The OLM bundle (registry+v1), generated from `manifests/`: the CSV's permissions and
//! deployment are exactly the kustomize output's ClusterRoles, Role and Deployment, so
//! the two install paths cannot drift apart.
//!
//! OLM turns `permissions` into Roles in each target namespace of the OperatorGroup (and
//! the operator's own), or into ClusterRoles for AllNamespaces; `clusterPermissions` are
//! always ClusterRoles. So the namespaced rules (ClusterRole `loki-zone-operator` of the
//! kustomize install) and, as a second entry, the leader-election Role (its own Lease by
//! name) go to `permissions`, and only the cluster-scoped reads
//! (`loki-zone-operator-cluster-reader`) to `clusterPermissions`.
//!
//! The bundle declares no webhook: OLM sets a declared webhook's namespace selector to
//! the OperatorGroup's namespaces, which for AllNamespaces is every namespace, so the
//! API server would call the zone-at-bind webhook for every pod binding of the cluster
//! (kube-system included). Nothing else can narrow it: a Binding carries no labels for an
//! object selector, and the namespaces of zone-aware stacks change while OLM's
//! configuration is static. OLM installs run with `BIND_WEBHOOK=false`: the pod
//! annotator zones every pod, and the zone init container waits for it.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde_json::{json, Value};

use crate::repo_root;

pub const PACKAGE: &str = "loki-zone-operator";
/// The samples the CSV shows as examples (`alm-examples`): a stack, and one object of
/// each of the ruler's kinds for it.
pub const EXAMPLES: [&str; 4] = [
    "lokistack-zone-aware.yaml",
    "alertingrule.yaml",
    "recordingrule.yaml",
    "rulerconfig.yaml",
];

/// OLM's channel naming convention: `candidate`, `fast` or `stable`.
pub const CHANNEL: &str = "candidate";
/// The icon OperatorHub and the OLM console show, embedded in the CSV as base64.
pub const ICON: &str = "bundle/icon.svg";
pub const ICON_MEDIATYPE: &str = "image/svg+xml";
/// The kinds the operator creates for a stack, as OLM lists them under the owned CRD.
pub const CHILD_KINDS: [&str; 7] = [
    "StatefulSet",
    "Deployment",
    "Service",
    "ConfigMap",
    "ServiceAccount",
    "PodDisruptionBudget",
    "NetworkPolicy",
];
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The ClusterRole of the namespaced rules, which OLM grants per target namespace.
pub const NAMESPACED_RULES: &str = "loki-zone-operator";
/// The Role of the leader Lease, in the operator's namespace.
pub const LEADER_ELECTION_ROLE: &str = "loki-zone-operator-leader-election";

/// The CSV's `minKubeVersion`, below which OLM does not install the operator: the
/// operator's own minimum (`checks::kube_version::MIN_KUBE_VERSION`), which it would
/// refuse at start anyway, as the semantic version OLM reads.
pub fn min_kube_version() -> String {
    format!(
        "{}.0",
        loki_zone_operator::checks::kube_version::MIN_KUBE_VERSION
    )
}
/// The ClusterRole of the cluster-scoped reads, cluster-wide in every install mode.
pub const CLUSTER_READER: &str = "loki-zone-operator-cluster-reader";
/// The annotation OLM sets on the operator's pods: the OperatorGroup's target
/// namespaces, comma-separated, empty for AllNamespaces.
pub const OLM_TARGET_NAMESPACES: &str = "olm.targetNamespaces";

/// Replicas of the CSV's Deployment: two, as the kustomize install, with its
/// PodDisruptionBudget as a bundle object. Without webhooks a standby is ready once its
/// caches have synced, so the Deployment becomes Available.
pub const OLM_REPLICAS: i64 = 2;
/// The operator's PodDisruptionBudget as a bundle object (OLM creates it in the
/// operator's namespace).
pub const OLM_BUDGET_FILE: &str =
    "bundle/manifests/loki-zone-operator_policy_v1_poddisruptionbudget.yaml";

/// The kustomize Deployment as the CSV runs it: WATCH_NAMESPACES from OLM's annotation,
/// no webhooks (`BIND_WEBHOOK=false`, see the module's documentation), and
/// [`OLM_REPLICAS`] replicas.
pub fn olm_deployment_spec(deployment: &Value) -> Result<Value> {
    let mut spec = deployment["spec"].clone();
    spec["replicas"] = json!(OLM_REPLICAS);
    let env = spec["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .context("env of the operator container")?;
    env.insert(
        0,
        json!({"name": "WATCH_NAMESPACES", "valueFrom": {"fieldRef": {
            "fieldPath": format!("metadata.annotations['{OLM_TARGET_NAMESPACES}']")
        }}}),
    );
    env.push(json!({"name": "BIND_WEBHOOK", "value": "false"}));
    Ok(spec)
}

/// The object of `kind` named `name` in `objects`.
pub fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} in manifests/operator"))
}

/// The files of the bundle: (path relative to the repository root, content).
pub fn files() -> Result<Vec<(String, String)>> {
    let objects = kustomize_operator()?;
    let find = |kind: &str| -> Result<Value> {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .cloned()
            .with_context(|| format!("no {kind} in manifests/operator"))
    };
    let deployment = find("Deployment")?;
    let budget = find("PodDisruptionBudget")?;
    let cluster_reader = named(&objects, "ClusterRole", CLUSTER_READER)?;
    let namespaced = named(&objects, "ClusterRole", NAMESPACED_RULES)?;
    let lease_role = named(&objects, "Role", LEADER_ELECTION_ROLE)?;
    let service_account = find("ServiceAccount")?;
    let sa = service_account["metadata"]["name"].clone();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let operator_image = container["image"]
        .as_str()
        .context("operator image")?
        .to_string();
    let env_value = |name: &str| {
        container["env"]
            .as_array()
            .and_then(|e| e.iter().find(|v| v["name"] == name))
            .and_then(|v| v["value"].as_str())
            .map(String::from)
    };
    let loki_image =
        env_value("RELATED_IMAGE_LOKI").context("RELATED_IMAGE_LOKI in the operator Deployment")?;
    let zone_wait_image = env_value("RELATED_IMAGE_ZONE_WAIT")
        .context("RELATED_IMAGE_ZONE_WAIT in the operator Deployment")?;
    let root = repo_root();
    let mut samples = Vec::new();
    for f in EXAMPLES {
        let text = std::fs::read_to_string(root.join("manifests/samples").join(f))?;
        samples.push(serde_yaml_ng::from_str::<Value>(&text)?);
    }
    let crd_files = crate::apidoc::CRD_FILES
        .iter()
        .map(|f| {
            Ok((
                f,
                std::fs::read_to_string(root.join("manifests/crd").join(f))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let icon = base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(root.join(ICON)).with_context(|| format!("reading {ICON}"))?);
    // OLM requires `name` on every resource: the plural of a custom resource, and the
    // empty string for a built-in kind like these.
    let resources: Vec<Value> = CHILD_KINDS
        .iter()
        .map(|kind| json!({"kind": kind, "name": "", "version": "v1"}))
        .collect();

    let descriptor = |path: &str, name: &str, description: &str, x: &[&str]| json!({"path": path, "displayName": name, "description": description, "x-descriptors": x});
    let csv = json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{VERSION}"),
            "namespace": "placeholder",
            "annotations": {
                "alm-examples": serde_json::to_string_pretty(&samples)?,
                "capabilities": "Basic Install",
                "categories": "Logging & Tracing",
                "containerImage": operator_image,
                "description": "Runs Grafana Loki with every copy of a log stream in a different availability zone.",
                "operatorframework.io/suggested-namespace": "loki-zone-operator-system",
            },
        },
        "spec": {
            "displayName": "Loki Zone Operator",
            "description": "Reconciles LokiStack resources (loki.grafana.com/v1). With spec.replication.zones every copy of a log stream lands in a different failure domain: the operator checks the replication factor against the zones of the nodes, spreads every component with topology spread constraints, annotates each pod with its node's zone and configures Loki's ring for zone awareness.",
            "version": VERSION,
            "maturity": "alpha",
            "minKubeVersion": min_kube_version(),
            "provider": {"name": "loki-zone-operator"},
            "keywords": ["loki", "logging", "zones", "availability", "replication"],
            "maintainers": [{"name": "loki-zone-operator maintainers", "email": "maintainers@loki-zone-operator.invalid"}],
            "links": [{"name": "Documentation", "url": "https://github.com/loki-zone-operator/loki-zone-operator/tree/main/docs"}],
            "icon": [{"base64data": icon, "mediatype": ICON_MEDIATYPE}],
            // The operator runs the stacks of the namespaces WATCH_NAMESPACES names,
            // which the Deployment takes from OLM's olm.targetNamespaces annotation.
            "installModes": [
                {"type": "OwnNamespace", "supported": true},
                {"type": "SingleNamespace", "supported": true},
                {"type": "MultiNamespace", "supported": true},
                {"type": "AllNamespaces", "supported": true},
            ],
            "customresourcedefinitions": {"owned": [{
                "name": "lokistacks.loki.grafana.com",
                "version": "v1",
                "kind": "LokiStack",
                "displayName": "LokiStack",
                "description": "A Grafana Loki deployment whose log streams can be replicated across availability zones.",
                "resources": resources,
                "specDescriptors": [
                    descriptor("size", "Size", "The t-shirt size of the deployment", &["urn:alm:descriptor:com.tectonic.ui:select:1x.demo", "urn:alm:descriptor:com.tectonic.ui:select:1x.pico", "urn:alm:descriptor:com.tectonic.ui:select:1x.extra-small", "urn:alm:descriptor:com.tectonic.ui:select:1x.small", "urn:alm:descriptor:com.tectonic.ui:select:1x.medium"]),
                    descriptor("replication.factor", "Replication factor", "Copies of each log stream; with zones, each in a different zone", &["urn:alm:descriptor:com.tectonic.ui:number"]),
                    descriptor("replication.zones", "Zones", "Node labels that define the failure domains", &[]),
                    descriptor("replication.zones[0].topologyKey", "Topology key", "The node label whose values are the zones", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                    descriptor("replication.zones[0].maxSkew", "Max skew", "The most pods of one component a zone may hold above another", &["urn:alm:descriptor:com.tectonic.ui:number"]),
                    descriptor("storage.secret.name", "Object storage secret", "The Secret with the object storage credentials", &["urn:alm:descriptor:io.kubernetes:Secret"]),
                ],
                "statusDescriptors": [
                    descriptor("conditions", "Conditions", "Ready, Pending, Failed, Degraded and Warning", &["urn:alm:descriptor:io.kubernetes.conditions"]),
                    descriptor("replication.factor", "Replication factor", "The replication factor in effect", &[]),
                    descriptor("replication.zones", "Zones found", "Zones found on eligible nodes", &[]),
                    descriptor("replication.writeQuorum", "Write quorum", "Copies that must be written for a push to succeed", &[]),
                    descriptor("replication.zoneFailuresTolerated", "Zone failures tolerated", "Zones that can be lost while writes succeed", &[]),
                    descriptor("replication.ineligibleNodes", "Ineligible nodes", "Nodes not counted for zones", &[]),
                    descriptor("replication.podsWithoutZone", "Pods without zone", "Pods whose node lacks a topology label", &[]),
                ],
            },
            rule_kind("alertingrules", "AlertingRule", "Alerting rules of one tenant, loaded by the ruler of every LokiStack whose spec.rules selects them.", &[
                descriptor("tenantID", "Tenant ID", "The tenant whose logs the rules query", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                descriptor("groups", "Groups", "Groups of alerting rules", &[]),
            ]),
            rule_kind("recordingrules", "RecordingRule", "Recording rules of one tenant, loaded by the ruler of every LokiStack whose spec.rules selects them.", &[
                descriptor("tenantID", "Tenant ID", "The tenant whose logs the rules query", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                descriptor("groups", "Groups", "Groups of recording rules", &[]),
            ]),
            rule_kind("rulerconfigs", "RulerConfig", "The ruler settings (evaluation, Alertmanager, remote write) of the LokiStack of the same name.", &[
                descriptor("evaluationInterval", "Evaluation interval", "How often rules are evaluated", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                descriptor("alertmanager.endpoints", "Alertmanager endpoints", "Where firing alerts are sent", &[]),
            ]),
            ]},
            "install": {"strategy": "deployment", "spec": {
                "clusterPermissions": [{"serviceAccountName": sa, "rules": cluster_reader["rules"]}],
                // Two Roles: the namespaced rules, and the operator's own Lease by name.
                "permissions": [
                    {"serviceAccountName": sa, "rules": namespaced["rules"]},
                    {"serviceAccountName": sa, "rules": lease_role["rules"]},
                ],
                "deployments": [{
                    "name": deployment["metadata"]["name"],
                    "label": deployment["metadata"]["labels"],
                    "spec": olm_deployment_spec(&deployment)?,
                }],
            }},
            "relatedImages": [
                {"name": "loki-zone-operator", "image": operator_image},
                {"name": "loki", "image": loki_image},
                {"name": "loki-zone-wait", "image": zone_wait_image},
            ],
        },
    });

    let annotations = annotations();
    let mut metadata = String::from("annotations:\n");
    let mut labels = String::new();
    for (k, v) in &annotations {
        metadata.push_str(&format!("  {k}: {v}\n"));
        labels.push_str(&format!("LABEL {k}={v}\n"));
    }
    let dockerfile = format!(
        "# Generated by `make bundle` from manifests/; edit those, not this.\nFROM scratch\n{labels}COPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\n"
    );
    let header = "# Generated by `make bundle` from manifests/; edit those, not this.\n";
    let crds = crd_files
        .into_iter()
        .map(|(f, text)| (format!("bundle/manifests/{f}"), text));
    Ok(crds
        .chain(vec![
            (
                format!("bundle/manifests/{PACKAGE}.clusterserviceversion.yaml"),
                format!("{header}{}", serde_yaml_ng::to_string(&csv)?),
            ),
            (
                OLM_BUDGET_FILE.into(),
                format!("{header}{}", serde_yaml_ng::to_string(&budget)?),
            ),
            (
                "bundle/metadata/annotations.yaml".into(),
                format!("{header}{metadata}"),
            ),
            ("bundle.Dockerfile".into(), dockerfile),
        ])
        .collect())
}

/// An owned CRD of the ruler's kinds: its objects become rule files in ConfigMaps of the
/// stacks that pick them.
fn rule_kind(plural: &str, kind: &str, description: &str, spec: &[Value]) -> Value {
    json!({
        "name": format!("{plural}.loki.grafana.com"),
        "version": "v1",
        "kind": kind,
        "displayName": kind,
        "description": description,
        "resources": [{"kind": "ConfigMap", "name": "", "version": "v1"}],
        "specDescriptors": spec,
        "statusDescriptors": [{"path": "conditions", "displayName": "Conditions", "description": "Ready: which stacks pick it, or why it is not loaded", "x-descriptors": ["urn:alm:descriptor:io.kubernetes.conditions"]}],
    })
}

/// The bundle's annotations, which bundle.Dockerfile repeats as labels.
pub fn annotations() -> Vec<(&'static str, String)> {
    vec![
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1".into(),
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.package.v1",
            PACKAGE.into(),
        ),
        (
            "operators.operatorframework.io.bundle.channels.v1",
            CHANNEL.into(),
        ),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            CHANNEL.into(),
        ),
    ]
}

/// `kubectl kustomize manifests/operator`, as JSON objects.
pub fn kustomize_operator() -> Result<Vec<Value>> {
    kustomize(&repo_root().join("manifests/operator"))
}

/// `kubectl kustomize DIR`, as JSON objects.
pub fn kustomize(dir: &Path) -> Result<Vec<Value>> {
    parse_stream(&kustomize_text(dir)?)
}

/// `kubectl kustomize DIR`, as the YAML stream it prints.
pub fn kustomize_text(dir: &Path) -> Result<String> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .context("running kubectl kustomize (kubectl is needed to build the bundle)")?;
    if !out.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The documents of a YAML stream, empty ones left out.
pub fn parse_stream(text: &str) -> Result<Vec<Value>> {
    let mut docs = Vec::new();
    for d in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(d)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// A kustomize overlay, written into `dir`, whose `kustomization.yaml` is `body` after a
/// `resources:` entry for `manifests/operator` and `components:` entries for the named
/// directories of `manifests/components/`, all by relative path as an overlay of a
/// user's own repository would name them.
pub fn write_overlay(dir: &Path, components: &[&str], body: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let manifests = repo_root().join("manifests").canonicalize()?;
    let rel = relative(&dir, &manifests);
    let mut text = format!("resources:\n- {rel}/operator\n");
    if !components.is_empty() {
        text.push_str("components:\n");
        for c in components {
            text.push_str(&format!("- {rel}/components/{c}\n"));
        }
    }
    text.push_str(body);
    std::fs::write(dir.join("kustomization.yaml"), text)?;
    Ok(())
}

/// `to` relative to `from` (both absolute): kustomize refuses absolute resource paths.
fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); f.len() - common];
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// The namespaced-mode overlay docs/install.md shows, written into `dir`:
/// `manifests/operator` with the `namespaced` component, one kustomization per watched
/// namespace instantiating `manifests/watched-namespace` there, and WATCH_NAMESPACES
/// set to them; `body` is appended to the top kustomization (e.g. `namePrefix:`).
pub fn write_namespaced_overlay(dir: &Path, namespaces: &[&str], body: &str) -> Result<()> {
    write_namespaced_overlay_with(dir, namespaces, &[], body)
}

/// [`write_namespaced_overlay`], each watched namespace's kustomization also naming the
/// directories `extra` of `manifests/` (e.g. `watched-namespace/zone-outage-recovery`).
pub fn write_namespaced_overlay_with(
    dir: &Path,
    namespaces: &[&str],
    extra: &[&str],
    body: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let manifests = repo_root().join("manifests").canonicalize()?;
    let mut resources = String::new();
    for ns in namespaces {
        let sub = dir.join(ns);
        std::fs::create_dir_all(&sub)?;
        let rel = relative(&sub, &manifests);
        let mut text = format!("namespace: {ns}\nresources:\n- {rel}/watched-namespace\n");
        for e in extra {
            text.push_str(&format!("- {rel}/{e}\n"));
        }
        std::fs::write(sub.join("kustomization.yaml"), text)?;
        resources.push_str(&format!("- {ns}\n"));
    }
    let patch = format!(
        "patches:\n- target:\n    kind: Deployment\n    name: loki-zone-operator\n  patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: loki-zone-operator\n    spec:\n      template:\n        spec:\n          containers:\n          - name: manager\n            env:\n            - name: WATCH_NAMESPACES\n              value: {}\n",
        namespaces.join(",")
    );
    write_overlay(&dir, &["namespaced"], &format!("{patch}{body}"))?;
    // write_overlay wrote `resources:` first; the watched namespaces join that list.
    let path = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&path)?;
    let text = text.replacen("/operator\n", &format!("/operator\n{resources}"), 1);
    std::fs::write(&path, text)?;
    Ok(())
}
