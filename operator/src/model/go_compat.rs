//! Compatibility with the Go Loki Operator's `loki.grafana.com/v1` LokiStack.
//!
//! Both operators own the CRD `lokistacks.loki.grafana.com`. Ours declares every field of
//! theirs, so that installing ours over theirs prunes nothing from stored stacks, and
//! going back loses nothing either. Fields this operator does not act on are kept as
//! stored ([`crate::model::api::KeptObject`] and a few plain values) and named here, so a stack
//! that sets one gets a Warning condition instead of a silent ignore.

use crate::model::api::{CredentialMode, LokiStackSpec};

/// The Go-operator fields set in `spec` that this operator keeps but does not act on, as
/// paths under `spec` (`spec.tenants`, `spec.template.gateway`, ...).
pub fn unsupported_fields(spec: &LokiStackSpec) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |set: bool, path: String| {
        if set {
            out.push(path);
        }
    };
    check(spec.tenants.is_some(), "spec.tenants".into());
    check(spec.proxy.is_some(), "spec.proxy".into());
    let mode = spec.storage.secret.credential_mode;
    check(
        mode.is_some_and(|m| m != CredentialMode::Static),
        "spec.storage.secret.credentialMode".into(),
    );
    if let Some(t) = &spec.template {
        check(t.gateway.is_some(), "spec.template.gateway".into());
        check(
            t.use_requests_as_limits.is_some(),
            "spec.template.useRequestsAsLimits".into(),
        );
    }
    out
}

/// The Warning message for [`unsupported_fields`], `None` when there are none.
pub fn warning(fields: &[String]) -> Option<String> {
    (!fields.is_empty()).then(|| {
        format!(
            "these fields of the Go Loki Operator are kept but this operator does not act on them: {}. Remove them, or see docs/migrate.md",
            fields.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Every field path of the Go Loki Operator's LokiStack v1 `spec` with its OpenAPI
    /// type, derived from its CRD by `hack/go-operator-fields.py`.
    const GO_FIELDS: &str = include_str!("testdata/go-operator-lokistack-fields.json");

    fn our_spec_schema() -> Value {
        let crd = serde_json::to_value(crate::model::api::crd()).expect("crd");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    /// The schema node at `path` (segments; `*` is a map value, `[]` a list item), or the
    /// node above it that keeps unknown fields.
    fn lookup<'a>(mut node: &'a Value, path: &str) -> Option<&'a Value> {
        for seg in path.split('.').skip(1) {
            if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                return Some(node);
            }
            node = match seg {
                "*" => node.get("additionalProperties")?,
                "[]" => node.get("items")?,
                _ => node.get("properties")?.get(seg)?,
            };
        }
        Some(node)
    }

    #[test]
    fn our_schema_declares_every_go_operator_field_with_its_type() {
        let fields: Value = serde_json::from_str(GO_FIELDS).expect("fixture");
        let fields = fields["fields"].as_object().expect("fields");
        assert!(fields.len() > 100, "the fixture lists the whole spec");
        let ours = our_spec_schema();
        let mut missing = Vec::new();
        for (path, ty) in fields {
            match lookup(&ours, path) {
                None => missing.push(format!("{path}: not declared")),
                Some(node) if node.get("x-kubernetes-preserve-unknown-fields").is_some() => {}
                Some(node) => {
                    // A value the Go operator stores must be one ours stores too.
                    if node.get("type").is_some_and(|t| t != ty) {
                        missing.push(format!("{path}: {ty} there, {} here", node["type"]));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn a_go_operator_stack_keeps_every_field_and_names_what_is_ignored() {
        let sample = json!({
            "size": "1x.small",
            "storage": {"secret": {"name": "s", "type": "s3", "credentialMode": "token"}},
            "tenants": {"mode": "openshift-logging"},
            "proxy": {"httpProxy": "http://proxy:3128"},
            "hashRing": {"type": "memberlist", "memberlist": {"instanceAddrType": "podIP"}},
            "rules": {"enabled": true, "selector": {"matchLabels": {"a": "b"}}},
            "template": {
                "gateway": {"replicas": 2},
                "ingester": {"replicas": 2, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}},
            },
            "limits": {
                "global": {"ingestion": {"perStreamRateLimit": 3}, "otlp": {"streamLabels": {"resourceAttributes": [{"name": "k8s.namespace.name"}]}}},
                "tenants": {"t1": {"queries": {"blocked": [{"pattern": "{a=\"b\"}", "types": ["metric"]}]}}},
            },
        });
        let spec: LokiStackSpec = serde_json::from_value(sample.clone()).expect("decodes");
        assert_eq!(
            serde_json::to_value(&spec).expect("encodes"),
            {
                let mut s = sample.clone();
                s["managementState"] = json!("Managed");
                s
            },
            "a round trip through our types loses nothing"
        );
        assert_eq!(
            unsupported_fields(&spec),
            [
                "spec.tenants",
                "spec.proxy",
                "spec.storage.secret.credentialMode",
                "spec.template.gateway",
            ]
        );
        let msg = warning(&unsupported_fields(&spec)).expect("warning");
        assert!(msg.contains("spec.tenants, spec.proxy"), "{msg}");
    }

    #[test]
    fn static_credentials_and_implemented_fields_are_not_named() {
        let spec: LokiStackSpec = serde_json::from_value(json!({
            "size": "1x.small",
            "storage": {"secret": {"name": "s", "type": "s3", "credentialMode": "static"}},
            "hashRing": {"type": "memberlist", "memberlist": {"enableIPv6": true}},
            "template": {"querier": {"podAntiAffinity": {}}},
            "limits": {
                "global": {"ingestion": {"perStreamRateLimit": 3}, "otlp": {"drop": {"logAttributes": [{"name": "x"}]}}},
                "tenants": {"t": {"queries": {"blocked": [{"hash": 12}]}, "otlp": {}}},
            },
        }))
        .expect("decodes");
        assert!(unsupported_fields(&spec).is_empty());
        assert_eq!(warning(&[]), None);
    }
}
