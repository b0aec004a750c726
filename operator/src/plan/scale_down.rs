//! Ingesters leaving a zone-aware stack for good.
//!
//! The ingesters of a zone-aware stack keep their ring entry and tokens across restarts
//! (`unregister_on_shutdown: false` and a tokens file on their volume), so restarting a
//! whole zone does not reshuffle streams. An ingester that a scale-down removes must
//! leave the ring, though, or it stays there for good as an unhealthy member, owning
//! tokens whose streams then keep one copy fewer. So before the ingester StatefulSet
//! shrinks, the operator asks every ingester that goes (the highest ordinals, as the
//! StatefulSet removes them) to prepare: Loki's `POST /ingester/prepare_shutdown` makes
//! it flush its chunks and unregister when it stops, and keeps that on its volume across
//! a crash. Only once every one of them has answered does the StatefulSet shrink. If one
//! cannot be asked, the StatefulSet keeps its replicas, those already asked are asked to
//! forget it (`DELETE`), and an Event says why; the next reconcile tries again.

use k8s_openapi::api::core::v1::Pod;

use crate::intent::{Action, Leaving, ScaleDown};
use crate::model::defaults::{Component, EffectiveStack};
use crate::model::names;
use crate::observe::Snapshot;
use crate::render::Child;

/// The ingester StatefulSet's replicas: as it runs, and as rendered now.
pub fn replicas(snapshot: &Snapshot, children: &[Child], stack: &str) -> Option<(i32, i32)> {
    let name = Component::Ingester.workload_name(stack);
    let running = snapshot
        .statefulsets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))?
        .spec
        .as_ref()?
        .replicas?;
    let wanted = children.iter().find_map(|c| match c {
        Child::StatefulSet(s) if s.metadata.name.as_deref() == Some(name.as_str()) => {
            s.spec.as_ref()?.replicas
        }
        _ => None,
    })?;
    Some((running, wanted))
}

/// The ingesters that going from `running` to `wanted` replicas removes, with where to
/// reach them.
pub fn leaving(stack: &str, running: i32, wanted: i32, pods: &[&Pod]) -> Vec<Leaving> {
    let workload = Component::Ingester.workload_name(stack);
    (wanted.max(0)..running)
        .map(|ordinal| {
            let name = format!("{workload}-{ordinal}");
            let pod = pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
            let base_url = pod.and_then(|p| running_ip(p)).map(|ip| {
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_string()
                };
                format!("http://{host}:{}", names::PORT_HTTP)
            });
            Leaving {
                pod: name,
                base_url,
            }
        })
        .collect()
}

fn running_ip(pod: &Pod) -> Option<&str> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    status.pod_ip.as_deref().filter(|ip| !ip.is_empty())
}

/// The scale-down of this reconcile, when the rendered children shrink a zone-aware
/// stack's ingesters: who leaves, and the ingester StatefulSet held at its current
/// replicas, applied instead while one of them cannot be asked.
pub fn plan(snapshot: &Snapshot, eff: &EffectiveStack, action: &Action) -> Option<ScaleDown> {
    if !eff.zone_aware() {
        return None;
    }
    let Action::Apply { children, .. } = action else {
        return None;
    };
    let (running, wanted) = replicas(snapshot, children, &snapshot.name)?;
    if wanted >= running {
        return None;
    }
    let name = Component::Ingester.workload_name(&snapshot.name);
    let mut held = children
        .iter()
        .find(|c| matches!(c, Child::StatefulSet(s) if s.metadata.name.as_deref() == Some(name.as_str())))?
        .clone();
    if let Child::StatefulSet(s) = &mut held {
        if let Some(spec) = s.spec.as_mut() {
            spec.replicas = Some(running);
        }
    }
    Some(ScaleDown {
        running,
        wanted,
        leaving: leaving(&snapshot.name, running, wanted, &snapshot.pod_refs()),
        held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn pod(name: &str, phase: &str, ip: Option<&str>) -> Pod {
        let p = testing::pod(name).phase(phase);
        match ip {
            Some(ip) => p.ip(ip),
            None => p,
        }
        .build()
    }

    #[test]
    fn the_highest_ordinals_leave_and_only_running_pods_can_be_asked() {
        let pods = [
            pod("s-ingester-0", "Running", Some("10.0.0.1")),
            pod("s-ingester-4", "Running", Some("10.0.0.5")),
            pod("s-ingester-5", "Pending", None),
            pod("s-ingester-6", "Running", Some("fd00::7")),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let l = leaving("s", 7, 4, &refs);
        assert_eq!(
            l,
            vec![
                Leaving {
                    pod: "s-ingester-4".into(),
                    base_url: Some("http://10.0.0.5:3100".into())
                },
                Leaving {
                    pod: "s-ingester-5".into(),
                    base_url: None
                },
                Leaving {
                    pod: "s-ingester-6".into(),
                    base_url: Some("http://[fd00::7]:3100".into())
                },
            ]
        );
        assert!(leaving("s", 3, 3, &refs).is_empty());
        assert!(
            leaving("s", 3, 6, &refs).is_empty(),
            "a scale-up asks nobody"
        );
    }
}
