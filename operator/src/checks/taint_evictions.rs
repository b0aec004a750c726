//! Whether Kubernetes may still delete a Ready pod because of a node loss: what a
//! rollout must know before it counts that pod's zone as whole and moves on.
//!
//! Kubernetes' taint-eviction controller (in kube-controller-manager) schedules the
//! deletion of each pod on a node tainted `NoExecute` `unreachable` or `not-ready` for
//! when the pod's toleration of that taint ends (300 s by default), and it keys that
//! work by the pod's name, not its uid (read in `pkg/controller/tainteviction` of 1.35,
//! and seen there). When the node returns before it is due, the work is cancelled only
//! if the controller sees a pod of that name on the node once the taint is gone; a
//! StatefulSet pod recreated under the same name meanwhile can be deleted when the
//! work fires, or at once when the controller sees it bound to the node before it has
//! seen the taint removed. No object shows that work, so a pod on a node that became
//! Ready again less than the pod's toleration (plus [`RETURN_SETTLE`]) ago is counted
//! as one Kubernetes may still delete. That is the safe side: it only delays.

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::checks::zones::{node_ready, tolerates};
use crate::model::names;

/// How long after a node turns Ready its loss taints may still be on it, as the
/// controller sees them: the node lifecycle controller removes them on its next pass
/// (`--node-monitor-period`, 5 s by default), and the taint-eviction controller learns
/// it from its own watch.
pub const RETURN_SETTLE: SignedDuration = SignedDuration::from_secs(10);

/// The taints whose evictions are scheduled for when a toleration ends.
const EVICTING_TAINTS: [&str; 2] = [names::TAINT_UNREACHABLE, names::TAINT_NOT_READY];

/// Why Kubernetes may still delete a pod that is Ready now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hazard {
    /// The pod carries a `DisruptionTarget` condition: Kubernetes announced its deletion.
    Announced,
    /// Its node carries a `NoExecute` taint the pod does not tolerate for good.
    Tainted,
    /// Its node became Ready again recently: an eviction scheduled while it was lost may
    /// still fire, until then.
    Returned { until: Timestamp },
}

/// The hazard to a pod bound to `node` (the node as the caches hold it), at `now`.
pub fn hazard(pod: &Pod, node: Option<&Node>, now: Timestamp) -> Option<Hazard> {
    if announced(pod) {
        return Some(Hazard::Announced);
    }
    let node = node?;
    let tolerations = pod_tolerations(pod);
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    let no_execute = taints
        .unwrap_or(&[])
        .iter()
        .filter(|t| t.effect == "NoExecute");
    if no_execute
        .into_iter()
        .any(|t| toleration_ends(tolerations, t).is_some())
    {
        return Some(Hazard::Tainted);
    }
    let window = eviction_window(tolerations)?;
    let back = ready_since(node)?;
    let until = back.checked_add(window + RETURN_SETTLE).ok()?;
    (until > now).then_some(Hazard::Returned { until })
}

/// Kubernetes marked the pod for deletion (`DisruptionTarget`, by whatever controller).
fn announced(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == names::POD_CONDITION_DISRUPTION_TARGET && c.status == "True")
        })
}

fn pod_tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// After how long the pod is evicted from a node with `taint`: `None` when it tolerates
/// it for good; zero when it does not tolerate it (as Kubernetes takes the shortest of
/// the matching tolerations, and forever only when none has `tolerationSeconds`).
fn toleration_ends(tolerations: &[Toleration], taint: &Taint) -> Option<SignedDuration> {
    let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
    if matching.is_empty() {
        return Some(SignedDuration::ZERO);
    }
    let secs = matching.iter().filter_map(|t| t.toleration_seconds).min()?;
    Some(SignedDuration::from_secs(secs.max(0)))
}

/// The longest an eviction scheduled for a node loss can be due after the loss ended:
/// the longest finite toleration of the two loss taints; `None` when the pod tolerates
/// both for good.
fn eviction_window(tolerations: &[Toleration]) -> Option<SignedDuration> {
    EVICTING_TAINTS
        .iter()
        .filter_map(|key| {
            let taint = Taint {
                key: (*key).to_string(),
                effect: "NoExecute".into(),
                ..Default::default()
            };
            toleration_ends(tolerations, &taint)
        })
        .max()
}

