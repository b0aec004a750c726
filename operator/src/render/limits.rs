//! Limits and retention: `spec.limits.global` into Loki's `limits_config`, each tenant of
//! `spec.limits.tenants` into the runtime overrides, which Loki reloads without a restart.
//! Blocked queries become `blocked_queries`, OTLP attribute rules `otlp_config`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::model::api::{
    BlockedQuerySpec, LimitsSpec, LimitsTemplateSpec, LokiStackSize, OtlpAttributeReference,
    OtlpSpec, RetentionLimitSpec,
};

/// The size's defaults: our own conservative figures.
fn defaults(size: LokiStackSize) -> Value {
    use LokiStackSize::*;
    let (rate, burst, streams) = match size {
        Demo | Pico => (4, 6, 10000),
        ExtraSmall => (4, 6, 10000),
        Small => (10, 20, 25000),
        Medium => (10, 20, 50000),
    };
    let streams = if size == Demo { 5000 } else { streams };
    json!({
        "ingestion_rate_mb": rate,
        "ingestion_burst_size_mb": burst,
        "max_global_streams_per_user": streams,
        "max_line_size": 256000,
        "max_entries_limit_per_query": 5000,
        "max_query_series": 500,
        "query_timeout": "3m",
    })
}

/// Loki's names for what one limits block sets; unset fields are left out. `inherited`
/// is the OTLP setting of every tenant, which a tenant's own adds to.
pub fn loki_limits(l: &LimitsTemplateSpec, inherited: Option<&OtlpSpec>) -> Map<String, Value> {
    let int = |v: Option<i32>| v.map(Value::from);
    let mb = |v: Option<i32>| v.map(megabytes);
    let mut fields: Vec<(&str, Option<Value>)> = Vec::new();
    if let Some(i) = &l.ingestion {
        fields.extend([
            ("ingestion_rate_mb", int(i.ingestion_rate)),
            ("ingestion_burst_size_mb", int(i.ingestion_burst_size)),
            ("max_line_size", int(i.max_line_size)),
            (
                "max_global_streams_per_user",
                int(i.max_global_streams_per_tenant),
            ),
            ("max_label_name_length", int(i.max_label_name_length)),
            ("max_label_value_length", int(i.max_label_value_length)),
            (
                "max_label_names_per_series",
                int(i.max_label_names_per_series),
            ),
            ("per_stream_rate_limit", mb(i.per_stream_rate_limit)),
            (
                "per_stream_rate_limit_burst",
                mb(i.per_stream_rate_limit_burst),
            ),
            (
                "shard_streams",
                mb(i.per_stream_desired_rate).map(|r| json!({"desired_rate": r})),
            ),
        ]);
    }
    if let Some(q) = &l.queries {
        fields.extend([
            (
                "max_entries_limit_per_query",
                int(q.max_entries_limit_per_query),
            ),
            ("max_query_series", int(q.max_query_series)),
            ("query_timeout", q.query_timeout.clone().map(Value::from)),
            ("max_chunks_per_query", int(q.max_chunks_per_query)),
            ("cardinality_limit", int(q.cardinality_limit)),
            ("volume_max_series", int(q.max_volume_series)),
            ("blocked_queries", q.blocked.as_deref().map(blocked_queries)),
        ]);
    }
    if let Some(r) = &l.retention {
        fields.extend(retention(r));
    }
    if let Some(own) = &l.otlp {
        fields.push((
            "otlp_config",
            Some(otlp_config(inherited.into_iter().chain([own]))),
        ));
    }
    fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v?)))
        .collect()
}

