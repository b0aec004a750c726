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

/// docs/install.md's quick-start (which the real-node check runs as written) installs
/// this version's release, in five commands, and the README and CHANGELOG name the same
/// version.
#[test]
fn the_quick_start_installs_this_release_in_five_commands() {
    let root = repo_root();
    let install = std::fs::read_to_string(root.join("docs/install.md")).expect("install.md");
    let start = install
        .find("<!-- quick-start")
        .expect("the quick-start marker in docs/install.md");
    let block = &install[start..];
    let block = &block[block.find("```sh\n").expect("a sh block") + 6..];
    let block = &block[..block
        .find("```\n<!-- /quick-start -->")
        .expect("the end marker")];
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let url = format!("https://github.com/loki-zone-operator/loki-zone-operator/releases/download/{version}/install.yaml");
    assert!(
        block.contains(&url),
        "the quick-start does not install {url}:\n{block}"
    );
    let commands = block.lines().filter(|l| l.starts_with("kubectl ")).count();
    assert_eq!(
        commands, 5,
        "the quick-start has {commands} commands:\n{block}"
    );
    assert!(
        std::fs::read_to_string(root.join("README.md"))
            .expect("README")
            .contains(&url),
        "the README's install line names another release"
    );
    assert!(
        std::fs::read_to_string(root.join("CHANGELOG.md"))
            .expect("CHANGELOG")
            .contains(&format!("\n## {version}\n")),
        "CHANGELOG.md has no section for {version}"
    );
}
