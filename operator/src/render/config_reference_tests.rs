//! The Loki config and runtime config we render, key by key, against the configuration
//! reference of the Loki release we deploy. Loki ignores a key it does not know and a
//! value of the wrong type can fail its start, so a misspelt key, a key in the wrong
//! block or a value of the wrong type must fail here instead.
//!
//! `testdata/loki-config-reference.json` is derived by `hack/loki-config-reference.py`
//! from grafana/loki's `docs/sources/shared/configuration.md` (its header says how to
//! regenerate it); it records the keys of every block and the type of every leaf.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_yaml_ng::Value as Yaml;

use crate::model::api::{
    BlockedQuerySpec, BlockedQueryType, HashRingSpec, IngestionLimitSpec, LimitsSpec,
    LimitsTemplateSpec, LokiStack, LokiStackSize, MemberListSpec, ObjectStorageSchema,
    ObjectStorageSchemaVersion, ObjectStorageSecretType, OtlpAttributeReference, OtlpMetadataSpec,
    OtlpSpec, OtlpStreamLabelSpec, QueryLimitSpec, RetentionLimitSpec, RetentionStreamSpec,
    RulesSpec,
};
use crate::model::defaults::{effective, EffectiveStack};
use crate::model::names;
use crate::render::{documents, loki_config, RenderInput, Settings, DEFAULT_LOKI_IMAGE};
use crate::testing::{stack, stack_spec, zoned_spec, ZONE};

const REFERENCE_JSON: &str = include_str!("testdata/loki-config-reference.json");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reference {
    /// `grafana/loki docs/sources/shared/configuration.md @ <commit> (<tag>)`.
    source: String,
    /// Blocks described from Loki's Go types, where the document names a type only.
    supplements: Vec<String>,
    /// `config.yaml`.
    root: Node,
    /// The runtime config file.
    runtime: Node,
    blocks: BTreeMap<String, Node>,
}

/// One place in the reference: a block of keys (with the named blocks whose keys it
/// embeds), a named block, a list, a map of string keys, a single value, or a type the
/// reference names without describing.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Node {
    Block {
        fields: BTreeMap<String, Node>,
        #[serde(default)]
        embed: Vec<String>,
    },
    Ref {
        #[serde(rename = "ref")]
        block: String,
    },
    List {
        list: Box<Node>,
    },
    Map {
        map: Box<Node>,
    },
    Leaf {
        #[serde(rename = "type")]
        leaf: Leaf,
    },
    Opaque {
        opaque: String,
    },
}

/// The reference's single-value types. `Bytes` is an `<int>` that also takes a size
/// (`512MB`); `NamedInt` an `<int>` that also takes its name (`auto`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Leaf {
    String,
    Int,
    Bytes,
    NamedInt,
    Float,
    Boolean,
    Duration,
    Url,
    Time,
    Daytime,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Mismatch {
    path: String,
    problem: String,
}

fn reference() -> Reference {
    serde_json::from_str(REFERENCE_JSON).expect("testdata/loki-config-reference.json")
}

/// Walks a parsed config against a node of the reference, collecting every mismatch.
struct Walker<'r> {
    reference: &'r Reference,
    found: Vec<Mismatch>,
    /// Single values checked against a leaf type.
    leaves: usize,
}

impl<'r> Walker<'r> {
    fn new(reference: &'r Reference) -> Self {
        Walker {
            reference,
            found: Vec::new(),
            leaves: 0,
        }
    }

    fn report(&mut self, path: &str, problem: String) {
        self.found.push(Mismatch {
            path: path.to_string(),
            problem,
        });
    }

