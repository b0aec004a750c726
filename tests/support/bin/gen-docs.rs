//! `make docs`: writes docs/api.md from the committed CRDs.

use anyhow::Result;
use loki_zone_operator_tests::{apidoc, repo_root};

fn main() -> Result<()> {
    let root = repo_root();
    let crds = apidoc::committed_crds(&root);
    std::fs::write(root.join("docs/api.md"), apidoc::api_reference(&crds))?;
    println!("wrote docs/api.md");
    Ok(())
}
