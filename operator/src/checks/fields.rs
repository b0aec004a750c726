//! Fields of a manifest that the LokiStack schema does not have.
//!
//! The API server prunes such fields silently, and so would deserialising: a typo such as
//! `replicationFactr` would render as if it were not there. `render` checks a manifest
//! against the CRD's own schema first and names every unknown field. (The Go Loki
//! Operator's fields are all declared: see `go_compat.rs`.)

use serde_json::Value;

/// Paths of fields in `value` that `schema` (an OpenAPI v3 structural schema, as in a
/// CRD) does not declare, e.g. `spec.tenants` or `spec.template.ingester.replica`.
pub fn unknown(value: &Value, schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(value, schema, "", &mut out);
    out.sort();
    out
}

fn walk(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, v) in map {
                // Every object has these; a CRD's schema need not declare them.
                if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
                    continue;
                }
                let child = join(path, key);
                match (props.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => walk(v, s, &child, out),
                    (None, Some(s)) if s.is_object() => walk(v, s, &child, out),
                    (None, _) if props.is_some() => out.push(child),
                    // No declared properties: an open object (e.g. metadata as CRDs
                    // declare it); the API server validates it itself.
                    (None, _) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(v, s, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        let crd = serde_json::to_value(crate::model::api::crd()).expect("crd");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn unknown_fields_are_named_and_go_operator_ones_are_known() {
        let stack = json!({
            "apiVersion": "loki.grafana.com/v1",
            "kind": "LokiStack",
            "metadata": {"name": "s", "labels": {"a": "b"}},
            "spec": {
                "size": "1x.small",
                "storage": {"secret": {"name": "s", "type": "s3"}},
                "tenants": {"mode": "openshift-logging"},
                "template": {
                    "ingester": {"replica": 3, "nodeSelector": {"pool": "loki"},
                                 "tolerations": [{"key": "k", "operator": "Exists", "effct": "NoSchedule"}]},
                },
            },
        });
        let found = unknown(&stack, &schema());
        assert_eq!(
            found,
            [
                "spec.template.ingester.replica",
                "spec.template.ingester.tolerations[0].effct",
            ]
        );
    }

    #[test]
    fn a_valid_manifest_has_none() {
        let stack = json!({
            "apiVersion": "loki.grafana.com/v1",
            "kind": "LokiStack",
            "metadata": {"name": "s", "namespace": "n", "annotations": {"x": "y"}},
            "spec": {
                "size": "1x.small",
                "storage": {"secret": {"name": "s", "type": "s3"}, "schemas": [{"version": "v13", "effectiveDate": "2024-04-02"}]},
                "replication": {"factor": 3, "zones": [{"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1}]},
            },
        });
        assert!(unknown(&stack, &schema()).is_empty());
    }
}
