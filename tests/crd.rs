//! The CRD: the committed manifest matches the code, and every rule it declares about a
//! single LokiStack (bounds, enums, required fields, list keys, and the cross-field CEL
//! rules such as the deprecated `replicationFactor` beside `replication`, or a storage CA
//! for a store that cannot use one) rejects what it should, with the failing field
//! named. OpenAPI constraints are checked with a JSON-schema validator, CEL rules with a
//! CEL evaluator, both against the generated schema; the reconciler's own copy of the
//! rules (`validate`) is checked too. What depends on the cluster (enough zones for the
//! replication factor) is never an admission error: it is a status condition, so a stack
//! can always be edited while the cluster is broken.

use std::sync::OnceLock;

use kube_cel::Validator as CelValidator;
use loki_zone_operator::checks::validate::validate;
use loki_zone_operator::cli::crd_yaml;
use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator_tests::repo_root;
use serde_json::{json, Value};

/// The generated CRD's schema, built once: the probe test below validates hundreds of
/// stacks against it.
fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd: Value = serde_yaml_ng::from_str(&crd_yaml().expect("crd")).expect("yaml");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    })
}

#[test]
fn committed_crds_match_the_code() {
    let files = loki_zone_operator::cli::crd_files().expect("crds");
    assert_eq!(files.len(), 4);
    assert_eq!(files[0].1, crd_yaml().expect("crd"), "LokiStack first");
    for (file, yaml) in files {
        let path = repo_root().join("manifests/crd").join(&file);
        let committed = std::fs::read_to_string(&path).expect("read committed CRD");
        assert!(
            committed == yaml,
            "{} is stale: run `make manifests`",
            path.display()
        );
    }
    let kustomization =
        std::fs::read_to_string(repo_root().join("manifests/crd/kustomization.yaml"))
            .expect("kustomization");
    for f in loki_zone_operator_tests::apidoc::CRD_FILES {
        assert!(
            kustomization.contains(f),
            "manifests/crd/kustomization.yaml lacks {f}"
        );
    }
}

/// `kubectl get logging` (and `loki`) lists every kind the operator serves.
#[test]
fn every_crd_is_in_the_logging_and_loki_categories() {
    for (file, yaml) in loki_zone_operator::cli::crd_files().expect("crds") {
        let crd: Value = serde_yaml_ng::from_str(&yaml).expect("yaml");
        assert_eq!(
            crd["spec"]["names"]["categories"],
            json!(["logging", "loki"]),
            "{file}"
        );
    }
}

