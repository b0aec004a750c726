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

use crate::checks::zones::ZoneState;
use crate::model::api::{CredentialMode, LokiStackSpec, LokiStackStatus};
use crate::model::conditions::ConditionType;
use crate::model::defaults::{self, EffectiveStack};
use crate::render::limits::global_ingestion_rate_mb;

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

/// The labels of the Go Loki Operator's per-stack series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SizedStackLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub size: String,
}

/// `lokistack_info`, as the Go Loki Operator labels it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub size: String,
    pub object_storage_type: String,
    pub credential_mode: String,
    pub schema_version: String,
    pub tenancy_mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub size: String,
    pub component: String,
}

/// A known zone and its state: `Available`, `Maintenance` or `Unavailable`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneStateLabels {
    pub stack_namespace: String,
    pub stack_name: String,
    pub zone: String,
    pub state: String,
}

/// controller-runtime's label for one controller, so that generic operator dashboards
/// and alerts read ours.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerResultLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookCodeLabels {
    pub webhook: String,
    pub code: String,
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
    info: Option<InfoLabels>,
    components: Vec<ComponentLabels>,
    sized: Option<SizedStackLabels>,
    zones: Vec<ZoneLabels>,
    zone_states: Vec<ZoneStateLabels>,
    rollout: Vec<ZoneLabels>,
    stage: Option<StageLabels>,
}

/// One unit of a gauge, given back when dropped: a reconcile running, an object waiting.
pub struct Held(Gauge);

