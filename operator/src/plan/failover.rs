//! The fast failover: the pods of a zone whose node Leases all stopped leave their
//! Services once the zone is silent (`checks/silence.rs` says when: late on fresh
//! evidence), instead of after the node lifecycle controller's grace period.
//!
//! A pod leaves its Services when its Ready condition is False: the endpoints
//! controllers then drop it, and kube-proxy stops sending to it. A readiness gate alone
//! would not do: the kubelet computes Ready from the gates, and a stopped zone's
//! kubelets compute nothing. So the plan sets Ready False itself, as the node lifecycle
//! controller does for a node it judges lost, together with the pod condition
//! [`names::POD_CONDITION_ZONE_AVAILABLE`], which says why and marks the pods it took
//! out. When the zone's Leases are seen renewed again it sets that condition True and
//! leaves Ready to the kubelet, whose status sync restores it within its sync period.
//!
//! A kubelet that sets Ready True again on a pod taken out is alive and its probes pass,
//! whatever its Lease says (a Lease update failing on its own): the pod is left in its
//! Services and not written again while the zone stays silent, with a Warning naming the
//! node, rather than taken out every sync period and put back by the kubelet (flapping).
//!
//! The mark never lingers where the failover no longer looks: switched off, or the stack
//! without zones, every marked pod is put back here; an Unmanaged stack or one being
//! deleted gets [`release`] from the reconcile, as its only write.
//!
//! What a wrong verdict costs: a zone cut off from the control plane but still serving
//! (a partition) stops receiving traffic through the Services while the other zones
//! serve it, as it would once Kubernetes marks its nodes NotReady anyway; nothing is
//! deleted, restarted or rescheduled, and it comes back by itself once its kubelets
//! renew their Leases. No pod of a zone outside the verdict is ever touched.

use k8s_openapi::api::core::v1::Pod;

use crate::checks::podzone::{node_name, pod_zone};
use crate::checks::silence::{self, Silence, SilentZone, Tolerance};
use crate::checks::zones::{zone_of, ZoneCheck};
use crate::intent::{Failover, Fence, Findings, KubeletAlive, ZoneServiceWrite};
use crate::model::names;
use crate::model::pods::condition;
use crate::observe::Snapshot;

/// Whether the failover is on for a stack, and how it tolerates late renewals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    On(Tolerance),
    Off,
}

impl Switch {
    /// As the stack's findings set it: on unless the stack switched it off.
    pub fn of(findings: &Findings) -> Switch {
        if findings.fast_failover_off {
            Switch::Off
        } else {
            Switch::On(findings.failover_tolerance)
        }
    }
}

/// The failover of a stack (`zone` is its zone check, `None` when it has no zones): the
/// silent zones it takes out when on, and the writes that take their pods out or put
/// back those of zones seen renewing again (every marked pod when off or without zones,
/// so that turning either off undoes it).
pub fn plan(snapshot: &Snapshot, zone: Option<&ZoneCheck>, switch: Switch) -> Failover {
    let (zone, tolerance) = match (zone, switch) {
        (Some(z), Switch::On(t)) => (z, t),
        (None, _) => return released(snapshot, "the stack no longer spreads over zones"),
        (Some(_), Switch::Off) => {
            let why = format!(
                "the fast failover is off for this stack ({})",
                names::ANNOTATION_ZONE_FAST_FAILOVER
            );
            return released(snapshot, &why);
        }
    };
    let verdict = silence::silence(
        &zone.keys,
        snapshot.nodes.iter().map(AsRef::as_ref),
        &snapshot.node_leases,
        tolerance,
    );
    let mut failover = Failover::default();
    for pod in &snapshot.pods {
        let Some((node, pod_zone)) = placed(snapshot, &zone.keys, pod) else {
            continue;
        };
        match verdict.out.iter().find(|z| z.zone == pod_zone) {
            Some(silent) => take_out(snapshot, pod, &node, silent, &mut failover),
            None if marked_out(pod) => {
                if verdict.renewing.contains(&pod_zone) {
                    let why = format!("zone {pod_zone}'s node Leases are renewed again");
                    failover.writes.extend(back(
                        pod,
                        &pod_zone,
                        names::POD_REASON_ZONE_RENEWING,
                        &why,
                    ));
                } else {
                    // Held or not yet seen renewing (a process that just started): the
                    // mark stays until a renewal is seen.
                    failover.zones_out.insert(pod_zone);
                }
            }
            None => {}
        }
    }
    failover
        .zones_out
        .extend(verdict.out.iter().map(|z| z.zone.clone()));
    let Silence { out, held, .. } = verdict;
    Failover {
        out,
        held,
        ..failover
    }
}

