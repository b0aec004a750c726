//! Carries out the fast failover's writes (`plan/failover.rs` decides them): each pod's
//! zone-available condition, and for a pod taken out its Ready condition False with it,
//! written to the pod's status as the node lifecycle controller writes Ready. The
//! patch names the pod's UID, so a successor of the same name is never written.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;

use crate::heartbeats::NodeLeases;
use crate::intent::{FailedOver, ZoneServiceWrite};
use crate::model::conditions::status_str;
use crate::model::names;

/// The status patch of one write.
pub fn patch_of(w: &ZoneServiceWrite, now: Timestamp) -> serde_json::Value {
    let reason = w.reason;
    let condition = |type_: &str| {
        json!({
            "type": type_,
            "status": status_str(w.available),
            "reason": reason,
            "message": w.message,
            "lastTransitionTime": Time(now),
        })
    };
    let mut conditions = vec![condition(names::POD_CONDITION_ZONE_AVAILABLE)];
    if !w.available {
        conditions.push(condition("Ready"));
    }
    json!({"metadata": {"uid": w.uid}, "status": {"conditions": conditions}})
}

/// Whether the write's fence still stands: none of the silent zone's nodes was seen
/// renewed after the view its verdict was made on.
pub fn fence_holds(w: &ZoneServiceWrite, leases: &NodeLeases) -> bool {
    w.fence
        .as_ref()
        .is_none_or(|f| !leases.renewed_after(&f.nodes, f.seq))
}

/// Runs the writes, each take-out only while its fence holds; returns what happened to
/// each.
pub async fn run(
    client: &Client,
    namespace: &str,
    writes: &[ZoneServiceWrite],
    now: Timestamp,
    leases: &NodeLeases,
) -> FailedOver {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut report = FailedOver::default();
    for w in writes {
        if !fence_holds(w, leases) {
            report.dropped.push(w.clone());
            continue;
        }
        let patch = patch_of(w, now);
        match pods
            .patch_status(&w.pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => report.written.push(w.clone()),
            // Gone, or replaced by a pod of the same name (the UID no longer matches):
            // the next plan sees the successor.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 || e.code == 422 => {}
            Err(kube::Error::Api(e)) if e.code == 403 => {
                let why = format!("the operator may not write pods/status in namespace {namespace}: install this release's RBAC (rule pods/status patch), or turn the fast failover off with the stack annotation {}: \"false\"", names::ANNOTATION_ZONE_FAST_FAILOVER);
                report.failed.push((w.clone(), why));
            }
            Err(e) => report.failed.push((w.clone(), e.to_string())),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::Fence;

    fn write(available: bool) -> ZoneServiceWrite {
        ZoneServiceWrite {
            pod: "s-ingester-0".into(),
            uid: "u1".into(),
            zone: "a".into(),
            available,
            reason: if available {
                names::POD_REASON_ZONE_RENEWING
            } else {
                names::POD_REASON_ZONE_UNAVAILABLE
            },
            message: "m".into(),
            fence: (!available).then(|| Fence {
                nodes: vec!["n1".into()],
                seq: 0,
            }),
        }
    }

    #[test]
    fn a_take_out_is_dropped_once_its_zone_renewed_after_the_verdicts_view() {
        use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let lease = |s: i64| Lease {
            metadata: kube::api::ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(Timestamp::from_second(s).expect("ts"))),
                lease_duration_seconds: Some(40),
                ..Default::default()
            }),
        };
        let leases = NodeLeases::default();
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).expect("ts");
        leases.observe(&lease(0), t(0));
        let mut w = write(false);
        w.fence = Some(Fence {
            nodes: vec!["n1".into()],
            seq: leases.view_at(t(1)).seq,
        });
        assert!(fence_holds(&w, &leases));
        leases.observe(&lease(30), t(30));
        assert!(!fence_holds(&w, &leases));
        // A put-back has no fence.
        assert!(fence_holds(&write(true), &leases));
    }

    #[test]
    fn out_sets_ready_false_with_the_mark_and_back_leaves_ready_to_the_kubelet() {
        let now = Timestamp::from_second(1_800_000_000).expect("ts");
        let out = patch_of(&write(false), now);
        assert_eq!(out["metadata"]["uid"], "u1");
        let cs = out["status"]["conditions"].as_array().expect("conditions");
        let types: Vec<&str> = cs.iter().filter_map(|c| c["type"].as_str()).collect();
        assert_eq!(types, vec![names::POD_CONDITION_ZONE_AVAILABLE, "Ready"]);
        for c in cs {
            assert_eq!(c["status"], "False");
            assert_eq!(c["reason"], names::POD_REASON_ZONE_UNAVAILABLE);
            assert_eq!(c["lastTransitionTime"], "2027-01-15T08:00:00Z");
        }
        let back = patch_of(&write(true), now);
        let cs = back["status"]["conditions"].as_array().expect("conditions");
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["type"], names::POD_CONDITION_ZONE_AVAILABLE);
        assert_eq!(cs[0]["status"], "True");
    }
}
