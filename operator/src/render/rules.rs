//! The ruler's inputs: rule files (one ConfigMap per tenant, more when they outgrow one),
//! the volumes that lay them out as `<RULES_DIR>/<tenant>/<file>` in the ruler pods, and
//! the RulerConfig's settings (`ruler/settings.rs`) as YAML in Loki's `ruler` block.
//!
//! The ruler re-reads its rule directory every `poll_interval` and the kubelet updates a
//! mounted ConfigMap in place, so a rule added, changed or removed reaches the ruler
//! without a restart. Only a tenant's first or last rule changes the pod template (a
//! volume per tenant, so that rules of one tenant never move between volumes).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::model::defaults::{Component, EffectiveStack, RuleFile};
use crate::ruler::names;

/// The most a rules ConfigMap holds: under the API server's 1 MiB object limit, with room
/// for metadata (the Go Loki Operator's figure).
pub const MAX_CONFIG_MAP_DATA: usize = 1024 * 1024 - 50_000;

/// One rules ConfigMap: its name, tenant and files.
#[derive(Clone, Debug, PartialEq)]
pub struct RulesConfigMap {
    pub name: String,
    pub tenant: String,
    pub files: BTreeMap<String, String>,
}

/// A rule file's YAML: the object's groups, each rule labelled with its tenant (so an
/// alert says which tenant's logs raised it), in Loki's rule file format.
pub fn rule_file_yaml(file: &RuleFile) -> Result<String, serde_yaml_ng::Error> {
    let mut groups = file.groups.clone();
    for group in groups.as_array_mut().into_iter().flatten() {
        for rule in group
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(r) = rule.as_object_mut() {
                let labels = r.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert(names::RULE_TENANT_LABEL.into(), file.tenant.clone().into());
                }
            }
        }
    }
    serde_yaml_ng::to_string(&json!({ "groups": groups }))
}

/// The rules ConfigMaps of a stack, by tenant then shard, in name order.
pub fn config_maps(
    stack: &str,
    files: &[RuleFile],
) -> Result<Vec<RulesConfigMap>, serde_yaml_ng::Error> {
    let mut by_tenant: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
    for f in files {
        by_tenant
            .entry(&f.tenant)
            .or_default()
            .insert(&f.key, rule_file_yaml(f)?);
    }
    let mut out = Vec::new();
    for (tenant, files) in by_tenant {
        let mut shard = RulesConfigMap {
            name: names::rules_config_map_name(stack, tenant, 0),
            tenant: tenant.to_string(),
            files: BTreeMap::new(),
        };
        let mut size = 0;
        for (key, text) in files {
            let len = key.len() + text.len();
            if size + len > MAX_CONFIG_MAP_DATA && !shard.files.is_empty() {
                let next = names::rules_config_map_name(stack, tenant, out.len() + 1);
                out.push(std::mem::replace(
                    &mut shard,
                    RulesConfigMap {
                        name: next,
                        tenant: tenant.to_string(),
                        files: BTreeMap::new(),
                    },
                ));
                size = 0;
            }
            size += len;
            shard.files.insert(key.to_string(), text);
        }
        out.push(shard);
    }
    // Shard numbers count per tenant.
    let mut per_tenant: BTreeMap<String, usize> = BTreeMap::new();
    for cm in &mut out {
        let n = per_tenant.entry(cm.tenant.clone()).or_default();
        cm.name = names::rules_config_map_name(stack, &cm.tenant, *n);
        *n += 1;
    }
    Ok(out)
}

/// The ruler pods' rule volumes: per tenant, its ConfigMaps projected at
/// `<RULES_DIR>/<tenant>`.
pub fn volumes(maps: &[RulesConfigMap]) -> Value {
    let mut by_tenant: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for cm in maps {
        by_tenant.entry(&cm.tenant).or_default().push(&cm.name);
    }
    by_tenant
        .into_iter()
        .map(|(tenant, maps)| {
            json!({
                "name": names::rules_volume_name(tenant),
                "mount_path": format!("{}/{tenant}", names::RULES_DIR),
                "config_maps": maps,
            })
        })
        .collect()
}