/// The pod's node and zone, for a pod bound to a node with the keys.
fn placed(snapshot: &Snapshot, keys: &[String], pod: &Pod) -> Option<(String, String)> {
    let name = node_name(pod)?;
    let node = snapshot.node(name)?;
    let zone = zone_of(
        node.metadata.labels.as_ref(),
        keys.iter().map(String::as_str),
    )
    .ok()?;
    Some((name.to_string(), zone))
}

/// A pod of a silent zone: taken out, unless it is already, is terminating, or its
/// kubelet set it Ready again since it was taken out.
fn take_out(snapshot: &Snapshot, pod: &Pod, node: &str, silent: &SilentZone, f: &mut Failover) {
    if pod.metadata.deletion_timestamp.is_some() || taken_out(pod) {
        return;
    }
    let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone()) else {
        return;
    };
    if ready_again(pod) {
        f.alive.push(KubeletAlive {
            pod: name,
            node: node.to_string(),
            zone: silent.zone.clone(),
        });
        return;
    }
    let message = format!(
        "{} while other zones renew theirs: taken out of its Services by the Loki zone operator until they are renewed",
        silent.describe(snapshot.node_leases.now)
    );
    f.writes.push(ZoneServiceWrite {
        pod: name,
        uid,
        zone: silent.zone.clone(),
        available: false,
        reason: names::POD_REASON_ZONE_UNAVAILABLE,
        message,
        fence: Some(Fence {
            nodes: silent.nodes.clone(),
            seq: snapshot.node_leases.seq,
        }),
    });
}

/// The write that puts a marked pod back.
fn back(pod: &Pod, zone: &str, reason: &'static str, why: &str) -> Option<ZoneServiceWrite> {
    Some(ZoneServiceWrite {
        pod: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone()?,
        zone: zone.to_string(),
        available: true,
        reason,
        message: format!("{why}: back in its Services once its kubelet reports it Ready"),
        fence: None,
    })
}

/// Puts back every pod of `pods` the failover marked, saying `why` it no longer looks:
/// for a stack switched off, without zones, Unmanaged or being deleted.
pub fn release<'a>(pods: impl IntoIterator<Item = &'a Pod>, why: &str) -> Vec<ZoneServiceWrite> {
    pods.into_iter()
        .filter(|p| marked_out(p))
        .filter_map(|p| {
            let zone = pod_zone(p).unwrap_or_default();
            back(p, zone, names::POD_REASON_ZONE_RELEASED, why)
        })
        .collect()
}

fn released(snapshot: &Snapshot, why: &str) -> Failover {
    Failover {
        writes: release(snapshot.pods.iter().map(AsRef::as_ref), why),
        ..Failover::default()
    }
}

/// The pod carries the failover's mark: its zone-available condition is False.
fn marked_out(pod: &Pod) -> bool {
    condition(pod, names::POD_CONDITION_ZONE_AVAILABLE) == Some("False")
}

/// The pod is out of its Services, marked as the failover's: nothing left to write.
fn taken_out(pod: &Pod) -> bool {
    marked_out(pod) && condition(pod, "Ready") == Some("False")
}

/// Marked out, and Ready True: its kubelet set it Ready again after the mark. The
/// failover writes both conditions in one patch and lifts the mark whenever it puts a pod
/// back, so nothing else leaves a marked pod Ready (compared without timestamps: the
/// kubelet's clock is not the operator's).
fn ready_again(pod: &Pod) -> bool {
    marked_out(pod) && condition(pod, "Ready") == Some("True")
}

#[cfg(test)]
mod tests;