fn retention(r: &RetentionLimitSpec) -> [(&'static str, Option<Value>); 2] {
    let streams: Vec<Value> = r
        .streams
        .iter()
        .map(|s| json!({"selector": s.selector, "priority": s.priority, "period": format!("{}h", i64::from(s.days) * 24)}))
        .collect();
    [
        (
            "retention_period",
            Some(Value::from(format!("{}h", i64::from(r.days) * 24))),
        ),
        (
            "retention_stream",
            (!streams.is_empty()).then_some(Value::Array(streams)),
        ),
    ]
}

/// Loki's `blocked_queries`: only what is set, as the Go Loki Operator writes it.
fn blocked_queries(blocked: &[BlockedQuerySpec]) -> Value {
    let one = |b: &BlockedQuerySpec| {
        let types: Vec<&str> = b.types.iter().map(|t| t.as_str()).collect();
        let fields = [
            ("pattern", b.pattern.clone().map(Value::from)),
            ("regex", b.regex.map(Value::from)),
            // Loki's hash is unsigned; the API's is signed 32 bits (the Go operator's
            // type), so a hash above i32::MAX is stored negative and restored here.
            (
                "hash",
                b.hash
                    .map(|h| Value::from(u32::from_ne_bytes(h.to_ne_bytes()))),
            ),
            (
                "types",
                (!types.is_empty()).then(|| Value::from(types.join(","))),
            ),
        ];
        let map: Map<String, Value> = fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect();
        Value::Object(map)
    };
    Value::Array(blocked.iter().map(one).collect())
}

/// Loki's OTLP actions, in the order Loki tries them (the first rule that matches an
/// attribute decides): drop before stream label, as the Go Loki Operator orders them, so
/// a dropping regular expression wins over a stream label it matches.
const OTLP_DROP: &str = "drop";
const OTLP_STREAM_LABEL: &str = "index_label";

/// Loki's `otlp_config` for one or more OTLP settings taken together (every tenant's,
/// then a tenant's own). Per attribute kind and action: one rule with every exact name
/// (sorted, once each), then one rule per regular expression.
fn otlp_config<'a>(specs: impl Iterator<Item = &'a OtlpSpec>) -> Value {
    let mut resource = Rules::default();
    let mut scope = Rules::default();
    let mut log = Rules::default();
    for spec in specs {
        if let Some(labels) = &spec.stream_labels {
            resource.add(OTLP_STREAM_LABEL, &labels.resource_attributes);
        }
        if let Some(drop) = &spec.drop {
            resource.add(OTLP_DROP, &drop.resource_attributes);
            scope.add(OTLP_DROP, &drop.scope_attributes);
            log.add(OTLP_DROP, &drop.log_attributes);
        }
    }
    let mut out = Map::new();
    if !resource.0.is_empty() {
        out.insert(
            "resource_attributes".into(),
            json!({"attributes_config": resource.rendered()}),
        );
    }
    for (key, rules) in [("scope_attributes", scope), ("log_attributes", log)] {
        if !rules.0.is_empty() {
            out.insert(key.into(), Value::Array(rules.rendered()));
        }
    }
    Value::Object(out)
}

