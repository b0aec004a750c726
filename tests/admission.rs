//! The CRD admission table (`tests/support/admission.rs`) against the full kube-apiserver
//! of both ends of the supported range: the current Kubernetes and the oldest
//! (`hack/build-k8s.sh current` and `oldest`, built once and cached), each a control
//! plane of the e2e harness on its own etcd, with the CRD as the operator generates it
//! (with CEL). Every invalid stack must be rejected with its field named (and a CEL
//! rule's message where it breaks one), every valid stack accepted.
//!
//! First, without any server, it checks that the table has a rejecting case for every
//! bound and every CEL rule of the generated CRD.
//!
//! It builds nothing: without the binaries (`make test` builds them first) it says
//! loudly that the admission check did NOT run, and why; with
//! `LZO_REQUIRE_CURRENT_SERVER=1` (as `make test` sets) that is a failure. A run prints
//! one line per server: its version and the counts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use loki_zone_operator::cli::crd_yaml;
use loki_zone_operator_tests::admission::{
    create, expect_rejected, invalid_cases, valid_cases, Invalid, CEL,
};
use loki_zone_operator_tests::harness::{ControlPlane, Kube, Tuning};
use loki_zone_operator_tests::{client_for, repo_root, runtime};
use serde_json::Value;

/// `1`: a missing server fails the test instead of only saying so.
const REQUIRE_ENV: &str = "LZO_REQUIRE_CURRENT_SERVER";
const NAMESPACE: &str = "admission";

fn main() -> ExitCode {
    if let Err(e) = table_covers_the_crd() {
        eprintln!("admission: FAILED: {e:#}");
        return ExitCode::FAILURE;
    }
    let mut code = ExitCode::SUCCESS;
    for kube in [Kube::Current, Kube::Oldest] {
        match kube.cached_bin_dir() {
            Ok(_) => match runtime().and_then(|rt| rt.block_on(run_table(kube))) {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("admission: FAILED on the {} Kubernetes: {e:#}", kube.name());
                    code = ExitCode::FAILURE;
                }
            },
            Err(reason) => {
                not_run(kube, &format!("{reason:#}"));
                if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                    eprintln!("admission: {REQUIRE_ENV}=1, so a missing server is a failure");
                    code = ExitCode::FAILURE;
                }
            }
        }
    }
    code
}

fn not_run(kube: Kube, reason: &str) {
    let bar = "!".repeat(78);
    eprintln!("{bar}\n!! admission: the CRD admission check on the {} Kubernetes did NOT run.\n!! Why: {reason}\n!! Build it with `bash hack/build-k8s.sh {}` (make test does).\n{bar}", kube.name(), kube.name());
}

