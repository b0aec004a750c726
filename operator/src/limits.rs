//! Limits and retention: `spec.limits.global` into Loki's `limits_config`, each tenant of
//! `spec.limits.tenants` into the runtime overrides, which Loki reloads without a restart.

use serde_json::{json, Map, Value};

use crate::api::{LimitsSpec, LimitsTemplateSpec, LokiStackSize};

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
    let mut out = Map::new();
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(k.to_string(), v);
        }
    };
    if let Some(i) = &l.ingestion {
        set("ingestion_rate_mb", i.ingestion_rate.map(Value::from));
        set(
            "ingestion_burst_size_mb",
            i.ingestion_burst_size.map(Value::from),
        );
        set("max_line_size", i.max_line_size.map(Value::from));
        set(
            "max_global_streams_per_user",
            i.max_global_streams_per_tenant.map(Value::from),
        );
    }
    if let Some(q) = &l.queries {
        set(
            "max_entries_limit_per_query",
            q.max_entries_limit_per_query.map(Value::from),
        );
        set("max_query_series", q.max_query_series.map(Value::from));
        set("query_timeout", q.query_timeout.clone().map(Value::from));
    }
    if let Some(r) = &l.retention {
        set(
            "retention_period",
            Some(Value::from(format!("{}h", i64::from(r.days) * 24))),
        );
        let streams: Vec<Value> = r
            .streams
            .iter()
            .map(|s| json!({"selector": s.selector, "priority": s.priority, "period": format!("{}h", i64::from(s.days) * 24)}))
            .collect();
        if !streams.is_empty() {
            set("retention_stream", Some(Value::Array(streams)));
        }
    }
    out
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
    use crate::api::{IngestionLimitSpec, QueryLimitSpec, RetentionLimitSpec, RetentionStreamSpec};

    #[test]
    fn global_limits_override_the_size_and_tenants_get_their_own() {
        let limits = LimitsSpec {
            global: Some(LimitsTemplateSpec {
                ingestion: Some(IngestionLimitSpec {
                    ingestion_rate: Some(20),
                    max_line_size: Some(512000),
                    ..Default::default()
                }),
                queries: Some(QueryLimitSpec {
                    query_timeout: Some("5m".into()),
                    ..Default::default()
                }),
                retention: None,
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
        assert!(g.get("retention_period").is_none());
        let t = tenant_overrides(Some(&limits));
        assert_eq!(t["audit"]["retention_period"], "8760h");
        assert_eq!(t["audit"]["retention_stream"][0]["period"], "168h");
        assert!(retention_enabled(Some(&limits)));
        assert!(!retention_enabled(None));
    }
}