/// The RulerConfig's settings as YAML lines indented into the `ruler` block; empty
/// when it has none.
pub fn ruler_settings_yaml(eff: &EffectiveStack) -> Result<String, serde_yaml_ng::Error> {
    if eff.ruler.settings.is_empty() {
        return Ok(String::new());
    }
    let text = serde_yaml_ng::to_string(&Value::Object(eff.ruler.settings.clone()))?;
    Ok(text
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Whether the ruler reads rule files from the pod (`local`) or its rules live in the
/// object store (written through Loki's rules API).
pub fn local_rules(eff: &EffectiveStack) -> bool {
    eff.component(Component::Ruler).is_some() && eff.ruler.files.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{LokiStack, LokiStackSize};
    use crate::model::defaults::effective;
    use crate::render::{documents, parse, render, Child, RenderInput, Settings};
    use crate::testing::{stack, zoned_spec, ZONE};
    use k8s_openapi::api::apps::v1::StatefulSet;

    fn file(name: &str, tenant: &str, expr: &str) -> RuleFile {
        RuleFile {
            key: format!("ns-{name}-uid.yaml"),
            tenant: tenant.into(),
            groups: json!([{"name": "g", "interval": "1m", "rules": [
                {"alert": "A", "expr": expr, "for": "5m", "labels": {"severity": "page"},
                 "annotations": {"summary": "{{ $labels.app }} logs errors"}}]}]),
        }
    }

    fn ruled(files: Vec<RuleFile>) -> (LokiStack, EffectiveStack) {
        let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
        spec.rules =
            Some(serde_json::from_value(json!({"enabled": true, "selector": {}})).expect("rules"));
        let s = stack("s", spec);
        let mut eff = effective(&s.spec);
        eff.ruler = crate::ruler::settings::input(
            Some(files),
            Some(&crate::ruler::settings::full_ruler_config()),
        );
        (s, eff)
    }

    fn ruler(children: &[Child]) -> StatefulSet {
        children
            .iter()
            .find_map(|c| match c {
                Child::StatefulSet(s) if c.name() == "s-ruler" => Some(s.clone()),
                _ => None,
            })
            .expect("ruler")
    }

    fn children(s: &LokiStack, eff: &EffectiveStack) -> Vec<Child> {
        render(&RenderInput::new(s, eff.clone()), &Settings::default()).expect("render")
    }

    #[test]
    fn rule_files_are_laid_out_per_tenant_for_the_ruler() {
        let expr = r#"sum(rate({app="a"} |= "error" [5m])) > 1"#;
        let (s, eff) = ruled(vec![
            file("a", "application", expr),
            file("b", "application", expr),
            file("c", "Team(A)", expr),
        ]);
        let docs =
            documents(&RenderInput::new(&s, eff.clone()), &Settings::default()).expect("documents");
        for doc in &docs {
            let raw: Value = serde_yaml_ng::from_str(&doc.text).expect("yaml");
            assert_eq!(
                raw,
                parse(doc).expect("parses").to_json().expect("json"),
                "{}",
                doc.template
            );
        }
        let all = children(&s, &eff);
        let maps: Vec<_> = all
            .iter()
            .filter_map(|c| match c {
                Child::ConfigMap(cm) if c.name().starts_with("s-rules-") => Some(cm.clone()),
                _ => None,
            })
            .collect();
        let names: Vec<_> = maps
            .iter()
            .map(|m| m.metadata.name.clone().unwrap_or_default())
            .collect();
        // By tenant: "Team(A)" (hashed into the name) sorts before "application".
        assert_eq!(names[1], "s-rules-application-0");
        assert!(
            names[0].starts_with("s-rules-h") && names[0].ends_with("-0"),
            "{names:?}"
        );
        let data = maps[1].data.as_ref().expect("data");
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ns-a-uid.yaml", "ns-b-uid.yaml"]
        );
        let parsed: Value = serde_yaml_ng::from_str(&data["ns-a-uid.yaml"]).expect("rule file");
        let rule = &parsed["groups"][0]["rules"][0];
        assert_eq!(rule["labels"]["tenantId"], "application");
        assert_eq!(rule["expr"], expr);
        assert_eq!(
            rule["annotations"]["summary"], "{{ $labels.app }} logs errors",
            "rule files are not expanded: $ stays"
        );
        assert_eq!(
            maps[0]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(names::ANNOTATION_RULES_TENANT))
                .map(String::as_str),
            Some("Team(A)")
        );

        let pod = ruler(&all).spec.expect("spec").template.spec.expect("pod");
        let mounts: Vec<_> = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        for want in [
            "/tmp/rules/application",
            "/tmp/rules/Team(A)",
            names::REMOTE_WRITE_SECRET_DIR,
        ] {
            assert!(mounts.contains(&want), "{want} not in {mounts:?}");
        }
        let volumes = pod.volumes.expect("volumes");
        let app = volumes
            .iter()
            .find(|v| v.name == names::rules_volume_name("application"))
            .and_then(|v| v.projected.as_ref())
            .expect("projected rules volume");
        assert_eq!(app.sources.as_ref().map(Vec::len), Some(1));
        assert!(volumes
            .iter()
            .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("rw")));
        // Other components get neither.
        let querier = all
            .iter()
            .find_map(|c| match c {
                Child::Deployment(d) if c.name() == "s-querier" => d.spec.clone(),
                _ => None,
            })
            .expect("querier");
        let qv = querier
            .template
            .spec
            .expect("pod")
            .volumes
            .unwrap_or_default();
        assert!(!qv
            .iter()
            .any(|v| v.projected.is_some() || v.name == names::VOLUME_REMOTE_WRITE_SECRET));
    }

    /// The ruler polls its rule directory: a rule added, changed or removed for a tenant
    /// that has rules already changes a ConfigMap only, never the ruler's pods.
    #[test]
    fn rule_changes_of_a_known_tenant_restart_nothing() {
        let expr = r#"count_over_time({a="b"}[1m]) > 0"#;
        let (s, before) = ruled(vec![file("a", "application", expr)]);
        let (_, after) = ruled(vec![
            file("a", "application", &expr.replace("> 0", "> 5")),
            file("b", "application", expr),
        ]);
        let t = |eff: &EffectiveStack| ruler(&children(&s, eff)).spec.expect("spec").template;
        assert_eq!(t(&before), t(&after));
        let (_, new_tenant) = ruled(vec![
            file("a", "application", expr),
            file("c", "audit", expr),
        ]);
        assert_ne!(t(&before), t(&new_tenant), "a new tenant is a new volume");
    }

    #[test]
    fn a_tenant_whose_rules_outgrow_a_config_map_gets_shards_in_one_volume() {
        let big = format!("sum(rate({{a=\"{}\"}}[5m])) > 1", "x".repeat(400_000));
        let files: Vec<RuleFile> = (0..4)
            .map(|i| file(&format!("r{i}"), "application", &big))
            .collect();
        let maps = config_maps("s", &files).expect("maps");
        let names: Vec<&str> = maps.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["s-rules-application-0", "s-rules-application-1"]);
        assert!(maps.iter().all(|m| m
            .files
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            <= MAX_CONFIG_MAP_DATA));
        assert_eq!(maps.iter().map(|m| m.files.len()).sum::<usize>(), 4);
        assert_eq!(
            volumes(&maps)[0]["config_maps"],
            json!(["s-rules-application-0", "s-rules-application-1"])
        );
    }

    #[test]
    fn without_a_selector_the_ruler_keeps_rules_in_the_object_store() {
        let (s, mut eff) = ruled(vec![]);
        eff.ruler.files = None;
        let config =
            crate::render::loki_config(&RenderInput::new(&s, eff.clone())).expect("config");
        assert!(!config.contains("backend: local"), "{config}");
        assert!(!children(&s, &eff)
            .iter()
            .any(|c| c.name().starts_with("s-rules-")));
    }
}
