//! The docs: the API reference matches the CRD, and every page the README links exists.

use loki_zone_operator_tests::{apidoc, repo_root};

#[test]
fn api_reference_matches_the_crd() {
    let root = repo_root();
    let crds = apidoc::committed_crds(&root);
    let committed = std::fs::read_to_string(root.join("docs/api.md")).unwrap_or_default();
    assert!(
        committed == apidoc::api_reference(&crds),
        "docs/api.md is stale: run `make docs`"
    );
    for field in [
        "spec.replication.zones[].topologyKey",
        "spec.replication.factor",
        "status.replication.zoneFailuresTolerated",
        "spec.groups[].rules[].expr",
        "spec.remoteWrite.client.authorizationSecretName",
    ] {
        assert!(
            committed.contains(&format!("`{field}`")),
            "{field} not documented"
        );
    }
}

#[test]
fn readme_links_resolve() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let mut checked = 0;
    for part in readme.split("](").skip(1) {
        let target = part.split(')').next().unwrap_or_default();
        if target.starts_with("http") || target.starts_with('#') {
            continue;
        }
        let path = target.split('#').next().unwrap_or_default();
        assert!(root.join(path).exists(), "README links to missing {path}");
        checked += 1;
    }
    assert!(
        checked >= 5,
        "README should link the docs pages, found {checked} local links"
    );
}
