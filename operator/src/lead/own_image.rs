//! The image of the zone init container: the operator's own, by digest.
//!
//! Released installs configure it by digest (`RELATED_IMAGE_OPERATOR`), and then it is
//! used as it is. Configured by tag (an install from a checkout's manifests, a user's
//! overlay), the operator reads its own pod once at start and pins the tag to the digest
//! the kubelet reports for its container, so that every Loki pod's init container runs
//! exactly the bytes the operator runs, whatever happens to the tag later. Where it
//! cannot (run outside a cluster, no right to read its pod, a runtime that reports no
//! digest), it keeps the configured reference and says so in the log: the init
//! containers then pull that tag, as before.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use tracing::{info, warn};

use crate::model::image::{self, pinned_by_status};

/// This replica's pod, when it runs in one (`POD_NAMESPACE`, `POD_NAME`).
#[derive(Clone, Debug)]
pub struct OwnPod {
    pub namespace: String,
    pub name: String,
}

/// `configured` pinned to the digest this replica's container runs, or `configured`.
pub async fn pin(client: &Client, configured: &str, own: Option<&OwnPod>) -> String {
    if image::is_pinned(configured) {
        return configured.to_string();
    }
    let Some(own) = own else {
        return configured.to_string();
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &own.namespace);
    match api.get(&own.name).await {
        Ok(pod) => match pinned_in(&pod, configured) {
            Some(pinned) => {
                info!(configured, image = %pinned, "zone init containers run the operator's own image by digest");
                pinned
            }
            None => {
                warn!(configured, pod = %own.name, "the kubelet reports no digest for the operator's container: zone init containers pull the configured tag (set RELATED_IMAGE_OPERATOR to a reference by digest to pin them)");
                configured.to_string()
            }
        },
        Err(e) => {
            warn!(error = %e, configured, pod = %own.name, "cannot read the operator's own pod: zone init containers pull the configured tag (set RELATED_IMAGE_OPERATOR to a reference by digest to pin them)");
            configured.to_string()
        }
    }
}

/// The digest of the container of `pod` that runs `configured` (or of its only
/// container, under an install that names the image differently), as
/// [`pinned_by_status`] gives it.
fn pinned_in(pod: &Pod, configured: &str) -> Option<String> {
    let containers = &pod.spec.as_ref()?.containers;
    let ours = containers
        .iter()
        .find(|c| c.image.as_deref() == Some(configured))
        .or(match containers.as_slice() {
            [only] => Some(only),
            _ => None,
        })?;
    let spec_image = ours.image.as_deref()?;
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == ours.name)?;
    pinned_by_status(spec_image, &status.image_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn pod(containers: &[(&str, &str, &str)]) -> Pod {
        containers
            .iter()
            .fold(testing::pod("op-1").namespace("ops"), |p, (n, i, id)| {
                p.container(n, i, id)
            })
            .build()
    }

    #[test]
    fn the_container_running_the_configured_image_gives_the_digest() {
        let id = format!("ghcr.io/org/op@{D}");
        let p = pod(&[
            ("sidecar", "proxy:1", "proxy@sha256:ff"),
            ("manager", "ghcr.io/org/op:v1", &id),
        ]);
        assert_eq!(
            pinned_in(&p, "ghcr.io/org/op:v1").as_deref(),
            Some(format!("ghcr.io/org/op:v1@{D}").as_str())
        );
        // Two containers, neither with the configured image: nothing to go by.
        assert_eq!(pinned_in(&p, "other:v1"), None);
        // One container under another name (an overlay that renamed the image only in
        // the container): it is ours.
        let only = pod(&[("manager", "mirror.example/op:v1", &id)]);
        assert_eq!(
            pinned_in(&only, "ghcr.io/org/op:v1").as_deref(),
            Some(format!("mirror.example/op:v1@{D}").as_str())
        );
        // A runtime that reports a local ID only.
        let local = pod(&[("manager", "op:v1", &D[7..])]);
        assert_eq!(pinned_in(&local, "op:v1"), None);
    }
}
