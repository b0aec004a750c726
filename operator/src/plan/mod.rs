//! Plan, the second step of a reconcile and its only decider: a pure function of the
//! stack and its snapshot that returns the whole [`Intent`]: what the cluster should hold,
//! the pods to prepare or delete (scale-down, rollout, recovery), and the Events of what
//! the status alone does not show.
//!
//! A Degraded finding (invalid spec, storage Secret, zone check) holds the new spec back:
//! nothing is applied, nothing is removed or scaled down, `observedGeneration` stays
//! behind, and the next trigger (a node or Secret change) plans again by itself. What runs
//! keeps running on the last good spec.

pub mod failover;
pub mod recovery;
pub mod rollout;
pub mod rules;
pub mod scale_down;
pub mod staging;

use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;

use crate::checks::validate::{
    reads_zone_label, validate_stack, zone_aware_evictions, zone_aware_gossip, zone_fast_failover,
    zone_fast_failover_tolerance, zone_from_pod_label, zone_local_services,
};
use crate::checks::volumes;
use crate::checks::zones::{self, ZoneCheck};
use crate::intent::{Action, Findings, Intent, PlannedEvent, Rollout, RuleFindings};
use crate::model::api::{LokiStack, ZoneAwarenessStage, ZoneAwarenessStatus};
use crate::model::defaults::{effective, Component, EffectiveStack};
use crate::model::go_compat;
use crate::model::storage::{self as storage, check_ca, StorageSecretError, StoreParams};
use crate::observe::Snapshot;
use crate::render::kinds::ChildKind;
use crate::render::{render, Child, RenderError, RenderInput, Settings};

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("rendering the stack's objects failed: {0}")]
    Render(#[from] RenderError),
}

/// The zone check of a zone-aware stack, on every node and the stack's volumes.
fn zone_check(eff: &EffectiveStack, snapshot: &Snapshot) -> Option<ZoneCheck> {
    let nodes = snapshot.nodes.iter().map(AsRef::as_ref);
    let volumes = snapshot.volumes.iter().map(AsRef::as_ref);
    eff.zone_aware().then(|| zones::check(eff, nodes, volumes))
}

/// The object store's parameters from the stack's Secret (key names and the values that
/// shape the config), or what is wrong with it.
fn secret_params(
    stack: &LokiStack,
    snapshot: &Snapshot,
) -> Result<StoreParams, StorageSecretError> {
    let spec = &stack.spec.storage.secret;
    if let (None, Some(error)) = (&snapshot.secret, &snapshot.secret_unreadable) {
        return Err(StorageSecretError::Unreadable {
            name: spec.name.clone(),
            namespace: snapshot.namespace.clone(),
            error: error.clone(),
        });
    }
    storage::secret_params(
        spec.type_,
        &spec.name,
        &snapshot.namespace,
        snapshot.secret.as_deref(),
    )
}

/// The spec resolved with what the plan reads from the snapshot: the storage Secret's
/// parameters (when it is usable) and the ruler's files and settings; with the findings
/// of the Secret and the rules.
fn resolve(
    stack: &LokiStack,
    snapshot: &Snapshot,
) -> (EffectiveStack, Option<StorageSecretError>, RuleFindings) {
    let (store, secret) = match secret_params(stack, snapshot) {
        Ok(params) => (params, None),
        Err(e) => (StoreParams::default(), Some(e)),
    };
    let (ruler, rules) = rules::plan(stack, snapshot);
    let base = effective(&stack.spec);
    let eff = EffectiveStack {
        store,
        ruler,
        zone_local_services: base.zone_local_services
            && zone_local_services(stack.metadata.annotations.as_ref()) != Ok(false),
        zone_gossip: base.zone_gossip
            && zone_aware_gossip(stack.metadata.annotations.as_ref()) != Ok(false),
        zone_from_pod_label_allowed: zone_from_pod_label(stack.metadata.annotations.as_ref())
            != Ok(false),
        ..base
    };
    (eff, secret, rules)
}