/// When the node's Ready condition last turned True; `None` when it is not Ready, or
/// its kubelet gave no time (then nothing says it was lost).
fn ready_since(node: &Node) -> Option<Timestamp> {
    if !node_ready(node) {
        return None;
    }
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const T0: i64 = 1_800_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).expect("a time")
    }

    /// A node Ready since `since` (seconds after T0), with `taints` (key, effect).
    fn node(since: i64, taints: &[(&str, &str)]) -> Node {
        let mut n = testing::node("n", &[]);
        if let Some(c) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].last_transition_time = Some(Time(at(since)));
        }
        n.spec = Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|(k, e)| Taint {
                        key: (*k).into(),
                        effect: (*e).into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        n
    }

    /// A pod with the tolerations the API server adds by default (300 s of both loss
    /// taints), or `secs` of them; `None` tolerates them for good.
    fn pod(secs: Option<i64>) -> Pod {
        let mut p = testing::pod("ing-0").ready_is(true).build();
        let toleration = |key: &str| Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: secs,
            ..Default::default()
        };
        p.spec.get_or_insert_with(Default::default).tolerations = Some(vec![
            toleration(names::TAINT_NOT_READY),
            toleration(names::TAINT_UNREACHABLE),
        ]);
        p
    }

    #[test]
    fn a_node_ready_for_longer_than_the_toleration_is_no_hazard() {
        let n = node(0, &[]);
        assert_eq!(hazard(&pod(Some(300)), Some(&n), at(311)), None);
        // Unbound, or on a node the caches do not hold: nothing to go by.
        assert_eq!(hazard(&pod(Some(300)), None, at(1)), None);
    }

    #[test]
    fn a_node_back_within_the_toleration_holds_until_it_and_the_settle_end() {
        let n = node(0, &[]);
        let until = at(300 + 10);
        assert_eq!(
            hazard(&pod(Some(300)), Some(&n), at(309)),
            Some(Hazard::Returned { until })
        );
        // Short tolerations, short wait; none at all still waits for the taints to go.
        let short = Hazard::Returned { until: at(20) };
        assert_eq!(hazard(&pod(Some(10)), Some(&n), at(15)), Some(short));
        let untolerated = testing::pod("ing-0").ready_is(true).build();
        assert_eq!(
            hazard(&untolerated, Some(&n), at(5)),
            Some(Hazard::Returned { until: at(10) })
        );
        assert_eq!(hazard(&untolerated, Some(&n), at(10)), None);
    }

    #[test]
    fn a_pod_that_tolerates_the_loss_for_good_never_waits() {
        assert_eq!(hazard(&pod(None), Some(&node(0, &[])), at(1)), None);
        let tainted = node(0, &[(names::TAINT_UNREACHABLE, "NoExecute")]);
        assert_eq!(hazard(&pod(None), Some(&tainted), at(1)), None);
    }

    #[test]
    fn a_no_execute_taint_on_the_node_is_an_eviction_under_way() {
        let tainted = node(-1000, &[(names::TAINT_UNREACHABLE, "NoExecute")]);
        assert_eq!(
            hazard(&pod(Some(300)), Some(&tainted), at(0)),
            Some(Hazard::Tainted)
        );
        // Any NoExecute taint it does not tolerate, not only the loss taints.
        let other = node(-1000, &[("example.com/drain", "NoExecute")]);
        assert_eq!(
            hazard(&pod(Some(300)), Some(&other), at(0)),
            Some(Hazard::Tainted)
        );
        // A NoSchedule taint evicts nothing.
        let cordon = node(-1000, &[(names::TAINT_UNSCHEDULABLE, "NoSchedule")]);
        assert_eq!(hazard(&pod(Some(300)), Some(&cordon), at(0)), None);
    }

    #[test]
    fn an_announced_deletion_is_a_hazard_wherever_the_pod_is() {
        let p = testing::pod("ing-0")
            .ready_is(true)
            .condition_since(
                names::POD_CONDITION_DISRUPTION_TARGET,
                "True",
                "2027-01-15T08:00:00Z",
            )
            .build();
        assert_eq!(hazard(&p, None, at(0)), Some(Hazard::Announced));
        let cleared = testing::pod("ing-0")
            .ready_is(true)
            .condition_since(
                names::POD_CONDITION_DISRUPTION_TARGET,
                "False",
                "2027-01-15T08:00:00Z",
            )
            .build();
        assert_eq!(hazard(&cleared, None, at(0)), None);
    }

    #[test]
    fn a_node_not_ready_or_without_a_transition_time_is_left_to_the_zone_check() {
        let mut n = node(0, &[]);
        if let Some(c) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].status = "Unknown".into();
        }
        assert_eq!(hazard(&pod(Some(300)), Some(&n), at(1)), None);
        let no_time = testing::node("n", &[]);
        assert_eq!(hazard(&pod(Some(300)), Some(&no_time), at(1)), None);
    }
}
