//! The static rules of a LokiStack spec, checked in the reconciler.
//!
//! The CRD enforces the same rules at admission (OpenAPI constraints and CEL). A stack may
//! predate a rule (stored before the CRD that has it), and `render` reads stacks no
//! server admitted, so the reconciler checks them again and reports a Degraded
//! `InvalidSpec` condition naming each field.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodAntiAffinity};

use crate::checks::silence::{Tolerance, DEFAULT_MISSED_RENEWALS, MAX_MISSED_RENEWALS};
use crate::model::api::{
    BlockedQuerySpec, InstanceAddrType, LimitsTemplateSpec, LokiStack, LokiStackSpec,
    ObjectStorageSecretType, OtlpAttributeReference, OtlpSpec, ZoneSpec, BLOCKED_NO_DOLLAR_MSG,
    MAX_REPLICAS, MAX_REPLICATION_FACTOR, MAX_SKEW, MAX_ZONE_ENTRIES, OTLP_DROP_STREAM_LABEL_MSG,
    OTLP_NO_DOLLAR_MSG, QUALIFIED_NAME_MAX_LEN, RECOVER_AFTER_FLOOR_SECS, RULE_IPV6_ADDR_TYPE_MSG,
    RULE_NAME_DNS_LABEL_MSG, RULE_NAME_LENGTH_MSG, RULE_REPLICATION_EXCLUSIVE_MSG, RULE_TLS_S3_MSG,
    RULE_UNIQUE_KEYS_MSG, SELECTOR_NO_DOLLAR_MSG, TENANT_NO_DOLLAR_MSG,
};
use crate::model::defaults::{effective, Component, EffectiveStack};
use crate::model::names::{self, MAX_STACK_NAME_LEN};

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

/// A label of a DNS subdomain as Kubernetes checks label-key prefixes: lowercase
/// alphanumerics and `-`, alphanumeric at both ends. Kubernetes bounds only the prefix as
/// a whole (253), not each label, and the CRD agrees; so does this check.
fn dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A Kubernetes qualified name (label key): `[prefix/]name`, the prefix a DNS subdomain of
/// at most 253 characters, the name at most 63 alphanumerics, `-`, `_` or `.`, starting
/// and ending with an alphanumeric. The CRD's pattern and CEL rule say the same.
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

/// A real calendar date written `YYYY-MM-DD` (2024-02-31 is not one).
fn is_date(s: &str) -> bool {
    s.len() == 10 && s.parse::<k8s_openapi::jiff::civil::Date>().is_ok()
}

/// A switch annotation that is on unless set to `"false"`. Any other value keeps it on
/// (the safe side) and is an error to report, saying what `stays` in effect.
fn on_unless_false(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    key: &str,
    stays: &str,
) -> Result<bool, String> {
    match annotations.and_then(|a| a.get(key)) {
        None => Ok(true),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(format!(
            "annotation {key}: {v:?} is neither \"true\" nor \"false\"; {stays}"
        )),
    }
}

