//! Prometheus metrics, served as text on `/metrics`.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use crate::model::api::LokiStackStatus;
use crate::model::conditions::ConditionType;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Which path gave a pod its zone: `bind` (the webhook) or `annotator`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabel {
    pub condition: String,
}

/// Stacks are labelled `stack_namespace` and `stack_name`: Prometheus adds `namespace`
/// for the scrape target (the operator's own), which would clash.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StackLabels {
    pub stack_namespace: String,
    pub stack_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub zone: String,
}

/// The Go Loki Operator's `lokistack_status_condition` series, so its alerts and
/// dashboards work on these stacks.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusConditionLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub size: String,
    pub condition: String,
    pub reason: String,
    pub status: String,
}

/// One step of the pod annotator's path from a pod event to its zone written.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabel {
    pub step: String,
}

/// The stage of turning a stack's zones on or off (`status.zoneAwareness.stage`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub stage: String,
}

/// What was last exported for one stack, so its old series can be removed.
#[derive(Default)]
struct Exported {
    true_conditions: Vec<String>,
    conditions: Vec<StatusConditionLabels>,
    zones: Vec<ZoneLabels>,
    stage: Option<StageLabels>,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub annotations: Family<ResultLabel, Counter>,
    pub bind_to_annotated: Histogram,
    annotator_steps: Family<StepLabel, Histogram, fn() -> Histogram>,
    pub applies: Family<ResultLabel, Counter>,
    pub webhook_bindings: Family<ResultLabel, Counter>,
    pub webhook_duration: Histogram,
    pub webhook_pod_reads: Family<ResultLabel, Counter>,
    pub webhook_evictions: Family<ResultLabel, Counter>,
    webhook_configuration_applied: Family<WebhookLabel, Gauge>,
    pub webhook_certificate_ready: Gauge,
    pods_zoned: Family<PathLabel, Counter>,
    stacks_by_condition: Family<ConditionLabel, Gauge>,
    status_condition: Family<StatusConditionLabels, Gauge>,
    zones: Family<StackLabels, Gauge>,
    zone_available: Family<ZoneLabels, Gauge>,
    zone_failures_tolerated: Family<StackLabels, Gauge>,
    write_quorum_met: Family<StackLabels, Gauge>,
    zone_awareness_stage: Family<StageLabels, Gauge>,
    zone_read_path_at: Family<StackLabels, Gauge>,
    exported: Mutex<HashMap<(String, String), Exported>>,
}

/// What the metrics show of one stack.
pub struct StackView<'a> {
    pub size: &'a str,
    pub status: &'a LokiStackStatus,
}

