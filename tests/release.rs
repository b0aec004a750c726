//! The release's building blocks, checked without building a release: the image writer
//! (`hack/oci.py`) is reproducible and writes what registries and runtimes take, the
//! SBOM (`hack/sbom.py`) is valid CycloneDX and lists exactly the crates cargo compiles
//! into the binary, and `make release` refuses what it cannot ship before it builds.
//! The release itself (both platforms, the installs, the bundle, reproducibility, the
//! push) runs in `make test` through the real-node check (hack/real-node/e2e.sh).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use loki_zone_operator_tests::repo_root;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn run(cmd: &mut Command) -> Output {
    let out = cmd.current_dir(repo_root()).output().expect("run");
    assert!(
        out.status.success(),
        "{:?} failed:\n{}{}",
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).expect("read")).expect("json")
}

/// A blob of an unpacked OCI layout, checked against its digest.
fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let bytes = fs::read(layout.join("blobs/sha256").join(&digest[7..])).expect("blob");
    assert_eq!(sha256(&bytes), digest, "the blob's content is its digest");
    bytes
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .args(["-dc"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b)
        .expect("write");
    child.wait_with_output().expect("gzip").stdout
}

fn rootfs(dir: &Path, arch: &str) {
    fs::create_dir_all(dir.join("etc")).expect("mkdir");
    fs::create_dir_all(dir.join("home/nonroot")).expect("mkdir");
    fs::write(dir.join("loki-zone-operator"), format!("binary for {arch}")).expect("write");
    fs::write(
        dir.join("etc/passwd"),
        "nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n",
    )
    .expect("write");
}

fn write_image(out: &Path, platforms: &[(&str, &Path)]) -> Value {
    let mut cmd = Command::new("python3");
    cmd.args([
        "hack/oci.py",
        "image",
        "--name",
        "example.org/lzo:v1",
        "--created",
        "1700000000",
    ]);
    cmd.arg("--out").arg(out);
    for (p, dir) in platforms {
        cmd.arg("--rootfs").arg(format!("{p}={}", dir.display()));
    }
    cmd.args([
        "--owner",
        "home/nonroot=65532:65532",
        "--user",
        "65532:65532",
        "--entrypoint",
        "/loki-zone-operator",
        "--cmd",
        "run",
        "--label",
        "org.opencontainers.image.version=1",
    ]);
    serde_json::from_slice(&run(&mut cmd).stdout).expect("summary")
}

fn unpack(archive: &Path, dir: &Path) {
    fs::create_dir_all(dir).expect("mkdir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir));
}

#[test]
fn the_image_writer_is_reproducible_and_writes_an_index_over_the_platforms() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (amd, arm) = (tmp.path().join("amd64"), tmp.path().join("arm64"));
    rootfs(&amd, "amd64");
    rootfs(&arm, "arm64");
    let both = [
        ("linux/amd64", amd.as_path()),
        ("linux/arm64", arm.as_path()),
    ];
    let (a, b) = (tmp.path().join("a.tar"), tmp.path().join("b.tar"));
    let summary = write_image(&a, &both);
    write_image(&b, &both);
    assert!(
        fs::read(&a).expect("a") == fs::read(&b).expect("b"),
        "two runs, two archives"
    );

    let layout = tmp.path().join("layout");
    unpack(&a, &layout);
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let top = &json(&layout.join("index.json"))["manifests"];
    assert_eq!(
        top.as_array().map(Vec::len),
        Some(1),
        "index.json names one image"
    );
    let top = &top[0];
    assert_eq!(top["mediaType"], "application/vnd.oci.image.index.v1+json");
    assert_eq!(top["digest"], summary["digest"]);
    assert_eq!(
        top["annotations"]["org.opencontainers.image.ref.name"],
        "example.org/lzo:v1"
    );
    let index: Value =
        serde_json::from_slice(&blob(&layout, top["digest"].as_str().expect("d"))).expect("index");
    let mut platforms = BTreeSet::new();
    for m in index["manifests"].as_array().expect("manifests") {
        assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        let arch = m["platform"]["architecture"]
            .as_str()
            .expect("arch")
            .to_string();
        assert_eq!(m["platform"]["os"], "linux");
        let manifest: Value =
            serde_json::from_slice(&blob(&layout, m["digest"].as_str().expect("d"))).expect("m");
        let config: Value = serde_json::from_slice(&blob(
            &layout,
            manifest["config"]["digest"].as_str().expect("config"),
        ))
        .expect("config");
        assert_eq!(config["architecture"], arch.as_str());
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"][0], "/loki-zone-operator");
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.version"],
            "1"
        );
        assert_eq!(
            config["created"], "2023-11-14T22:13:20Z",
            "SOURCE_DATE_EPOCH"
        );
        let layer = &manifest["layers"][0];
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let plain = gunzip(&blob(&layout, layer["digest"].as_str().expect("layer")));
        assert_eq!(config["rootfs"]["diff_ids"][0], sha256(&plain), "diff_id");
        let listing = String::from_utf8(
            run(Command::new("tar").args(["-tvf", "-"]).stdin({
                let f = tmp.path().join(format!("{arch}.layer.tar"));
                fs::write(&f, &plain).expect("write");
                fs::File::open(&f).expect("open")
            }))
            .stdout,
        )
        .expect("utf8");
        assert!(
            listing.contains("65532/65532") && listing.contains("home/nonroot"),
            "{listing}"
        );
        assert!(listing.contains("loki-zone-operator"), "{listing}");
        assert_eq!(
            summary["platforms"][format!("linux/{arch}")]["manifest"],
            m["digest"],
            "the summary names each platform's manifest"
        );
        platforms.insert(arch);
    }
    assert_eq!(platforms, BTreeSet::from(["amd64".into(), "arm64".into()]));
    assert!(
        !layout.join("manifest.json").exists(),
        "no Docker manifest for an index"
    );

    // One platform: one manifest, and Docker's manifest.json for `docker load`.
    let single = tmp.path().join("single.tar");
    let summary = write_image(&single, &both[..1]);
    let layout = tmp.path().join("single");
    unpack(&single, &layout);
    let top = &json(&layout.join("index.json"))["manifests"][0];
    assert_eq!(
        top["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(top["digest"], summary["digest"]);
    let docker = json(&layout.join("manifest.json"));
    assert_eq!(docker[0]["RepoTags"][0], "example.org/lzo:v1");
    blob(
        &layout,
        &format!("sha256:{}", &docker[0]["Config"].as_str().expect("c")[13..]),
    );
}

/// Crate (name, version) pairs from Cargo.lock, with their .crate checksums.
fn lock_checksums() -> std::collections::BTreeMap<(String, String), String> {
    let text = fs::read_to_string(repo_root().join("Cargo.lock")).expect("Cargo.lock");
    let mut out = std::collections::BTreeMap::new();
    for block in text.split("[[package]]") {
        let field = |k: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if let (Some(n), Some(v), Some(c)) = (field("name"), field("version"), field("checksum")) {
            out.insert((n, v), c);
        }
    }
    out
}

/// What `cargo tree` says the binary is made of, for the released targets: normal
/// dependencies without procedural macros (which run at build time).
fn shipped_by_cargo_tree() -> BTreeSet<(String, String)> {
    let mut all = BTreeSet::new();
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        let out = run(Command::new("cargo").args([
            "tree",
            "--locked",
            "-p",
            "loki-zone-operator",
            "--target",
            target,
            "-e",
            "normal,no-proc-macro",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ]));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut parts = line.split_whitespace();
            if let (Some(name), Some(version)) = (parts.next(), parts.next()) {
                if name != "loki-zone-operator" {
                    all.insert((
                        name.to_string(),
                        version.trim_start_matches('v').to_string(),
                    ));
                }
            }
        }
    }
    all
}

