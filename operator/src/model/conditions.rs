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
        /// The stack's RulerConfig does not decode or breaks a rule (held back).
        InvalidRulerConfig => "InvalidRulerConfig",
        /// The remote-write Secret a RulerConfig names is missing (held back; the Go
        /// operator's reason).
        MissingRulerSecret => "MissingRulerSecret",
        /// It lacks a key its authorization needs (held back; the Go operator's reason).
        InvalidRulerSecret => "InvalidRulerSecret",
        /// Rules the stack picks are not loaded (a Warning naming each and why).
        RulesNotLoaded => "RulesNotLoaded",
        /// On a rule or RulerConfig: a stack with rules enabled picks it and it is valid.
        Selected => "Selected",
        /// On a rule or RulerConfig: a stack picks it but it is invalid (field named).
        InvalidRule => "InvalidRule",
        /// On a rule or RulerConfig a stack picked before: none picks it now.
        NotSelected => "NotSelected",
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
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(&t.to_string()), Some(*t));
        }
        assert_eq!(PodPhase::parse("Succeeded"), Some(PodPhase::Succeeded));
        assert_eq!(PodPhase::parse("Terminating"), None);
    }
}