async fn run_table(kube: Kube) -> Result<String> {
    let dir = repo_root().join(format!(".e2e/admission-{}", kube.name()));
    let tuning = Tuning {
        kube,
        ..Tuning::default()
    };
    let cp = ControlPlane::start_with(&dir, &tuning)?;
    let client = client_for(&cp.admin_kubeconfig).await?;
    let version = client.apiserver_version().await?;
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    if minor < CEL {
        bail!("{} has no CEL in CRDs", version.git_version);
    }
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the test namespace")?;
    install_crd(&client).await?;

    let invalid = invalid_cases();
    let mut failures = Vec::new();
    let mut rejected = 0;
    for case in &invalid {
        match expect_rejected(
            case,
            minor,
            create(&client, NAMESPACE, &case.body, false).await,
        ) {
            Ok(()) => rejected += 1,
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    let valid = valid_cases()?;
    let mut accepted = 0;
    for case in &valid {
        match create(&client, NAMESPACE, &case.body, false).await {
            Ok(()) => accepted += 1,
            Err(e) => failures.push(format!("{}: a valid spec was rejected: {e}", case.name)),
        }
    }
    let (rule_counts, rule_failures) = rule_table(&client).await?;
    failures.extend(rule_failures);
    let counts = format!(
        "{rejected}/{} invalid specs rejected with the field named, {accepted}/{} valid specs accepted; {rule_counts}",
        invalid.len(),
        valid.len()
    );
    if !failures.is_empty() {
        bail!(
            "against kube-apiserver {}: {counts}\n  {}",
            version.git_version,
            failures.join("\n  ")
        );
    }
    Ok(format!(
        "admission: ran against kube-apiserver {} (CEL): {counts}",
        version.git_version
    ))
}

/// The ruler's kinds against the same server: their CRDs install (within the CEL cost
/// budget), the samples are accepted, and what the schema can refuse is refused with
/// the field named (and a CEL rule's message where one breaks).
async fn rule_table(client: &kube::Client) -> Result<(String, Vec<String>)> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;
    let files = loki_zone_operator::cli::crd_files()?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (file, yaml) in files.iter().skip(1) {
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(yaml)?;
        api.create(&PostParams::default(), &crd)
            .await
            .with_context(|| format!("the API server rejected the CRD of {file}"))?;
    }
    let post = |kind: &str, body: Value| {
        let gvk = GroupVersionKind::gvk("loki.grafana.com", "v1", kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &ar);
        async move {
            let obj: DynamicObject =
                serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
            api.create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &obj,
            )
            .await
            .map(|_| ())
        }
    };
    let sample = |f: &str| -> Result<Value> {
        Ok(serde_yaml_ng::from_str(&fs::read_to_string(
            repo_root().join("manifests/samples").join(f),
        )?)?)
    };
    let mut failures = Vec::new();
    let mut accepted = 0;
    let samples = [
        ("AlertingRule", "alertingrule.yaml"),
        ("RecordingRule", "recordingrule.yaml"),
        ("RulerConfig", "rulerconfig.yaml"),
    ];
    for (kind, f) in samples {
        // The CRD may take a moment to serve after it is created.
        let start = Instant::now();
        loop {
            match post(kind, sample(f)?).await {
                Ok(()) => {
                    accepted += 1;
                    break;
                }
                Err(_) if start.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => {
                    failures.push(format!("{f}: the sample was rejected: {e}"));
                    break;
                }
            }
        }
    }
    let alerting = sample("alertingrule.yaml")?;
    // `pointer` set to `value`, its last key created if the sample lacks it.
    let with = |base: &Value, pointer: &str, value: Value| {
        let mut b = base.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
        match b.pointer_mut(parent) {
            Some(Value::Object(o)) => {
                o.insert(key.to_string(), value);
            }
            Some(Value::Array(a)) => {
                if let Some(slot) = key.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    *slot = value;
                }
            }
            _ => panic!("{pointer}: no such parent in the sample"),
        }
        b
    };
    let mut duplicate_groups = alerting.clone();
    let group = duplicate_groups["spec"]["groups"][0].clone();
    if let Some(groups) = duplicate_groups["spec"]["groups"].as_array_mut() {
        groups.push(group);
    }
    let ruler = sample("rulerconfig.yaml")?;
    let cases: Vec<(&str, &str, Value, &str, Option<&str>)> = vec![
        (
            "interval in words",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/interval", json!("1 minute")),
            "spec.groups[0].interval",
            None,
        ),
        (
            "for in words",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/rules/0/for", json!("5 minutes")),
            "spec.groups[0].rules[0].for",
            None,
        ),
        (
            "a group name twice",
            "AlertingRule",
            duplicate_groups,
            "spec.groups[1]",
            None,
        ),
        (
            "a tenant with a slash",
            "AlertingRule",
            with(&alerting, "/spec/tenantID", json!("../etc")),
            "spec.tenantID",
            None,
        ),
        (
            "the tenant ..",
            "AlertingRule",
            with(&alerting, "/spec/tenantID", json!("..")),
            "spec.tenantID",
            Some(loki_zone_operator::ruler::api::RULE_TENANT_NOT_DOTS_MSG),
        ),
        (
            "an empty alert name",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/rules/0/alert", json!("")),
            "spec.groups[0].rules[0].alert",
            None,
        ),
        (
            "a negative limit",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/limit", json!(-1)),
            "spec.groups[0].limit",
            None,
        ),
        (
            "an empty record name",
            "RecordingRule",
            with(
                &sample("recordingrule.yaml")?,
                "/spec/groups/0/rules/0/record",
                json!(""),
            ),
            "spec.groups[0].rules[0].record",
            None,
        ),
        (
            "an evaluation interval in words",
            "RulerConfig",
            with(&ruler, "/spec/evaluationInterval", json!("often")),
            "spec.evaluationInterval",
            None,
        ),
        (
            "header credentials twice",
            "RulerConfig",
            with(
                &ruler,
                "/spec/alertmanager/client",
                json!({"headerAuth": {"credentials": "a", "credentialsFile": "/f"}}),
            ),
            "spec.alertmanager.client.headerAuth.credentials",
            Some(loki_zone_operator::ruler::api::RULE_HEADER_AUTH_EXCLUSIVE_MSG),
        ),
        (
            "an unknown relabel action",
            "RulerConfig",
            with(
                &ruler,
                "/spec/alertmanager/relabelConfigs",
                json!([{"sourceLabels": ["a"], "action": "rewrite"}]),
            ),
            "spec.alertmanager.relabelConfigs[0].action",
            None,
        ),
    ];
    let mut rejected = 0;
    for (name, kind, body, field, message) in &cases {
        match post(kind, body.clone()).await {
            Err(kube::Error::Api(e))
                if e.code == 422
                    && e.message.contains(field)
                    && message.is_none_or(|m| e.message.contains(m)) =>
            {
                rejected += 1
            }
            Err(e) => failures.push(format!(
                "{kind}, {name}: refused without naming {field}{}: {e}",
                message.map(|m| format!(" ({m})")).unwrap_or_default()
            )),
            Ok(()) => failures.push(format!("{kind}, {name}: accepted (want {field} refused)")),
        }
    }
    Ok((
        format!("ruler kinds: {accepted}/{} samples accepted, {rejected}/{} invalid objects rejected with the field named", samples.len(), cases.len()),
        failures,
    ))
}

