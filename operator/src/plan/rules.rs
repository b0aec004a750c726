//! What the ruler of a stack is given: the rule files of the rules it picks that are
//! valid, and its RulerConfig; and what the stack's status says about the rest.
//!
//! A rule found wrong is left out, alone: the others of its tenant still load (Loki
//! refuses a tenant's whole rule set when one file does not parse). A RulerConfig found
//! wrong, or a remote-write Secret that is missing or lacks a key, holds the stack back
//! instead: rendered without them, the ruler would stop sending alerts or series it
//! sends now.

use std::sync::Arc;

use crate::caches::rule_bodies::Judge;
use crate::caches::rules::RuleKind;
use crate::intent::RuleFindings;
use crate::model::api::{LokiStack, RulesSpec};
use crate::model::conditions::Reason;
use crate::model::defaults::{RuleFile, RulerInput};
use crate::observe::{PickedRule, PickedSpec, Snapshot, Unloadable};
use crate::render::rules;
use crate::ruler::api::RulerConfigSpec;
use crate::ruler::check::{
    check_alerting_rule, check_recording_rule, check_ruler_config, tenant_refusal,
};
use crate::ruler::names as rulernames;
use crate::ruler::settings;

/// The file and the errors of one picked rule.
pub fn check(rule: &PickedRule) -> Result<RuleFile, Vec<String>> {
    let spec = rule.spec.as_ref().map_err(|e| match e {
        Unloadable::Decode(e) => vec![format!("the stored object cannot be read: {e}")],
        Unloadable::Refused(reasons) => reasons.to_vec(),
    })?;
    let (errors, tenant, groups) = match spec {
        PickedSpec::Alerting(s) => (
            check_alerting_rule(s),
            &s.tenant_id,
            serde_json::to_value(&s.groups),
        ),
        PickedSpec::Recording(s) => (
            check_recording_rule(s),
            &s.tenant_id,
            serde_json::to_value(&s.groups),
        ),
    };
    if !errors.is_empty() {
        return Err(errors.iter().map(ToString::to_string).collect());
    }
    let groups = groups.map_err(|e| vec![e.to_string()])?;
    let file = RuleFile {
        key: rulernames::rule_file_key(&rule.namespace, &rule.name, &rule.uid),
        tenant: tenant.clone(),
        groups,
    };
    // A file too large for any ConfigMap would make its shard one the server refuses.
    let size = file.key.len()
        + rules::rule_file_yaml(&file)
            .map_err(|e| vec![e.to_string()])?
            .len();
    if size > rules::MAX_CONFIG_MAP_DATA {
        return Err(vec![format!(
            "its rule file is {size} bytes, more than the {} bytes a ConfigMap holds: split its groups over several {}s",
            rules::MAX_CONFIG_MAP_DATA,
            rule.kind.kind()
        )]);
    }
    Ok(file)
}

/// How the bodies' cache judges an AlertingRule or RecordingRule as it arrives
/// (`rule_bodies::Judge`): by [`check`], so what it refuses is what every plan would, and
/// it keeps only the reasons of those. A RulerConfig (one per stack) is kept whole.
pub fn judge() -> Judge {
    Arc::new(|kind, body| match kind {
        RuleKind::RulerConfig => Ok(()),
        _ => check(&PickedRule::from_object(kind, body)).map(|_| ()),
    })
}

pub fn plan(stack: &LokiStack, snapshot: &Snapshot) -> (RulerInput, RuleFindings) {
    let mut findings = RuleFindings::default();
    let Some(spec) = stack.spec.rules.as_ref().filter(|r| r.enabled) else {
        return (RulerInput::default(), findings);
    };
    // An object picked but not read yet is not gone: rendered without it, its rules or
    // the ruler's settings would be removed until it is read. Hold everything instead;
    // its arrival runs the stack again.
    if !snapshot.rules.pending.is_empty() {
        let names: Vec<String> = snapshot.rules.pending.iter().map(|p| p.label()).collect();
        findings.hold = Some((
            Reason::RulesNotRead,
            format!(
                "{} picked by the stack could not be read yet; the ruler keeps its current rules and settings until they are (the operator's log says why a read failed)",
                names.join(", ")
            ),
        ));
        return (RulerInput::default(), findings);
    }
    let files = spec
        .selector
        .is_some()
        .then(|| rule_files(spec, snapshot, &mut findings));
    let config = ruler_config(snapshot, &mut findings);
    if let Some(hold) = config
        .as_ref()
        .and_then(|c| remote_write_secret(c, snapshot))
    {
        findings.hold.get_or_insert(hold);
    }
    (settings::input(files, config.as_ref()), findings)
}