impl Held {
    fn new(gauge: Gauge) -> Held {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub annotations: Family<ResultLabel, Counter>,
    pub bind_to_annotated: Histogram,
    annotator_steps: Family<StepLabel, Histogram, fn() -> Histogram>,
    pub applies: Family<ResultLabel, Counter>,
    pub failover_pods: Family<ResultLabel, Counter>,
    pub webhook_bindings: Family<ResultLabel, Counter>,
    pub webhook_duration: Histogram,
    pub webhook_pod_reads: Family<ResultLabel, Counter>,
    pub webhook_evictions: Family<ResultLabel, Counter>,
    webhook_configuration_applied: Family<WebhookLabel, Gauge>,
    pub webhook_certificate_ready: Gauge,
    pods_zoned: Family<PathLabel, Counter>,
    stacks_by_condition: Family<ConditionLabel, Gauge>,
    status_condition: Family<StatusConditionLabels, Gauge>,
    info: Family<InfoLabels, Gauge>,
    component_replicas: Family<ComponentLabels, Gauge>,
    ingestion_rate_limit: Family<SizedStackLabels, Gauge>,
    reconcile_total: Family<ControllerResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabel, Gauge>,
    queue_depth: Family<QueueLabel, Gauge>,
    webhook_requests: Family<WebhookCodeLabels, Counter>,
    webhook_latency: Family<WebhookLabel, Histogram, fn() -> Histogram>,
    zones: Family<StackLabels, Gauge>,
    zone_state: Family<ZoneStateLabels, Gauge>,
    rollout_pods: Family<ZoneLabels, Gauge>,
    rollout_pods_updated: Family<ZoneLabels, Gauge>,
    zone_available: Family<ZoneLabels, Gauge>,
    zone_failures_tolerated: Family<StackLabels, Gauge>,
    write_quorum_met: Family<StackLabels, Gauge>,
    zone_awareness_stage: Family<StageLabels, Gauge>,
    zone_read_path_at: Family<StackLabels, Gauge>,
    exported: Mutex<HashMap<(String, String), Exported>>,
}

/// What the metrics show of one stack.
pub struct StackView<'a> {
    pub spec: &'a LokiStackSpec,
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
        let info = register(&mut root, "lokistack_info", "Information about deployed LokiStack instances. Value is always 1 (as the Go Loki Operator exports it)", Family::default());
        let component_replicas = register(&mut root, "lokistack_component_replicas", "Replicas the operator runs per component of a LokiStack (as the Go Loki Operator exports it; no gateway)", Family::default());
        let ingestion_rate_limit = register(&mut root, "lokistack_global_ingestion_rate_limit_bytes", "The ingestion rate limit of every tenant of a LokiStack, in bytes per second (as the Go Loki Operator exports it)", Family::default());
        // controller-runtime's names, so that generic operator dashboards read ours.
        let reconcile_total = register(
            &mut root,
            "controller_runtime_reconcile",
            "Reconciles per controller, by result: success or error",
            Family::default(),
        );
        let reconcile_errors = register(
            &mut root,
            "controller_runtime_reconcile_errors",
            "Reconciles that failed, per controller",
            Family::default(),
        );
        let reconcile_time = register(
            &mut root,
            "controller_runtime_reconcile_time_seconds",
            "Duration of one reconcile, per controller",
            Family::new_with_constructor(seconds as fn() -> Histogram),
        );
        let active_workers = register(
            &mut root,
            "controller_runtime_active_workers",
            "Reconciles running now, per controller",
            Family::default(),
        );
        let queue_depth = register(
            &mut root,
            "workqueue_depth",
            "Objects due for a reconcile that wait for a free worker, per queue",
            Family::default(),
        );
        let webhook_requests = register(
            &mut root,
            "controller_runtime_webhook_requests",
            "Admission reviews answered, per webhook and HTTP status code",
            Family::default(),
        );
        let webhook_latency = register(
            &mut root,
            "controller_runtime_webhook_latency_seconds",
            "Time to answer one admission review, per webhook",
            Family::new_with_constructor(fine_seconds as fn() -> Histogram),
        );
        let r = root.sub_registry_with_prefix("loki_zone_operator");
        let m = Metrics {
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
            failover_pods: register(r, "fast_failover_pods", "Pods the fast failover wrote, by result: out (Ready and zone-available set False: their zone's node Leases all stopped), back (zone-available True: renewed again), failed", Family::default()),
            stacks_by_condition: register(r, "stacks", "LokiStacks whose condition is True, by condition type", Family::default()),
            zones: register(r, "zones_observed", "Known zones (those of nodes an ingester can run on, up or down), per zone-aware stack", Family::default()),
            zone_state: register(r, "zone_state", "1 for the state a known zone is in: Available, Maintenance (every node that is up is cordoned or draining) or Unavailable (status.replication.zoneStatus)", Family::default()),
            rollout_pods: register(r, "rollout_pods", "While a zone-by-zone rollout is under way: the ring members of the stack in the zone", Family::default()),
            rollout_pods_updated: register(r, "rollout_pods_updated", "While a zone-by-zone rollout is under way: the zone's ring members at their StatefulSet's update revision", Family::default()),
            zone_available: register(r, "zone_available", "1 when at least one node of the known zone can run pods, else 0", Family::default()),
            zone_failures_tolerated: register(r, "zone_failures_tolerated", "Zones the stack can lose with writes still reaching quorum, from where its Ready ingesters are", Family::default()),
            write_quorum_met: register(r, "write_quorum_met", "1 when every stream can write a quorum of copies in the available zones, else 0", Family::default()),
            zone_awareness_stage: register(r, "zone_awareness_stage", "1 for the stage of zone-aware replication a stack is in: Enabling, Enabled or Disabling (status.zoneAwareness.stage)", Family::default()),
            zone_read_path_at: register(r, "zone_read_path_at_seconds", "While zones are being turned on and the write path is zone-aware: when queriers and rulers turn zone-aware (status.zoneAwareness.readPathAt), in seconds since the epoch", Family::default()),
            status_condition,
            info,
            component_replicas,
            ingestion_rate_limit,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            queue_depth,
            webhook_requests,
            webhook_latency,
            exported: Mutex::new(HashMap::new()),
            registry: root,
        };
        // Counters a dashboard or alert divides or graphs by label exist from the start,
        // at 0: a series that appears only at its first event leaves panels empty and
        // makes rate() miss that first event.
        for path in ["bind", "annotator"] {
            m.pods_zoned
                .get_or_create(&PathLabel {
                    path: path.to_string(),
                })
                .inc_by(0);
        }
        for result in ["written", "conflict", "failed", "pod_gone"] {
            Metrics::count(&m.annotations, result, 0);
        }
        for result in ["out", "back", "failed"] {
            Metrics::count(&m.failover_pods, result, 0);
        }
        m
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

