//! The zone-at-bind webhook: a mutating admission webhook on `pods/binding` that adds the
//! pod's zone to the Binding, so kube-apiserver writes it onto the pod in the same update
//! that binds it (no extra write, no wait for the annotator).
//!
//! Every replica serves it, leader or not, from the process's shared caches of nodes and
//! zone-aware pods; the leader keeps its configuration current ([`registration`]). The pod annotator
//! stays the fallback for every pod the webhook could not zone: it then finds the zone
//! already set and does nothing. `docs/zone-aware-replication.md` gives the design and
//! its failure modes.
//!
//! The same server answers `pods/eviction` for the ingesters of zone-aware stacks
//! ([`eviction`]): one zone may be disrupted at a time. That webhook fails closed, and
//! only the leader decides, so two replicas never allow two zones at once.

pub mod binding;
pub mod certs;
pub mod disruptions;
pub mod eviction;
pub mod registration;
pub mod review;
pub mod serve;
pub mod slots;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use registration::ClientTarget;

/// How the webhook runs.
#[derive(Clone, Debug)]
pub enum WebhookMode {
    /// Not served; the leader removes the configuration it registered, if any.
    Off,
    /// `make deploy`: the operator issues its own CA and certificate (kept in a Secret in
    /// its namespace) and keeps the configuration current.
    SelfManaged { target: ClientTarget },
    /// OLM: certificates are mounted from `dir` (`tls.crt`, `tls.key`) and the bundle
    /// declares the configuration, which OLM keeps.
    External { dir: PathBuf },
}

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub mode: WebhookMode,
    /// Serve and register the zone-disruption (pods/eviction) webhook too; only with
    /// [`WebhookMode::SelfManaged`].
    pub disruptions: bool,
    pub addr: SocketAddr,
    /// The operator's own namespace: where the certificate Secret lives.
    pub namespace: String,
    /// The install's ClusterRole that owns the webhook configurations it registers.
    pub owner_role: String,
}