    /// `block` names the enclosing block in messages: a named block of the reference,
    /// the dotted path of an inline one, or "" for the top level.
    fn walk(&mut self, path: &str, block: &str, node: &'r Node, value: &Yaml) {
        match node {
            Node::Ref { block: name } => match self.reference.blocks.get(name) {
                Some(named) => self.walk(path, name, named, value),
                None => self.report(path, format!("the reference has no block `{name}`")),
            },
            Node::Block { fields, embed } => self.block(path, block, fields, embed, value),
            Node::List { list } => match value {
                Yaml::Sequence(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.walk(&format!("{path}[{i}]"), block, list, item);
                    }
                }
                other => self.report(path, format!("expected a list, found {}", kind(other))),
            },
            Node::Map { map } => match value {
                Yaml::Mapping(m) => {
                    for (k, v) in m {
                        match k.as_str() {
                            Some(k) => self.walk(&join(path, k), block, map, v),
                            None => self.report(path, format!("map key {} is not a string", kind(k))),
                        }
                    }
                }
                other => self.report(path, format!("expected a map, found {}", kind(other))),
            },
            Node::Leaf { leaf } => {
                self.leaves += 1;
                if !fits(*leaf, value) {
                    self.report(path, format!("expected {leaf:?}, found {}", kind(value)));
                }
            }
            Node::Opaque { opaque } => self.report(
                path,
                format!(
                    "the reference does not describe what this holds (type `{opaque}`): describe it in SUPPLEMENTS of hack/loki-config-reference.py"
                ),
            ),
        }
    }

    fn block(
        &mut self,
        path: &str,
        block: &str,
        fields: &'r BTreeMap<String, Node>,
        embed: &'r [String],
        value: &Yaml,
    ) {
        let shown = if block.is_empty() {
            "the top level"
        } else {
            block
        };
        let Yaml::Mapping(m) = value else {
            return self.report(
                path,
                format!("expected block `{shown}`, found {}", kind(value)),
            );
        };
        for (k, v) in m {
            let Some(key) = k.as_str() else {
                self.report(path, format!("key {} is not a string", kind(k)));
                continue;
            };
            let child_path = join(path, key);
            match self.lookup(fields, embed, key) {
                Some(child) => self.walk(&child_path, &join(block, key), child, v),
                None => {
                    let hint = match self.elsewhere(key).as_slice() {
                        [] => String::new(),
                        places => format!(" (the reference has `{key}` in: {})", places.join(", ")),
                    };
                    self.report(
                        &child_path,
                        format!("`{key}` is not a key of `{shown}`{hint}"),
                    );
                }
            }
        }
    }

    fn lookup(
        &self,
        fields: &'r BTreeMap<String, Node>,
        embed: &'r [String],
        key: &str,
    ) -> Option<&'r Node> {
        fields.get(key).or_else(|| {
            embed
                .iter()
                .find_map(|name| match self.reference.blocks.get(name) {
                    Some(Node::Block { fields, embed }) => self.lookup(fields, embed, key),
                    _ => None,
                })
        })
    }

    /// Where the reference does have a key, for the message about a misplaced one.
    fn elsewhere(&self, key: &str) -> Vec<String> {
        let mut out = BTreeSet::new();
        let named = self.reference.blocks.iter().map(|(n, b)| (n.as_str(), b));
        for (name, node) in std::iter::once(("", &self.reference.root)).chain(named) {
            places(name, node, key, &mut out);
        }
        out.into_iter().take(6).collect()
    }
}