/// The files of the picked rules that are valid; the others, and the rule kinds the
/// server does not serve, go into the findings.
fn rule_files(spec: &RulesSpec, snapshot: &Snapshot, findings: &mut RuleFindings) -> Vec<RuleFile> {
    let observed = &snapshot.rules;
    for kind in observed
        .unserved
        .iter()
        .filter(|k| **k != RuleKind::RulerConfig)
    {
        findings.notes.push(format!(
            "the {} CRD is not installed, so no {} is loaded; install it (make deploy) and restart the operator",
            kind.crd_name(),
            kind.kind()
        ));
    }
    observed
        .picked
        .iter()
        .filter_map(|rule| match check(rule) {
            Ok(file) => {
                match tenant_refusal(spec, &snapshot.namespace, &rule.namespace, &file.tenant) {
                    None => Some(file),
                    Some(why) => {
                        findings
                            .not_loaded
                            .push(format!("{} ({why})", rule.label()));
                        None
                    }
                }
            }
            Err(errors) => {
                findings
                    .not_loaded
                    .push(format!("{} ({})", rule.label(), errors.join("; ")));
                None
            }
        })
        .collect()
}

/// The stack's RulerConfig, if it has one; one that is wrong holds the stack back.
fn ruler_config(snapshot: &Snapshot, findings: &mut RuleFindings) -> Option<RulerConfigSpec> {
    let why = match snapshot.rules.ruler_config.as_ref()? {
        Err(e) => format!("cannot be read: {e}. Fix it"),
        Ok(c) => {
            let errors: Vec<String> = check_ruler_config(c)
                .iter()
                .map(ToString::to_string)
                .collect();
            if errors.is_empty() {
                return Some(c.clone());
            }
            format!(
                "is invalid: {}. Fix it; until then the ruler keeps its current settings",
                errors.join("; ")
            )
        }
    };
    findings.hold = Some((
        Reason::InvalidRulerConfig,
        format!("the RulerConfig {} {why}", snapshot.name),
    ));
    None
}

