//! The status vocabulary: condition types, reasons and pod phases, each spelled once.
//!
//! These strings are API: alerts, `kubectl wait --for=condition=...` and the Go Loki
//! Operator's tooling match on them, so a rename here is a breaking change.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// Defines a string-valued enum with its wire strings in one table.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// The condition types of `status.conditions`, as the Go Loki Operator names them.
    ConditionType {
        Ready => "Ready",
        Pending => "Pending",
        Failed => "Failed",
        Degraded => "Degraded",
        Warning => "Warning",
    }
}

impl Reason {
    /// A True Warning of this reason is news, not trouble: its Event is Normal.
    pub fn is_informational(self) -> bool {
        matches!(self, Reason::ZoneMaintenance)
    }
}

impl ConditionType {
    /// A True condition of this type is bad news: its Event is a Warning.
    pub fn is_problem(self) -> bool {
        matches!(
            self,
            ConditionType::Failed | ConditionType::Degraded | ConditionType::Warning
        )
    }
}

wire_enum! {
    /// Every condition reason the operator sets.
    Reason {
        ReadyComponents => "ReadyComponents",
        ComponentsNotReady => "ComponentsNotReady",
        PendingComponents => "PendingComponents",
        NoPendingComponents => "NoPendingComponents",
        FailedComponents => "FailedComponents",
        NoFailedComponents => "NoFailedComponents",
        NoIssues => "NoIssues",
        NoWarnings => "NoWarnings",
        InvalidSpec => "InvalidSpec",
        ApplyFailed => "ApplyFailed",
        NameConflict => "NameConflict",
        MissingObjectStorageSecret => "MissingObjectStorageSecret",
        InvalidObjectStorageSecret => "InvalidObjectStorageSecret",
        MissingObjectStorageCAConfigMap => "MissingObjectStorageCAConfigMap",
        InvalidObjectStorageCAConfigMap => "InvalidObjectStorageCAConfigMap",
        StorageClassMissing => "StorageClassMissing",
        StorageClassImmediateBinding => "StorageClassImmediateBinding",
        ZonesSufficient => "ZonesSufficient",
        NoZoneFailureTolerance => "NoZoneFailureTolerance",
        ZoneLabelMissing => "ZoneLabelMissing",
        ZoneLabelEmpty => "ZoneLabelEmpty",
        ZonesInsufficient => "ZonesInsufficient",
        ZoneUnavailable => "ZoneUnavailable",
        ZoneMaintenance => "ZoneMaintenance",
        ZoneAwareEvictionsOff => "ZoneAwareEvictionsOff",
        WriteQuorumLost => "WriteQuorumLost",
        PodZoneUnknown => "PodZoneUnknown",
        ZoneLabelChanged => "ZoneLabelChanged",
        UnsupportedFields => "UnsupportedFields",
        UnmanagedChildren => "UnmanagedChildren",
        InvalidAnnotation => "InvalidAnnotation",
        /// A zone's name is longer than Loki's zone-aware gossip takes: it is off, and
        /// gossip crosses zones freely.
        ZoneGossipRoutingOff => "ZoneGossipRoutingOff",
        /// The stack's RulerConfig does not decode or breaks a rule (held back).
        InvalidRulerConfig => "InvalidRulerConfig",
        /// The remote-write Secret a RulerConfig names is missing (held back; the Go
        /// operator's reason).
        MissingRulerSecret => "MissingRulerSecret",
        /// It lacks a key its authorization needs (held back; the Go operator's reason).
        InvalidRulerSecret => "InvalidRulerSecret",
        /// Ruler objects the stack picks could not be read yet (held back, so that the
        /// ruler keeps the rules and settings it has; goes on once they are read).
        RulesNotRead => "RulesNotRead",
        /// Rules the stack picks are not loaded (a Warning naming each and why).
        RulesNotLoaded => "RulesNotLoaded",
        /// The newest schema period is older than v13 (the Go operator's reason).
        StorageNeedsSchemaUpdate => "StorageNeedsSchemaUpdate",
        /// A stack without zones has no more ingesters than its replication factor (the
        /// Go operator's reason).
        InsufficientIngesterReplicas => "InsufficientIngesterReplicas",
        /// On a rule or RulerConfig: a stack with rules enabled picks it and it is valid.
        Selected => "Selected",
        /// On a rule or RulerConfig: a stack picks it but it is invalid (field named).
        InvalidRule => "InvalidRule",
        /// On a rule or RulerConfig a stack picked before: none picks it now.
        NotSelected => "NotSelected",
    }
}

