//! The StorageClass a stack's claims get, checked before anything is created: a class
//! that does not exist leaves every claim Pending with no word why, and a class that
//! binds volumes at once places them before the scheduler has picked a zone.

use k8s_openapi::api::storage::v1::StorageClass;

use crate::model::conditions::Reason;

const DEFAULT_CLASS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

pub fn is_default(class: &StorageClass) -> bool {
    class.metadata.annotations.as_ref().is_some_and(|a| {
        DEFAULT_CLASS
            .iter()
            .any(|k| a.get(*k).map(String::as_str) == Some("true"))
    })
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageClassFinding {
    #[error("StorageClass {0:?} (spec.storageClassName) does not exist, so the stack's PersistentVolumeClaims would stay Pending; create it or name an existing class")]
    Missing(String),
    #[error("spec.storageClassName is not set and the cluster has no default StorageClass, so the stack's PersistentVolumeClaims would stay Pending; set spec.storageClassName or mark a class as default")]
    NoDefault,
    #[error("StorageClass {0:?} binds volumes as soon as a claim is created (volumeBindingMode Immediate), before the scheduler picks the pod's zone: a volume may land in one zone and its pod be kept to it, against the spread. Use a class with volumeBindingMode: WaitForFirstConsumer")]
    ImmediateBinding(String),
}

impl StorageClassFinding {
    pub fn reason(&self) -> Reason {
        match self {
            StorageClassFinding::Missing(_) | StorageClassFinding::NoDefault => {
                Reason::StorageClassMissing
            }
            StorageClassFinding::ImmediateBinding(_) => Reason::StorageClassImmediateBinding,
        }
    }

    /// A missing class holds the spec back; a binding mode is a warning.
    pub fn holds_back(&self) -> bool {
        !matches!(self, StorageClassFinding::ImmediateBinding(_))
    }
}

/// `requested`: `spec.storageClassName`; `class`: that class, or the cluster's default
/// when none is requested, as the caches hold it.
pub fn check(
    requested: Option<&str>,
    class: Option<&StorageClass>,
    zone_aware: bool,
) -> Option<StorageClassFinding> {
    let Some(class) = class else {
        return Some(match requested {
            Some(name) => StorageClassFinding::Missing(name.to_string()),
            None => StorageClassFinding::NoDefault,
        });
    };
    // Kubernetes' default binding mode is Immediate.
    let mode = class.volume_binding_mode.as_deref().unwrap_or("Immediate");
    (zone_aware && mode == "Immediate").then(|| {
        StorageClassFinding::ImmediateBinding(class.metadata.name.clone().unwrap_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn class(name: &str, mode: Option<&str>) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            provisioner: "p".into(),
            volume_binding_mode: mode.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn missing_default_and_binding_mode() {
        assert_eq!(
            check(Some("fast"), None, false),
            Some(StorageClassFinding::Missing("fast".into()))
        );
        assert_eq!(
            check(None, None, true),
            Some(StorageClassFinding::NoDefault)
        );
        let wffc = class("zonal", Some("WaitForFirstConsumer"));
        assert_eq!(check(Some("zonal"), Some(&wffc), true), None);
        let immediate = class("std", None);
        let f = check(Some("std"), Some(&immediate), true).expect("warning");
        assert_eq!(f.reason(), Reason::StorageClassImmediateBinding);
        assert!(!f.holds_back());
        assert_eq!(
            check(Some("std"), Some(&immediate), false),
            None,
            "only zones care"
        );
    }
}