fn valid_stack() -> Value {
    json!({
        "apiVersion": "loki.grafana.com/v1",
        "kind": "LokiStack",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {
            "size": "1x.small",
            "storage": {"secret": {"name": "s3", "type": "s3"}, "schemas": [{"version": "v13", "effectiveDate": "2024-04-02"}]},
            "replication": {"factor": 2, "zones": [{"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1}]}
        }
    })
}

/// JSON-pointer paths of OpenAPI violations.
fn openapi_errors(object: &Value) -> Vec<String> {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    let validator =
        VALIDATOR.get_or_init(|| jsonschema::validator_for(schema()).expect("schema compiles"));
    validator
        .iter_errors(object)
        .map(|e| e.instance_path.to_string())
        .collect()
}

/// Field paths of CEL rule violations.
fn cel_errors(object: &Value) -> Vec<String> {
    CelValidator::new()
        .validate(schema(), object, None)
        .into_iter()
        .map(|e| e.field_path)
        .collect()
}

fn with(mutate: impl FnOnce(&mut Value)) -> Value {
    let mut v = valid_stack();
    mutate(&mut v);
    v
}

#[test]
fn a_valid_stack_passes_every_rule() {
    let v = valid_stack();
    assert_eq!(openapi_errors(&v), Vec::<String>::new());
    assert_eq!(cel_errors(&v), Vec::<String>::new());
    let stack: LokiStack = serde_json::from_value(v).expect("typed");
    assert_eq!(validate(&stack.spec), Ok(()));
}

#[test]
fn openapi_constraints_reject_with_the_field_named() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "replicationFactor below 1",
            with(|v| {
                v["spec"].as_object_mut().unwrap().remove("replication");
                v["spec"]["replicationFactor"] = json!(0);
            }),
            "/spec/replicationFactor",
        ),
        (
            "replication.factor below 1",
            with(|v| v["spec"]["replication"]["factor"] = json!(0)),
            "/spec/replication/factor",
        ),
        (
            "maxSkew below 1",
            with(|v| v["spec"]["replication"]["zones"][0]["maxSkew"] = json!(0)),
            "/spec/replication/zones/0/maxSkew",
        ),
        (
            "topologyKey with a space",
            with(|v| v["spec"]["replication"]["zones"][0]["topologyKey"] = json!("my zone")),
            "/spec/replication/zones/0/topologyKey",
        ),
        (
            "empty topologyKey",
            with(|v| v["spec"]["replication"]["zones"][0]["topologyKey"] = json!("")),
            "/spec/replication/zones/0/topologyKey",
        ),
        (
            "topologyKey with two slashes",
            with(|v| v["spec"]["replication"]["zones"][0]["topologyKey"] = json!("a/b/c")),
            "/spec/replication/zones/0/topologyKey",
        ),
        (
            "more than 3 zones",
            with(|v| {
                v["spec"]["replication"]["zones"] = json!([
                    {"topologyKey": "a"}, {"topologyKey": "b"}, {"topologyKey": "c"}, {"topologyKey": "d"}
                ]);
            }),
            "/spec/replication/zones",
        ),
        (
            "unknown size",
            with(|v| v["spec"]["size"] = json!("2x.huge")),
            "/spec/size",
        ),
        (
            // The Go Loki Operator's MinProperties: an empty rule would block everything.
            "empty blocked query",
            with(|v| {
                v["spec"]["limits"] = json!({"tenants": {"a": {"queries": {"blocked": [{}]}}}})
            }),
            "/spec/limits/tenants/a/queries/blocked/0",
        ),
        (
            "unknown storage type",
            with(|v| v["spec"]["storage"]["secret"]["type"] = json!("ftp")),
            "/spec/storage/secret/type",
        ),
        (
            "empty secret name",
            with(|v| v["spec"]["storage"]["secret"]["name"] = json!("")),
            "/spec/storage/secret/name",
        ),
        (
            "bad schema date",
            with(|v| v["spec"]["storage"]["schemas"][0]["effectiveDate"] = json!("yesterday")),
            "/spec/storage/schemas/0/effectiveDate",
        ),
        (
            "unknown schema version",
            with(|v| v["spec"]["storage"]["schemas"][0]["version"] = json!("v9")),
            "/spec/storage/schemas/0/version",
        ),
        (
            "unknown managementState",
            with(|v| v["spec"]["managementState"] = json!("Sometimes")),
            "/spec/managementState",
        ),
        (
            "negative replicas override",
            with(|v| v["spec"]["template"] = json!({"querier": {"replicas": -1}})),
            "/spec/template/querier/replicas",
        ),
    ];
    for (name, object, field) in cases {
        let errors = openapi_errors(&object);
        assert!(
            errors.iter().any(|e| e == field),
            "{name}: expected an error at {field}, got {errors:?}"
        );
        // Where the typed API can hold the value, the reconciler rejects it as well,
        // naming the same field.
        if let Ok(stack) = serde_json::from_value::<LokiStack>(object) {
            let dotted = field.trim_start_matches('/').replace('/', ".");
            let err = validate(&stack.spec).expect_err(name).to_string();
            let dotted_indexed = indexed_path(&dotted);
            assert!(
                err.contains(&dotted_indexed),
                "{name}: validate() did not name {dotted_indexed}: {err}"
            );
        }
    }
}

