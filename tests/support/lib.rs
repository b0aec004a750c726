//! Support for the integration and end-to-end tests: a local Kubernetes control plane,
//! a node simulator, and the operator as a process.

pub mod apidoc;
pub mod bundle;
pub mod harness;
pub mod nodesim;
pub mod operator;

use std::path::PathBuf;

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}