/// Why the remote-write Secret a RulerConfig names holds the stack back, if it does:
/// missing, not consenting to be sent away, or without a key its authorization needs.
fn remote_write_secret(config: &RulerConfigSpec, snapshot: &Snapshot) -> Option<(Reason, String)> {
    let client = config.remote_write.as_ref()?.client.as_ref()?;
    let name = &client.authorization_secret_name;
    let needed = client.authorization_type.secret_keys();
    let Some(secret) = &snapshot.rules.remote_write_secret else {
        return Some((
            Reason::MissingRulerSecret,
            format!(
                "the remote-write Secret {name:?} (RulerConfig spec.remoteWrite.client.authorizationSecretName) does not exist in namespace {}. Create it with the keys {} and the annotation {}=true",
                snapshot.namespace,
                needed.join(" and "),
                rulernames::ANNOTATION_REMOTE_WRITE_SECRET,
            ),
        ));
    };
    if !secret.opted_in {
        return Some((
            Reason::InvalidRulerSecret,
            format!(
                "the remote-write Secret {name:?} is not marked for remote write, so the ruler does not send it to {}: if it is meant for that, annotate it (kubectl -n {} annotate secret {name} {}=true)",
                config
                    .remote_write
                    .as_ref()
                    .and_then(|rw| rw.client.as_ref())
                    .map_or("", |c| c.url.as_str()),
                snapshot.namespace,
                rulernames::ANNOTATION_REMOTE_WRITE_SECRET,
            ),
        ));
    }
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|k| !secret.keys.contains(*k))
        .collect();
    (!missing.is_empty()).then(|| {
        (
            Reason::InvalidRulerSecret,
            format!(
                "the remote-write Secret {name:?} lacks the non-empty keys {} that authorization {:?} needs",
                missing.join(", "),
                client.authorization_type.as_str()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{LokiStackSize, RuleTenantGrant};
    use crate::observe::{PendingRule, RulerSecretSeen, RulesObserved};
    use crate::testing::{stack, stack_spec};
    use serde_json::json;

    fn picked(name: &str, spec: serde_json::Value) -> PickedRule {
        PickedRule {
            kind: RuleKind::AlertingRule,
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            spec: Ok(PickedSpec::Alerting(
                serde_json::from_value(spec).expect("spec"),
            )),
        }
    }

    fn object(expr: &str) -> kube::api::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "loki.grafana.com/v1", "kind": "AlertingRule",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
            "spec": {"tenantID": "t", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]},
        }))
        .expect("object")
    }

    /// The cache's judge refuses exactly what `check` refuses, with its reasons, and a
    /// rule held as those reasons is refused by the plan with the same ones.
    #[test]
    fn the_judge_is_check_and_a_refused_rule_keeps_its_reasons() {
        let kind = RuleKind::AlertingRule;
        let good = object(r#"sum(rate({a="b"}[5m])) > 1"#);
        assert_eq!(judge()(kind, &good), Ok(()));
        let bad = object(r#"sum(nope({a="b"}[5m])) > 1"#);
        let reasons = judge()(kind, &bad).expect_err("refused");
        assert_eq!(
            check(&PickedRule::from_object(kind, &bad)).expect_err("refused"),
            reasons
        );
        let held = crate::caches::rule_bodies::Loaded {
            body: std::sync::Arc::new(object("")),
            refused: Some(std::sync::Arc::new(reasons.clone())),
        };
        let rule = PickedRule::from_loaded(kind, &held);
        assert_eq!((rule.name.as_str(), rule.uid.as_str()), ("r", "u"));
        assert_eq!(check(&rule).expect_err("refused"), reasons);
    }

    fn ruled_stack(selector: bool) -> LokiStack {
        let mut spec = stack_spec(LokiStackSize::Demo);
        spec.rules = Some(
            serde_json::from_value(if selector {
                json!({"enabled": true, "selector": {}})
            } else {
                json!({"enabled": true})
            })
            .expect("rules"),
        );
        stack("s", spec)
    }

    #[test]
    fn valid_rules_become_files_and_an_invalid_one_is_named_and_left_out() {
        let s = ruled_stack(true);
        let snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            rules: RulesObserved {
                picked: vec![
                    picked(
                        "good",
                        json!({"tenantID": "application", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate({a=\"b\"}[5m])) > 1"}]}]}),
                    ),
                    picked(
                        "bad",
                        json!({"tenantID": "application", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "{a=\"b\"}"}]}]}),
                    ),
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let (input, findings) = plan(&s, &snap);
        let files = input.files.expect("files");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].key, "ns-good-uid-good.yaml");
        assert_eq!(files[0].tenant, "application");
        assert_eq!(findings.not_loaded.len(), 1);
        assert!(findings.not_loaded[0].starts_with("AlertingRule ns/bad (spec.groups[0].rules[0].expr: at column 1: this is a log query"), "{:?}", findings.not_loaded);
        assert!(findings.hold.is_none());
    }

    /// A rule of a name near the longest a name may be, and a rule whose file no
    /// ConfigMap can hold: the first loads (its key cut to fit), the second is named and
    /// left out, and neither reaches a ConfigMap the server would refuse.
    #[test]
    fn a_long_name_loads_and_an_oversized_rule_is_left_out() {
        let s = ruled_stack(true);
        let long_name = "r".repeat(240);
        let big = "x".repeat(rules::MAX_CONFIG_MAP_DATA);
        let snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            rules: RulesObserved {
                picked: vec![
                    picked(
                        &long_name,
                        json!({"tenantID": "application", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate({a=\"b\"}[5m])) > 1"}]}]}),
                    ),
                    picked(
                        "huge",
                        json!({"tenantID": "application", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate({a=\"b\"}[5m])) > 1", "annotations": {"runbook": big}}]}]}),
                    ),
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let (input, findings) = plan(&s, &snap);
        let files = input.files.expect("files");
        assert_eq!(files.len(), 1);
        assert!(
            files[0].key.len() <= rulernames::CONFIG_MAP_KEY_MAX,
            "{}",
            files[0].key.len()
        );
        let maps = rules::config_maps("s", &files).expect("maps");
        assert!(maps.iter().all(|m| m
            .files
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            <= rules::MAX_CONFIG_MAP_DATA));
        assert_eq!(findings.not_loaded.len(), 1, "{:?}", findings.not_loaded);
        assert!(
            findings.not_loaded[0].starts_with("AlertingRule ns/huge (its rule file is ")
                && findings.not_loaded[0].contains(&format!(
                    "more than the {} bytes",
                    rules::MAX_CONFIG_MAP_DATA
                ))
                && findings.not_loaded[0].contains("split its groups over several AlertingRules"),
            "{:?}",
            findings.not_loaded
        );
    }

    /// A rule's tenant is its own field: picking a namespace does not let its rules read
    /// every tenant's logs. Only the stack's namespace, and the grants of
    /// `allowedTenants`, decide.
    #[test]
    fn a_rule_of_another_namespace_loads_only_for_a_tenant_granted_to_it() {
        let mut s = ruled_stack(true);
        let in_ns = |ns: &str, name: &str, tenant: &str| PickedRule {
            namespace: ns.into(),
            ..picked(
                name,
                json!({"tenantID": tenant, "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate({a=\"b\"}[5m])) > 1"}]}]}),
            )
        };
        let snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            rules: RulesObserved {
                picked: vec![
                    in_ns("ns", "own", "billing"),
                    in_ns("team-a", "mine", "team-a"),
                    in_ns("team-a", "theirs", "billing"),
                ],
                ..Default::default()
            },
            ..Default::default()
        };
        let loaded = |s: &LokiStack| {
            let (input, findings) = plan(s, &snap);
            let keys: Vec<String> = input
                .files
                .unwrap_or_default()
                .into_iter()
                .map(|f| f.key)
                .collect();
            (keys, findings.not_loaded)
        };
        let (keys, refused) = loaded(&s);
        assert_eq!(keys, ["ns-own-uid-own.yaml"]);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused[0].starts_with("AlertingRule team-a/mine (tenant \"team-a\" is not granted to the rules of namespace \"team-a\"")
                && refused[0].contains("spec.rules.allowedTenants (namespaces: [team-a], tenants: [team-a])"),
            "{refused:?}"
        );
        if let Some(rules) = s.spec.rules.as_mut() {
            rules.allowed_tenants = vec![RuleTenantGrant {
                namespaces: vec!["team-a".into()],
                tenants: vec!["team-a".into()],
            }];
        }
        let (keys, refused) = loaded(&s);
        assert_eq!(keys, ["ns-own-uid-own.yaml", "team-a-mine-uid-mine.yaml"]);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with("AlertingRule team-a/theirs (tenant \"billing\""),
            "{refused:?}"
        );
    }

    /// A picked rule or RulerConfig whose body was not read in time is not taken for
    /// deleted: the stack is held back whole, so the rules ConfigMaps and the ruler's
    /// settings stay as they are.
    #[test]
    fn a_picked_object_not_read_yet_holds_the_stack_back() {
        let s = ruled_stack(true);
        let snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            rules: RulesObserved {
                picked: vec![picked(
                    "read",
                    json!({"tenantID": "application", "groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate({a=\"b\"}[5m])) > 1"}]}]}),
                )],
                pending: vec![PendingRule {
                    kind: RuleKind::RulerConfig,
                    namespace: "ns".into(),
                    name: "s".into(),
                    uid: "u".into(),
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        let (_, findings) = plan(&s, &snap);
        let (reason, message) = findings.hold.expect("held back");
        assert_eq!(reason, Reason::RulesNotRead);
        assert!(
            message.starts_with("RulerConfig ns/s picked by the stack could not be read yet"),
            "{message}"
        );
    }

    #[test]
    fn without_a_selector_rules_stay_in_the_object_store() {
        let (input, findings) = plan(&ruled_stack(false), &Snapshot::default());
        assert_eq!(input.files, None);
        assert_eq!(findings, RuleFindings::default());
    }

    #[test]
    fn a_wrong_ruler_config_or_remote_write_secret_holds_the_stack_back() {
        let s = ruled_stack(true);
        let config = |v: serde_json::Value| Some(Ok(serde_json::from_value(v).expect("config")));
        let mut snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            ..Default::default()
        };
        snap.rules.ruler_config = config(json!({"evaluationInterval": "often"}));
        let (_, f) = plan(&s, &snap);
        let (reason, message) = f.hold.expect("held");
        assert_eq!(reason, Reason::InvalidRulerConfig);
        assert!(message.contains("spec.evaluationInterval"), "{message}");

        snap.rules.ruler_config = config(json!({"remoteWrite": {"enabled": true, "client": {
            "name": "m", "url": "https://m.example/api/v1/write", "authorization": "basic", "authorizationSecretName": "rw"}}}));
        let (input, f) = plan(&s, &snap);
        assert_eq!(f.hold.map(|h| h.0), Some(Reason::MissingRulerSecret));
        assert_eq!(input.remote_write_secret.as_deref(), Some("rw"));
        let seen = |keys: &[&str], opted_in: bool| {
            Some(RulerSecretSeen {
                keys: keys.iter().map(ToString::to_string).collect(),
                opted_in,
            })
        };
        snap.rules.remote_write_secret = seen(&["username"], true);
        let (_, f) = plan(&s, &snap);
        let (reason, message) = f.hold.expect("held");
        assert_eq!(reason, Reason::InvalidRulerSecret);
        assert!(
            message.contains("lacks the non-empty keys password"),
            "{message}"
        );
        snap.rules.remote_write_secret = seen(&["username", "password"], true);
        assert_eq!(plan(&s, &snap).1.hold, None);
    }

    #[test]
    fn a_remote_write_secret_is_sent_away_only_when_it_says_so() {
        // Any Secret of the namespace, named by whoever may edit the RulerConfig, would
        // otherwise be mounted into the ruler and sent to the URL that editor chose.
        let s = ruled_stack(true);
        let mut snap = Snapshot {
            namespace: "ns".into(),
            name: "s".into(),
            ..Default::default()
        };
        snap.rules.ruler_config = Some(Ok(serde_json::from_value(json!({"remoteWrite": {"enabled": true, "client": {
            "name": "m", "url": "https://collector.example/api/v1/write", "authorization": "bearer", "authorizationSecretName": "db-admin"}}}))
        .expect("config")));
        snap.rules.remote_write_secret = Some(RulerSecretSeen {
            keys: ["bearer_token".to_string()].into(),
            opted_in: false,
        });
        let (reason, message) = plan(&s, &snap).1.hold.expect("held back");
        assert_eq!(reason, Reason::InvalidRulerSecret);
        assert!(
            message.contains("\"db-admin\" is not marked for remote write")
                && message.contains("https://collector.example/api/v1/write")
                && message.contains(
                    "kubectl -n ns annotate secret db-admin loki.grafana.com/ruler-remote-write=true"
                ),
            "{message}"
        );
        snap.rules.remote_write_secret = Some(RulerSecretSeen {
            keys: ["bearer_token".to_string()].into(),
            opted_in: true,
        });
        assert_eq!(plan(&s, &snap).1.hold, None);
    }
}
