//! `docs/api.md`, generated from the CRD's schema, so the reference cannot drift from
//! the API (a test compares them).

use serde_json::Value;

fn constraints(schema: &Value) -> String {
    let mut c = Vec::new();
    if let Some(e) = schema["enum"].as_array() {
        c.push(format!(
            "one of {}",
            e.iter()
                .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(m) = schema["minimum"].as_f64() {
        c.push(format!("minimum {m}"));
    }
    if let Some(m) = schema["maxItems"].as_u64() {
        c.push(format!("at most {m} items"));
    }
    if let Some(m) = schema["minLength"].as_u64() {
        c.push(format!("min length {m}"));
    }
    if let Some(m) = schema["maxLength"].as_u64() {
        c.push(format!("max length {m}"));
    }
    if schema["pattern"].is_string() {
        c.push("pattern (see CRD)".into());
    }
    if !schema["default"].is_null() {
        c.push(format!("default `{}`", schema["default"]));
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        c.push(format!(
            "rule: {}",
            rule["message"].as_str().unwrap_or_default()
        ));
    }
    c.join("; ")
}

fn walk(path: &str, schema: &Value, required: bool, rows: &mut Vec<String>) {
    let ty = match schema["type"].as_str() {
        Some("array") => format!("[]{}", schema["items"]["type"].as_str().unwrap_or("object")),
        Some(t) => t.to_string(),
        None => "object".into(),
    };
    let description = schema["description"]
        .as_str()
        .unwrap_or_default()
        .replace('\n', " ")
        .replace('|', "\\|");
    rows.push(format!(
        "| `{path}` | {ty} | {} | {description} | {} |",
        if required { "yes" } else { "" },
        constraints(schema)
    ));
    let (props, req) = match schema["type"].as_str() {
        Some("array") => (&schema["items"]["properties"], &schema["items"]["required"]),
        _ => (&schema["properties"], &schema["required"]),
    };
    let suffix = if schema["type"] == "array" { "[]" } else { "" };
    if let Some(map) = props.as_object() {
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for k in keys {
            let is_req = req
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == k.as_str()));
            // Kubernetes' own types (tolerations, conditions) are documented upstream.
            if path.ends_with("tolerations") || path.ends_with("conditions") {
                continue;
            }
            walk(&format!("{path}{suffix}.{k}"), &map[k], is_req, rows);
        }
    }
}

/// The files of `manifests/crd`, in the order its kustomization lists them: LokiStack
/// first, then the ruler's kinds.
pub const CRD_FILES: [&str; 4] = [
    "loki.grafana.com_lokistacks.yaml",
    "loki.grafana.com_alertingrules.yaml",
    "loki.grafana.com_recordingrules.yaml",
    "loki.grafana.com_rulerconfigs.yaml",
];

/// The committed CRDs, parsed, in [`CRD_FILES`] order.
pub fn committed_crds(root: &std::path::Path) -> Vec<Value> {
    CRD_FILES
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(root.join("manifests/crd").join(f))
                .unwrap_or_else(|e| panic!("manifests/crd/{f}: {e}"));
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("manifests/crd/{f}: {e}"))
        })
        .collect()
}

/// One kind's section: its group, version and description, then its spec and status.
fn kind_reference(crd: &Value, out: &mut String) {
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    out.push_str(&format!(
        "## {kind}\n\n`{}/{}`, kind `{kind}`, namespaced, with a status subresource.\n\n{}\n\n",
        crd["spec"]["group"].as_str().unwrap_or_default(),
        version["name"].as_str().unwrap_or_default(),
        schema["description"].as_str().unwrap_or_default()
    ));
    for part in ["spec", "status"] {
        out.push_str(&format!("### {kind} {part}\n\n| field | type | required | description | constraints |\n|---|---|---|---|---|\n"));
        let mut rows = Vec::new();
        walk(part, &schema["properties"][part], false, &mut rows);
        for r in rows.iter().skip(1) {
            out.push_str(r);
            out.push('\n');
        }
        out.push('\n');
    }
}

/// The Markdown reference of the operator's API: LokiStack, then the ruler's kinds.
pub fn api_reference(crds: &[Value]) -> String {
    let mut out = String::from(
        "# API reference\n\n<!-- Generated from manifests/crd by `make docs`; a test fails when it drifts. -->\n\n",
    );
    for crd in crds {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        out.push_str(&format!("- [{kind}](#{})\n", kind.to_lowercase()));
    }
    out.push('\n');
    for crd in crds {
        kind_reference(crd, &mut out);
    }
    out.push_str("`status.conditions` are standard Kubernetes conditions (`type`, `status`, `reason`, `message`, `lastTransitionTime`, `observedGeneration`); see [the replication guide](zone-aware-replication.md#conditions) for every reason of a LokiStack, and [the rules guide](rules.md#status) for those of the ruler's kinds.\n");
    out
}
