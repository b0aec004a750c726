//! The kinds of object the operator owns, and the API resource each is served as.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ApiResource;

use crate::render::Child;

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

    /// The API resource the kind is served as: the version `render` produces it in.
    pub fn resource(self) -> ApiResource {
        match self {
            ChildKind::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            ChildKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            ChildKind::Service => ApiResource::erase::<Service>(&()),
            ChildKind::NetworkPolicy => ApiResource::erase::<NetworkPolicy>(&()),
            ChildKind::Deployment => ApiResource::erase::<Deployment>(&()),
            ChildKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
            ChildKind::PodDisruptionBudget => ApiResource::erase::<PodDisruptionBudget>(&()),
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
    fn each_kind_is_served_as_the_version_it_is_rendered_in() {
        assert_eq!(
            ChildKind::PodDisruptionBudget.resource().api_version,
            "policy/v1"
        );
        for k in ChildKind::ALL {
            assert_eq!(k.resource().kind, k.as_str());
        }
    }
}