/// The CRD exactly as `loki-zone-operator crd` prints it (for current servers, with CEL).
async fn install_crd(client: &kube::Client) -> Result<()> {
    let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&crd_yaml()?)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(&PostParams::default(), &crd)
        .await
        .context("the API server rejected the CRD")?;
    let name = crd.metadata.name.unwrap_or_default();
    let start = Instant::now();
    loop {
        let got = api.get(&name).await?;
        let established = got.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        // Established, and served: the first create can race the handler otherwise.
        let probe = loki_zone_operator_tests::admission::stack("probe");
        if established && create(client, NAMESPACE, &probe, true).await.is_ok() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("CRD {name} not established and served after 60s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A constraint of the CRD schema: where (a dotted path, map keys as `*`, list items
/// without an index) and what (`minimum`, `required`, `rule: ...`, ...).
type Constraint = (String, String);

/// Every constraint of the generated CRD has a case in the table that breaks it.
fn table_covers_the_crd() -> Result<()> {
    let crd: Value = serde_yaml_ng::from_str(&crd_yaml()?)?;
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut wanted = BTreeSet::new();
    constraints(schema, "", &mut wanted);
    let cases = invalid_cases();
    let mut names = BTreeSet::new();
    let mut broken: BTreeMap<Constraint, Vec<String>> = BTreeMap::new();
    for case in &cases {
        if !names.insert(case.name.as_str()) {
            bail!("two invalid cases are named {}", case.name);
        }
        for c in breaks(schema, case)? {
            broken.entry(c).or_default().push(case.name.clone());
        }
    }
    let missing: Vec<String> = wanted
        .iter()
        .filter(|c| !broken.contains_key(*c))
        .map(|(path, what)| format!("{path}: {what}"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the admission table (tests/support/admission.rs) has no case breaking:\n  {}",
            missing.join("\n  ")
        );
    }
    Ok(())
}

fn join(path: &str, child: &str) -> String {
    if path.is_empty() {
        child.to_string()
    } else {
        format!("{path}.{child}")
    }
}

const BOUNDS: [&str; 8] = [
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "enum",
    "maxItems",
];

fn constraints(node: &Value, path: &str, out: &mut BTreeSet<Constraint>) {
    for b in BOUNDS {
        // An integer's format (int32) is its width, which the bounds already cover.
        let width = b == "format" && node["type"] != "string";
        if node.get(b).is_some() && !width {
            out.insert((path.to_string(), b.to_string()));
        }
    }
    if node["x-kubernetes-list-type"] == "map" {
        out.insert((path.to_string(), "list-map".into()));
    }
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.insert((
            path.to_string(),
            format!("rule: {}", rule["message"].as_str().unwrap_or_default()),
        ));
    }
    for r in node["required"].as_array().into_iter().flatten() {
        out.insert((
            join(path, r.as_str().unwrap_or_default()),
            "required".into(),
        ));
    }
    for (key, child) in node["properties"].as_object().into_iter().flatten() {
        // Status is the operator's, never admitted from a user's create.
        if !(path.is_empty() && key == "status") {
            constraints(child, &join(path, key), out);
        }
    }
    if node["items"].is_object() {
        constraints(&node["items"], path, out);
    }
    if node["additionalProperties"].is_object() {
        constraints(&node["additionalProperties"], &join(path, "*"), out);
    }
}

/// The constraints a case breaks: what its value at its field violates in the schema.
fn breaks(schema: &Value, case: &Invalid) -> Result<Vec<Constraint>> {
    let mut node = schema;
    let mut value = Some(&case.body);
    let mut path = String::new();
    // The list the field's last index points into, if any.
    let mut list = &Value::Null;
    for seg in case.field.split('.') {
        let (key, index) = match seg.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        let next = &node["properties"][key];
        node = if next.is_object() {
            path = join(&path, key);
            next
        } else if node["additionalProperties"].is_object() {
            path = join(&path, "*");
            &node["additionalProperties"]
        } else if (path.is_empty() && key == "metadata") || path == "metadata" {
            // The schema does not describe metadata; its name has the root's CEL rule.
            path = join(&path, key);
            &Value::Null
        } else {
            bail!("{}: {} is not in the schema", case.name, case.field);
        };
        value = value.and_then(|v| v.get(key));
        list = &Value::Null;
        if let Some(i) = index {
            list = node;
            node = &node["items"];
            value = value.and_then(|v| v.get(i));
        }
    }
    let mut out = Vec::new();
    let mut add = |what: &str| out.push((path.clone(), what.to_string()));
    let num = |k: &str| node[k].as_f64();
    match value {
        None => add("required"),
        Some(_) if list["x-kubernetes-list-type"] == "map" => add("list-map"),
        Some(v) => {
            if let Some(n) = v.as_f64() {
                if num("minimum").is_some_and(|m| n < m) {
                    add("minimum");
                }
                if num("maximum").is_some_and(|m| n > m) {
                    add("maximum");
                }
            }
            if let Some(s) = v.as_str() {
                let len = s.chars().count() as f64;
                if num("minLength").is_some_and(|m| len < m) {
                    add("minLength");
                } else if num("maxLength").is_some_and(|m| len > m) {
                    add("maxLength");
                } else if node.get("enum").is_some() {
                    add("enum");
                } else if node["format"] == "date" && date_shaped(s) {
                    add("format");
                } else if node.get("pattern").is_some() && case.cel_message.is_none() {
                    add("pattern");
                }
            }
            if num("maxItems").is_some_and(|m| v.as_array().is_some_and(|a| a.len() as f64 > m)) {
                add("maxItems");
            }
        }
    }
    if let Some(message) = case.cel_message {
        // The rule sits on the field itself or on an object above it (with a fieldPath).
        out.push((
            rule_owner(schema, message, &case.field).unwrap_or_default(),
            format!("rule: {message}"),
        ));
    }
    Ok(out)
}

/// `NNNN-NN-NN`: what the date pattern admits; a format error if it is no calendar day.
fn date_shaped(s: &str) -> bool {
    s.len() == 10
        && s.char_indices().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The path of the schema node that carries the CEL rule with this message, above
/// `field` (a rule may sit at several places: one schema inlined under `global` and under
/// every tenant, say).
fn rule_owner(schema: &Value, message: &str, field: &str) -> Option<String> {
    let mut all = BTreeSet::new();
    constraints(schema, "", &mut all);
    // `spec.limits.tenants.team-a.retention.streams[0].selector`, without indexes.
    let mut unindexed = String::new();
    let mut depth = 0;
    for c in field.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => unindexed.push(c),
            _ => {}
        }
    }
    let segments: Vec<&str> = unindexed.split('.').collect();
    let above = |owner: &str| {
        let owner: Vec<&str> = owner.split('.').filter(|s| !s.is_empty()).collect();
        owner.len() <= segments.len()
            && owner
                .iter()
                .zip(&segments)
                .all(|(o, f)| *o == "*" || o == f)
    };
    let owners: Vec<String> = all
        .into_iter()
        .filter(|(_, what)| what.strip_prefix("rule: ") == Some(message))
        .map(|(path, _)| path)
        .collect();
    owners.iter().find(|o| above(o)).or(owners.first()).cloned()
}