    /// One reconcile of `controller` ended, after `took`.
    pub fn reconciled(&self, controller: &str, ok: bool, took: std::time::Duration) {
        let c = ControllerLabel {
            controller: controller.to_string(),
        };
        self.reconcile_total
            .get_or_create(&ControllerResultLabels {
                controller: controller.to_string(),
                result: if ok { "success" } else { "error" }.to_string(),
            })
            .inc();
        if !ok {
            self.reconcile_errors.get_or_create(&c).inc();
        }
        self.reconcile_time
            .get_or_create(&c)
            .observe(took.as_secs_f64());
    }

    /// Counts a reconcile of `controller` as running until the guard is dropped.
    pub fn worker(&self, controller: &str) -> Held {
        Held::new(
            self.active_workers
                .get_or_create(&ControllerLabel {
                    controller: controller.to_string(),
                })
                .clone(),
        )
    }

    /// Counts an object of `queue` as waiting for a worker until the guard is dropped.
    pub fn waiting(&self, queue: &str) -> Held {
        Held::new(
            self.queue_depth
                .get_or_create(&QueueLabel {
                    name: queue.to_string(),
                })
                .clone(),
        )
    }

    /// One admission review of `webhook` answered with HTTP status `code`, after `took`.
    pub fn webhook_request(&self, webhook: &str, code: u16, took: std::time::Duration) {
        self.webhook_requests
            .get_or_create(&WebhookCodeLabels {
                webhook: webhook.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.webhook_latency
            .get_or_create(&WebhookLabel {
                webhook: webhook.to_string(),
            })
            .observe(took.as_secs_f64());
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

    /// Records what a stack's spec and status say; `None` when the stack is gone.
    pub fn set_stack(&self, namespace: &str, stack: &str, view: Option<StackView<'_>>) {
        let key = (namespace.to_string(), stack.to_string());
        let labels = StackLabels {
            stack_namespace: namespace.to_string(),
            stack_name: stack.to_string(),
        };
        let mut exported = self.exported();
        if let Some(old) = exported.remove(&key) {
            self.remove(&old);
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

    fn remove(&self, old: &Exported) {
        for l in &old.conditions {
            self.status_condition.remove(l);
        }
        if let Some(l) = &old.info {
            self.info.remove(l);
        }
        for l in &old.components {
            self.component_replicas.remove(l);
        }
        if let Some(l) = &old.sized {
            self.ingestion_rate_limit.remove(l);
        }
        for l in &old.zones {
            self.zone_available.remove(l);
        }
        for l in &old.zone_states {
            self.zone_state.remove(l);
        }
        for l in &old.rollout {
            self.rollout_pods.remove(l);
            self.rollout_pods_updated.remove(l);
        }
        if let Some(l) = &old.stage {
            self.zone_awareness_stage.remove(l);
        }
    }

    fn export(&self, labels: &StackLabels, view: &StackView<'_>) -> Exported {
        let mut out = Exported::default();
        let sized = SizedStackLabels {
            stack_namespace: labels.stack_namespace.clone(),
            stack_name: labels.stack_name.clone(),
            size: view.spec.size.as_str().to_string(),
        };
        let eff = defaults::effective(view.spec);
        self.export_conditions(&sized, &eff, view.status, &mut out);
        self.export_spec(&sized, &eff, view.spec, &mut out);
        out.stage = self.export_stage(labels, view.status);
        self.export_rollout(labels, view.status, &mut out);
        self.export_zones(labels, view.status, &mut out);
        out
    }

    /// `lokistack_status_condition` as the Go Loki Operator exports it (after
    /// kube-state-metrics): per condition a `status="true"` series, 1 while it is True,
    /// and a `status="false"` series, 1 while it is not; Ready, Pending, Failed and
    /// Degraded always, with an empty reason while the status lacks them; and each of the
    /// Go operator's Warning reasons that applies as a Warning of its own, since our one
    /// Warning condition carries the most pressing reason only.
    fn export_conditions(
        &self,
        sized: &SizedStackLabels,
        eff: &EffectiveStack,
        status: &LokiStackStatus,
        out: &mut Exported,
    ) {
        let mut series = |condition: &str, reason: &str, active: bool| {
            for (state, value) in [("true", active), ("false", !active)] {
                let l = StatusConditionLabels {
                    stack_namespace: sized.stack_namespace.clone(),
                    stack_name: sized.stack_name.clone(),
                    size: sized.size.clone(),
                    condition: condition.to_string(),
                    reason: reason.to_string(),
                    status: state.to_string(),
                };
                self.status_condition
                    .get_or_create(&l)
                    .set(i64::from(value));
                out.conditions.push(l);
            }
        };
        for t in [
            ConditionType::Failed,
            ConditionType::Ready,
            ConditionType::Pending,
            ConditionType::Degraded,
        ] {
            if !status.conditions.iter().any(|c| c.type_ == t.as_str()) {
                series(t.as_str(), "", false);
            }
        }
        let mut warning = None;
        for c in &status.conditions {
            let active = c.status == "True";
            series(&c.type_, &c.reason, active);
            if active {
                out.true_conditions.push(c.type_.clone());
                if c.type_ == ConditionType::Warning.as_str() {
                    warning = Some(c.reason.as_str());
                }
            }
        }
        for (reason, _) in defaults::advisories(eff) {
            if warning != Some(reason.as_str()) {
                series(ConditionType::Warning.as_str(), reason.as_str(), true);
            }
        }
    }

    /// `lokistack_info`, `lokistack_component_replicas` and
    /// `lokistack_global_ingestion_rate_limit_bytes`, from the spec with its defaults.
    fn export_spec(
        &self,
        sized: &SizedStackLabels,
        eff: &EffectiveStack,
        spec: &LokiStackSpec,
        out: &mut Exported,
    ) {
        let secret = &spec.storage.secret;
        let info = InfoLabels {
            stack_namespace: sized.stack_namespace.clone(),
            stack_name: sized.stack_name.clone(),
            size: sized.size.clone(),
            object_storage_type: secret.type_.as_str().to_string(),
            credential_mode: match secret.credential_mode.unwrap_or(CredentialMode::Static) {
                CredentialMode::Static => "static",
                CredentialMode::Token => "token",
                CredentialMode::TokenCco => "token-cco",
            }
            .to_string(),
            schema_version: eff
                .schemas
                .last()
                .map(|s| s.version.as_str().to_string())
                .unwrap_or_default(),
            tenancy_mode: spec
                .tenants
                .as_ref()
                .and_then(|t| t.0.get("mode"))
                .and_then(|m| m.as_str())
                .unwrap_or_default()
                .to_string(),
        };
        self.info.get_or_create(&info).set(1);
        out.info = Some(info);
        for c in &eff.components {
            let l = ComponentLabels {
                stack_namespace: sized.stack_namespace.clone(),
                stack_name: sized.stack_name.clone(),
                size: sized.size.clone(),
                component: c.component.name().to_string(),
            };
            self.component_replicas
                .get_or_create(&l)
                .set(i64::from(c.replicas));
            out.components.push(l);
        }
        if let Some(mb) =
            global_ingestion_rate_mb(spec.size, spec.limits.as_ref()).filter(|mb| *mb > 0)
        {
            self.ingestion_rate_limit
                .get_or_create(sized)
                .set(mb.saturating_mul(1 << 20));
            out.sized = Some(sized.clone());
        }
    }

    /// A zone-by-zone rollout: each zone's ring members, and those updated.
    fn export_rollout(&self, labels: &StackLabels, status: &LokiStackStatus, out: &mut Exported) {
        let Some(rollout) = &status.rollout else {
            return;
        };
        for z in &rollout.zones {
            let l = ZoneLabels {
                stack_namespace: labels.stack_namespace.clone(),
                stack_name: labels.stack_name.clone(),
                zone: z.zone.clone(),
            };
            self.rollout_pods.get_or_create(&l).set(i64::from(z.total));
            self.rollout_pods_updated
                .get_or_create(&l)
                .set(i64::from(z.updated));
            out.rollout.push(l);
        }
    }

    fn export_zones(&self, labels: &StackLabels, status: &LokiStackStatus, out: &mut Exported) {
        let Some(r) = status.replication.as_ref().filter(|r| !r.zones.is_empty()) else {
            return;
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
            // A status an older version wrote has no state: availability says enough.
            let state = r
                .zone_status
                .iter()
                .find(|s| &s.zone == z)
                .and_then(|s| s.state.clone())
                .unwrap_or_else(|| {
                    if available {
                        ZoneState::Available
                    } else {
                        ZoneState::Unavailable
                    }
                    .as_str()
                    .to_string()
                });
            let l = ZoneStateLabels {
                stack_namespace: labels.stack_namespace.clone(),
                stack_name: labels.stack_name.clone(),
                zone: z.clone(),
                state,
            };
            self.zone_state.get_or_create(&l).set(1);
            out.zone_states.push(l);
        }
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

    /// Removes every stack's series: this replica no longer leads.
    pub fn forget_stacks(&self) {
        self.retain(&std::collections::HashSet::new());
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
    use crate::model::api::{
        LokiStackSize, ObjectStorageSchema, ObjectStorageSchemaVersion, ReplicationStatus,
        RolloutStatus, ZoneRolloutStatus, ZoneStatus,
    };
    use crate::testing::stack_spec;
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

    fn small() -> &'static LokiStackSpec {
        static SPEC: std::sync::OnceLock<LokiStackSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| stack_spec(LokiStackSize::Small))
    }

    fn view(status: &LokiStackStatus) -> Option<StackView<'_>> {
        Some(StackView {
            spec: small(),
            status,
        })
    }

    /// The value of the one series of `family` whose labels include every pair.
    fn value(text: &str, family: &str, labels: &[(&str, &str)]) -> Option<String> {
        let mut found = text.lines().filter(|l| {
            l.starts_with(&format!("{family}{{"))
                && labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        });
        let line = found.next()?;
        assert!(
            found.next().is_none(),
            "more than one {family} {labels:?} in\n{text}"
        );
        line.rsplit(' ').next().map(str::to_string)
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
            "lokistack_status_condition{stack_namespace=\"ns\",stack_name=\"b\",size=\"1x.small\",condition=\"Degraded\",reason=\"DegradedReason\",status=\"true\"} 1",
            "lokistack_status_condition{stack_namespace=\"ns\",stack_name=\"b\",size=\"1x.small\",condition=\"Degraded\",reason=\"DegradedReason\",status=\"false\"} 0",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // A changed status replaces the stack's series; a gone stack has none.
        let a2 = status(&["Ready"], &[("z1", true), ("z2", true), ("z3", true)]);
        m.set_stack("ns", "a", view(&a2));
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                "lokistack_status_condition",
                &[
                    ("stack_name", "a"),
                    ("condition", "Warning"),
                    ("status", "true")
                ]
            )
            .as_deref(),
            Some("0"),
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

    /// The Go Loki Operator's `LokistackComponentsNotReadyWarning` reads
    /// `{condition="Ready", status="false"}` and expects 1 while Ready is not True.
    #[test]
    fn conditions_are_the_go_operators_true_and_false_series() {
        let m = Metrics::default();
        let mut s = status(&["Degraded"], &[]);
        // No Pending or Failed condition in this status: both get their default series.
        s.conditions.retain(|c| c.type_ != "Warning");
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        let get = |condition: &str, reason: &str, state: &str| {
            value(
                &text,
                "lokistack_status_condition",
                &[
                    ("condition", condition),
                    ("reason", reason),
                    ("status", state),
                ],
            )
        };
        for (condition, reason, t, f) in [
            ("Ready", "ReadyReason", "0", "1"),
            ("Degraded", "DegradedReason", "1", "0"),
            ("Pending", "", "0", "1"),
            ("Failed", "", "0", "1"),
        ] {
            assert_eq!(
                get(condition, reason, "true").as_deref(),
                Some(t),
                "{condition} true\n{text}"
            );
            assert_eq!(
                get(condition, reason, "false").as_deref(),
                Some(f),
                "{condition} false\n{text}"
            );
        }
        assert!(!text.contains("status=\"True\""), "{text}");
        // Ready turning True flips the pair, and the old reason's series go.
        let mut s = status(&["Ready"], &[]);
        s.conditions[0].reason = "ReadyComponents".into();
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                "lokistack_status_condition",
                &[("condition", "Ready"), ("status", "false")]
            )
            .as_deref(),
            Some("0"),
            "{text}"
        );
        assert!(!text.contains("ReadyReason"), "{text}");
    }

    #[test]
    fn the_go_operators_warnings_get_series_of_their_own() {
        let m = Metrics::default();
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.storage.schemas = vec![ObjectStorageSchema {
            version: ObjectStorageSchemaVersion::V12,
            effective_date: "2023-01-01".into(),
        }];
        let s = status(&["Ready", "Warning"], &[]);
        m.set_stack(
            "ns",
            "a",
            Some(StackView {
                spec: &spec,
                status: &s,
            }),
        );
        let text = m.encode();
        let labels = [
            ("condition", "Warning"),
            ("reason", "StorageNeedsSchemaUpdate"),
            ("status", "true"),
        ];
        assert_eq!(
            value(&text, "lokistack_status_condition", &labels).as_deref(),
            Some("1"),
            "{text}"
        );
        // Our own Warning keeps its series beside it.
        assert_eq!(
            value(
                &text,
                "lokistack_status_condition",
                &[("reason", "WarningReason"), ("status", "true")]
            )
            .as_deref(),
            Some("1"),
            "{text}"
        );
        assert_eq!(
            value(&text, "lokistack_info", &[("stack_name", "a")]).as_deref(),
            Some("1")
        );
        assert!(text.contains("schema_version=\"v12\""), "{text}");
        // A v13 period added: the advisory and its series go.
        spec.storage.schemas.push(ObjectStorageSchema {
            version: ObjectStorageSchemaVersion::V13,
            effective_date: "2024-01-01".into(),
        });
        m.set_stack(
            "ns",
            "a",
            Some(StackView {
                spec: &spec,
                status: &s,
            }),
        );
        let text = m.encode();
        assert!(!text.contains("StorageNeedsSchemaUpdate"), "{text}");
        assert!(text.contains("schema_version=\"v13\""), "{text}");
    }

    #[test]
    fn replicas_and_the_ingestion_limit_follow_the_spec() {
        let m = Metrics::default();
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.template = Some(
            serde_json::from_value(serde_json::json!({"querier": {"replicas": 5}}))
                .expect("template"),
        );
        let s = status(&["Ready"], &[]);
        m.set_stack(
            "ns",
            "a",
            Some(StackView {
                spec: &spec,
                status: &s,
            }),
        );
        let text = m.encode();
        for (component, n) in [
            ("ingester", "3"),
            ("querier", "5"),
            ("compactor", "1"),
            ("query-frontend", "2"),
        ] {
            assert_eq!(
                value(
                    &text,
                    "lokistack_component_replicas",
                    &[("component", component)]
                )
                .as_deref(),
                Some(n),
                "{component}\n{text}"
            );
        }
        // The ruler is not run, and no gateway: neither has a series.
        assert!(!text.contains("component=\"ruler\""), "{text}");
        assert!(!text.contains("component=\"gateway\""), "{text}");
        // 1x.small's 10 MB, as Loki counts megabytes.
        assert_eq!(
            value(
                &text,
                "lokistack_global_ingestion_rate_limit_bytes",
                &[("stack_name", "a")]
            )
            .as_deref(),
            Some("10485760"),
            "{text}"
        );
        m.set_stack("ns", "a", None);
        let text = m.encode();
        assert!(!text.contains("stack_name=\"a\""), "{text}");
    }

    #[test]
    fn zone_states_and_a_rollout_are_one_series_each() {
        let m = Metrics::default();
        let mut s = status(&["Ready"], &[("z1", true), ("z2", true), ("z3", false)]);
        if let Some(r) = s.replication.as_mut() {
            r.zone_status = vec![
                ZoneStatus {
                    zone: "z1".into(),
                    state: Some("Available".into()),
                    available: true,
                    ..Default::default()
                },
                ZoneStatus {
                    zone: "z2".into(),
                    state: Some("Maintenance".into()),
                    available: true,
                    ..Default::default()
                },
                // A status an older version wrote: no state; availability decides.
                ZoneStatus {
                    zone: "z3".into(),
                    state: None,
                    available: false,
                    ..Default::default()
                },
            ];
        }
        s.rollout = Some(RolloutStatus {
            zone: Some("z1".into()),
            zones: vec![ZoneRolloutStatus {
                zone: "z1".into(),
                updated: 1,
                total: 2,
            }],
            waiting_for: None,
        });
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        for (zone, state) in [
            ("z1", "Available"),
            ("z2", "Maintenance"),
            ("z3", "Unavailable"),
        ] {
            assert_eq!(
                value(&text, "loki_zone_operator_zone_state", &[("zone", zone)]).as_deref(),
                Some("1"),
                "{zone}\n{text}"
            );
            assert!(
                text.contains(&format!("zone=\"{zone}\",state=\"{state}\"")),
                "{text}"
            );
        }
        assert_eq!(
            value(&text, "loki_zone_operator_rollout_pods", &[("zone", "z1")]).as_deref(),
            Some("2")
        );
        assert_eq!(
            value(
                &text,
                "loki_zone_operator_rollout_pods_updated",
                &[("zone", "z1")]
            )
            .as_deref(),
            Some("1")
        );
        // The zone back and the rollout done: the old state's and the rollout's series go.
        if let Some(r) = s.replication.as_mut() {
            r.zone_status[1].state = Some("Available".into());
        }
        s.rollout = None;
        m.set_stack("ns", "a", view(&s));
        let text = m.encode();
        assert!(!text.contains("state=\"Maintenance\""), "{text}");
        assert!(!text.contains("loki_zone_operator_rollout_pods{"), "{text}");
    }

    #[test]
    fn the_zoning_counters_start_at_zero() {
        let text = Metrics::default().encode();
        for line in [
            "loki_zone_operator_pods_zoned_total{path=\"bind\"} 0",
            "loki_zone_operator_pods_zoned_total{path=\"annotator\"} 0",
            "loki_zone_operator_zone_annotations_total{result=\"written\"} 0",
            "loki_zone_operator_zone_annotations_total{result=\"failed\"} 0",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn controller_and_webhook_series_have_controller_runtimes_names() {
        let m = Metrics::default();
        {
            let _waiting = m.waiting("lokistack");
            let _running = m.worker("lokistack");
            let text = m.encode();
            assert_eq!(
                value(&text, "workqueue_depth", &[("name", "lokistack")]).as_deref(),
                Some("1")
            );
            assert_eq!(
                value(
                    &text,
                    "controller_runtime_active_workers",
                    &[("controller", "lokistack")]
                )
                .as_deref(),
                Some("1")
            );
        }
        m.reconciled("lokistack", true, std::time::Duration::from_millis(3));
        m.reconciled("lokistack", false, std::time::Duration::from_millis(3));
        m.webhook_request("/zone-at-bind", 200, std::time::Duration::from_millis(1));
        let text = m.encode();
        for (family, labels, want) in [
            ("workqueue_depth", vec![("name", "lokistack")], "0"),
            (
                "controller_runtime_active_workers",
                vec![("controller", "lokistack")],
                "0",
            ),
            (
                "controller_runtime_reconcile_total",
                vec![("result", "success")],
                "1",
            ),
            (
                "controller_runtime_reconcile_total",
                vec![("result", "error")],
                "1",
            ),
            (
                "controller_runtime_reconcile_errors_total",
                vec![("controller", "lokistack")],
                "1",
            ),
            (
                "controller_runtime_reconcile_time_seconds_count",
                vec![("controller", "lokistack")],
                "2",
            ),
            (
                "controller_runtime_webhook_requests_total",
                vec![("webhook", "/zone-at-bind"), ("code", "200")],
                "1",
            ),
            (
                "controller_runtime_webhook_latency_seconds_count",
                vec![("webhook", "/zone-at-bind")],
                "1",
            ),
        ] {
            assert_eq!(
                value(&text, family, &labels).as_deref(),
                Some(want),
                "{family}\n{text}"
            );
        }
    }
}