fn places(path: &str, node: &Node, key: &str, out: &mut BTreeSet<String>) {
    if let Node::Block { fields, .. } = node {
        for (k, child) in fields {
            let here = join(path, k);
            if k == key {
                out.insert(here.clone());
            }
            places(&here, child, key, out);
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Yaml) -> String {
    match v {
        Yaml::Null => "null".into(),
        Yaml::Bool(b) => format!("boolean {b}"),
        Yaml::Number(n) if n.is_f64() => format!("float {n}"),
        Yaml::Number(n) => format!("integer {n}"),
        Yaml::String(s) => format!("string {s:?}"),
        Yaml::Sequence(_) => "a list".into(),
        Yaml::Mapping(_) => "a map".into(),
        Yaml::Tagged(t) => format!("tagged value {}", t.tag),
    }
}

/// `${VAR}` or `${VAR:-default}` as the whole value: Loki expands it before parsing
/// (-config.expand-env=true), so it stands for a value of any single-value type.
fn env_reference(s: &str) -> bool {
    s.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|inner| !inner.is_empty() && !inner.contains(['{', '}', '$']))
}

fn fits(leaf: Leaf, v: &Yaml) -> bool {
    let int = matches!(v, Yaml::Number(n) if n.is_i64() || n.is_u64());
    let text = v.as_str();
    if text.is_some_and(env_reference) {
        return true;
    }
    match leaf {
        Leaf::String | Leaf::Url | Leaf::Time => text.is_some(),
        Leaf::Int => int,
        Leaf::Bytes => int || text.is_some_and(|s| units(s, &BYTE_UNITS)),
        Leaf::NamedInt => int || text.is_some(),
        Leaf::Float => matches!(v, Yaml::Number(_)),
        Leaf::Boolean => matches!(v, Yaml::Bool(_)),
        // Loki reads an integer duration as nanoseconds: only 0 means what it says.
        Leaf::Duration => {
            v.as_u64() == Some(0) || text.is_some_and(|s| s == "0" || units(s, &DURATION_UNITS))
        }
        Leaf::Daytime => text.is_some_and(is_date),
    }
}

/// Go's and Prometheus' duration units, longest first so `ms` is not read as `m`.
const DURATION_UNITS: [&str; 10] = ["ns", "us", "µs", "ms", "s", "m", "h", "d", "w", "y"];
const BYTE_UNITS: [&str; 13] = [
    "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "KB", "MB", "GB", "TB", "PB", "EB", "B",
];

/// One or more `<number><unit>` groups, as in `1h30m` or `63KiB1023B`.
fn units(s: &str, units: &[&str]) -> bool {
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        if digits == 0 || rest[..digits].matches('.').count() > 1 {
            return false;
        }
        rest = &rest[digits..];
        match units.iter().find(|u| rest.starts_with(**u)) {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    !s.is_empty()
}

fn is_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    matches!(parts.as_slice(), [y, m, d] if y.len() == 4 && m.len() == 2 && d.len() == 2)
        && s.chars().all(|c| c.is_ascii_digit() || c == '-')
}

fn check(reference: &Reference, node: &Node, yaml: &str) -> Vec<Mismatch> {
    let value: Yaml = serde_yaml_ng::from_str(yaml).expect("rendered config is YAML");
    let mut walker = Walker::new(reference);
    walker.walk("", "", node, &value);
    // Without a mismatch, every single value in the file met a leaf of the reference.
    if walker.found.is_empty() {
        assert_eq!(
            walker.leaves,
            scalars(&value),
            "values the walk did not reach"
        );
    }
    walker.found
}

fn scalars(v: &Yaml) -> usize {
    match v {
        Yaml::Mapping(m) => m.values().map(scalars).sum(),
        Yaml::Sequence(s) => s.iter().map(scalars).sum(),
        _ => 1,
    }
}

/// Every key a limits block can set, globally and per tenant.
fn all_limits() -> LimitsSpec {
    let full = LimitsTemplateSpec {
        ingestion: Some(IngestionLimitSpec {
            ingestion_rate: Some(20),
            ingestion_burst_size: Some(30),
            max_line_size: Some(512000),
            max_global_streams_per_tenant: Some(20000),
            max_label_name_length: Some(1024),
            max_label_value_length: Some(2048),
            max_label_names_per_series: Some(30),
            per_stream_rate_limit: Some(3),
            per_stream_rate_limit_burst: Some(15),
            per_stream_desired_rate: Some(2),
        }),
        queries: Some(QueryLimitSpec {
            max_entries_limit_per_query: Some(10000),
            max_query_series: Some(1000),
            query_timeout: Some("5m".into()),
            max_chunks_per_query: Some(2000000),
            cardinality_limit: Some(100000),
            max_volume_series: Some(1000),
            blocked: Some(vec![
                BlockedQuerySpec {
                    hash: Some(-2),
                    pattern: Some(".*secret.*".into()),
                    regex: Some(true),
                    types: vec![BlockedQueryType::Filter, BlockedQueryType::Metric],
                },
                BlockedQuerySpec {
                    pattern: Some("{a=\"b\"}".into()),
                    ..Default::default()
                },
            ]),
        }),
        retention: Some(RetentionLimitSpec {
            days: 30,
            streams: vec![RetentionStreamSpec {
                days: 7,
                priority: 1,
                selector: "{namespace=\"dev\"}".into(),
            }],
        }),
        otlp: Some(every_otlp_rule()),
    };
    let retention_only = LimitsTemplateSpec {
        retention: Some(RetentionLimitSpec {
            days: 365,
            streams: vec![],
        }),
        ..Default::default()
    };
    LimitsSpec {
        global: Some(full.clone()),
        tenants: [
            ("audit".to_string(), retention_only),
            ("dev".to_string(), full),
        ]
        .into(),
    }
}

/// OTLP rules of every kind: stream labels and drops, by name and by regular expression.
fn every_otlp_rule() -> OtlpSpec {
    let attrs = |name: &str| {
        vec![
            OtlpAttributeReference {
                name: name.into(),
                regex: None,
            },
            OtlpAttributeReference {
                name: format!("{name}\\..+"),
                regex: Some(true),
            },
        ]
    };
    OtlpSpec {
        stream_labels: Some(OtlpStreamLabelSpec {
            resource_attributes: attrs("k8s.namespace.name"),
        }),
        drop: Some(OtlpMetadataSpec {
            resource_attributes: attrs("process.pid"),
            scope_attributes: attrs("scope.x"),
            log_attributes: attrs("log.iostream"),
        }),
    }
}

/// Ring members advertise their pod IP, over IPv6.
fn ipv6_ring() -> HashRingSpec {
    HashRingSpec {
        memberlist: Some(MemberListSpec {
            enable_ipv6: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Stacks whose configs between them render every key the templates can render: each
/// size, zone setting and storage type, with the ruler, with and without limits, with
/// the default schema and with older schemas (boltdb-shipper), and for S3 also with an
/// endpoint read from the Secret (host, region, TLS and addressing rendered literally),
/// and with server-side encryption and a private CA. With limits (blocked queries, OTLP
/// rules), the ring also advertises the pod IP over IPv6 (spec.hashRing).
fn variants() -> Vec<(String, LokiStack, EffectiveStack)> {
    let mut out = Vec::new();
    let zone_settings: [&[&str]; 3] = [&[], &[ZONE], &[ZONE, "example.com/rack"]];
    let old_schemas = vec![
        ObjectStorageSchema {
            version: ObjectStorageSchemaVersion::V12,
            effective_date: "2022-06-01".into(),
        },
        ObjectStorageSchema {
            version: ObjectStorageSchemaVersion::V13,
            effective_date: "2024-04-02".into(),
        },
    ];
    for size in LokiStackSize::ALL {
        for keys in zone_settings {
            for st in ObjectStorageSecretType::ALL {
                for limits in [None, Some(all_limits())] {
                    for schemas in [vec![], old_schemas.clone()] {
                        let mut spec = if keys.is_empty() {
                            stack_spec(size)
                        } else {
                            zoned_spec(size, 2, keys)
                        };
                        spec.storage.secret.type_ = st;
                        spec.storage.schemas = schemas.clone();
                        spec.rules = Some(RulesSpec {
                            enabled: true,
                            ..Default::default()
                        });
                        spec.limits = limits.clone();
                        spec.hash_ring = limits.is_some().then(ipv6_ring);
                        let label = format!(
                            "{} zones={keys:?} storage={} limits+ipv6={} schemas={}",
                            size.as_str(),
                            st.as_str(),
                            limits.is_some(),
                            if schemas.is_empty() {
                                "default"
                            } else {
                                "v12,v13"
                            },
                        );
                        let s = stack("lokistack-dev", spec);
                        let eff = effective(&s.spec);
                        if st == ObjectStorageSecretType::S3 {
                            let mut with_endpoint = eff.clone();
                            with_endpoint.store.s3 = Some(
                                crate::model::storage::parse_s3_endpoint(
                                    "https://s3.eu-west-1.amazonaws.com",
                                    None,
                                    None,
                                )
                                .expect("endpoint"),
                            );
                            out.push((
                                format!("{label} endpoint"),
                                s.clone(),
                                with_endpoint.clone(),
                            ));
                            // Server-side encryption and a private CA add nested blocks.
                            let mut encrypted = s.clone();
                            encrypted.spec.storage.tls =
                                Some(crate::model::api::ObjectStorageTlsSpec {
                                    ca_name: "ca".into(),
                                    ca_key: None,
                                });
                            with_endpoint.store.sse = Some(crate::model::storage::S3Sse::Kms {
                                key_id: "k".into(),
                                context: Some(r#"{"team":"logs"}"#.into()),
                            });
                            out.push((format!("{label} sse+ca"), encrypted, with_endpoint));
                        }
                        out.push((label, s, eff));
                    }
                }
            }
        }
    }
    out
}

fn runtime_config(s: &LokiStack, eff: &EffectiveStack) -> String {
    let docs =
        documents(&RenderInput::new(s, eff.clone()), &Settings::default()).expect("documents");
    let cm = docs
        .iter()
        .find(|d| d.kind == "ConfigMap")
        .expect("configmap");
    let v: Yaml = serde_yaml_ng::from_str(&cm.text).expect("configmap is YAML");
    v["data"][names::RUNTIME_CONFIG_FILE]
        .as_str()
        .expect("runtime config in the ConfigMap")
        .to_string()
}

#[test]
fn rendered_configs_use_only_keys_and_types_loki_knows() {
    let reference = reference();
    // (file, path, problem) -> the first variant it was found in, and how many.
    let mut found: BTreeMap<(String, Mismatch), (String, usize)> = BTreeMap::new();
    let mut checked = 0;
    for (label, s, eff) in variants() {
        let config = loki_config(&RenderInput::new(&s, eff.clone())).expect("config");
        let runtime = runtime_config(&s, &eff);
        for (file, node, text) in [
            (names::CONFIG_FILE, &reference.root, &config),
            (names::RUNTIME_CONFIG_FILE, &reference.runtime, &runtime),
        ] {
            for m in check(&reference, node, text) {
                found
                    .entry((file.to_string(), m))
                    .or_insert_with(|| (label.clone(), 0))
                    .1 += 1;
            }
            checked += 1;
        }
    }
    // 5 sizes x 3 zone settings x 5 storage types x 2 limits x 2 schema lists, S3 three
    // times; a config.yaml and a runtime config each.
    assert_eq!(checked, 5 * 3 * (5 + 2) * 2 * 2 * 2);
    let list: Vec<String> = found
        .iter()
        .map(|((file, m), (first, n))| {
            format!(
                "{file}: {}: {} [{n} configs, first: {first}]",
                m.path, m.problem
            )
        })
        .collect();
    assert!(
        list.is_empty(),
        "{} mismatch(es) with {}:\n{}",
        list.len(),
        reference.source,
        list.join("\n")
    );
}

#[test]
fn walker_reports_misspelt_misplaced_and_mistyped_keys_with_their_paths() {
    let reference = reference();
    let config = r#"
auth_enabled: true
server:
  http_listen_prot: 3100
common:
  ring:
    zone_awareness_enabled: true
    instance_availability_zone: "${INSTANCE_AVAILABILITY_ZONE}"
  storage:
    object_store:
      s3:
        insecure: "${S3_INSECURE}"
        bucket_lookup_type: path
limits_config:
  retention_period: 24h
  chunk_idle_period: 1h
  retention_stream:
  - selector: '{namespace="dev"}'
    priority: 1
    period: 7
ingester:
  chunk_idle_period: 30
  wal:
    enabled: "yes"
    replay_memory_ceiling: 2GB
schema_config:
  configs:
  - from: "2024-04-02"
    store: tsdb
    index:
      period: 24h
      prefix: index_
"#;
    let found = check(&reference, &reference.root, config);
    let at = |path: &str| -> Vec<&str> {
        found
            .iter()
            .filter(|m| m.path == path)
            .map(|m| m.problem.as_str())
            .collect()
    };
    assert_eq!(
        at("server.http_listen_prot"),
        ["`http_listen_prot` is not a key of `server`"]
    );
    let misplaced = at("limits_config.chunk_idle_period");
    assert_eq!(misplaced.len(), 1, "{found:#?}");
    assert!(
        misplaced[0].starts_with("`chunk_idle_period` is not a key of `limits_config`")
            && misplaced[0].contains("ingester.chunk_idle_period"),
        "{misplaced:?}"
    );
    assert_eq!(
        at("ingester.chunk_idle_period"),
        ["expected Duration, found integer 30"]
    );
    assert_eq!(
        at("ingester.wal.enabled"),
        ["expected Boolean, found string \"yes\""]
    );
    assert_eq!(
        at("limits_config.retention_stream[0].period"),
        ["expected Duration, found integer 7"]
    );
    assert_eq!(found.len(), 5, "nothing else: {found:#?}");

    let runtime = "overrides:\n  audit:\n    retention_period: 30d\n    max_look_back: 1h\n";
    let found = check(&reference, &reference.runtime, runtime);
    assert_eq!(
        found,
        [Mismatch {
            path: "overrides.audit.max_look_back".into(),
            problem: "`max_look_back` is not a key of `limits_config`".into(),
        }]
    );
}

#[test]
fn a_slip_in_the_rendered_config_is_caught() {
    let reference = reference();
    let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
    spec.rules = Some(RulesSpec {
        enabled: true,
        ..Default::default()
    });
    let s = stack("lokistack-dev", spec);
    let config = loki_config(&RenderInput::new(&s, effective(&s.spec))).expect("config");
    assert_eq!(check(&reference, &reference.root, &config), []);
    for (from, to, path, problem) in [
        (
            "  max_concurrent:",
            "  max_concurent:",
            "querier.max_concurent",
            "not a key of `querier`",
        ),
        (
            "  chunk_idle_period: 1h",
            "  chunk_idle_period: 60",
            "ingester.chunk_idle_period",
            "expected Duration",
        ),
        (
            "    zone_awareness_enabled: true",
            "    zone_awareness_enabled: \"true\"",
            "common.ring.zone_awareness_enabled",
            "expected Boolean",
        ),
        (
            "ruler_storage:",
            "ruler_store:",
            "ruler_store",
            "not a key of `the top level`",
        ),
    ] {
        assert!(config.contains(from), "{from}");
        let found = check(&reference, &reference.root, &config.replacen(from, to, 1));
        assert!(
            found
                .iter()
                .any(|m| m.path == path && m.problem.contains(problem)),
            "{to}: {found:#?}"
        );
    }
}

#[test]
fn leaf_types_take_what_loki_decodes() {
    let y = |s: &str| -> Yaml { serde_yaml_ng::from_str(s).expect("yaml") };
    for (leaf, good, bad) in [
        (
            Leaf::Duration,
            &["1h30m", "500ms", "0", "0s", "7d"][..],
            &["30", "1x", "h", ""][..],
        ),
        (
            Leaf::Bytes,
            &["512MB", "63KiB1023B", "1024"],
            &["\"512 MB\"", "1.2.3MB", "MB"],
        ),
        (Leaf::Int, &["5"], &["\"5\"", "5.5", "true"]),
        (Leaf::Boolean, &["true"], &["\"true\"", "1"]),
        (
            Leaf::String,
            &["\"1\"", "abc", "\"${X}\""],
            &["1", "true", "null"],
        ),
        (
            Leaf::Daytime,
            &["\"2024-04-02\""],
            &["2024-4-2", "\"20240402\""],
        ),
        (Leaf::Float, &["1.5", "2"], &["\"2\""]),
    ] {
        for g in good {
            assert!(fits(leaf, &y(g)), "{leaf:?} should take {g}");
        }
        for b in bad {
            assert!(!fits(leaf, &y(b)), "{leaf:?} should refuse {b}");
        }
    }
    // An environment reference stands for any single value, but not for a block.
    assert!(fits(Leaf::Boolean, &y("\"${S3_INSECURE}\"")));
    assert!(!fits(Leaf::Boolean, &y("\"${A}${B}\"")));
}

#[test]
fn reference_is_the_deployed_loki_release_and_complete() {
    let reference = reference();
    let tag = DEFAULT_LOKI_IMAGE.rsplit(':').next().expect("image tag");
    assert!(
        reference.source.ends_with(&format!("(v{tag})")),
        "the image is Loki {tag} but the reference is {}: regenerate it with hack/loki-config-reference.py",
        reference.source
    );
    fn names(node: &Node, out: &mut Vec<String>) {
        match node {
            Node::Ref { block } => out.push(block.clone()),
            Node::Block { fields, embed } => {
                out.extend(embed.iter().cloned());
                fields.values().for_each(|f| names(f, out));
            }
            Node::List { list: n } | Node::Map { map: n } => names(n, out),
            Node::Leaf { .. } | Node::Opaque { .. } => {}
        }
    }
    let mut used = Vec::new();
    for node in [&reference.root, &reference.runtime]
        .into_iter()
        .chain(reference.blocks.values())
    {
        names(node, &mut used);
    }
    for name in used {
        assert!(reference.blocks.contains_key(&name), "no block {name}");
    }
    for name in &reference.supplements {
        assert!(reference.blocks.contains_key(name), "no supplement {name}");
    }
    for key in [
        "server",
        "common",
        "limits_config",
        "ruler_storage",
        "schema_config",
    ] {
        assert!(
            matches!(&reference.root, Node::Block { fields, .. } if fields.contains_key(key)),
            "{key}"
        );
    }
}

#[test]
fn go_operator_limits_and_ring_fields_are_checked_key_by_key() {
    let reference = reference();
    let (_, s, eff) = variants()
        .into_iter()
        .find(|(label, ..)| label.contains("limits+ipv6=true"))
        .expect("a variant with limits");
    let config = loki_config(&RenderInput::new(&s, eff.clone())).expect("config");
    let runtime = runtime_config(&s, &eff);
    for key in [
        "instance_addr: \"${HASH_RING_INSTANCE_ADDR}\"",
        "advertise_addr: \"${HASH_RING_INSTANCE_ADDR}\"",
        "enable_inet6: true",
        "default_resource_attributes_as_index_labels: []",
        "otlp_config:",
        "blocked_queries:",
    ] {
        assert!(config.contains(key), "config.yaml lacks {key}");
    }
    for key in [
        "otlp_config",
        "attributes_config",
        "scope_attributes",
        "log_attributes",
        "blocked_queries",
        "\"types\":\"filter,metric\"",
    ] {
        assert!(runtime.contains(key), "the runtime config lacks {key}");
    }
    assert_eq!(check(&reference, &reference.runtime, &runtime), []);
    for (from, to, problem) in [
        ("\"regex\":true", "\"regex\":\"true\"", "expected Boolean"),
        (
            "\"types\":\"filter,metric\"",
            "\"types\":[\"filter\"]",
            "expected String",
        ),
        ("\"attributes_config\"", "\"attribute_config\"", "not a key"),
        ("\"log_attributes\"", "\"log_attribute\"", "not a key"),
    ] {
        assert!(runtime.contains(from), "{from}");
        let found = check(
            &reference,
            &reference.runtime,
            &runtime.replacen(from, to, 1),
        );
        assert!(
            found.iter().any(|m| m.problem.contains(problem)),
            "{to}: {found:#?}"
        );
    }
    let slip = config.replacen("enable_inet6: true", "enable_inet6: \"true\"", 1);
    assert!(check(&reference, &reference.root, &slip)
        .iter()
        .any(|m| m.path == "ingester.lifecycler.enable_inet6"));
}

#[test]
fn the_ruler_config_and_rule_files_use_only_keys_loki_knows() {
    let reference = reference();
    let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
    spec.rules = Some(
        serde_json::from_value(serde_json::json!({"enabled": true, "selector": {}}))
            .expect("rules"),
    );
    let s = stack("lokistack-dev", spec);
    let mut eff = effective(&s.spec);
    eff.ruler = crate::ruler::settings::input(
        Some(Vec::new()),
        Some(&crate::ruler::settings::full_ruler_config()),
    );
    let config = loki_config(&RenderInput::new(&s, eff.clone())).expect("config");
    let runtime = runtime_config(&s, &eff);
    assert_eq!(check(&reference, &reference.root, &config), []);
    assert_eq!(check(&reference, &reference.runtime, &runtime), []);
    for key in [
        "backend: local",
        "  alertmanager_url: http://_web._tcp.alertmanager.monitoring.svc,http://_web._tcp.am2.monitoring.svc",
        "  external_labels:\n    cluster: eu-1",
        "write_relabel_configs:",
        "password_file: /etc/loki/ruler/remote-write/password",
        // Doubled: Loki's -config.expand-env turns $$ back into $, so $1 stays $1.
        "replacement: $${2}$$1",
        "basic_auth_password: p$$ss",
    ] {
        assert!(config.contains(key), "config.yaml lacks {key}:\n{config}");
    }
    assert!(runtime.contains("ruler_alertmanager_config"), "{runtime}");
    assert!(
        runtime.contains("\"p$ss\""),
        "the runtime config is read as written: {runtime}"
    );
    // A slip inside a described supplement is caught too.
    let slip = config.replacen("password_file:", "pasword_file:", 1);
    assert_ne!(slip, config);
    assert!(check(&reference, &reference.root, &slip)
        .iter()
        .any(|m| m.problem.contains("not a key")));
}
