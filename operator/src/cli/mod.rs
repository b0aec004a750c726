//! The offline commands: `crd` and `render`. `render` builds from its files the snapshot
//! the operator would observe and takes its objects from the plan's own resolution
//! (`plan::resolve_stack`), so what it prints is what the controller would apply.

pub mod secret;

use std::path::{Path, PathBuf};

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::jiff::Timestamp;

use kube::api::DynamicObject;
use kube::ResourceExt;

use crate::caches::rules::{decode, RuleKind};
use crate::checks::fields;
use crate::checks::kube_version::KubeVersion;
use crate::checks::validate::validate_stack;
use crate::checks::zones::{self, ZoneCheck};
use crate::model::api::LokiStack;
use crate::model::go_compat;
use crate::model::names;
use crate::observe::{PickedRule, RulesObserved, Snapshot};
use crate::plan::{self, PlanError};
use crate::render::{render, to_yaml_stream, Settings};
use crate::ruler::api::{RulerConfig, RulerConfigSpec};
use crate::ruler::check::{check_ruler_config, selects};

/// Exit code for input the user must fix.
pub const EXIT_INVALID: i32 = 2;
/// Exit code for a Degraded zone check: nothing is rendered, as the controller would hold back.
pub const EXIT_DEGRADED: i32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{file}: {message}")]
    Input { file: String, message: String },
    #[error("{report}\nzone check is Degraded: nothing rendered (the operator would keep what runs and apply nothing)")]
    Degraded { report: String },
    #[error("render failed: {0}")]
    Render(#[from] crate::render::RenderError),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Degraded { .. } => EXIT_DEGRADED,
            CliError::Input { .. } | CliError::Render(_) => EXIT_INVALID,
        }
    }
}

/// The LokiStack CRD as YAML, exactly as committed in `manifests/crd/`.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&crate::model::api::crd())
}

/// Every CRD of the operator (LokiStack, AlertingRule, RecordingRule, RulerConfig), each
/// with the file name `manifests/crd/` commits it under, CEL rules included: every
/// supported server enforces them ([`MIN_KUBE_VERSION`](crate::checks::kube_version::MIN_KUBE_VERSION)).
pub fn crd_files() -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    crate::ruler::api::crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            // Through a JSON value, whose keys are sorted: the order the files commit.
            let value = serde_json::to_value(&crd)
                .map_err(<serde_yaml_ng::Error as serde::ser::Error>::custom)?;
            Ok((file, serde_yaml_ng::to_string(&value)?))
        })
        .collect()
}

/// [`crd_files`] as one YAML stream, LokiStack first, as `loki-zone-operator crd`
/// prints it for `kubectl apply -f -`.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    Ok(crd_files()?
        .into_iter()
        .map(|(_, yaml)| format!("---\n{yaml}"))
        .collect())
}

/// What `--kube-version` of `crd` and `render` takes: a version the operator supports.
/// Their output is the same for every supported version; an older one is refused, so
/// that nothing is printed for a cluster that would reject it.
pub fn parse_kube_version(s: &str) -> Result<KubeVersion, String> {
    let version = KubeVersion::parse(s)
        .ok_or_else(|| format!("invalid Kubernetes version {s:?}: expected e.g. 1.35"))?;
    version
        .require_supported("the target cluster", s.trim())
        .map_err(|e| e.to_string())?;
    Ok(version)
}

fn input_err(file: &Path, message: impl Into<String>) -> CliError {
    CliError::Input {
        file: file.display().to_string(),
        message: message.into(),
    }
}

fn read(file: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(file).map_err(|e| input_err(file, format!("cannot read: {e}")))
}

