//! Support for the integration and end-to-end tests: a local Kubernetes control plane,
//! a node simulator, and the operator as a process.

pub mod admission;
pub mod apidoc;
pub mod bundle;
pub mod harness;
pub mod nodesim;
pub mod operator;
pub mod proxy;
pub mod scrape;

use std::path::PathBuf;

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A client for the cluster of a kubeconfig file.
pub async fn client_for(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// A client that returns every answer as it comes: kube's default client retries 429s
/// (and 503s) for minutes, which would hide a refused eviction from a test.
pub async fn client_without_retries(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

/// The storage Secret every test stack names: `loki-s3`, with every key type s3 needs.
pub const STORAGE_SECRET: &str = "loki-s3";

/// Creates a namespace holding the storage Secret.
pub async fn namespace_with_storage_secret(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use kube::api::{Api, PostParams};
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": STORAGE_SECRET},
        "stringData": {"bucketnames": "loki", "endpoint": "http://minio:9000", "access_key_id": "id", "access_key_secret": "secret"},
    }))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// The multi-threaded runtime of the e2e and bench binaries (they run without a test
/// harness, so they build their own).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
