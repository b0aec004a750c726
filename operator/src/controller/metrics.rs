//! Prometheus metrics, served as text on `/metrics`.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::conditions::ConditionType;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabel {
    pub condition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StackLabels {
    pub namespace: String,
    pub stack: String,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub annotations: Family<ResultLabel, Counter>,
    pub bind_to_annotated: Histogram,
    pub applies: Family<ResultLabel, Counter>,
    stacks_by_condition: Family<ConditionLabel, Gauge>,
    zones: Family<StackLabels, Gauge>,
    /// The conditions that are True, per stack: the source of `stacks_by_condition`.
    true_conditions: Mutex<HashMap<(String, String), Vec<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("loki_zone_operator");
        let reconciles = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles of LokiStacks, by result: ok, held_back, or the step that failed (observe_failed, plan_failed, apply_failed, status_failed)",
            reconciles.clone(),
        );
        // 1 ms .. ~16 s
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            reconcile_duration.clone(),
        );
        let annotations = Family::<ResultLabel, Counter>::default();
        registry.register(
            "zone_annotations",
            "Zone annotations written by the pod annotator, by result",
            annotations.clone(),
        );
        // 1 ms .. ~16 s
        let bind_to_annotated = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "bind_to_annotated_seconds",
            "Time from seeing a zone-aware pod bound to a node to its zone annotation being written",
            bind_to_annotated.clone(),
        );
        let applies = Family::<ResultLabel, Counter>::default();
        registry.register(
            "child_applies",
            "Children per reconcile: applied, unchanged (skipped), pruned, failed",
            applies.clone(),
        );
        let stacks_by_condition = Family::<ConditionLabel, Gauge>::default();
        registry.register(
            "stacks",
            "LokiStacks whose condition is True, by condition type",
            stacks_by_condition.clone(),
        );
        let zones = Family::<StackLabels, Gauge>::default();
        registry.register(
            "zones_observed",
            "Zones found on eligible nodes, per zone-aware stack",
            zones.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_duration,
            annotations,
            bind_to_annotated,
            applies,
            stacks_by_condition,
            zones,
            true_conditions: Mutex::new(HashMap::new()),
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

    /// Records a stack's True conditions and zone count; `None` when it is gone.
    pub fn set_stack(
        &self,
        namespace: &str,
        stack: &str,
        true_conditions: Option<Vec<String>>,
        zones: Option<usize>,
    ) {
        let key = (namespace.to_string(), stack.to_string());
        let labels = StackLabels {
            namespace: namespace.to_string(),
            stack: stack.to_string(),
        };
        match zones {
            Some(z) => {
                self.zones
                    .get_or_create(&labels)
                    .set(i64::try_from(z).unwrap_or(i64::MAX));
            }
            None => {
                self.zones.remove(&labels);
            }
        }
        let mut all = self
            .true_conditions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match true_conditions {
            Some(c) => all.insert(key, c),
            None => all.remove(&key),
        };
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for conds in all.values() {
            for c in conds {
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
        let gone: Vec<(String, String)> = {
            let all = self
                .true_conditions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            all.keys().filter(|k| !live.contains(*k)).cloned().collect()
        };
        for (ns, name) in gone {
            self.set_stack(&ns, &name, None, None);
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

    #[test]
    fn stacks_by_condition_follow_the_latest_state() {
        let m = Metrics::default();
        m.set_stack(
            "ns",
            "a",
            Some(vec!["Ready".into(), "Warning".into()]),
            Some(3),
        );
        m.set_stack("ns", "b", Some(vec!["Degraded".into()]), Some(2));
        let text = m.encode();
        assert!(
            text.contains("loki_zone_operator_stacks{condition=\"Ready\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("loki_zone_operator_zones_observed{namespace=\"ns\",stack=\"a\"} 3"),
            "{text}"
        );
        m.set_stack("ns", "a", None, None);
        let text = m.encode();
        assert!(
            text.contains("loki_zone_operator_stacks{condition=\"Ready\"} 0"),
            "{text}"
        );
        assert!(!text.contains("stack=\"a\""), "{text}");
    }

    #[test]
    fn deleted_stacks_lose_their_series() {
        let m = Metrics::default();
        m.set_stack("ns", "kept", Some(vec!["Ready".into()]), Some(3));
        m.set_stack("ns", "deleted", Some(vec!["Ready".into()]), Some(2));
        m.retain(&[("ns".to_string(), "kept".to_string())].into());
        let text = m.encode();
        assert!(text.contains("stack=\"kept\""), "{text}");
        assert!(!text.contains("stack=\"deleted\""), "{text}");
        assert!(
            text.contains("loki_zone_operator_stacks{condition=\"Ready\"} 1"),
            "{text}"
        );
    }
}
