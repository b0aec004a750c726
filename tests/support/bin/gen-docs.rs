//! `make docs`: writes docs/api.md from the committed CRD.

use anyhow::Result;
use loki_zone_operator_tests::{apidoc, repo_root};

fn main() -> Result<()> {
    let root = repo_root();
    let crd: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(
        root.join("manifests/crd/loki.grafana.com_lokistacks.yaml"),
    )?)?;
    std::fs::write(root.join("docs/api.md"), apidoc::api_reference(&crd))?;
    println!("wrote docs/api.md");
    Ok(())
}