/// Every check of the stack against what was observed.
fn check(
    stack: &LokiStack,
    snapshot: &Snapshot,
    eff: &EffectiveStack,
    secret: Option<StorageSecretError>,
    rules: RuleFindings,
) -> Findings {
    let zone = zone_check(eff, snapshot);
    let gossip_zones_too_long = match &zone {
        Some(z) if eff.zone_gossip => zones::too_long_for_gossip(&z.zones),
        _ => Vec::new(),
    };
    Findings {
        invalid: validate_stack(stack).err(),
        secret,
        storage_ca: stack.spec.storage.tls.as_ref().and_then(|tls| {
            check_ca(tls, &snapshot.namespace, snapshot.storage_ca_keys.as_ref()).err()
        }),
        storage_class: volumes::check(
            stack.spec.storage_class_name.as_deref(),
            snapshot.storage_class.as_deref(),
            eff.zone_aware(),
        ),
        zone,
        gossip_zones_too_long,
        unsupported: go_compat::unsupported_fields(&stack.spec),
        annotation: annotation_errors(stack),
        zone_evictions_off: zone_aware_evictions(stack.metadata.annotations.as_ref()) == Ok(false),
        fast_failover_off: zone_fast_failover(stack.metadata.annotations.as_ref()) == Ok(false),
        failover_tolerance: zone_fast_failover_tolerance(stack.metadata.annotations.as_ref())
            .unwrap_or_default(),
        rules,
    }
}

/// The stack's annotations that are set but invalid, each with what applies instead.
fn annotation_errors(stack: &LokiStack) -> Option<String> {
    let errors: Vec<String> = [
        staging::read_path_delay(stack).err(),
        zone_aware_evictions(stack.metadata.annotations.as_ref()).err(),
        zone_local_services(stack.metadata.annotations.as_ref()).err(),
        zone_fast_failover(stack.metadata.annotations.as_ref()).err(),
        zone_fast_failover_tolerance(stack.metadata.annotations.as_ref()).err(),
        zone_aware_gossip(stack.metadata.annotations.as_ref()).err(),
        zone_from_pod_label(stack.metadata.annotations.as_ref()).err(),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// The one resolution of a stack's spec against what was observed: the findings, the
/// zone stage, and the render input. The reconcile's [`plan`] and the `render` command
/// both take their objects from it, so that what `render` prints is what is applied.
pub struct Resolution<'a> {
    pub findings: Findings,
    /// The zone stage the stack goes to (or keeps, when held back).
    pub stage: Option<crate::model::api::ZoneAwarenessStatus>,
    /// The stage the stack's status showed.
    pub previous: Option<crate::model::api::ZoneAwarenessStatus>,
    pub input: RenderInput<'a>,
}

pub fn resolve_stack<'a>(
    stack: &'a LokiStack,
    snapshot: &Snapshot,
) -> Result<Resolution<'a>, PlanError> {
    let (resolved, secret, rules) = resolve(stack, snapshot);
    let findings = check(stack, snapshot, &resolved, secret, rules);
    let previous = stack.status.as_ref().and_then(|s| s.zone_awareness.clone());
    // The stage is decided only for a spec that goes out: one held back keeps its stage.
    let stage = match findings.hold_back() {
        Some(_) => staging::Stage {
            status: previous.clone(),
            zones: resolved.zones.clone(),
            read_path_zone_aware: resolved.read_path_zone_aware,
        },
        None => staging::stage(stack, snapshot, &resolved)?,
    };
    // What the zone-disruption webhook changes, and the stage's zones.
    let ingester_disruptions =
        if snapshot.disruptions_by_zone && staging::ingesters_zone_aware(snapshot) {
            per_zone_disruptions(stack, &resolved, findings.zone.as_ref())
        } else {
            resolved.ingester_disruptions
        };
    let zone_gossip = resolved.zone_gossip && findings.gossip_zones_too_long.is_empty();
    let input = RenderInput::new(
        stack,
        EffectiveStack {
            ingester_disruptions,
            zone_gossip,
            zones: stage.zones,
            read_path_zone_aware: stage.read_path_zone_aware,
            ..resolved
        },
    );
    Ok(Resolution {
        findings,
        stage: stage.status,
        previous,
        input,
    })
}

