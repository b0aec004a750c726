//! The static rules of a LokiStack spec, checked in the reconciler.
//!
//! The CRD enforces the same rules at admission (OpenAPI constraints and CEL). API servers
//! older than 1.25 ignore CEL, and a stack may predate a rule, so the reconciler checks
//! them again and reports a Degraded `InvalidSpec` condition naming each field.

use std::collections::BTreeSet;
use std::fmt;

use crate::api::{
    LokiStackSpec, ZoneSpec, MAX_ZONE_ENTRIES, QUALIFIED_NAME_MAX_LEN,
    RULE_REPLICATION_EXCLUSIVE_MSG, RULE_UNIQUE_KEYS_MSG,
};
use crate::defaults::Component;

/// One violated rule: the field's path and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid LokiStack spec: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidSpec(pub Vec<FieldError>);

fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

fn dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A Kubernetes qualified name (label key): `[prefix/]name`, the prefix a DNS subdomain of
/// at most 253 characters, the name at most 63 alphanumerics, `-`, `_` or `.`, starting
/// and ending with an alphanumeric.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(dns1123_label) {
            return false;
        }
    }
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 3
        && parts[0].len() >= 4
        && parts[1].len() == 2
        && parts[2].len() == 2
        && parts.iter().all(|p| p.bytes().all(|c| c.is_ascii_digit()))
}

/// Every static rule; an empty result means the spec is valid.
pub fn validate(spec: &LokiStackSpec) -> Result<(), InvalidSpec> {
    let mut errors = Vec::new();
    replication(spec, &mut errors);
    if let Some(r) = &spec.replication {
        zones(&r.zones, &mut errors);
    }
    storage(spec, &mut errors);
    for c in Component::ALL {
        if let Some(r) = c.template(spec).and_then(|t| t.replicas).filter(|r| *r < 0) {
            errors.push(err(
                format!("spec.template.{}.replicas", c.spec_field()),
                format!("must not be negative, got {r}"),
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec(errors))
    }
}

fn replication(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    if spec.replication.is_some() && spec.replication_factor.is_some() {
        errors.push(err(
            "spec.replicationFactor",
            RULE_REPLICATION_EXCLUSIVE_MSG,
        ));
    }
    if let Some(f) = spec.replication_factor.filter(|f| *f < 1) {
        errors.push(err(
            "spec.replicationFactor",
            format!("must be at least 1, got {f}"),
        ));
    }
    if let Some(f) = spec
        .replication
        .as_ref()
        .and_then(|r| r.factor)
        .filter(|f| *f < 1)
    {
        errors.push(err(
            "spec.replication.factor",
            format!("must be at least 1, got {f}"),
        ));
    }
}

fn zones(zones: &[ZoneSpec], errors: &mut Vec<FieldError>) {
    if zones.len() > MAX_ZONE_ENTRIES {
        errors.push(err(
            "spec.replication.zones",
            format!("at most {MAX_ZONE_ENTRIES} entries, got {}", zones.len()),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, z) in zones.iter().enumerate() {
        let field = format!("spec.replication.zones[{i}]");
        if z.topology_key.len() > QUALIFIED_NAME_MAX_LEN || !is_qualified_name(&z.topology_key) {
            errors.push(err(
                format!("{field}.topologyKey"),
                format!(
                    "{:?} is not a valid label name ([prefix/]name, e.g. topology.kubernetes.io/zone)",
                    z.topology_key
                ),
            ));
        }
        if !seen.insert(z.topology_key.as_str()) {
            errors.push(err(format!("{field}.topologyKey"), RULE_UNIQUE_KEYS_MSG));
        }
        if z.max_skew < 1 {
            errors.push(err(
                format!("{field}.maxSkew"),
                format!("must be at least 1, got {}", z.max_skew),
            ));
        }
    }
}

fn storage(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    if spec.storage.secret.name.is_empty() {
        errors.push(err(
            "spec.storage.secret.name",
            "must name the object storage Secret",
        ));
    }
    let mut dates = BTreeSet::new();
    for (i, s) in spec.storage.schemas.iter().enumerate() {
        let field = format!("spec.storage.schemas[{i}].effectiveDate");
        if !is_date(&s.effective_date) {
            errors.push(err(
                &field,
                format!("{:?} is not a date (YYYY-MM-DD)", s.effective_date),
            ));
        } else if !dates.insert(s.effective_date.as_str()) {
            errors.push(err(&field, "two schema periods start on the same date"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LokiStackSize, ReplicationSpec};
    use crate::testing::{stack_spec, ZONE};

    #[test]
    fn qualified_names() {
        for ok in [
            ZONE,
            "kubernetes.io/hostname",
            "rack",
            "a.b/c_d.e-f",
            "x/Y9",
        ] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        let long_name = "a".repeat(64);
        let long_prefix = format!("{}/zone", "a.".repeat(127) + "a");
        for bad in [
            "",
            "/zone",
            "Topology.io/zone",
            "zone-",
            "-zone",
            "a/b/c",
            "has space",
            &long_name,
            &long_prefix,
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    #[test]
    fn valid_spec_passes() {
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.replication = Some(ReplicationSpec {
            factor: Some(3),
            zones: vec![ZoneSpec {
                topology_key: ZONE.into(),
                max_skew: 1,
            }],
        });
        assert_eq!(validate(&spec), Ok(()));
    }

    #[test]
    fn each_error_names_its_field() {
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.replication_factor = Some(0);
        spec.replication = Some(ReplicationSpec {
            factor: Some(0),
            zones: vec![
                ZoneSpec {
                    topology_key: ZONE.into(),
                    max_skew: 0,
                },
                ZoneSpec {
                    topology_key: ZONE.into(),
                    max_skew: 1,
                },
                ZoneSpec {
                    topology_key: "bad key".into(),
                    max_skew: 1,
                },
                ZoneSpec {
                    topology_key: "rack".into(),
                    max_skew: 1,
                },
            ],
        });
        let Err(InvalidSpec(errors)) = validate(&spec) else {
            panic!("expected errors")
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.replicationFactor",
                "spec.replicationFactor",
                "spec.replication.factor",
                "spec.replication.zones",
                "spec.replication.zones[0].maxSkew",
                "spec.replication.zones[1].topologyKey",
                "spec.replication.zones[2].topologyKey",
            ]
        );
    }
}