/// Action to (exact names, regular expressions), actions in Loki's order of trial.
#[derive(Default)]
struct Rules(BTreeMap<&'static str, (BTreeSet<String>, BTreeSet<String>)>);

impl Rules {
    fn add(&mut self, action: &'static str, refs: &[OtlpAttributeReference]) {
        if refs.is_empty() {
            return;
        }
        let (names, regexes) = self.0.entry(action).or_default();
        for r in refs {
            if r.is_regex() {
                regexes.insert(r.name.clone());
            } else {
                names.insert(r.name.clone());
            }
        }
    }

    fn rendered(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (action, (names, regexes)) in &self.0 {
            if !names.is_empty() {
                out.push(json!({"action": action, "attributes": names}));
            }
            out.extend(
                regexes
                    .iter()
                    .map(|r| json!({"action": action, "regex": r})),
            );
        }
        out
    }
}

/// Whether any limits block sets OTLP attribute rules: Loki's default stream labels for
/// OTLP are then turned off for every tenant (`distributor.otlp_config`), as the Go Loki
/// Operator does, so only the attributes the stack names become stream labels.
pub fn otlp_set(limits: Option<&LimitsSpec>) -> bool {
    any_block(limits, |t| t.otlp.is_some())
}

/// Whether the global limits or any tenant's satisfy `f`.
fn any_block(limits: Option<&LimitsSpec>, f: impl Fn(&LimitsTemplateSpec) -> bool) -> bool {
    limits.is_some_and(|l| l.global.iter().chain(l.tenants.values()).any(f))
}

/// Loki reads sizes as strings with a unit; the API gives whole megabytes, as the Go Loki
/// Operator does.
fn megabytes(mb: i32) -> Value {
    Value::from(format!("{mb}MB"))
}

/// `limits_config`: the size's defaults, with `spec.limits.global` on top.
pub fn global(size: LokiStackSize, limits: Option<&LimitsSpec>) -> Value {
    let mut out = defaults(size);
    if let (Some(map), Some(g)) = (out.as_object_mut(), limits.and_then(|l| l.global.as_ref())) {
        map.extend(loki_limits(g, None));
    }
    out
}

/// The ingestion rate every tenant gets, in megabytes per second (Loki's
/// `ingestion_rate_mb`, which it reads as MiB): the one `global` renders.
pub fn global_ingestion_rate_mb(size: LokiStackSize, limits: Option<&LimitsSpec>) -> Option<i64> {
    global(size, limits)
        .get("ingestion_rate_mb")
        .and_then(Value::as_i64)
}

/// The runtime overrides, one entry per tenant.
pub fn tenant_overrides(limits: Option<&LimitsSpec>) -> Value {
    let tenants = limits.map(|l| &l.tenants);
    let inherited = limits
        .and_then(|l| l.global.as_ref())
        .and_then(|g| g.otlp.as_ref());
    let map: Map<String, Value> = tenants
        .into_iter()
        .flatten()
        .map(|(t, l)| (t.clone(), Value::Object(loki_limits(l, inherited))))
        .collect();
    Value::Object(map)
}

/// Whether any tenant has a retention: the compactor then deletes what has expired.
pub fn retention_enabled(limits: Option<&LimitsSpec>) -> bool {
    any_block(limits, |t| t.retention.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{
        BlockedQueryType, IngestionLimitSpec, OtlpMetadataSpec, OtlpStreamLabelSpec,
        QueryLimitSpec, RetentionLimitSpec, RetentionStreamSpec,
    };

    fn attr(name: &str, regex: bool) -> OtlpAttributeReference {
        OtlpAttributeReference {
            name: name.into(),
            regex: regex.then_some(true),
        }
    }

    #[test]
    fn blocked_queries_reach_loki_with_only_what_is_set() {
        let blocked = vec![
            BlockedQuerySpec {
                pattern: Some("sum(rate({a=\"b\"}[5m]))".into()),
                types: vec![BlockedQueryType::Metric, BlockedQueryType::Filter],
                ..Default::default()
            },
            BlockedQuerySpec {
                pattern: Some(".*secret.*".into()),
                regex: Some(true),
                ..Default::default()
            },
            // Above i32::MAX, stored as its two's complement.
            BlockedQuerySpec {
                hash: Some(-1),
                ..Default::default()
            },
            BlockedQuerySpec {
                hash: Some(12345),
                types: vec![BlockedQueryType::Limited],
                ..Default::default()
            },
        ];
        let l = LimitsTemplateSpec {
            queries: Some(QueryLimitSpec {
                blocked: Some(blocked),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            loki_limits(&l, None)["blocked_queries"],
            json!([
                {"pattern": "sum(rate({a=\"b\"}[5m]))", "types": "metric,filter"},
                {"pattern": ".*secret.*", "regex": true},
                {"hash": 4294967295u32},
                {"hash": 12345, "types": "limited"},
            ])
        );
    }

    /// OTLP rules for every tenant, and for team-a its own on top; team-b has none.
    fn otlp_limits() -> LimitsSpec {
        let every = OtlpSpec {
            stream_labels: Some(OtlpStreamLabelSpec {
                resource_attributes: vec![
                    attr("k8s.namespace.name", false),
                    attr("k8s\\.pod\\..+", true),
                    attr("k8s.container.name", false),
                    attr("k8s.namespace.name", false),
                ],
            }),
            drop: Some(OtlpMetadataSpec {
                resource_attributes: vec![attr("process\\..+", true)],
                scope_attributes: vec![],
                log_attributes: vec![attr("log.iostream", false)],
            }),
        };
        let tenant = OtlpSpec {
            stream_labels: Some(OtlpStreamLabelSpec {
                resource_attributes: vec![attr("service.name", false)],
            }),
            drop: Some(OtlpMetadataSpec {
                scope_attributes: vec![attr("scope.x", false)],
                ..Default::default()
            }),
        };
        LimitsSpec {
            global: Some(LimitsTemplateSpec {
                otlp: Some(every),
                ..Default::default()
            }),
            tenants: [
                (
                    "team-a".to_string(),
                    LimitsTemplateSpec {
                        otlp: Some(tenant),
                        ..Default::default()
                    },
                ),
                ("team-b".to_string(), LimitsTemplateSpec::default()),
            ]
            .into(),
        }
    }

    #[test]
    fn otlp_rules_drop_first_names_before_regexes_and_tenants_add_to_global() {
        let limits = otlp_limits();
        assert!(otlp_set(Some(&limits)));
        assert!(!otlp_set(None));
        let g = global(LokiStackSize::Small, Some(&limits));
        assert_eq!(
            g["otlp_config"],
            json!({
                "resource_attributes": {"attributes_config": [
                    {"action": "drop", "regex": "process\\..+"},
                    {"action": "index_label", "attributes": ["k8s.container.name", "k8s.namespace.name"]},
                    {"action": "index_label", "regex": "k8s\\.pod\\..+"},
                ]},
                "log_attributes": [{"action": "drop", "attributes": ["log.iostream"]}],
            })
        );
        let t = tenant_overrides(Some(&limits));
        assert_eq!(
            t["team-a"]["otlp_config"],
            json!({
                "resource_attributes": {"attributes_config": [
                    {"action": "drop", "regex": "process\\..+"},
                    {"action": "index_label", "attributes": ["k8s.container.name", "k8s.namespace.name", "service.name"]},
                    {"action": "index_label", "regex": "k8s\\.pod\\..+"},
                ]},
                "scope_attributes": [{"action": "drop", "attributes": ["scope.x"]}],
                "log_attributes": [{"action": "drop", "attributes": ["log.iostream"]}],
            }),
            "a tenant's own rules are added to every tenant's"
        );
        assert!(
            t["team-b"].get("otlp_config").is_none(),
            "a tenant without its own reads limits_config's"
        );
    }

    #[test]
    fn global_limits_override_the_size_and_tenants_get_their_own() {
        let limits = LimitsSpec {
            global: Some(LimitsTemplateSpec {
                ingestion: Some(IngestionLimitSpec {
                    ingestion_rate: Some(20),
                    max_line_size: Some(512000),
                    per_stream_rate_limit: Some(3),
                    per_stream_desired_rate: Some(2),
                    max_label_names_per_series: Some(30),
                    ..Default::default()
                }),
                queries: Some(QueryLimitSpec {
                    query_timeout: Some("5m".into()),
                    max_volume_series: Some(1000),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            tenants: [(
                "audit".to_string(),
                LimitsTemplateSpec {
                    retention: Some(RetentionLimitSpec {
                        days: 365,
                        streams: vec![RetentionStreamSpec {
                            days: 7,
                            priority: 1,
                            selector: "{namespace=\"dev\"}".into(),
                        }],
                    }),
                    ..Default::default()
                },
            )]
            .into(),
        };
        let g = global(LokiStackSize::Small, Some(&limits));
        assert_eq!(g["ingestion_rate_mb"], 20);
        assert_eq!(g["ingestion_burst_size_mb"], 20, "the size's default stays");
        assert_eq!(g["max_line_size"], 512000);
        assert_eq!(g["query_timeout"], "5m");
        assert_eq!(g["per_stream_rate_limit"], "3MB");
        assert_eq!(g["shard_streams"], json!({"desired_rate": "2MB"}));
        assert_eq!(g["max_label_names_per_series"], 30);
        assert_eq!(g["volume_max_series"], 1000);
        assert!(g.get("retention_period").is_none());
        let t = tenant_overrides(Some(&limits));
        assert_eq!(t["audit"]["retention_period"], "8760h");
        assert_eq!(t["audit"]["retention_stream"][0]["period"], "168h");
        assert!(retention_enabled(Some(&limits)));
        assert!(!retention_enabled(None));
    }
}