/// Whether the zone-disruption webhook decides the evictions of a stack's ingesters, from
/// its annotations ([`names::ANNOTATION_ZONE_AWARE_EVICTIONS`]).
pub fn zone_aware_evictions(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<bool, String> {
    on_unless_false(
        annotations,
        names::ANNOTATION_ZONE_AWARE_EVICTIONS,
        "zone-aware evictions stay on",
    )
}

/// Whether a stack whose only topology key is `topology.kubernetes.io/zone` reads its
/// pods' zone from that label where the server copies it at binding, from its
/// annotations ([`names::ANNOTATION_ZONE_FROM_POD_LABEL`]).
pub fn zone_from_pod_label(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<bool, String> {
    on_unless_false(
        annotations,
        names::ANNOTATION_ZONE_FROM_POD_LABEL,
        "the zone comes from the pod's label where Kubernetes copies it",
    )
}

/// Loki reads a zone-aware pod's zone from the pod's `topology.kubernetes.io/zone` label
/// rather than from the operator's annotation: the server copies that label from the
/// node when it binds the pod (`server_copies`:
/// [`crate::checks::kube_version::ZONE_LABELS_AT_BINDING_SINCE`]), it is the stack's only
/// topology key (the server copies no other), and the stack allows it. The render (the
/// pods' `fieldPath`), the plan, the observe step and the zone-at-bind webhook's
/// registration (which leaves such stacks out) all ask this, so they agree.
pub fn reads_zone_label(keys: &[&str], server_copies: bool, allowed: bool) -> bool {
    server_copies && allowed && keys == [names::LABEL_TOPOLOGY_ZONE]
}

/// [`reads_zone_label`] of a stack, from its topology keys and its annotations: what the
/// webhook registration and the observe step ask before they have its resolved spec.
pub fn stack_reads_zone_label(
    keys: &[&str],
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    server_copies: bool,
) -> bool {
    let allowed = zone_from_pod_label(annotations) != Ok(false);
    reads_zone_label(keys, server_copies, allowed)
}

/// Whether a zone-aware stack's entry Services keep traffic in the client's zone, from
/// its annotations ([`names::ANNOTATION_ZONE_LOCAL_SERVICES`]).
pub fn zone_local_services(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<bool, String> {
    on_unless_false(
        annotations,
        names::ANNOTATION_ZONE_LOCAL_SERVICES,
        "the entry Services stay zone-local",
    )
}

/// Whether a zone-aware stack's Loki gossips zone-aware, from its annotations
/// ([`names::ANNOTATION_ZONE_AWARE_GOSSIP`]).
pub fn zone_aware_gossip(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<bool, String> {
    on_unless_false(
        annotations,
        names::ANNOTATION_ZONE_AWARE_GOSSIP,
        "zone-aware gossip stays on",
    )
}

/// Whether a zone-aware stack's pods are taken out of their Services as soon as their
/// zone's node Leases all stop, from its annotations
/// ([`names::ANNOTATION_ZONE_FAST_FAILOVER`]).
pub fn zone_fast_failover(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<bool, String> {
    on_unless_false(
        annotations,
        names::ANNOTATION_ZONE_FAST_FAILOVER,
        "the fast failover stays on",
    )
}

/// The renewals each node may miss before the fast failover counts it late, from a
/// zone-aware stack's annotations
/// ([`names::ANNOTATION_ZONE_FAST_FAILOVER_MISSED_RENEWALS`]): 0 to
/// [`MAX_MISSED_RENEWALS`], default [`DEFAULT_MISSED_RENEWALS`]. Any other value keeps
/// the default and is an error to report.
pub fn zone_fast_failover_tolerance(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<Tolerance, String> {
    let key = names::ANNOTATION_ZONE_FAST_FAILOVER_MISSED_RENEWALS;
    let Some(v) = annotations.and_then(|a| a.get(key)) else {
        return Ok(Tolerance::default());
    };
    match v.parse::<u32>() {
        Ok(n) if n <= MAX_MISSED_RENEWALS => Ok(Tolerance { missed_renewals: n }),
        _ => Err(format!(
            "annotation {key}: {v:?} is not a whole number from 0 to {MAX_MISSED_RENEWALS}; the fast failover tolerates {DEFAULT_MISSED_RENEWALS} missed renewal"
        )),
    }
}

/// `RULE_NAME_DNS_LABEL`: a lowercase letter, then lowercase letters, digits and `-`,
/// ending with a letter or digit.
fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    b.first().is_some_and(u8::is_ascii_lowercase)
        && b.iter().all(inner)
        && b.last().is_some_and(|c| *c != b'-')
}

/// Every rule on the whole stack: its name, its spec, and what the defaults make of it.
pub fn validate_stack(stack: &LokiStack) -> Result<(), InvalidSpec> {
    let mut errors = validate(&stack.spec).err().map(|e| e.0).unwrap_or_default();
    let name = stack.metadata.name.as_deref().unwrap_or_default();
    if name.len() > MAX_STACK_NAME_LEN {
        errors.push(err(
            "metadata.name",
            format!("{RULE_NAME_LENGTH_MSG}; {name:?} has {}", name.len()),
        ));
    }
    if !is_dns_label(name) {
        errors.push(err(
            "metadata.name",
            format!("{RULE_NAME_DNS_LABEL_MSG}; {name:?} is not"),
        ));
    }
    if errors.is_empty() {
        errors.extend(effective_rules(&effective(&stack.spec)));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec(errors))
    }
}

/// Rules on resolved values: a stream cannot have more copies than there are ingesters.
fn effective_rules(eff: &EffectiveStack) -> Vec<FieldError> {
    let ingesters = eff.component(Component::Ingester).map_or(0, |c| c.replicas);
    if eff.replication_factor <= ingesters {
        return Vec::new();
    }
    vec![err(
        "spec.replication.factor",
        format!(
            "replication factor {} needs at least {} ingesters, the stack has {ingesters}; raise spec.template.ingester.replicas or lower the factor",
            eff.replication_factor, eff.replication_factor
        ),
    )]
}

/// Every static rule; an empty result means the spec is valid.
pub fn validate(spec: &LokiStackSpec) -> Result<(), InvalidSpec> {
    let mut errors = Vec::new();
    replication(spec, &mut errors);
    if let Some(r) = &spec.replication {
        zones(&r.zones, &mut errors);
    }
    storage(spec, &mut errors);
    nothing_to_expand(spec, &mut errors);
    otlp_drops(spec, &mut errors);
    hash_ring(spec, &mut errors);
    rule_selectors(spec, &mut errors);
    for c in Component::ALL {
        let at = format!("spec.template.{}", c.spec_field());
        let replicas = c.template(spec).and_then(|t| t.replicas);
        if let Some(r) = replicas.filter(|r| !(0..=MAX_REPLICAS).contains(r)) {
            errors.push(err(
                format!("{at}.replicas"),
                format!("must be between 0 and {MAX_REPLICAS}, got {r}"),
            ));
        }
        if let Some(a) = c.template(spec).and_then(|t| t.pod_anti_affinity.as_ref()) {
            anti_affinity(&format!("{at}.podAntiAffinity"), a, &mut errors);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec(errors))
    }
}

/// `spec.rules`' selectors must be selectors: the schema takes any operator string.
fn rule_selectors(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    let Some(rules) = &spec.rules else {
        return;
    };
    for (field, sel) in [
        ("spec.rules.selector", &rules.selector),
        ("spec.rules.namespaceSelector", &rules.namespace_selector),
    ] {
        if let Some(Err(e)) = sel.clone().map(kube::core::Selector::try_from) {
            errors.push(err(
                field,
                format!("{e}: use the operators In, NotIn, Exists or DoesNotExist, with values for In and NotIn only"),
            ));
        }
    }
}

/// No free-form string of the spec that is written into Loki's configuration may hold a
/// `$`: Loki expands it from its environment (`-config.expand-env`), where the object
/// store's credentials are. The CRD refuses it in selectors, blocked query patterns and
/// OTLP attribute names (a stack stored before those patterns is caught here); tenant
/// names only here. Every other string that reaches the configuration is bound by a
/// pattern or an enum.
fn nothing_to_expand(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    let Some(limits) = &spec.limits else {
        return;
    };
    if let Some(g) = &limits.global {
        limit_strings("spec.limits.global", g, errors);
    }
    if limits.tenants.keys().any(|t| t.contains('$')) {
        errors.push(err("spec.limits.tenants", TENANT_NO_DOLLAR_MSG));
    }
    for (tenant, l) in &limits.tenants {
        limit_strings(&format!("spec.limits.tenants.{tenant}"), l, errors);
    }
}

/// The strings of one limits block that reach Loki's configuration, with their paths
/// (and a blocked query that sets nothing).
fn limit_strings(at: &str, l: &LimitsTemplateSpec, errors: &mut Vec<FieldError>) {
    let refuse = |errors: &mut Vec<FieldError>, field: String, text: &str, message: &str| {
        if text.contains('$') {
            errors.push(err(field, message));
        }
    };
    let streams = l.retention.iter().flat_map(|r| r.streams.iter());
    for (i, s) in streams.enumerate() {
        let field = format!("{at}.retention.streams[{i}].selector");
        refuse(errors, field, &s.selector, SELECTOR_NO_DOLLAR_MSG);
    }
    let blocked = l.queries.iter().flat_map(|q| q.blocked.iter().flatten());
    for (i, b) in blocked.enumerate() {
        if *b == BlockedQuerySpec::default() {
            // The CRD's minProperties, for a stack stored before it.
            errors.push(err(
                format!("{at}.queries.blocked[{i}]"),
                "an empty rule would refuse every query: set a hash, a pattern or types",
            ));
        }
        let field = format!("{at}.queries.blocked[{i}].pattern");
        refuse(
            errors,
            field,
            b.pattern.as_deref().unwrap_or_default(),
            BLOCKED_NO_DOLLAR_MSG,
        );
    }
    for (list, refs) in l.otlp.iter().flat_map(otlp_lists) {
        for (i, r) in refs.iter().enumerate() {
            let field = format!("{at}.otlp.{list}[{i}].name");
            refuse(errors, field, &r.name, OTLP_NO_DOLLAR_MSG);
        }
    }
}

/// Every attribute list of an OTLP setting, with its path under `otlp`.
fn otlp_lists(o: &OtlpSpec) -> Vec<(&'static str, &[OtlpAttributeReference])> {
    let mut out = Vec::new();
    if let Some(s) = &o.stream_labels {
        out.push((
            "streamLabels.resourceAttributes",
            &s.resource_attributes[..],
        ));
    }
    if let Some(d) = &o.drop {
        out.push(("drop.resourceAttributes", &d.resource_attributes[..]));
        out.push(("drop.scopeAttributes", &d.scope_attributes[..]));
        out.push(("drop.logAttributes", &d.log_attributes[..]));
    }
    out
}

/// A resource attribute named as a stream label (of the block, or of every tenant for a
/// tenant's block) may not be dropped by name, as the Go Loki Operator checks: Loki
/// would drop the label. Regular expressions are not compared.
fn otlp_drops(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    let Some(limits) = &spec.limits else {
        return;
    };
    let labels = |o: Option<&OtlpSpec>| -> BTreeSet<String> {
        let refs = o.and_then(|o| o.stream_labels.as_ref());
        refs.into_iter()
            .flat_map(|s| s.resource_attributes.iter())
            .filter(|r| !r.is_regex())
            .map(|r| r.name.clone())
            .collect()
    };
    let global = limits.global.as_ref().and_then(|g| g.otlp.as_ref());
    let blocks = global.map(|g| ("spec.limits.global".to_string(), g, BTreeSet::new()));
    let tenants = limits.tenants.iter().filter_map(|(t, l)| {
        let own = l.otlp.as_ref()?;
        Some((format!("spec.limits.tenants.{t}"), own, labels(global)))
    });
    for (at, own, mut kept) in blocks.into_iter().chain(tenants) {
        kept.extend(labels(Some(own)));
        let drops = own.drop.iter().flat_map(|d| d.resource_attributes.iter());
        for (i, d) in drops.enumerate() {
            if !d.is_regex() && kept.contains(&d.name) {
                let field = format!("{at}.otlp.drop.resourceAttributes[{i}]");
                errors.push(err(
                    field,
                    format!("{:?}: {OTLP_DROP_STREAM_LABEL_MSG}", d.name),
                ));
            }
        }
    }
}

/// `spec.hashRing.memberlist`: IPv6 advertises the pod IP, so `default` contradicts it
/// (the CRD's CEL rule, again for servers without CEL).
fn hash_ring(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    let memberlist = spec.hash_ring.as_ref().and_then(|h| h.memberlist.as_ref());
    if memberlist
        .is_some_and(|m| m.ipv6() && m.instance_addr_type == Some(InstanceAddrType::Default))
    {
        errors.push(err(
            "spec.hashRing.memberlist.instanceAddrType",
            RULE_IPV6_ADDR_TYPE_MSG,
        ));
    }
}

/// What the API server would refuse in the Deployment or StatefulSet (naming its own
/// field, not the stack's): a weight outside 1..100, a topology key that is no label name.
fn anti_affinity(at: &str, a: &PodAntiAffinity, errors: &mut Vec<FieldError>) {
    let term = |field: String, t: &PodAffinityTerm, errors: &mut Vec<FieldError>| {
        if t.topology_key.len() > QUALIFIED_NAME_MAX_LEN || !is_qualified_name(&t.topology_key) {
            errors.push(err(
                format!("{field}.topologyKey"),
                format!(
                    "{:?} is not a valid label name ([prefix/]name, e.g. kubernetes.io/hostname)",
                    t.topology_key
                ),
            ));
        }
    };
    let required = a
        .required_during_scheduling_ignored_during_execution
        .iter()
        .flatten();
    for (i, t) in required.enumerate() {
        term(
            format!("{at}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            t,
            errors,
        );
    }
    let preferred = a
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten();
    for (i, w) in preferred.enumerate() {
        let field = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
        term(
            format!("{field}.podAffinityTerm"),
            &w.pod_affinity_term,
            errors,
        );
        if !(1..=100).contains(&w.weight) {
            errors.push(err(
                format!("{field}.weight"),
                format!("must be between 1 and 100, got {}", w.weight),
            ));
        }
    }
}

fn replication(spec: &LokiStackSpec, errors: &mut Vec<FieldError>) {
    if spec.replication.is_some() && spec.replication_factor.is_some() {
        errors.push(err(
            "spec.replicationFactor",
            RULE_REPLICATION_EXCLUSIVE_MSG,
        ));
    }
    let factors = [
        ("spec.replicationFactor", spec.replication_factor),
        (
            "spec.replication.factor",
            spec.replication.as_ref().and_then(|r| r.factor),
        ),
    ];
    let recover_after = spec
        .replication
        .as_ref()
        .and_then(|r| r.zone_outage.as_ref())
        .and_then(|z| z.recover_after.as_deref());
    match recover_after.map(crate::model::duration::parse_duration) {
        Some(Err(e)) => errors.push(err("spec.replication.zoneOutage.recoverAfter", e)),
        Some(Ok(d)) if d.as_secs() < RECOVER_AFTER_FLOOR_SECS => errors.push(err(
            "spec.replication.zoneOutage.recoverAfter",
            format!(
                "{} is shorter than {RECOVER_AFTER_FLOOR_SECS}s: a node NotReady for less is most often a restarting kubelet or a short partition that still runs its pods (Kubernetes itself waits 300 s before it evicts them); set 5m or more",
                recover_after.unwrap_or_default()
            ),
        )),
        _ => {}
    }
    let per_zone = spec
        .replication
        .as_ref()
        .and_then(|r| r.max_unavailable_per_zone);
    if let Some(m) = per_zone.filter(|m| !(1..=MAX_REPLICAS).contains(m)) {
        errors.push(err(
            "spec.replication.maxUnavailablePerZone",
            format!("must be between 1 and {MAX_REPLICAS}, got {m}"),
        ));
    }
    for (field, factor) in factors {
        if let Some(f) = factor.filter(|f| !(1..=MAX_REPLICATION_FACTOR).contains(f)) {
            errors.push(err(
                field,
                format!("must be between 1 and {MAX_REPLICATION_FACTOR}, got {f}"),
            ));
        }
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
        if !(1..=MAX_SKEW).contains(&z.max_skew) {
            errors.push(err(
                format!("{field}.maxSkew"),
                format!("must be between 1 and {MAX_SKEW}, got {}", z.max_skew),
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
    if spec.storage.tls.is_some() && spec.storage.secret.type_ != ObjectStorageSecretType::S3 {
        errors.push(err("spec.storage.tls", RULE_TLS_S3_MSG));
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
    use crate::model::api::{LokiStackSize, ReplicationSpec};
    use crate::testing::{stack_spec, ZONE};

    #[test]
    fn zone_aware_evictions_are_on_unless_switched_off() {
        let with = |v: &str| {
            let a = [(
                names::ANNOTATION_ZONE_AWARE_EVICTIONS.to_string(),
                v.to_string(),
            )]
            .into();
            zone_aware_evictions(Some(&a))
        };
        assert_eq!(zone_aware_evictions(None), Ok(true));
        assert_eq!(with("true"), Ok(true));
        assert_eq!(with("false"), Ok(false));
        let e = with("off").expect_err("not a boolean");
        assert!(e.contains("\"off\" is neither"), "{e}");
    }

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
        // A 64-character prefix label: the API server accepts it, so must we.
        assert!(is_qualified_name(&format!("{}.io/zone", "a".repeat(64))));
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
            zone_outage: None,
            max_unavailable_per_zone: None,
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
            zone_outage: None,
            max_unavailable_per_zone: Some(0),
        });
        let Err(InvalidSpec(errors)) = validate(&spec) else {
            panic!("expected errors")
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.replicationFactor",
                "spec.replication.maxUnavailablePerZone",
                "spec.replicationFactor",
                "spec.replication.factor",
                "spec.replication.zones",
                "spec.replication.zones[0].maxSkew",
                "spec.replication.zones[1].topologyKey",
                "spec.replication.zones[2].topologyKey",
            ]
        );
    }

    #[test]
    fn bounds_dates_and_copies_per_ingester() {
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.replication = Some(ReplicationSpec {
            factor: Some(2_000_000),
            zones: vec![ZoneSpec {
                topology_key: ZONE.into(),
                max_skew: 101,
            }],
            zone_outage: None,
            max_unavailable_per_zone: None,
        });
        spec.storage.schemas = vec![crate::model::api::ObjectStorageSchema {
            version: crate::model::api::ObjectStorageSchemaVersion::V13,
            effective_date: "2024-02-31".into(),
        }];
        spec.template = Some(crate::model::api::LokiTemplateSpec {
            querier: Some(crate::model::api::LokiComponentSpec {
                replicas: Some(1001),
                ..Default::default()
            }),
            ..Default::default()
        });
        let Err(InvalidSpec(errors)) = validate(&spec) else {
            panic!("expected errors")
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.replication.factor",
                "spec.replication.zones[0].maxSkew",
                "spec.storage.schemas[0].effectiveDate",
                "spec.template.querier.replicas",
            ]
        );

        // Within bounds, but more copies than ingesters.
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.replication = Some(ReplicationSpec {
            factor: Some(5),
            zones: vec![],
            zone_outage: None,
            max_unavailable_per_zone: None,
        });
        let e =
            validate_stack(&crate::testing::stack("s", spec)).expect_err("5 copies, 3 ingesters");
        assert!(
            e.to_string()
                .contains("needs at least 5 ingesters, the stack has 3"),
            "{e}"
        );
    }

    /// `recoverAfter` has a floor of 5 minutes, in the reconciler as in the CRD's
    /// pattern (which the admission table checks against the API server).
    #[test]
    fn recover_after_has_a_floor_of_five_minutes() {
        let with = |after: &str| {
            let mut spec =
                crate::testing::zoned_spec(LokiStackSize::Small, 2, &[crate::testing::ZONE]);
            spec.replication.as_mut().expect("zones").zone_outage =
                Some(crate::model::api::ZoneOutageSpec {
                    recover_after: Some(after.into()),
                });
            validate(&spec)
        };
        for short in ["0s", "299s", "4m", "0h"] {
            let e = with(short).expect_err(short);
            assert_eq!(e.0[0].field, "spec.replication.zoneOutage.recoverAfter");
            assert!(e.to_string().contains("5m or more"), "{e}");
        }
        for long in ["300s", "5m", "1h", "999999h", "15m"] {
            assert!(with(long).is_ok(), "{long}");
        }
    }

    /// Kubernetes admits any DNS subdomain as a LokiStack's name; its Services need a
    /// DNS-1035 label, so the others are refused before anything is applied.
    #[test]
    fn a_name_that_is_no_dns_label_is_refused() {
        for bad in ["1stack", "my.stack", "stack-", "Stack", "-s", "s_t"] {
            let e = validate_stack(&crate::testing::stack(bad, stack_spec(LokiStackSize::Demo)))
                .expect_err(bad);
            assert_eq!(e.0[0].field, "metadata.name", "{bad}");
            assert!(e.to_string().contains("DNS-1035"), "{e}");
        }
        for good in ["s", "a1", "my-stack", "x-1-y"] {
            let ok = crate::testing::stack(good, stack_spec(LokiStackSize::Demo));
            assert_eq!(validate_stack(&ok), Ok(()), "{good}");
        }
        assert_eq!(
            crate::model::api::RULE_NAME_DNS_LABEL,
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "the CRD's rule and is_dns_label say the same"
        );
    }

    #[test]
    fn the_longest_allowed_name_fits_every_child() {
        let name = "a".repeat(MAX_STACK_NAME_LEN);
        for c in Component::ALL {
            // The revision-hash label of a StatefulSet's pods: name, dash, up to 10.
            // (A Deployment's hash label is the hash alone.)
            if c.kind() == crate::model::defaults::WorkloadKind::StatefulSet {
                assert!(c.workload_name(&name).len() + 11 <= 63, "{c:?}");
            }
            assert!(c.http_service_name(&name).len() <= 63, "{c:?}");
            assert!(c.grpc_service_name(&name).len() <= 63, "{c:?}");
        }
        assert_eq!(
            crate::model::api::RULE_NAME_LENGTH,
            format!("self.metadata.name.size() <= {MAX_STACK_NAME_LEN}")
        );
        let ok = crate::testing::stack(&name, stack_spec(LokiStackSize::Demo));
        assert_eq!(validate_stack(&ok), Ok(()));
        let long = crate::testing::stack(&format!("{name}b"), stack_spec(LokiStackSize::Demo));
        let e = validate_stack(&long).expect_err("39 characters");
        assert_eq!(e.0[0].field, "metadata.name");
    }

    #[test]
    fn a_dollar_that_would_reach_lokis_config_is_refused_naming_the_field() {
        use crate::model::api::{
            LimitsSpec, LimitsTemplateSpec, RetentionLimitSpec, RetentionStreamSpec,
        };
        let limits = |selector: &str| LimitsTemplateSpec {
            retention: Some(RetentionLimitSpec {
                days: 7,
                streams: vec![RetentionStreamSpec {
                    days: 1,
                    priority: 0,
                    selector: selector.into(),
                }],
            }),
            ..Default::default()
        };
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.limits = Some(LimitsSpec {
            global: Some(limits("{a=\"${AWS_SECRET_ACCESS_KEY}\"}")),
            tenants: [
                ("team-$HOSTNAME".to_string(), limits("{a=\"b\"}")),
                ("team-b".to_string(), limits("{a=~\"x$\"}")),
            ]
            .into(),
        });
        let fields: Vec<String> = validate(&spec)
            .expect_err("refused")
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.limits.global.retention.streams[0].selector",
                "spec.limits.tenants",
                "spec.limits.tenants.team-b.retention.streams[0].selector",
            ]
        );
        spec.limits = Some(LimitsSpec {
            global: Some(limits("{a=\"b\"}")),
            tenants: [("team-a".to_string(), limits("{a=\"b\"}"))].into(),
        });
        assert_eq!(validate(&spec), Ok(()));
    }

    fn spec_with(v: serde_json::Value) -> LokiStackSpec {
        let mut base = serde_json::json!({
            "size": "1x.small",
            "storage": {"secret": {"name": "s3", "type": "s3"}},
        });
        if let (Some(b), Some(extra)) = (base.as_object_mut(), v.as_object()) {
            b.extend(extra.clone());
        }
        serde_json::from_value(base).expect("spec")
    }

    fn fields(spec: &LokiStackSpec) -> Vec<String> {
        match validate(spec) {
            Ok(()) => vec![],
            Err(InvalidSpec(e)) => e.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn a_dollar_in_blocked_queries_or_otlp_names_is_refused_naming_the_field() {
        let spec = spec_with(serde_json::json!({"limits": {
            "global": {
                "queries": {"blocked": [{"pattern": "ok"}, {"pattern": "{a=\"${AWS_SECRET_ACCESS_KEY}\"}"}]},
                "otlp": {"streamLabels": {"resourceAttributes": [{"name": "a$b"}]}},
            },
            "tenants": {"t": {"otlp": {"drop": {
                "resourceAttributes": [{"name": "ok"}],
                "scopeAttributes": [{"name": "x"}, {"name": "${HOME}", "regex": true}],
                "logAttributes": [{"name": "$PATH"}],
            }}}},
        }}));
        assert_eq!(
            fields(&spec),
            [
                "spec.limits.global.queries.blocked[1].pattern",
                "spec.limits.global.otlp.streamLabels.resourceAttributes[0].name",
                "spec.limits.tenants.t.otlp.drop.scopeAttributes[1].name",
                "spec.limits.tenants.t.otlp.drop.logAttributes[0].name",
            ]
        );
        let e = validate(&spec).expect_err("refused").to_string();
        assert!(
            e.contains(BLOCKED_NO_DOLLAR_MSG) && e.contains(OTLP_NO_DOLLAR_MSG),
            "{e}"
        );
    }

    #[test]
    fn a_stream_label_may_not_be_dropped_by_name() {
        let spec = spec_with(serde_json::json!({"limits": {
            "global": {"otlp": {
                "streamLabels": {"resourceAttributes": [{"name": "k8s.namespace.name"}, {"name": "k8s\\..+", "regex": true}]},
                "drop": {"resourceAttributes": [{"name": "k8s.pod.uid"}, {"name": "k8s.namespace.name"}]},
            }},
            "tenants": {
                "a": {"otlp": {
                    "streamLabels": {"resourceAttributes": [{"name": "service.name"}]},
                    "drop": {"resourceAttributes": [{"name": "service.name"}, {"name": "k8s.namespace.name"}, {"name": "k8s.namespace.name", "regex": true}]},
                }},
                "b": {"otlp": {"drop": {"logAttributes": [{"name": "k8s.namespace.name"}]}}},
            },
        }}));
        assert_eq!(
            fields(&spec),
            [
                "spec.limits.global.otlp.drop.resourceAttributes[1]",
                "spec.limits.tenants.a.otlp.drop.resourceAttributes[0]",
                "spec.limits.tenants.a.otlp.drop.resourceAttributes[1]",
            ],
            "a regular expression, or a log attribute, is not compared"
        );
    }

    #[test]
    fn ipv6_contradicts_the_default_address_and_anti_affinity_is_checked() {
        let ring = |m: serde_json::Value| {
            spec_with(serde_json::json!({"hashRing": {"type": "memberlist", "memberlist": m}}))
        };
        assert_eq!(
            fields(&ring(
                serde_json::json!({"enableIPv6": true, "instanceAddrType": "default"})
            )),
            ["spec.hashRing.memberlist.instanceAddrType"]
        );
        for ok in [
            serde_json::json!({"enableIPv6": true}),
            serde_json::json!({"enableIPv6": true, "instanceAddrType": "podIP"}),
            serde_json::json!({"enableIPv6": false, "instanceAddrType": "default"}),
        ] {
            assert_eq!(fields(&ring(ok.clone())), Vec::<String>::new(), "{ok}");
        }
        let term = |key: &str| serde_json::json!({"topologyKey": key});
        let spec = spec_with(
            serde_json::json!({"template": {"ruler": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term("kubernetes.io/hostname"), term("")],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "podAffinityTerm": term("kubernetes.io/hostname")},
                    {"weight": 100, "podAffinityTerm": term("not a key")},
                ],
            }}}}),
        );
        let at = "spec.template.ruler.podAntiAffinity";
        assert_eq!(
            fields(&spec),
            [
                format!("{at}.requiredDuringSchedulingIgnoredDuringExecution[1].topologyKey"),
                format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
                format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[1].podAffinityTerm.topologyKey"),
            ]
        );
    }
}