/// Registers `metric` and returns it, for the struct literal below.
fn register<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// 1 ms .. ~16 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// 100 µs .. ~3 s: a webhook answer is expected in a few milliseconds.
fn fine_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        // The Go Loki Operator's name, unprefixed, so its alerts and dashboards match.
        let status_condition = register(
            &mut root,
            "lokistack_status_condition",
            "1 for each condition a LokiStack shows, with its status and reason (as the Go Loki Operator exports it)",
            Family::default(),
        );
        let r = root.sub_registry_with_prefix("loki_zone_operator");
        Metrics {
            reconciles: register(r, "reconciles", "Reconciles of LokiStacks, by result: ok, held_back, undecodable, or the step that failed (observe_failed, plan_failed, apply_failed, status_failed)", Family::default()),
            reconcile_duration: register(r, "reconcile_duration_seconds", "Duration of one reconcile", seconds()),
            annotations: register(r, "zone_annotations", "Zone annotations written by the pod annotator, by result", Family::default()),
            bind_to_annotated: register(r, "bind_to_annotated_seconds", "Time from seeing a zone-aware pod bound to a node to its zone annotation being written", seconds()),
            annotator_steps: register(r, "annotator_step_seconds", "The pod annotator's time per step, by step: queued (pod event in the cache to the annotator taking it), decided (taken to its patch ready), permit (waiting for one of the patches in flight), patch (sent to answered), finished (answered to the annotator recording it)", Family::new_with_constructor(fine_seconds as fn() -> Histogram)),
            webhook_bindings: register(r, "webhook_bindings", "pods/binding reviews answered by this replica, by result: zoned, not_zone_aware, pod_unknown, already_zoned, node_unknown, node_label, no_keys, not_a_node_binding", Family::default()),
            webhook_duration: register(r, "webhook_response_seconds", "Time to answer one pods/binding review, from the request read to the response written", fine_seconds()),
            webhook_pod_reads: register(r, "webhook_pod_reads", "Pods the webhook read from the API server because its cache had not seen them yet", Family::default()),
            webhook_configuration_applied: register(r, "webhook_configuration_applied", "1 while the leader's last apply of a webhook configuration (zone-at-bind, zone-disruption) succeeded, 0 while it fails (its Warning log says why)", Family::default()),
            webhook_certificate_ready: register(r, "webhook_certificate_ready", "1 while this replica serves a valid webhook certificate, 0 while it cannot read, issue or load one", Gauge::default()),
            webhook_evictions: register(r, "webhook_evictions", "pods/eviction reviews answered by this replica, by result: allowed, already_down, denied, not_leader, not_ours", Family::default()),
            pods_zoned: register(r, "pods_zoned", "Zone-aware pods given their zone, by path: bind (in the binding, by the webhook) or annotator (a patch after the bind)", Family::default()),
            applies: register(r, "child_applies", "Children per reconcile: applied, unchanged (skipped), pruned, failed", Family::default()),
            stacks_by_condition: register(r, "stacks", "LokiStacks whose condition is True, by condition type", Family::default()),
            zones: register(r, "zones_observed", "Known zones (those of nodes an ingester can run on, up or down), per zone-aware stack", Family::default()),
            zone_available: register(r, "zone_available", "1 when at least one node of the known zone can run pods, else 0", Family::default()),
            zone_failures_tolerated: register(r, "zone_failures_tolerated", "Zones the stack can lose with writes still reaching quorum, from where its Ready ingesters are", Family::default()),
            write_quorum_met: register(r, "write_quorum_met", "1 when every stream can write a quorum of copies in the available zones, else 0", Family::default()),
            zone_awareness_stage: register(r, "zone_awareness_stage", "1 for the stage of zone-aware replication a stack is in: Enabling, Enabled or Disabling (status.zoneAwareness.stage)", Family::default()),
            zone_read_path_at: register(r, "zone_read_path_at_seconds", "While zones are being turned on and the write path is zone-aware: when queriers and rulers turn zone-aware (status.zoneAwareness.readPathAt), in seconds since the epoch", Family::default()),
            status_condition,
            exported: Mutex::new(HashMap::new()),
            registry: root,
        }
    }
}

impl Metrics {
    pub fn count(family: &Family<ResultLabel, Counter>, result: &str, n: u64) {
        family
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc_by(n);
    }

    /// Whether the last apply of webhook configuration `webhook` succeeded.
    pub fn webhook_configuration(&self, webhook: &str, applied: bool) {
        self.webhook_configuration_applied
            .get_or_create(&WebhookLabel {
                webhook: webhook.to_string(),
            })
            .set(i64::from(applied));
    }