pub fn plan(
    stack: &LokiStack,
    snapshot: &Snapshot,
    settings: &Settings,
) -> Result<Intent, PlanError> {
    let Resolution {
        findings,
        stage,
        previous,
        input,
    } = resolve_stack(stack, snapshot)?;
    let mut held = Vec::new();
    let action = if findings.hold_back().is_some() {
        Action::HoldBack
    } else {
        let mut children = render(&input, settings)?;
        // Stale before holding: a held StatefulSet is still wanted, never removed.
        let (stale, left) = not_rendered(snapshot, &children);
        if zone_outage(&findings) && !rollout::forced(stack) {
            held = hold_ring_members(snapshot, &mut children);
        }
        Action::Apply {
            children,
            stale,
            left,
        }
    };
    let eff = input.into_eff();
    let zone_awareness = stage;
    let applying = matches!(action, Action::Apply { .. });
    let switch = failover::Switch::of(&findings);
    // Before the rollout: a zone the failover takes out is one the rollout waits for.
    let failover = failover::plan(snapshot, findings.zone.as_ref(), switch);
    let rollout = rollout::step(stack, snapshot, &findings, &failover.zones_out, applying);
    let wake_after = wake_after(zone_awareness.as_ref(), &rollout, snapshot.now);
    Ok(Intent {
        now: snapshot.now,
        wait_for_webhook: applying && waits_for_webhook(&eff, zone_awareness.as_ref(), settings),
        scale_down: scale_down::plan(snapshot, &eff, &action),
        rollout,
        recovery: recovery::plan(stack, snapshot, &findings, &eff),
        failover,
        stage_event: staging::transition(previous.as_ref(), zone_awareness.as_ref())
            .map(|(reason, note)| PlannedEvent::normal(reason, note)),
        wake_after,
        eff,
        findings,
        action,
        held,
        zone_awareness,
    })
}

/// Before the apply, wait until the zone-at-bind webhook covers the namespace: for a
/// zone-aware stack, unless zones are being turned off (the webhook no longer covers it:
/// its ring members keep their zones, and the annotator writes them) or its pods read the
/// label Kubernetes copies at binding (the webhook leaves them out).
fn waits_for_webhook(
    eff: &EffectiveStack,
    zone_awareness: Option<&ZoneAwarenessStatus>,
    settings: &Settings,
) -> bool {
    let turning_off = zone_awareness.is_some_and(|z| z.stage == ZoneAwarenessStage::Disabling);
    let keys = eff.topology_keys();
    let label = reads_zone_label(
        &keys,
        settings.zone_labels_at_binding,
        eff.zone_from_pod_label_allowed,
    );
    eff.zone_aware() && !turning_off && !label
}

/// When to plan again though nothing changes: the earliest of the zone-awareness stage
/// moving on and the rollout's wait for pods Kubernetes may still evict.
fn wake_after(
    zone_awareness: Option<&ZoneAwarenessStatus>,
    rollout: &Rollout,
    now: Timestamp,
) -> Option<std::time::Duration> {
    let stage = staging::wake_after(zone_awareness, now);
    stage
        .into_iter()
        .chain(rollout::wake_after(rollout, now))
        .min()
}

/// The ingesters one zone may have down at once: `spec.replication.maxUnavailablePerZone`,
/// else a whole zone's share (the spread keeps zones within one ingester of each other).
/// Which zone they are in is the zone-disruption webhook's to decide.
fn per_zone_disruptions(stack: &LokiStack, eff: &EffectiveStack, zone: Option<&ZoneCheck>) -> i32 {
    let set = stack
        .spec
        .replication
        .as_ref()
        .and_then(|r| r.max_unavailable_per_zone);
    let replicas = eff.component(Component::Ingester).map_or(1, |c| c.replicas);
    let zones = zone.map_or(1, |z| z.zones.len().max(1));
    let zones = i32::try_from(zones).unwrap_or(i32::MAX);
    let share = (replicas.max(1) + zones - 1) / zones;
    set.unwrap_or(share).clamp(1, replicas.max(1))
}

