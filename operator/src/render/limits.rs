//! Limits and retention: `spec.limits.global` into Loki's `limits_config`, each tenant of
//! `spec.limits.tenants` into the runtime overrides, which Loki reloads without a restart.

use serde_json::{json, Map, Value};

use crate::model::api::{LimitsSpec, LimitsTemplateSpec, LokiStackSize, RetentionLimitSpec};

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

/// Loki's names for what one limits block sets; unset fields are left out.
pub fn loki_limits(l: &LimitsTemplateSpec) -> Map<String, Value> {
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
        ]);
    }
    if let Some(r) = &l.retention {
        fields.extend(retention(r));
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

/// Loki reads sizes as strings with a unit; the API gives whole megabytes, as the Go Loki
/// Operator does.
fn megabytes(mb: i32) -> Value {
    Value::from(format!("{mb}MB"))
}

/// `limits_config`: the size's defaults, with `spec.limits.global` on top.
pub fn global(size: LokiStackSize, limits: Option<&LimitsSpec>) -> Value {
    let mut out = defaults(size);
    if let (Some(map), Some(g)) = (out.as_object_mut(), limits.and_then(|l| l.global.as_ref())) {
        map.extend(loki_limits(g));
    }
    out
}

/// The runtime overrides, one entry per tenant.
pub fn tenant_overrides(limits: Option<&LimitsSpec>) -> Value {
    let tenants = limits.map(|l| &l.tenants);
    let map: Map<String, Value> = tenants
        .into_iter()
        .flatten()
        .map(|(t, l)| (t.clone(), Value::Object(loki_limits(l))))
        .collect();
    Value::Object(map)
}

/// Whether any tenant has a retention: the compactor then deletes what has expired.
pub fn retention_enabled(limits: Option<&LimitsSpec>) -> bool {
    limits.is_some_and(|l| {
        l.global
            .iter()
            .chain(l.tenants.values())
            .any(|t| t.retention.is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{
        IngestionLimitSpec, QueryLimitSpec, RetentionLimitSpec, RetentionStreamSpec,
    };

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
