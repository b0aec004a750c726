//! The kinds of object the operator owns, and the API resource each is served as.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ApiResource, GroupVersionKind};

use crate::render::{Child, ServerCapabilities};

/// A kind `render` produces. The order of [`ChildKind::ALL`] is the apply order: what a
/// workload mounts or runs as exists before the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChildKind {
    ServiceAccount,
    ConfigMap,
    Service,
    NetworkPolicy,
    Deployment,
    StatefulSet,
    PodDisruptionBudget,
}

impl ChildKind {
    pub const ALL: [ChildKind; 7] = [
        ChildKind::ServiceAccount,
        ChildKind::ConfigMap,
        ChildKind::Service,
        ChildKind::NetworkPolicy,
        ChildKind::Deployment,
        ChildKind::StatefulSet,
        ChildKind::PodDisruptionBudget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChildKind::ServiceAccount => "ServiceAccount",
            ChildKind::ConfigMap => "ConfigMap",
            ChildKind::Service => "Service",
            ChildKind::NetworkPolicy => "NetworkPolicy",
            ChildKind::Deployment => "Deployment",
            ChildKind::StatefulSet => "StatefulSet",
            ChildKind::PodDisruptionBudget => "PodDisruptionBudget",
        }
    }

    pub fn of(child: &Child) -> ChildKind {
        match child {
            Child::ServiceAccount(_) => ChildKind::ServiceAccount,
            Child::ConfigMap(_) => ChildKind::ConfigMap,
            Child::Service(_) => ChildKind::Service,
            Child::NetworkPolicy(_) => ChildKind::NetworkPolicy,
            Child::Deployment(_) => ChildKind::Deployment,
            Child::StatefulSet(_) => ChildKind::StatefulSet,
            Child::PodDisruptionBudget(_) => ChildKind::PodDisruptionBudget,
        }
    }

    /// The resource as this server serves it: PodDisruptionBudgets are `policy/v1beta1`
    /// before Kubernetes 1.21 (same fields as `policy/v1` for what we render).
    pub fn resource(self, caps: &ServerCapabilities) -> ApiResource {
        match self {
            ChildKind::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            ChildKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            ChildKind::Service => ApiResource::erase::<Service>(&()),
            ChildKind::NetworkPolicy => ApiResource::erase::<NetworkPolicy>(&()),
            ChildKind::Deployment => ApiResource::erase::<Deployment>(&()),
            ChildKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
            ChildKind::PodDisruptionBudget => {
                let version = if caps.pdb_v1 { "v1" } else { "v1beta1" };
                ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "policy",
                    version,
                    "PodDisruptionBudget",
                ))
            }
        }
    }
}

impl std::fmt::Display for ChildKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pdb_version_follows_the_server() {
        let old = ServerCapabilities::for_version(1, 20);
        let new = ServerCapabilities::for_version(1, 30);
        assert_eq!(
            ChildKind::PodDisruptionBudget.resource(&old).api_version,
            "policy/v1beta1"
        );
        assert_eq!(
            ChildKind::PodDisruptionBudget.resource(&new).api_version,
            "policy/v1"
        );
        for k in ChildKind::ALL {
            assert_eq!(k.resource(&new).kind, k.as_str());
        }
    }
}
