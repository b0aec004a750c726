//! `make bundle`: writes bundle/ and bundle.Dockerfile from manifests/.

use anyhow::Result;
use loki_zone_operator_tests::{bundle, repo_root};

fn main() -> Result<()> {
    let root = repo_root();
    for (path, content) in bundle::files()? {
        let target = root.join(&path);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&target, content)?;
        println!("wrote {path}");
    }
    Ok(())
}