#[test]
fn the_sbom_is_cyclonedx_and_lists_exactly_the_shipped_crates() {
    let out = run(Command::new("python3").args([
        "hack/sbom.py",
        "--version",
        env!("CARGO_PKG_VERSION"),
        "--commit",
        "0000000",
        "--created",
        "0",
        "--target",
        "x86_64-unknown-linux-musl",
        "--target",
        "aarch64-unknown-linux-musl",
    ]));
    let sbom: Value = serde_json::from_slice(&out.stdout).expect("sbom");

    let fixtures = repo_root().join("tests/fixtures/cyclonedx");
    let schema = json(&fixtures.join("bom-1.5.schema.json"));
    let mut options = jsonschema::options();
    for f in ["spdx.schema.json", "jsf-0.82.schema.json"] {
        let resource =
            jsonschema::Resource::from_contents(json(&fixtures.join(f))).expect("resource");
        options = options.with_resource(format!("http://cyclonedx.org/schema/{f}"), resource);
    }
    let validator = options.build(&schema).expect("the CycloneDX 1.5 schema");
    let errors: Vec<String> = validator
        .iter_errors(&sbom)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "not CycloneDX 1.5:\n{}",
        errors.join("\n")
    );

    let components = sbom["components"].as_array().expect("components");
    let listed: BTreeSet<(String, String)> = components
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().into(),
                c["version"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    let want = shipped_by_cargo_tree();
    assert_eq!(
        listed.symmetric_difference(&want).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "the SBOM and `cargo tree -e normal,no-proc-macro` disagree"
    );
    assert!(listed.len() > 100, "{} crates", listed.len());
    let checksums = lock_checksums();
    for c in components {
        let key = (
            c["name"].as_str().unwrap_or_default().to_string(),
            c["version"].as_str().unwrap_or_default().to_string(),
        );
        assert_eq!(
            c["hashes"][0]["content"].as_str(),
            checksums.get(&key).map(String::as_str),
            "{key:?}: the .crate checksum of Cargo.lock"
        );
        assert!(
            c["licenses"][0]["expression"].is_string(),
            "{key:?} has no licence"
        );
        assert_eq!(c["purl"], format!("pkg:cargo/{}@{}", key.0, key.1));
    }
    assert_eq!(sbom["metadata"]["component"]["name"], "loki-zone-operator");
}

fn refused(version: &str) -> String {
    let out = Command::new("bash")
        .arg("hack/release.sh")
        .env("VERSION", version)
        .env("DIST", repo_root().join("target/release-refused"))
        .current_dir(repo_root())
        .output()
        .expect("hack/release.sh");
    assert!(!out.status.success(), "VERSION={version} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `make release` checks its inputs before it builds (these return at once).
#[test]
fn a_release_refuses_a_version_it_cannot_ship() {
    let e = refused("0.1.0");
    assert!(e.contains("expected vMAJOR.MINOR.PATCH"), "{e}");
    let e = refused("v9.9.9");
    assert!(e.contains("Cargo.toml's workspace version is"), "{e}");
    assert!(
        !repo_root().join("target/release-refused").exists(),
        "nothing written"
    );
}
