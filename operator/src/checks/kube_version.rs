//! The Kubernetes versions the operator supports, and a version as a server or a user
//! gives it.
//!
//! The supported range is the range the test suite runs: every scenario on the newest,
//! the CRD admission table and the smoke scenarios on the oldest. There is no fallback
//! below it: what the operator renders and registers is what the oldest supported server
//! takes, so an older server is refused with a message rather than sent objects it would
//! reject or read another way.

use std::fmt;

/// The oldest supported Kubernetes. What the operator relies on from it: `policy/v1`
/// PodDisruptionBudgets, CEL rules (`x-kubernetes-validations`) in the CRDs,
/// `matchConditions` on its webhooks (so the zone-disruption webhook fails closed on the
/// stacks' ingesters only), `nodeTaintsPolicy: Honor` and `matchLabelKeys` in spread
/// constraints, and `trafficDistribution: PreferClose` on the entry Services (1.31;
/// `PreferSameZone` from [`PREFER_SAME_ZONE_SINCE`]).
pub const MIN_KUBE_VERSION: KubeVersion = KubeVersion {
    major: 1,
    minor: 31,
};

/// The first Kubernetes that takes `trafficDistribution: PreferSameZone` (beta and on by
/// default in 1.34, GA in 1.35, where `PreferClose`, its older name, draws a deprecation
/// warning on every write). Before it the API server refuses the value.
pub const PREFER_SAME_ZONE_SINCE: KubeVersion = KubeVersion {
    major: 1,
    minor: 34,
};

/// The first Kubernetes that copies a node's `topology.kubernetes.io/zone` and `/region`
/// labels onto each pod it binds there, in the same update that sets `spec.nodeName`
/// (KEP-4742: the `PodTopologyLabelsAdmission` feature, alpha and off in 1.33 and 1.34,
/// beta and on by default in 1.35). A cluster that switches it off still works: the
/// annotator writes the label on pods that lack it.
pub const ZONE_LABELS_AT_BINDING_SINCE: KubeVersion = KubeVersion {
    major: 1,
    minor: 35,
};

/// A Kubernetes version, as far as the operator tells versions apart: major and minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
}

/// A version below [`MIN_KUBE_VERSION`], with where it came from.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Kubernetes {MIN_KUBE_VERSION} or later is required; {subject} is {found}")]
pub struct Unsupported {
    /// What has the version: "this API server", "the target cluster".
    pub subject: &'static str,
    /// The version as the subject gave it (`v1.20.2`), so the user recognises it.
    pub found: String,
}

impl KubeVersion {
    /// Parses `1.31`, `1.31+` (GKE's and EKS's minor carries a `+`), `v1.35.4` or
    /// `v1.31.0-gke.1200`: the major and the digits that begin the minor. `None` when
    /// either is missing.
    pub fn parse(version: &str) -> Option<KubeVersion> {
        let v = version.trim();
        let v = v.strip_prefix('v').unwrap_or(v);
        let (major, rest) = v.split_once('.')?;
        let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some(KubeVersion {
            major: major.trim_end_matches('+').parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }

    /// Ok when the operator supports this version; else the error that names `subject`
    /// and `found`, the version as the user would recognise it.
    pub fn require_supported(self, subject: &'static str, found: &str) -> Result<(), Unsupported> {
        if self >= MIN_KUBE_VERSION {
            Ok(())
        } else {
            Err(Unsupported {
                subject,
                found: found.to_string(),
            })
        }
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> Option<KubeVersion> {
        Some(KubeVersion { major, minor })
    }

    #[test]
    fn versions_parse_as_servers_and_users_write_them() {
        assert_eq!(KubeVersion::parse("1.31"), v(1, 31));
        assert_eq!(KubeVersion::parse("1.31+"), v(1, 31));
        assert_eq!(KubeVersion::parse("v1.35.4"), v(1, 35));
        assert_eq!(KubeVersion::parse("v1.31.0-gke.1200"), v(1, 31));
        assert_eq!(KubeVersion::parse(" 1.20 "), v(1, 20));
        assert_eq!(KubeVersion::parse("2.0"), v(2, 0));
        for bad in ["", "1", "v1", "1.", "1.x", "one.31", "+.31"] {
            assert_eq!(KubeVersion::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_oldest_supported_is_1_31_and_older_ones_are_refused_by_name() {
        assert_eq!(MIN_KUBE_VERSION.to_string(), "1.31");
        let refused = KubeVersion::parse("v1.20.2")
            .expect("parses")
            .require_supported("this API server", "v1.20.2")
            .expect_err("1.20 is refused");
        assert_eq!(
            refused.to_string(),
            "Kubernetes 1.31 or later is required; this API server is v1.20.2"
        );
        let just_below = KubeVersion::parse("1.30+").expect("parses");
        assert!(just_below
            .require_supported("the target cluster", "1.30+")
            .is_err());
        for ok in ["1.31+", "v1.31.0", "v1.35.4", "1.36", "2.0"] {
            let version = KubeVersion::parse(ok).expect("parses");
            assert_eq!(
                version.require_supported("this API server", ok),
                Ok(()),
                "{ok}"
            );
        }
    }
}