/// Parses a LokiStack manifest, checking its apiVersion and kind.
pub fn parse_stack(file: &Path, text: &str) -> Result<LokiStack, CliError> {
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| input_err(file, format!("not YAML: {e}")))?;
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let kind = value
        .get("kind")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let want = format!("{}/{}", names::GROUP, names::VERSION);
    if api_version != want || kind != names::KIND {
        return Err(input_err(
            file,
            format!(
                "expected apiVersion {want} and kind {}, got {api_version:?} and {kind:?}",
                names::KIND
            ),
        ));
    }
    let json = serde_json::to_value(&value).map_err(|e| input_err(file, e.to_string()))?;
    let crd = serde_json::to_value(crate::model::api::crd())
        .map_err(|e| input_err(file, e.to_string()))?;
    let unknown = fields::unknown(
        &json,
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
    );
    if !unknown.is_empty() {
        return Err(input_err(
            file,
            format!(
                "unknown fields: {}. The API server would drop them silently; remove them or fix their names",
                unknown.join(", ")
            ),
        ));
    }
    // Deserialising from the text (not the Value) makes the YAML parser name the failing
    // field's path and line, e.g. `spec.size: unknown variant ... at line 6 column 9`.
    serde_yaml_ng::from_str(text).map_err(|e| input_err(file, e.to_string()))
}

