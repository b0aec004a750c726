//! The ruler's names: its kinds and CRDs, where rule files and remote-write
//! credentials go in the ruler pods, and the names of the rules ConfigMaps and volumes.

/// The ruler's kinds (`ruler/api.rs`) and their CRDs.
pub const KIND_ALERTING_RULE: &str = "AlertingRule";
pub const KIND_RECORDING_RULE: &str = "RecordingRule";
pub const KIND_RULER_CONFIG: &str = "RulerConfig";
pub const CRD_ALERTING_RULES: &str = "alertingrules.loki.grafana.com";
pub const CRD_RECORDING_RULES: &str = "recordingrules.loki.grafana.com";
pub const CRD_RULER_CONFIGS: &str = "rulerconfigs.loki.grafana.com";

/// Where the ruler reads the rule files of AlertingRules and RecordingRules: one
/// directory per tenant (the Go Loki Operator's layout, which Loki's local rule store
/// reads as `<dir>/<tenant>/<file>`).
pub const RULES_DIR: &str = "/tmp/rules";
/// The label every rule a rule file carries, naming its tenant (as the Go operator adds).
pub const RULE_TENANT_LABEL: &str = "tenantId";
/// On a rules ConfigMap, the tenant whose directory it fills.
pub const ANNOTATION_RULES_TENANT: &str = "loki.grafana.com/rules-tenant";
/// Where the remote-write credentials of a RulerConfig are mounted in the ruler pods.
pub const REMOTE_WRITE_SECRET_DIR: &str = "/etc/loki/ruler/remote-write";
pub const VOLUME_REMOTE_WRITE_SECRET: &str = "ruler-remote-write";
/// A Secret's consent to being a RulerConfig's remote-write credentials (value `"true"`).
/// The RulerConfig names the Secret and chooses the URL the ruler sends it to: without
/// the consent, whoever may edit a RulerConfig would read every Secret of the namespace
/// without the right to `get` one. Whoever may write the Secret gives it.
pub const ANNOTATION_REMOTE_WRITE_SECRET: &str = "loki.grafana.com/ruler-remote-write";
/// The ConfigMaps with one tenant's rule files: `<stack>-rules-<tenant>-<shard>` when
/// the tenant is a short DNS label, else a hash of it (a tenant ID may hold characters a
/// name may not). A hashed key starts with `h` and has 16 hex digits; a tenant of that
/// very form is hashed too, so no two tenants share a name.
pub fn rules_config_map_name(stack: &str, tenant: &str, shard: usize) -> String {
    format!("{stack}-rules-{}-{shard}", tenant_key(tenant))
}

/// The most a ConfigMap key may have (Kubernetes' limit on a data key).
pub const CONFIG_MAP_KEY_MAX: usize = 253;

/// The key of a rule object's file in its tenant's ConfigMap: the Go Loki Operator's
/// `<namespace>-<name>-<uid>.yaml`, with the name cut short when the key would exceed
/// [`CONFIG_MAP_KEY_MAX`] (a name of about 150 characters or more, with the longest
/// namespace). The uid keeps keys unique, and namespaces, names and uids hold only
/// characters a key may.
pub fn rule_file_key(namespace: &str, name: &str, uid: &str) -> String {
    const SUFFIX: &str = ".yaml";
    let fixed = namespace.len() + uid.len() + 2 + SUFFIX.len();
    let room = CONFIG_MAP_KEY_MAX.saturating_sub(fixed);
    let name = name.get(..room.min(name.len())).unwrap_or(name);
    format!("{namespace}-{name}-{uid}{SUFFIX}")
}

/// The volume of one tenant's rule files in the ruler pods (a DNS label).
pub fn rules_volume_name(tenant: &str) -> String {
    format!("rules-{}", tenant_hash(tenant))
}

fn tenant_hash(tenant: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(tenant.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn tenant_key(tenant: &str) -> String {
    let dns_label = !tenant.is_empty()
        && tenant.len() <= 30
        && tenant
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !tenant.starts_with('-')
        && !tenant.ends_with('-');
    let looks_hashed = tenant.len() == 17
        && tenant.starts_with('h')
        && tenant[1..].chars().all(|c| c.is_ascii_hexdigit());
    if dns_label && !looks_hashed {
        tenant.to_string()
    } else {
        format!("h{}", tenant_hash(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_file_key_is_never_longer_than_a_key_may_be() {
        let uid = "0b7f3a52-5c1e-4d55-9f0e-1d2c3b4a5e6f";
        assert_eq!(rule_file_key("ns", "r", uid), format!("ns-r-{uid}.yaml"));
        let (ns, name) = ("n".repeat(63), "r".repeat(253));
        let key = rule_file_key(&ns, &name, uid);
        assert_eq!(key.len(), CONFIG_MAP_KEY_MAX);
        assert!(key.starts_with(&format!("{ns}-rrr")) && key.ends_with(&format!("r-{uid}.yaml")));
        // Two long names of one prefix stay apart by their uids.
        assert_ne!(key, rule_file_key(&ns, &name, "another-uid"));
    }

    #[test]
    fn rules_config_maps_are_named_by_tenant_or_by_its_hash() {
        assert_eq!(
            rules_config_map_name("s", "application", 0),
            "s-rules-application-0"
        );
        let odd = rules_config_map_name("s", "Team(A)", 1);
        assert!(odd.starts_with("s-rules-h") && odd.ends_with("-1"), "{odd}");
        assert_eq!(odd.len(), "s-rules-h".len() + 16 + 2);
        // A tenant that looks like a hashed key is hashed too, so it cannot take the
        // name of another tenant's hash.
        let hashed_form = &odd["s-rules-".len()..odd.len() - 2];
        assert_ne!(
            rules_config_map_name("s", hashed_form, 1),
            odd,
            "{hashed_form}"
        );
        assert_ne!(rules_volume_name("a"), rules_volume_name("b"));
        assert!(rules_volume_name("Team(A)").len() <= 63);
    }
}