/// `spec.replication.zones.0.maxSkew` -> `spec.replication.zones[0].maxSkew`
fn indexed_path(path: &str) -> String {
    path.split('.')
        .map(|p| {
            if p.chars().all(|c| c.is_ascii_digit()) {
                format!("[{p}]")
            } else {
                format!(".{p}")
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .replace(".[", "[")
}

#[test]
fn cel_rules_reject_cross_field_errors_with_the_field_named() {
    let mut cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "replication with replicationFactor",
            with(|v| v["spec"]["replicationFactor"] = json!(2)),
            "spec.replicationFactor",
            "spec.replicationFactor",
        ),
        (
            "the same topologyKey twice",
            with(|v| {
                v["spec"]["replication"]["zones"] = json!([
                    {"topologyKey": "topology.kubernetes.io/zone"}, {"topologyKey": "topology.kubernetes.io/zone"}
                ]);
            }),
            "spec.replication.zones",
            "spec.replication.zones[1].topologyKey",
        ),
    ];
    let long_prefix = format!("{}/zone", "a".repeat(254));
    cases.push((
        "a topologyKey prefix over 253 characters",
        with(|v| v["spec"]["replication"]["zones"] = json!([{"topologyKey": long_prefix}])),
        "spec.replication.zones[0].topologyKey",
        "spec.replication.zones[0].topologyKey",
    ));
    cases.push((
        "a custom CA for a store other than S3",
        with(|v| {
            v["spec"]["storage"]["secret"]["type"] = json!("gcs");
            v["spec"]["storage"]["tls"] = json!({"caName": "ca"});
        }),
        "spec.storage.tls",
        "spec.storage.tls",
    ));
    for (name, object, cel_field, validate_field) in cases {
        assert_eq!(
            openapi_errors(&object),
            Vec::<String>::new(),
            "{name}: OpenAPI alone cannot catch this"
        );
        let errors = cel_errors(&object);
        assert_eq!(errors, vec![cel_field.to_string()], "{name}");
        // A stack stored before a rule existed escapes CEL: the reconciler must catch it.
        let stack: LokiStack = serde_json::from_value(object).expect("typed");
        let err = validate(&stack.spec).expect_err(name).to_string();
        assert!(err.contains(validate_field), "{name}: {err}");
    }
}

#[test]
fn zone_counts_are_never_an_admission_error() {
    // RF 3 with one zone key is valid at admission: whether the cluster has 3 zones is a
    // status condition, so an admin can always edit a stack while the cluster is broken.
    let v = with(|v| v["spec"]["replication"]["factor"] = json!(5));
    assert_eq!(openapi_errors(&v), Vec::<String>::new());
    assert_eq!(cel_errors(&v), Vec::<String>::new());
}

#[test]
fn lists_with_an_identity_are_list_maps() {
    // Every API server, with CEL or not, then rejects a key given twice, naming the entry.
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    for (list, key) in [
        (&spec["replication"]["properties"]["zones"], "topologyKey"),
        (&spec["storage"]["properties"]["schemas"], "effectiveDate"),
    ] {
        assert_eq!(list["x-kubernetes-list-type"], "map", "{key}");
        assert_eq!(list["x-kubernetes-list-map-keys"], json!([key]));
        let required = list["items"]["required"].as_array().expect("required");
        assert!(
            required.contains(&json!(key)),
            "a list-map key must be required: {key}"
        );
    }
}

/// Loki runs with `-config.expand-env=true`, so a `$` a user writes into any string of
/// the spec that reaches Loki's configuration (or its runtime overrides) would be
/// expanded from the Loki pod's environment, where the object store's credentials are.
/// For every string and every map key of every valid stack of the admission table, one
/// at a time, a `${...}` is added: either the CRD (OpenAPI or CEL) or the reconciler's
/// `validate` refuses the stack, or nothing of it reaches a rendered ConfigMap.
#[test]
fn no_user_string_reaches_lokis_config_expandable() {
    use loki_zone_operator::render::{render, Child, RenderInput, Settings};
    use loki_zone_operator_tests::admission::valid_cases;

    const PROBE: &str = "${LZO_PROBE}";
    // Every place of a JSON value: the path to a string (Some(key) for a map key).
    fn places(v: &Value, at: &mut Vec<String>, out: &mut Vec<(Vec<String>, bool)>) {
        match v {
            Value::String(_) => out.push((at.clone(), false)),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    at.push(i.to_string());
                    places(item, at, out);
                    at.pop();
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    at.push(k.clone());
                    out.push((at.clone(), true));
                    places(item, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    fn probed(body: &Value, path: &[String], key: bool) -> Value {
        let mut v = body.clone();
        let (last, parent) = path.split_last().expect("a path");
        let mut node = &mut v;
        for p in parent {
            node = match node {
                Value::Array(a) => &mut a[p.parse::<usize>().expect("index")],
                other => &mut other[p.as_str()],
            };
        }
        if key {
            if let Some(map) = node.as_object_mut() {
                let item = map.remove(last).unwrap_or(Value::Null);
                map.insert(format!("{last}{PROBE}"), item);
            }
        } else {
            let slot = match node {
                Value::Array(a) => &mut a[last.parse::<usize>().expect("index")],
                other => &mut other[last.as_str()],
            };
            let s = slot.as_str().unwrap_or_default().to_string();
            *slot = Value::String(format!("{s}{PROBE}"));
        }
        v
    }
    let configmaps = |body: &Value| -> Option<String> {
        let mut stack: LokiStack = serde_json::from_value(body.clone()).ok()?;
        stack.metadata.namespace = Some("logs".into());
        stack.metadata.uid = Some("uid".into());
        loki_zone_operator::checks::validate::validate_stack(&stack).ok()?;
        let children = render(&RenderInput::of_spec(&stack), &Settings::default())
            .expect("a valid stack renders");
        let mut text = String::new();
        for c in children {
            if let Child::ConfigMap(cm) = c {
                for v in cm.data.into_iter().flatten().map(|(_, v)| v) {
                    text.push_str(&v);
                }
            }
        }
        Some(text)
    };
    let mut seen = std::collections::BTreeSet::new();
    let (mut refused, mut rendered) = (Vec::new(), 0);
    for case in valid_cases().expect("cases") {
        let mut found = Vec::new();
        places(
            &case.body["spec"],
            &mut vec!["spec".to_string()],
            &mut found,
        );
        for (path, key) in found {
            let shape: Vec<&str> = path
                .iter()
                .map(|p| if p.parse::<usize>().is_ok() { "[]" } else { p })
                .collect();
            if !seen.insert((shape.join("."), key)) {
                continue;
            }
            let body = probed(&case.body, &path, key);
            let what = format!("{}{}", path.join("."), if key { " (key)" } else { "" });
            if !openapi_errors(&body).is_empty() || !cel_errors(&body).is_empty() {
                refused.push(what);
                continue;
            }
            let Some(config) = configmaps(&body) else {
                refused.push(what);
                continue;
            };
            rendered += 1;
            assert!(
                !config.contains("LZO_PROBE"),
                "{what} of case {}: a `$` reaches Loki's config, which Loki expands from its environment",
                case.name
            );
        }
    }
    // The table must reach the fields that matter, and most strings must be accepted
    // (the check is about what reaches the config, not about refusing everything).
    for must in [
        "spec.limits.global.retention.streams.0.selector",
        "spec.limits.tenants.team-a.retention.streams.0.selector",
        "spec.limits.tenants.team-a (key)",
        "spec.limits.global.queries.blocked.0.pattern",
        "spec.limits.tenants.team-a.queries.blocked.0.pattern",
        "spec.limits.global.otlp.streamLabels.resourceAttributes.0.name",
        "spec.limits.global.otlp.drop.resourceAttributes.0.name",
        "spec.limits.global.otlp.drop.scopeAttributes.0.name",
        "spec.limits.tenants.team-a.otlp.drop.logAttributes.0.name",
    ] {
        assert!(
            refused.iter().any(|r| r == must),
            "{must} not refused: {refused:?}"
        );
    }
    assert!(rendered > 20, "only {rendered} probes rendered");
}

/// Every integer in the spec of every CRD (the LokiStack's and the ruler's three) has a
/// minimum and a maximum that fit the type it decodes into, so admission, not the
/// decoder, refuses an overflow (an object the decoder refuses is reported, but could be
/// stored), and no setting asks Loki for the impossible.
#[test]
fn every_integer_is_bounded_at_admission() {
    fn walk(path: &str, s: &Value, out: &mut Vec<String>) {
        if s["type"] == "integer" {
            // The CRD writes bounds as numbers (`100000.0`); each must be a whole
            // number the field's type holds (int64 fields are held far below 2^53).
            let (lo, hi) = match s["format"].as_str() {
                Some("int32") => (f64::from(i32::MIN), f64::from(i32::MAX)),
                Some("uint64") => (0.0, 9_007_199_254_740_992.0),
                _ => (-9_007_199_254_740_992.0, 9_007_199_254_740_992.0),
            };
            let fits = |v: &Value| {
                v.as_f64()
                    .is_some_and(|n| n.fract() == 0.0 && n >= lo && n <= hi)
            };
            if !fits(&s["minimum"]) || !fits(&s["maximum"]) {
                out.push(format!(
                    "{path} ({})",
                    s["format"].as_str().unwrap_or("no format")
                ));
            }
        }
        for (k, v) in s["properties"].as_object().into_iter().flatten() {
            walk(&format!("{path}.{k}"), v, out);
        }
        if s["items"].is_object() {
            walk(&format!("{path}[]"), &s["items"], out);
        }
        if s["additionalProperties"].is_object() {
            walk(&format!("{path}.*"), &s["additionalProperties"], out);
        }
    }
    let files = loki_zone_operator::cli::crd_files().expect("crds");
    let mut unbounded = Vec::new();
    for (file, yaml) in &files {
        let crd: Value = serde_yaml_ng::from_str(yaml).expect("yaml");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(spec.is_object(), "{file}: no spec");
        walk(file, spec, &mut unbounded);
    }
    assert_eq!(files.len(), 4);
    assert!(
        unbounded.is_empty(),
        "integers without both bounds (within their type): {unbounded:#?}"
    );
}