/// Parses `kubectl get nodes -o yaml` output: a List/NodeList, a single Node, or a stream.
pub fn parse_nodes(file: &Path, text: &str) -> Result<Vec<Node>, CliError> {
    let mut nodes = Vec::new();
    for (doc_index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| input_err(file, format!("not YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let items = match kind {
            "List" | "NodeList" => value
                .get("items")
                .and_then(|v| v.as_sequence())
                .cloned()
                .unwrap_or_default(),
            "Node" => vec![value],
            other => {
                return Err(input_err(
                    file,
                    format!(
                    "document {doc_index}: expected a Node or a List of Nodes, got kind {other:?}"
                ),
                ))
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let node: Node = serde_yaml_ng::from_value(item)
                .map_err(|e| input_err(file, format!("document {doc_index}, item {i}: {e}")))?;
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// The zone check as `render --nodes` reports it on stderr.
pub fn zone_report(check: &ZoneCheck) -> String {
    let severity = if check.verdict.is_degraded() {
        "Degraded"
    } else if check.verdict == zones::ZoneVerdict::NoZoneFailureTolerance {
        "Warning"
    } else {
        "Ok"
    };
    let zones: Vec<&str> = check.zones.iter().map(String::as_str).collect();
    format!(
        "zone check: {} ({severity})\n  topology keys: {}\n  zones found: {} ({})\n  replication factor: {}\n  write quorum: {}\n  zone failures tolerated: {}\n  ineligible nodes: {}\n  {}",
        check.verdict.reason(),
        check.keys.join(", "),
        zones.len(),
        if zones.is_empty() { "none".to_string() } else { zones.join(", ") },
        check.factor,
        check.write_quorum,
        check.zone_failures_tolerated,
        check.ineligible.len(),
        check.message(),
    )
}

pub struct RenderRequest {
    pub stack_file: PathBuf,
    pub nodes_file: Option<PathBuf>,
    /// The storage Secret's manifest: resolves what the operator reads from the Secret.
    pub secret_file: Option<PathBuf>,
    /// Manifests of AlertingRules, RecordingRules and RulerConfigs (`--rules`).
    pub rules_files: Vec<PathBuf>,
    pub namespace: Option<String>,
    pub settings: Settings,
}

pub struct RenderOutput {
    /// The YAML stream for stdout.
    pub yaml: String,
    /// The zone check report for stderr, when nodes were given.
    pub report: Option<String>,
    /// What the operator's Warning condition would say of fields it keeps but ignores.
    pub warning: Option<String>,
    /// What the operator reads from the storage Secret and this render, without
    /// `--secret`, could not resolve.
    pub unresolved: Option<String>,
    /// Rules left out, and what an offline render of the ruler cannot know.
    pub rule_notes: Vec<String>,
}

/// The objects of a `--rules` file (every document, and the items of a List), each with
/// its kind.
fn rule_objects(file: &Path) -> Result<Vec<(RuleKind, DynamicObject)>, CliError> {
    let mut values = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&read(file)?) {
        let value = <serde_json::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| input_err(file, format!("not YAML: {e}")))?;
        match value["kind"].as_str() {
            Some("List") => values.extend(value["items"].as_array().cloned().unwrap_or_default()),
            Some(_) => values.push(value),
            None if value.is_null() => {}
            None => return Err(input_err(file, "a document without kind")),
        }
    }
    values
        .into_iter()
        .map(|value| {
            let kind = RuleKind::ALL
                .into_iter()
                .find(|k| value["kind"] == k.kind())
                .ok_or_else(|| {
                    input_err(
                        file,
                        format!(
                            "kind {}: --rules takes AlertingRule, RecordingRule and RulerConfig",
                            value["kind"]
                        ),
                    )
                })?;
            let obj = serde_json::from_value(value).map_err(|e| input_err(file, e.to_string()))?;
            Ok((kind, obj))
        })
        .collect()
}

/// The RulerConfig of the stack, if `obj` is it; a wrong one is an input error, as it
/// holds the stack back in the cluster.
fn stack_ruler_config(
    file: &Path,
    obj: &DynamicObject,
    stack: (&str, &str),
) -> Result<Option<RulerConfigSpec>, CliError> {
    if (
        obj.metadata.namespace.as_deref().unwrap_or(stack.0),
        obj.name_any().as_str(),
    ) != stack
    {
        return Ok(None);
    }
    let c = decode::<RulerConfig>(obj).map_err(|e| input_err(file, e.to_string()))?;
    let errors: Vec<String> = check_ruler_config(&c.spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        return Err(input_err(
            file,
            format!("RulerConfig {}: {}", obj.name_any(), errors.join("; ")),
        ));
    }
    Ok(Some(c.spec))
}

/// The ruler's objects as the operator's caches would hold them, from the objects of
/// `--rules`: the rules the stack picks in its own namespace (namespace labels are not
/// known offline) and its RulerConfig; with what an offline render cannot know.
fn rules_observed(
    req: &RenderRequest,
    stack: &LokiStack,
) -> Result<(RulesObserved, Vec<String>), CliError> {
    let Some(spec) = stack.spec.rules.as_ref().filter(|r| r.enabled) else {
        return Ok(Default::default());
    };
    let namespace = stack
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = stack.name_any();
    let (mut notes, mut observed) = (Vec::new(), RulesObserved::default());
    for file in &req.rules_files {
        for (kind, obj) in rule_objects(file)? {
            if kind == RuleKind::RulerConfig {
                if let Some(c) = stack_ruler_config(file, &obj, (&namespace, &name))? {
                    observed.ruler_config = Some(Ok(c));
                }
                continue;
            }
            let rule_ns = obj
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.clone());
            if !selects(spec, &namespace, &namespace, obj.labels(), None) {
                continue;
            }
            if rule_ns != namespace {
                notes.push(format!("{} {rule_ns}/{} is in another namespace, whose labels are not known offline: not rendered", kind.kind(), obj.name_any()));
                continue;
            }
            let mut rule = PickedRule::from_object(kind, &obj);
            rule.namespace = rule_ns;
            observed.picked.push(rule);
        }
    }
    if spec.selector.is_some() && req.rules_files.is_empty() {
        notes.push("spec.rules.selector is set but no --rules were given: the ruler gets no rule files (the operator renders those of the rules it picks in the cluster)".into());
    }
    if spec.selector.is_some() && observed.picked.iter().any(|r| r.uid.is_empty()) {
        notes.push("a rule without metadata.uid (not from kubectl get): its file name differs from the cluster's".into());
    }
    Ok((observed, notes))
}

/// "AlertingRule ns/name is not loaded: why" from the plan's "AlertingRule ns/name (why)".
fn not_loaded_note(finding: &str) -> String {
    match finding.split_once(" (") {
        Some((label, why)) => format!(
            "{label} is not loaded: {}",
            why.strip_suffix(')').unwrap_or(why)
        ),
        None => format!("{finding} is not loaded"),
    }
}

/// The storage Secret from `--secret`, as the operator's cache would hold it; without
/// it, what the render cannot resolve.
fn secret_of(
    req: &RenderRequest,
    stack: &LokiStack,
) -> Result<(Option<Secret>, Option<String>), CliError> {
    let Some(file) = &req.secret_file else {
        return Ok((None, secret::unresolved(stack)));
    };
    let fix = |message| input_err(file, message);
    let parsed = secret::parse_secret(&read(file)?).map_err(fix)?;
    let namespace = stack.metadata.namespace.as_deref().unwrap_or("default");
    let held = secret::stack_secret(stack, namespace, parsed).map_err(fix)?;
    Ok((Some(held), None))
}

/// What the operator would observe of `stack` from the files of `req`: the stack alone in
/// its namespace, its Secret, the nodes and the ruler's objects; no pods, volumes or
/// children yet.
fn snapshot_of(
    req: &RenderRequest,
    stack: &LokiStack,
) -> Result<(Snapshot, Option<String>, Vec<String>), CliError> {
    let (secret, unresolved) = secret_of(req, stack)?;
    let (rules, notes) = rules_observed(req, stack)?;
    let nodes = match &req.nodes_file {
        Some(f) => parse_nodes(f, &read(f)?)?,
        None => Vec::new(),
    };
    let snapshot = Snapshot {
        namespace: stack
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: stack.name_any(),
        uid: stack.metadata.uid.clone().unwrap_or_default(),
        secret: secret.map(Arc::new),
        nodes: nodes.into_iter().map(Arc::new).collect(),
        rules,
        now: Timestamp::now(),
        ..Snapshot::default()
    };
    Ok((snapshot, unresolved, notes))
}

pub fn render_files(req: &RenderRequest) -> Result<RenderOutput, CliError> {
    let mut stack = parse_stack(&req.stack_file, &read(&req.stack_file)?)?;
    if let Some(ns) = &req.namespace {
        stack.metadata.namespace = Some(ns.clone());
    }
    if stack
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(input_err(&req.stack_file, "metadata.name: required"));
    }
    validate_stack(&stack).map_err(|e| input_err(&req.stack_file, e.to_string()))?;
    let (snapshot, unresolved, mut rule_notes) = snapshot_of(req, &stack)?;
    // The plan's own resolution: annotations, zones, stage and ruler as the operator
    // resolves them for this snapshot.
    let resolution = plan::resolve_stack(&stack, &snapshot).map_err(|e| match e {
        PlanError::Render(e) => CliError::Render(e),
    })?;
    let findings = &resolution.findings;
    rule_notes.extend(findings.rules.not_loaded.iter().map(|n| not_loaded_note(n)));
    let report = match (&req.nodes_file, &findings.zone) {
        (None, _) => None,
        (Some(_), Some(check)) => {
            let text = zone_report(check);
            if check.verdict.is_degraded() {
                return Err(CliError::Degraded { report: text });
            }
            Some(text)
        }
        (Some(_), None) => {
            Some("zone check: not zone-aware (spec.replication.zones is empty)".to_string())
        }
    };
    let children = render(&resolution.input, &req.settings)?;
    let yaml = to_yaml_stream(&children)
        .map_err(|e| input_err(&req.stack_file, format!("cannot serialise: {e}")))?;
    let warning = go_compat::warning(&go_compat::unsupported_fields(&stack.spec));
    Ok(RenderOutput {
        yaml,
        report,
        warning,
        unresolved,
        rule_notes,
    })
}

#[cfg(test)]
mod tests;