/// A zone is unavailable or in maintenance: a changed template of a ring member would
/// disrupt a second zone.
fn zone_outage(findings: &Findings) -> bool {
    findings
        .zone
        .as_ref()
        .is_some_and(|z| z.disrupted().next().is_some())
}

/// While a zone is unavailable, the StatefulSets that already run (ingesters and the
/// other ring members) are not sent: a changed pod template would restart members in the
/// available zones, each restart taking a copy of its streams that the outage has not
/// already taken. Their change goes out when every zone is back. Stateless components
/// and new StatefulSets are applied as usual.
fn hold_ring_members(snapshot: &Snapshot, children: &mut Vec<Child>) -> Vec<String> {
    let mut held = Vec::new();
    children.retain(|c| {
        let running = ChildKind::of(c) == ChildKind::StatefulSet
            && snapshot
                .children
                .contains_key(&(ChildKind::StatefulSet, c.name().to_string()));
        if running {
            held.push(c.name().to_string());
        }
        !running
    });
    held
}

type Names = Vec<(ChildKind, String)>;

/// Children in the snapshot that the plan does not render: (those this operator applied,
/// to remove; the others, to leave).
fn not_rendered(snapshot: &Snapshot, children: &[Child]) -> (Names, Names) {
    let wanted: BTreeSet<(ChildKind, &str)> = children
        .iter()
        .map(|c| (ChildKind::of(c), c.name()))
        .collect();
    let (stale, left): (Vec<_>, Vec<_>) = snapshot
        .children
        .iter()
        .filter(|((k, n), _)| !wanted.contains(&(*k, n.as_str())))
        .partition(|(_, state)| state.applied_by_us);
    let names =
        |v: Vec<(&(ChildKind, String), _)>| v.into_iter().map(|(id, _)| id.clone()).collect();
    (names(stale), names(left))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::LokiStackSize;
    use crate::model::conditions::Reason;
    use crate::model::names;
    use crate::observe::ChildState;
    use crate::testing::{node, stack, stack_spec, zoned_spec, ZONE};
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    use std::sync::Arc;

    fn secret_with(keys: &[&str]) -> Arc<Secret> {
        Arc::new(Secret {
            data: Some(
                keys.iter()
                    .map(|k| (k.to_string(), ByteString(vec![1])))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    fn snapshot_for(s: &LokiStack) -> Snapshot {
        let keys = crate::model::storage::required_keys(s.spec.storage.secret.type_);
        let class = k8s_openapi::api::storage::v1::StorageClass {
            metadata: kube::api::ObjectMeta {
                name: s.spec.storage_class_name.clone(),
                ..Default::default()
            },
            volume_binding_mode: Some("WaitForFirstConsumer".into()),
            ..Default::default()
        };
        Snapshot {
            namespace: "ns".into(),
            name: s.metadata.name.clone().unwrap_or_default(),
            secret: Some(secret_with(&keys)),
            storage_class: Some(Arc::new(class)),
            ..Default::default()
        }
    }

    /// The ingester budget of the PDB rendered for a 3-zone stack with `ingesters`
    /// replicas, with or without the zone-disruption webhook.
    fn ingester_budget(ingesters: i32, per_zone: Option<i32>, webhook: bool) -> serde_json::Value {
        budget_with_pods(ingesters, per_zone, webhook, Vec::new())
    }

    fn budget_with_pods(
        ingesters: i32,
        per_zone: Option<i32>,
        webhook: bool,
        pods: Vec<k8s_openapi::api::core::v1::Pod>,
    ) -> serde_json::Value {
        let mut spec = zoned_spec(LokiStackSize::Small, 3, &[ZONE]);
        spec.template =
            serde_json::from_value(serde_json::json!({"ingester": {"replicas": ingesters}}))
                .expect("template");
        if let Some(r) = spec.replication.as_mut() {
            r.max_unavailable_per_zone = per_zone;
        }
        let s = stack("s", spec);
        let mut snap = snapshot_for(&s);
        snap.nodes = ["a", "b", "c"]
            .iter()
            .map(|z| Arc::new(node(z, &[(ZONE, z)])))
            .collect();
        snap.disruptions_by_zone = webhook;
        snap.pods = pods.into_iter().map(Arc::new).collect();
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        let Action::Apply { children, .. } = &p.action else {
            panic!("applied");
        };
        let pdb = children
            .iter()
            .find(|c| {
                ChildKind::of(c) == ChildKind::PodDisruptionBudget && c.name() == "s-ingester"
            })
            .expect("ingester PDB");
        pdb.to_json().expect("json")["spec"]["maxUnavailable"].clone()
    }

    /// The webhook keeps evictions in one zone, so the budget may allow a zone's share;
    /// without it, one ingester at a time is what keeps a drain inside one zone.
    #[test]
    fn the_ingester_budget_is_a_zone_s_share_only_when_the_webhook_decides() {
        assert_eq!(ingester_budget(6, None, false), 1);
        assert_eq!(ingester_budget(6, None, true), 2);
        assert_eq!(ingester_budget(7, None, true), 3);
        assert_eq!(ingester_budget(6, Some(1), true), 1);
        assert_eq!(ingester_budget(6, Some(50), true), 6);
        // Zones being turned on: an ingester of the old template is not zone-aware, and
        // the webhook does not see it.
        let ingester = |zone_aware: bool| {
            let p = crate::testing::pod("s-ingester-0").component(Component::Ingester);
            if zone_aware { p.zone_aware() } else { p }.build()
        };
        assert_eq!(budget_with_pods(6, None, true, vec![ingester(true)]), 2);
        assert_eq!(budget_with_pods(6, None, true, vec![ingester(false)]), 1);
    }

    #[test]
    fn a_valid_stack_is_applied_and_a_disabled_ruler_is_stale() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        snap.children.insert(
            (ChildKind::StatefulSet, "s-ruler".into()),
            ChildState::ours("g1"),
        );
        snap.children.insert(
            (ChildKind::StatefulSet, "s-ingester".into()),
            ChildState::ours("g1"),
        );
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        let Action::Apply {
            children,
            stale,
            left,
        } = p.action
        else {
            panic!("held back: {:?}", p.findings.hold_back())
        };
        assert!(children.iter().any(|c| c.name() == "s-ingester"));
        assert_eq!(stale, vec![(ChildKind::StatefulSet, "s-ruler".to_string())]);
        assert!(left.is_empty());
    }

    #[test]
    fn too_few_zones_hold_the_spec_back() {
        let s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let mut snap = snapshot_for(&s);
        snap.nodes = ["a", "b"]
            .iter()
            .map(|z| Arc::new(node(z, &[(ZONE, z)])))
            .collect();
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        assert_eq!(
            p.findings.hold_back().map(|d| d.0),
            Some(Reason::ZonesInsufficient)
        );
    }

    #[test]
    fn a_missing_secret_holds_the_spec_back() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        snap.secret = None;
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        assert_eq!(
            p.findings.hold_back().map(|d| d.0),
            Some(Reason::MissingObjectStorageSecret)
        );
    }

    #[test]
    fn a_secret_the_operator_cannot_read_is_named_with_why_not_called_missing() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        snap.secret = None;
        snap.secret_unreadable = Some("secrets \"s3\" is forbidden".into());
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        let (reason, message) = p.findings.hold_back().expect("held back");
        assert_eq!(reason, Reason::MissingObjectStorageSecret);
        assert!(
            message.contains("cannot be read: secrets \"s3\" is forbidden"),
            "{message}"
        );
        assert!(message.contains("get on Secrets"), "{message}");
    }

    #[test]
    fn during_an_outage_running_ring_members_are_held_unless_forced() {
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
        let mut snap = snapshot_for(&s);
        snap.nodes = ["a", "b", "c"]
            .iter()
            .map(|z| {
                let mut n = node(z, &[(ZONE, z)]);
                if *z == "c" {
                    n.status = None;
                }
                Arc::new(n)
            })
            .collect();
        snap.children.insert(
            (ChildKind::StatefulSet, "s-ingester".into()),
            ChildState::ours("g1"),
        );
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert_eq!(p.held, ["s-ingester"]);
        let Action::Apply {
            children, stale, ..
        } = &p.action
        else {
            panic!("an outage must not hold the spec back")
        };
        assert!(stale.is_empty(), "a held StatefulSet is not stale");
        let sts =
            |c: &Child, name: &str| ChildKind::of(c) == ChildKind::StatefulSet && c.name() == name;
        assert!(!children.iter().any(|c| sts(c, "s-ingester")));
        assert!(
            children.iter().any(|c| c.name() == "s-querier"),
            "stateless components still roll"
        );
        assert!(
            children.iter().any(|c| sts(c, "s-compactor")),
            "a StatefulSet that does not run yet is created"
        );
        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ROLL_DURING_OUTAGE.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(p.held.is_empty());
    }

    /// `loki.grafana.com/zone-local-services`: "false" turns zone-local routing off for
    /// the stack; any other value keeps it on and is reported.
    #[test]
    fn the_zone_local_services_annotation_switches_routing_and_reports_a_bad_value() {
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let snap = snapshot_for(&s);
        let with = |s: &LokiStack| {
            let p = plan(s, &snap, &Settings::default()).expect("plan");
            (p.eff.zone_local_services, p.findings.annotation)
        };
        assert_eq!(with(&s), (true, None));
        let annotate = |s: &mut LokiStack, v: &str| {
            s.metadata.annotations = Some(
                [(
                    names::ANNOTATION_ZONE_LOCAL_SERVICES.to_string(),
                    v.to_string(),
                )]
                .into(),
            );
        };
        annotate(&mut s, "false");
        assert_eq!(with(&s), (false, None));
        annotate(&mut s, "off");
        let (on, error) = with(&s);
        assert!(on, "a value that is not \"false\" keeps routing on");
        assert!(
            error.as_deref().is_some_and(
                |e| e.contains(names::ANNOTATION_ZONE_LOCAL_SERVICES) && e.contains("\"off\"")
            ),
            "{error:?}"
        );
    }

    /// On a server that copies the zone label at binding, a stack reading it has no
    /// zone-at-bind webhook to wait for before its apply; its annotation switches that
    /// off, and a bad value is reported and leaves it on.
    #[test]
    fn pods_reading_the_zone_label_wait_for_no_webhook() {
        use crate::checks::kube_version::KubeVersion;
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let snap = snapshot_for(&s);
        let copies = Settings::default().for_server(Some(KubeVersion {
            major: 1,
            minor: 35,
        }));
        let with = |s: &LokiStack, settings: &Settings| {
            let p = plan(s, &snap, settings).expect("plan");
            let waits = waits_for_webhook(&p.eff, p.zone_awareness.as_ref(), settings);
            (waits, p.findings.annotation)
        };
        assert_eq!(with(&s, &copies), (false, None));
        assert_eq!(with(&s, &Settings::default()), (true, None));
        let annotate = |s: &mut LokiStack, v: &str| {
            s.metadata.annotations = Some(
                [(
                    names::ANNOTATION_ZONE_FROM_POD_LABEL.to_string(),
                    v.to_string(),
                )]
                .into(),
            );
        };
        annotate(&mut s, "false");
        assert_eq!(with(&s, &copies), (true, None));
        annotate(&mut s, "no");
        let (waits, error) = with(&s, &copies);
        assert!(!waits, "a value that is not \"false\" keeps the label");
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains(names::ANNOTATION_ZONE_FROM_POD_LABEL)),
            "{error:?}"
        );
    }

    /// Zone-aware gossip: on for a zone-aware stack whose zone names Loki takes, off with
    /// the annotation (no finding), and off with a finding naming a zone name over 16
    /// bytes, which Loki would refuse to start with.
    #[test]
    fn zone_aware_gossip_is_off_for_long_zone_names_and_by_annotation() {
        let mut s = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
        let mut snap = snapshot_for(&s);
        let zones = |names: &[&str]| -> Vec<Arc<k8s_openapi::api::core::v1::Node>> {
            names
                .iter()
                .enumerate()
                .map(|(i, z)| Arc::new(node(&format!("n{i}"), &[(ZONE, z)])))
                .collect()
        };
        let with = |s: &LokiStack, snap: &Snapshot| {
            let p = plan(s, snap, &Settings::default()).expect("plan");
            (p.eff.zone_gossip, p.findings.gossip_zones_too_long)
        };
        snap.nodes = zones(&["us-east-1a", "us-east-1b", "europe-west12-c"]);
        assert_eq!(with(&s, &snap), (true, Vec::new()));
        snap.nodes = zones(&["us-east-1a", "northamerica-northeast1-a", "eu-b"]);
        assert_eq!(
            with(&s, &snap),
            (false, vec!["northamerica-northeast1-a".to_string()])
        );
        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ZONE_AWARE_GOSSIP.to_string(),
                "false".to_string(),
            )]
            .into(),
        );
        assert_eq!(with(&s, &snap), (false, Vec::new()));
    }

    #[test]
    fn what_the_go_operator_left_is_taken_over_or_left_never_removed() {
        let s = stack("s", stack_spec(LokiStackSize::Demo));
        let mut snap = snapshot_for(&s);
        let go = ChildState {
            applied_by_us: false,
            written_by_go: true,
            ..ChildState::ours("g4")
        };
        snap.children
            .insert((ChildKind::Deployment, "s-gateway".into()), go.clone());
        snap.children
            .insert((ChildKind::StatefulSet, "s-ingester".into()), go);
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        let Action::Apply {
            children,
            stale,
            left,
        } = p.action
        else {
            panic!("held back: {:?}", p.findings.hold_back())
        };
        assert!(
            children.iter().any(|c| c.name() == "s-ingester"),
            "rendered: applied"
        );
        assert!(stale.is_empty(), "nothing of the Go operator's is removed");
        assert_eq!(left, vec![(ChildKind::Deployment, "s-gateway".to_string())]);
    }

    #[test]
    fn a_missing_ca_bundle_holds_the_spec_back_naming_it() {
        let mut spec = stack_spec(LokiStackSize::Demo);
        spec.storage.tls = Some(crate::model::api::ObjectStorageTlsSpec {
            ca_name: "minio-ca".into(),
            ca_key: None,
        });
        let s = stack("s", spec);
        let mut snap = snapshot_for(&s);
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(matches!(p.action, Action::HoldBack));
        let (reason, message) = p.findings.hold_back().expect("held back");
        assert_eq!(reason, Reason::MissingObjectStorageCAConfigMap);
        assert!(
            message.contains("\"minio-ca\"") && message.contains("service-ca.crt"),
            "{message}"
        );

        snap.storage_ca_keys = Some(["ca.crt".to_string()].into());
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        let (reason, message) = p.findings.hold_back().expect("held back");
        assert_eq!(reason, Reason::InvalidObjectStorageCAConfigMap);
        assert!(message.contains("its keys: ca.crt"), "{message}");

        snap.storage_ca_keys = Some(["service-ca.crt".to_string()].into());
        let p = plan(&s, &snap, &Settings::default()).expect("plan");
        assert!(
            matches!(p.action, Action::Apply { .. }),
            "{:?}",
            p.findings.hold_back()
        );
    }
}