wire_enum! {
    /// What the operator did or saw, as the reason of an Event that no condition carries
    /// (an Event for a changed condition carries the condition's [`Reason`]). API too:
    /// `kubectl get events --field-selector reason=...` and alerts on Events match them.
    Happening {
        /// A scale-down goes ahead: the leaving ingesters were asked to leave the ring.
        IngestersLeaving => "IngestersLeaving",
        /// Leaving ingesters that were not running could not be asked.
        IngesterNotPrepared => "IngesterNotPrepared",
        /// A scale-down waits: a leaving ingester could not be asked.
        IngesterScaleDownHeld => "IngesterScaleDownHeld",
        /// A zone's outdated ring members were deleted at once.
        RolloutZoneStarted => "RolloutZoneStarted",
        /// An outdated pod without a zone was deleted.
        RolloutPodRestarted => "RolloutPodRestarted",
        RolloutCompleted => "RolloutCompleted",
        /// A rollout's pod could not be deleted.
        RolloutFailed => "RolloutFailed",
        /// A pod was moved out of a lost zone (the opt-in recovery).
        ZoneOutageRecovery => "ZoneOutageRecovery",
        ZoneOutageRecoveryFailed => "ZoneOutageRecoveryFailed",
        /// The fast failover took a zone's pods out of their Services (its node Leases
        /// all stopped), or put them back (renewed again).
        ZoneOutOfService => "ZoneOutOfService",
        ZoneBackInService => "ZoneBackInService",
        /// A pod's zone-available condition could not be written (retried).
        ZoneFailoverFailed => "ZoneFailoverFailed",
        /// Zones whose Leases all stopped, left to Kubernetes: more than the stack can
        /// lose, or no zone seen renewing (the operator's own view may be behind).
        ZoneFailoverHeld => "ZoneFailoverHeld",
        /// On a pod the fast failover took out: its kubelet set it Ready again while its
        /// node's Lease stays silent, so the kubelet is alive; the pod is left in its
        /// Services rather than taken out at every kubelet sync.
        ZoneKubeletAlive => "ZoneKubeletAlive",
        /// The stages of turning zones on and off.
        ZonesEnabling => "ZonesEnabling",
        ZonesWritePathReady => "ZonesWritePathReady",
        ZonesEnabled => "ZonesEnabled",
        ZonesDisabling => "ZonesDisabling",
        ZonesDisabled => "ZonesDisabled",
        /// On a pod: its zone annotation names keys that are not its stack's topology
        /// keys, or it has none (the annotator gives it no zone).
        ZoneKeysNotAllowed => "ZoneKeysNotAllowed",
        ZoneKeysMissing => "ZoneKeysMissing",
        /// On a pod: the annotator's write of its zone failed (it retries).
        ZoneAnnotationFailed => "ZoneAnnotationFailed",
        /// A reconcile step that failed (retried with a backoff).
        ObserveFailed => "ObserveFailed",
        RenderFailed => "RenderFailed",
        StatusUpdateFailed => "StatusUpdateFailed",
    }
}

/// The reason of an Event the operator publishes: every Event reason is one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// A condition's reason: a condition changed, or a finding of the same meaning.
    Condition(Reason),
    Happened(Happening),
}

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Condition(r) => r.as_str(),
            EventReason::Happened(h) => h.as_str(),
        }
    }
}

impl From<Reason> for EventReason {
    fn from(r: Reason) -> Self {
        EventReason::Condition(r)
    }
}

impl From<Happening> for EventReason {
    fn from(h: Happening) -> Self {
        EventReason::Happened(h)
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

wire_enum! {
    /// The keys of `status.components.<component>`: a pod's phase, with Running split into
    /// Ready (its Ready condition is True) and Running (not ready yet).
    PodPhase {
        Ready => "Ready",
        Running => "Running",
        Pending => "Pending",
        Failed => "Failed",
        Succeeded => "Succeeded",
        /// On a node that is down: the pod may or may not still run.
        Unknown => "Unknown",
    }
}

/// The `status` string of a condition.
pub fn status_str(status: bool) -> &'static str {
    if status {
        "True"
    } else {
        "False"
    }
}

/// The phase a pod shows in `status.components`: the pod's phase, with a running pod
/// whose Ready condition is True shown as Ready.
pub fn pod_phase(pod: &Pod) -> PodPhase {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") => PodPhase::Failed,
        Some("Running") => {
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                PodPhase::Ready
            } else {
                PodPhase::Running
            }
        }
        Some("Succeeded") => PodPhase::Succeeded,
        _ => PodPhase::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip_and_are_unique() {
        for r in Reason::ALL {
            assert_eq!(Reason::parse(r.as_str()), Some(*r));
        }
        let mut seen: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), Reason::ALL.len());
        // An Event reason means one thing: no happening is spelled as a condition reason.
        for h in Happening::ALL {
            assert_eq!(Reason::parse(h.as_str()), None, "{h}");
            assert_eq!(EventReason::from(*h).as_str(), h.as_str());
        }
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(&t.to_string()), Some(*t));
        }
        assert_eq!(PodPhase::parse("Succeeded"), Some(PodPhase::Succeeded));
        assert_eq!(PodPhase::parse("Terminating"), None);
    }
}