    /// How long one step of the annotator took (see `annotator_step_seconds`).
    pub fn annotator_step(&self, step: &str, took: std::time::Duration) {
        self.annotator_steps
            .get_or_create(&StepLabel {
                step: step.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// One pod given its zone by `path` (`bind` or `annotator`).
    pub fn zoned(&self, path: &str) {
        self.pods_zoned
            .get_or_create(&PathLabel {
                path: path.to_string(),
            })
            .inc();
    }

    fn exported(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Exported>> {
        // Every update replaces one entry whole, so a poisoned lock holds a usable map.
        self.exported.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what a stack's status says; `None` when the stack is gone.
    pub fn set_stack(&self, namespace: &str, stack: &str, view: Option<StackView<'_>>) {
        let key = (namespace.to_string(), stack.to_string());
        let labels = StackLabels {
            stack_namespace: namespace.to_string(),
            stack_name: stack.to_string(),
        };
        let mut exported = self.exported();
        if let Some(old) = exported.remove(&key) {
            for l in &old.conditions {
                self.status_condition.remove(l);
            }
            for l in &old.zones {
                self.zone_available.remove(l);
            }
            if let Some(l) = &old.stage {
                self.zone_awareness_stage.remove(l);
            }
        }
        for f in [
            &self.zones,
            &self.zone_failures_tolerated,
            &self.write_quorum_met,
            &self.zone_read_path_at,
        ] {
            f.remove(&labels);
        }
        if let Some(view) = view {
            let now = self.export(&labels, &view);
            exported.insert(key, now);
        }
        self.count_conditions(&exported);
    }

    fn export(&self, labels: &StackLabels, view: &StackView<'_>) -> Exported {
        let mut out = Exported::default();
        for c in &view.status.conditions {
            let l = StatusConditionLabels {
                stack_namespace: labels.stack_namespace.clone(),
                stack_name: labels.stack_name.clone(),
                size: view.size.to_string(),
                condition: c.type_.clone(),
                reason: c.reason.clone(),
                status: c.status.clone(),
            };
            self.status_condition.get_or_create(&l).set(1);
            out.conditions.push(l);
            if c.status == "True" {
                out.true_conditions.push(c.type_.clone());
            }
        }
        out.stage = self.export_stage(labels, view.status);
        let Some(r) = view
            .status
            .replication
            .as_ref()
            .filter(|r| !r.zones.is_empty())
        else {
            return out;
        };
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.zones.get_or_create(labels).set(gauge(r.zones.len()));
        if let Some(t) = r.zone_failures_tolerated {
            self.zone_failures_tolerated
                .get_or_create(labels)
                .set(i64::from(t));
        }
        if let Some(met) = r.write_quorum_met {
            self.write_quorum_met
                .get_or_create(labels)
                .set(i64::from(met));
        }
        for z in &r.zones {
            let l = ZoneLabels {
                stack_namespace: labels.stack_namespace.clone(),
                stack_name: labels.stack_name.clone(),
                zone: z.clone(),
            };
            let available = r.zones_available.contains(z);
            self.zone_available
                .get_or_create(&l)
                .set(i64::from(available));
            out.zones.push(l);
        }
        out
    }

    /// The stage of turning zones on or off, and when the read path follows.
    fn export_stage(&self, labels: &StackLabels, status: &LokiStackStatus) -> Option<StageLabels> {
        let z = status.zone_awareness.as_ref()?;
        if let Some(at) = &z.read_path_at {
            self.zone_read_path_at
                .get_or_create(labels)
                .set(at.0.as_second());
        }
        let l = StageLabels {
            stack_namespace: labels.stack_namespace.clone(),
            stack_name: labels.stack_name.clone(),
            stage: z.stage.as_str().to_string(),
        };
        self.zone_awareness_stage.get_or_create(&l).set(1);
        Some(l)
    }

    fn count_conditions(&self, exported: &HashMap<(String, String), Exported>) {
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for e in exported.values() {
            for c in &e.true_conditions {
                *counts.entry(c.as_str()).or_default() += 1;
            }
        }
        for t in ConditionType::ALL {
            self.stacks_by_condition
                .get_or_create(&ConditionLabel {
                    condition: t.to_string(),
                })
                .set(counts.get(t.as_str()).copied().unwrap_or(0));
        }
    }

    /// Removes the series of stacks that no longer exist.
    pub fn retain(&self, live: &std::collections::HashSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .exported()
            .keys()
            .filter(|k| !live.contains(*k))
            .cloned()
            .collect();
        for (ns, name) in gone {
            self.set_stack(&ns, &name, None);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::{ReplicationStatus, ZoneStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn status(true_conditions: &[&str], zones: &[(&str, bool)]) -> LokiStackStatus {
        LokiStackStatus {
            conditions: ["Ready", "Degraded", "Warning"]
                .iter()
                .map(|t| Condition {
                    type_: t.to_string(),
                    status: if true_conditions.contains(t) {
                        "True"
                    } else {
                        "False"
                    }
                    .into(),
                    reason: format!("{t}Reason"),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                })
                .collect(),
            replication: Some(ReplicationStatus {
                factor: 3,
                zones: zones.iter().map(|z| z.0.to_string()).collect(),
                zones_available: zones
                    .iter()
                    .filter(|z| z.1)
                    .map(|z| z.0.to_string())
                    .collect(),
                zone_failures_tolerated: Some(0),
                write_quorum_met: Some(true),
                zone_status: vec![ZoneStatus::default()],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn view(status: &LokiStackStatus) -> Option<StackView<'_>> {
        Some(StackView {
            size: "1x.small",
            status,
        })
    }

    #[test]
    fn stacks_by_condition_and_zone_series_follow_the_latest_state() {
        let m = Metrics::default();
        let a = status(
            &["Ready", "Warning"],
            &[("z1", true), ("z2", true), ("z3", false)],
        );
        m.set_stack("ns", "a", view(&a));
        let b = status(&["Degraded"], &[]);
        m.set_stack("ns", "b", view(&b));
        let text = m.encode();
        for line in [
            "loki_zone_operator_stacks{condition=\"Ready\"} 1",
            "loki_zone_operator_zones_observed{stack_namespace=\"ns\",stack_name=\"a\"} 3",
            "loki_zone_operator_zone_available{stack_namespace=\"ns\",stack_name=\"a\",zone=\"z3\"} 0",
            "loki_zone_operator_zone_failures_tolerated{stack_namespace=\"ns\",stack_name=\"a\"} 0",
            "loki_zone_operator_write_quorum_met{stack_namespace=\"ns\",stack_name=\"a\"} 1",
            "lokistack_status_condition{stack_namespace=\"ns\",stack_name=\"b\",size=\"1x.small\",condition=\"Degraded\",reason=\"DegradedReason\",status=\"True\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // A changed status replaces the stack's series; a gone stack has none.
        let a2 = status(&["Ready"], &[("z1", true), ("z2", true), ("z3", true)]);
        m.set_stack("ns", "a", view(&a2));
        let text = m.encode();
        assert!(
            !text.contains("condition=\"Warning\",reason=\"WarningReason\",status=\"True\""),
            "{text}"
        );
        assert!(text.contains("zone=\"z3\"} 1"), "{text}");
        m.set_stack("ns", "a", None);
        let text = m.encode();
        assert!(
            text.contains("loki_zone_operator_stacks{condition=\"Ready\"} 0"),
            "{text}"
        );
        assert!(!text.contains("stack_name=\"a\""), "{text}");
    }

    #[test]
    fn the_zone_awareness_stage_is_one_series_that_follows_the_status() {
        use crate::model::api::{ZoneAwarenessStage, ZoneAwarenessStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let m = Metrics::default();
        let mut s = status(&["Ready"], &[("z1", true)]);
        let at = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        s.zone_awareness = Some(ZoneAwarenessStatus {
            stage: ZoneAwarenessStage::Enabling,
            read_path_at: Some(Time(at)),
            ..Default::default()
        });
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        for line in [
            "loki_zone_operator_zone_awareness_stage{stack_namespace=\"ns\",stack_name=\"a\",stage=\"Enabling\"} 1",
            "loki_zone_operator_zone_read_path_at_seconds{stack_namespace=\"ns\",stack_name=\"a\"} 1800000000",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        s.zone_awareness = Some(ZoneAwarenessStatus {
            stage: ZoneAwarenessStage::Enabled,
            ..Default::default()
        });
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        assert!(text.contains("stage=\"Enabled\"} 1"), "{text}");
        assert!(!text.contains("stage=\"Enabling\""), "{text}");
        assert!(!text.contains("zone_read_path_at_seconds{"), "{text}");
        s.zone_awareness = None;
        m.set_stack("ns", "a", view(&s));
        assert!(!m.encode().contains("zone_awareness_stage{"));
    }

    #[test]
    fn deleted_stacks_lose_their_series() {
        let m = Metrics::default();
        let s = status(&["Ready"], &[("z1", true)]);
        m.set_stack("ns", "kept", view(&s));
        m.set_stack("ns", "deleted", view(&s));
        m.retain(&[("ns".to_string(), "kept".to_string())].into());
        let text = m.encode();
        assert!(text.contains("stack_name=\"kept\""), "{text}");
        assert!(!text.contains("stack_name=\"deleted\""), "{text}");
        assert!(
            text.contains("loki_zone_operator_stacks{condition=\"Ready\"} 1"),
            "{text}"
        );
    }
}
