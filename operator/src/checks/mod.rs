//! Pure checks: the spec against its rules, the zones the nodes offer against the
//! replication factor, storage classes and volumes against zones, a pod's zone from its
//! node, and a Kubernetes version against the supported range. Each takes what was
//! observed and returns findings; none reads the cluster.

pub mod fields;
pub mod kube_version;
pub mod podzone;
pub mod silence;
pub mod taint_evictions;
pub mod validate;
pub mod volumes;
pub mod zones;
