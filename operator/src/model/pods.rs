//! What a pod's labels say about it, for every room: whether it belongs to a zone-aware
//! stack, and which component of its stack it runs. One definition of each.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::model::defaults::Component;
use crate::model::names;

/// The pod runs a zone-aware template (`loki.grafana.com/zone-aware: enabled`): its zone
/// comes from its node, and it waits for it.
pub fn is_zone_aware(pod: &Pod) -> bool {
    pod.labels()
        .get(names::LABEL_ZONE_AWARE)
        .map(String::as_str)
        == Some(names::LABEL_ZONE_AWARE_VALUE)
}

/// The component the pod runs (`app.kubernetes.io/component`), when it is one of a
/// stack's.
pub fn component_of(pod: &Pod) -> Option<Component> {
    pod.labels()
        .get(names::LABEL_COMPONENT)
        .and_then(|c| Component::from_name(c))
}

/// The stack the pod belongs to (`app.kubernetes.io/instance`).
pub fn stack_of(pod: &Pod) -> Option<&str> {
    pod.labels().get(names::LABEL_INSTANCE).map(String::as_str)
}

/// The status (`True`, `False`, `Unknown`) of the pod's condition of `type_`, when it
/// has one.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::pod;

    #[test]
    fn labels_say_zone_awareness_component_and_stack() {
        let p = pod("p")
            .zone_aware()
            .component(Component::Ingester)
            .stack("logs")
            .build();
        assert!(is_zone_aware(&p));
        assert_eq!(component_of(&p), Some(Component::Ingester));
        assert_eq!(stack_of(&p), Some("logs"));
        let other = pod("p")
            .label(names::LABEL_ZONE_AWARE, "disabled")
            .label(names::LABEL_COMPONENT, "gateway")
            .build();
        assert!(!is_zone_aware(&other));
        assert_eq!(component_of(&other), None, "not a component of ours");
        assert_eq!(stack_of(&other), None);
    }
}
