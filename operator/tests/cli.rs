//! The binary's offline commands, as a user runs them: exit codes and messages.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loki-zone-operator"))
}

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/samples")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run loki-zone-operator")
}

#[test]
fn render_zone_aware_sample_prints_zone_pieces_and_the_verdict() {
    let stack = samples().join("lokistack-zone-aware.yaml");
    let nodes = samples().join("nodes-three-zones.yaml");
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("zone check: ZonesSufficient (Ok)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("zones found: 3 (eu-west-1a, eu-west-1b, eu-west-1c)"),
        "{stderr}"
    );
    assert!(stderr.contains("write quorum: 2"), "{stderr}");
    assert!(stderr.contains("zone failures tolerated: 1"), "{stderr}");
    let stdout = text(&out.stdout);
    // Every document parses; 7 workloads (the ruler too) each carry the init container.
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("document"))
        .collect();
    let workloads: Vec<&serde_yaml_ng::Value> = docs
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("StatefulSet" | "Deployment")))
        .collect();
    assert_eq!(workloads.len(), 7);
    for w in workloads {
        let init = &w["spec"]["template"]["spec"]["initContainers"][0];
        assert_eq!(init["name"].as_str(), Some("az-annotation-check"));
        assert_eq!(init["args"][0].as_str(), Some("--file"));
    }
}

#[test]
fn render_holds_back_on_a_degraded_zone_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = dir.path().join("stack.yaml");
    let src = std::fs::read_to_string(samples().join("lokistack-zone-aware.yaml")).expect("sample");
    // Four copies over three zones; four ingesters, so the factor itself is valid.
    let src = src
        .lines()
        .map(|l| match l.trim_start().strip_prefix("factor:") {
            Some(_) => "    factor: 4".to_string(),
            None if l == "spec:" => {
                "spec:\n  template:\n    ingester:\n      replicas: 4".to_string()
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&stack, src).expect("write");
    let nodes = samples().join("nodes-three-zones.yaml");
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing is rendered");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ZonesInsufficient"), "{stderr}");
    assert!(
        stderr.contains("replication factor 4 needs at least 4 zones"),
        "{stderr}"
    );
}

#[test]
fn render_rejects_invalid_input_naming_file_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        ("size: 1x.small", "size: 9x.huge", "spec.size"),
        (
            "maxSkew: 1",
            "maxSkew: 0",
            "spec.replication.zones[0].maxSkew",
        ),
        (
            "  replication:\n",
            "  replicationFactor: 2\n  replication:\n",
            "spec.replicationFactor",
        ),
        (
            "kind: LokiStack",
            "kind: Deployment",
            "expected apiVersion loki.grafana.com/v1 and kind LokiStack",
        ),
    ];
    let src = std::fs::read_to_string(samples().join("lokistack-zone-aware.yaml")).expect("sample");
    for (from, to, field) in cases {
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, src.replace(from, to)).expect("write");
        let out = run(&["render", "-f", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{to}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(file.to_str().unwrap()),
            "{to}: file not named: {stderr}"
        );
        assert!(stderr.contains(field), "{to}: {field} not named: {stderr}");
    }
    let out = run(&["render", "-f", "/nonexistent/stack.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/stack.yaml: cannot read"));
}

/// `crd` prints every CRD as one stream, LokiStack first; `--out-dir` writes the files
/// `manifests/crd/` commits.
#[test]
fn crd_command_prints_the_committed_crds() {
    let files = [
        "loki.grafana.com_lokistacks.yaml",
        "loki.grafana.com_alertingrules.yaml",
        "loki.grafana.com_recordingrules.yaml",
        "loki.grafana.com_rulerconfigs.yaml",
    ];
    let out = run(&["crd"]);
    assert_eq!(out.status.code(), Some(0));
    let committed: String = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(samples().join("../crd").join(f)).expect("crd");
            format!("---\n{text}")
        })
        .collect();
    assert_eq!(text(&out.stdout), committed);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&["crd", "--out-dir", dir.path().to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(0));
    for f in files {
        assert_eq!(
            std::fs::read_to_string(dir.path().join(f)).expect("written"),
            std::fs::read_to_string(samples().join("../crd").join(f)).expect("committed"),
            "{f}"
        );
    }
}

/// `crd --kube-version` prints the same CRDs, CEL rules included, for every supported
/// version, and refuses an older one with nothing printed.
#[test]
fn crd_refuses_a_cluster_older_than_the_oldest_supported() {
    let plain = text(&run(&["crd"]).stdout);
    // LokiStack 6, AlertingRule and RecordingRule 1 each, RulerConfig 2 (the header
    // authentication of its Alertmanager and of a tenant's).
    assert_eq!(plain.matches("x-kubernetes-validations").count(), 10);
    kube_version_gives_or_refuses(
        &["crd"],
        [&plain, &plain, &plain],
        ["1.30", "1.30+", "v1.20.2"],
    );
}

/// `args` with `--kube-version` 1.31, 1.31+ and v1.35.4 prints `want`'s texts in that
/// order, exactly; with each of `older` it exits 2, prints nothing and names both
/// versions.
fn kube_version_gives_or_refuses(args: &[&str], want: [&str; 3], older: [&str; 3]) {
    for (version, plain) in ["1.31", "1.31+", "v1.35.4"].into_iter().zip(want) {
        let out = run(&[args, &["--kube-version", version]].concat());
        assert_eq!(
            out.status.code(),
            Some(0),
            "{version}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), plain, "{version}");
    }
    for version in older {
        let out = run(&[args, &["--kube-version", version]].concat());
        assert_eq!(out.status.code(), Some(2), "{version}");
        assert!(out.stdout.is_empty(), "{version}");
        let want = format!("Kubernetes 1.31 or later is required; the target cluster is {version}");
        assert!(text(&out.stderr).contains(&want), "{}", text(&out.stderr));
    }
}

#[test]
fn render_rejects_unknown_fields_and_warns_of_go_operator_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = dir.path().join("stack.yaml");
    let src = std::fs::read_to_string(samples().join("lokistack-demo.yaml")).expect("sample");
    let go = src.replacen(
        "spec:\n",
        "spec:\n  tenants:\n    mode: openshift-logging\n",
        1,
    );
    let typo = go.replacen("spec:\n", "spec:\n  replicationFactr: 2\n", 1);
    std::fs::write(&stack, typo).expect("write");
    let out = run(&["render", "-f", stack.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing is rendered");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown fields: spec.replicationFactr"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("spec.tenants"),
        "a Go operator field is known: {stderr}"
    );

    std::fs::write(&stack, go).expect("write");
    let out = run(&["render", "-f", stack.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!out.stdout.is_empty(), "rendered");
    assert!(
        stderr.contains("warning: these fields of the Go Loki Operator are kept but this operator does not act on them: spec.tenants"),
        "{stderr}"
    );
}

/// The `config.yaml` of the rendered ConfigMap.
fn rendered_config(stdout: &str) -> String {
    serde_yaml_ng::Deserializer::from_str(stdout)
        .map(|d| <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d).expect("document"))
        .find_map(|d| d["data"]["config.yaml"].as_str().map(str::to_string))
        .expect("a ConfigMap with config.yaml")
}

#[test]
fn render_with_the_secret_resolves_the_s3_endpoint_as_the_operator_does() {
    let stack = samples().join("lokistack-zone-aware.yaml");
    let secret = samples().join("secret-s3.yaml");
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--secret",
        secret.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Nothing about the storage left unresolved; the sample picks rules, which this
    // render is not given (--rules), and says so.
    assert!(
        stderr
            .lines()
            .all(|l| !l.starts_with("warning") || l.contains("no --rules were given")),
        "{stderr}"
    );
    let config = rendered_config(&text(&out.stdout));
    for line in [
        "endpoint: \"s3.eu-west-1.amazonaws.com\"",
        "region: \"eu-west-1\"",
        "insecure: false",
        "bucket_lookup_type: \"virtual-hosted\"",
        "bucket_name: \"${LOKI_STORAGE_BUCKET_NAME}\"",
    ] {
        assert!(config.contains(line), "{line} missing:\n{config}");
    }
    assert!(!config.contains("LOKI_STORAGE_ENDPOINT"), "{config}");

    // Without it, the endpoint is left to Loki's expansion, and stderr says so.
    let out = run(&["render", "-f", stack.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(rendered_config(&text(&out.stdout)).contains("endpoint: \"${LOKI_STORAGE_ENDPOINT}\""));
    assert!(
        stderr.contains("warning: without --secret, the S3 endpoint")
            && stderr.contains("kubectl get secret lokistack-s3 -o yaml"),
        "{stderr}"
    );
}

#[test]
fn render_takes_the_stack_and_secret_as_kubectl_get_prints_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = std::fs::read_to_string(samples().join("lokistack-zone-aware.yaml")).expect("sample");
    let live = src.replacen(
        "  name: lokistack-zones\n",
        "  name: lokistack-zones\n  namespace: logs\n  uid: 0b8a3c1e-55a0-4d4e-9c61-1a2b3c4d5e6f\n  resourceVersion: \"42\"\n  generation: 3\n  creationTimestamp: \"2026-01-02T03:04:05Z\"\n",
        1,
    ) + "status:\n  conditions:\n  - type: Ready\n    status: \"True\"\n    reason: ReadyComponents\n    message: All components ready\n    lastTransitionTime: \"2026-01-02T03:05:00Z\"\n";
    let stack = dir.path().join("stack.yaml");
    std::fs::write(&stack, live).expect("write");
    // base64 of the sample's values, as `kubectl get secret -o yaml` prints them.
    let secret = dir.path().join("secret.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: lokistack-s3\n  namespace: logs\n  resourceVersion: \"7\"\ntype: Opaque\ndata:\n  bucketnames: bG9raS1jaHVua3M=\n  endpoint: aHR0cDovL21pbmlvLnN0b3JhZ2Uuc3ZjOjkwMDA=\n  access_key_id: aWQ=\n  access_key_secret: c2VjcmV0\n",
    )
    .expect("write");
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--secret",
        secret.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = text(&out.stdout);
    let config = rendered_config(&stdout);
    assert!(
        config.contains("endpoint: \"minio.storage.svc:9000\"")
            && config.contains("insecure: true")
            && config.contains("bucket_lookup_type: \"path\""),
        "{config}"
    );
    // With the stack's uid, every object is owned by it, as the operator applies it.
    assert!(
        stdout.contains("uid: 0b8a3c1e-55a0-4d4e-9c61-1a2b3c4d5e6f"),
        "{stdout}"
    );
}

#[test]
fn render_rejects_a_bad_secret_naming_what_to_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = samples().join("lokistack-zone-aware.yaml");
    let sample = std::fs::read_to_string(samples().join("secret-s3.yaml")).expect("sample");
    let cases = [
        (
            sample.replace("name: lokistack-s3", "name: other"),
            "metadata.name is \"other\", but the stack's spec.storage.secret.name is \"lokistack-s3\"",
        ),
        (
            sample.replace("  access_key_secret: REPLACE_ME\n", ""),
            "lacks keys required for type s3: access_key_secret",
        ),
        (
            sample.replace(
                "https://s3.eu-west-1.amazonaws.com",
                "https://s3.eu-west-1.amazonaws.com/loki",
            ),
            "key endpoint",
        ),
        (
            sample.replace("kind: Secret", "kind: ConfigMap"),
            "expected a Secret",
        ),
        (
            sample.replace("name: lokistack-s3", "name: lokistack-s3\n  namespace: elsewhere"),
            "metadata.namespace is \"elsewhere\", but the stack renders into \"default\"",
        ),
    ];
    for (body, want) in cases {
        let file = dir.path().join("secret.yaml");
        std::fs::write(&file, body).expect("write");
        let out = run(&[
            "render",
            "-f",
            stack.to_str().unwrap(),
            "--secret",
            file.to_str().unwrap(),
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(out.stdout.is_empty(), "{want}: rendered anyway");
        assert!(
            stderr.contains(&format!("{}:", file.display())) && stderr.contains(want),
            "{want}: {stderr}"
        );
    }
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--secret",
        "/nonexistent/secret.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/secret.yaml: cannot read"));
}

#[test]
fn render_prints_the_budgets_as_policy_v1() {
    let stack = samples().join("lokistack-demo.yaml");
    let out = run(&["render", "-f", stack.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let versions = serde_yaml_ng::Deserializer::from_str(&text(&out.stdout))
        .map(|d| <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d).expect("doc"))
        .filter(|d| d["kind"].as_str() == Some("PodDisruptionBudget"))
        .map(|d| d["apiVersion"].as_str().unwrap_or_default().to_string())
        .collect::<BTreeSet<String>>();
    assert_eq!(versions, BTreeSet::from(["policy/v1".to_string()]));
}

/// `rendered` as its pods read their zone on 1.35: from the label, marked so (each
/// zone-aware pod template's annotations end with the config hash).
fn zone_from_the_label(rendered: &str) -> String {
    // The downward-API fields and the init container's `--field`.
    let annotation = "metadata.annotations['loki.grafana.com/availability-zone']";
    let label = "metadata.labels['topology.kubernetes.io/zone']";
    let mut out = String::new();
    for line in rendered.replace(annotation, label).split_inclusive('\n') {
        out.push_str(line);
        if let Some(indent) = line
            .strip_suffix('\n')
            .and_then(|l| l.find("loki.grafana.com/config-hash: ").map(|i| &l[..i]))
        {
            out.push_str(&format!(
                "{indent}loki.grafana.com/zone-source: pod-label\n"
            ));
        }
    }
    out
}

/// `render --kube-version` renders the same objects for every supported version (but
/// the entry Services' `PreferSameZone` from 1.34 for `PreferClose`, and from 1.35 the
/// zone read from the label Kubernetes copies at binding, this sample's only key), and
/// refuses an older one with nothing rendered.
#[test]
fn render_refuses_a_cluster_older_than_the_oldest_supported() {
    let stack = samples().join("lokistack-zone-aware.yaml");
    let stack = stack.to_str().unwrap();
    let plain = run(&["render", "-f", stack]);
    assert_eq!(plain.status.code(), Some(0), "{}", text(&plain.stderr));
    let plain = text(&plain.stdout);
    assert!(plain.contains("trafficDistribution: PreferClose"));
    assert!(plain.contains("nodeTaintsPolicy: Honor"));
    // 1.34 and later take PreferSameZone, the name 1.35 does not warn about; 1.35 copies
    // topology.kubernetes.io/zone onto pods at binding, and the pods read it.
    let newer = zone_from_the_label(&plain.replace("PreferClose", "PreferSameZone"));
    kube_version_gives_or_refuses(
        &["render", "-f", stack],
        [&plain, &plain, &newer],
        ["1.30", "1.20+", "v1.20.2"],
    );
    let out = run(&["render", "-f", stack, "--kube-version", "latest"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid Kubernetes version \"latest\""));
}

/// `render --rules` renders the rule files and RulerConfig of the objects the stack
/// picks, as the operator does; a wrong rule is named on stderr and left out; a wrong
/// RulerConfig exits 2 naming its field.
#[test]
fn render_with_rules_lays_out_the_picked_rules_and_the_ruler_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = samples().join("lokistack-zone-aware.yaml");
    let file = |f: &str| samples().join(f).to_string_lossy().into_owned();
    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        "apiVersion: loki.grafana.com/v1\nkind: AlertingRule\nmetadata:\n  name: wrong\n  labels:\n    loki-rules: lokistack-zones\nspec:\n  tenantID: application\n  groups:\n  - name: g\n    rules:\n    - alert: A\n      expr: '{app=\"x\"} |= \"error\"'\n---\napiVersion: loki.grafana.com/v1\nkind: AlertingRule\nmetadata:\n  name: unpicked\nspec:\n  tenantID: application\n  groups: []\n",
    )
    .expect("write");
    let (a, r, c) = (
        file("alertingrule.yaml"),
        file("recordingrule.yaml"),
        file("rulerconfig.yaml"),
    );
    let wrong_arg = wrong.to_string_lossy().into_owned();
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--rules",
        &a,
        "--rules",
        &r,
        "--rules",
        &c,
        "--rules",
        &wrong_arg,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("AlertingRule default/wrong is not loaded: spec.groups[0].rules[0].expr"),
        "{stderr}"
    );
    assert!(!stderr.contains("unpicked"), "{stderr}");
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text(&out.stdout))
        .map(|d| serde::Deserialize::deserialize(d).expect("document"))
        .collect();
    let rules = docs
        .iter()
        .find(|d| d["metadata"]["name"].as_str() == Some("lokistack-zones-rules-application-0"))
        .expect("the tenant's rules ConfigMap");
    let keys: Vec<&str> = rules["data"]
        .as_mapping()
        .expect("data")
        .keys()
        .filter_map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "default-application-errors-.yaml",
            "default-application-log-rates-.yaml"
        ]
    );
    let config = docs
        .iter()
        .find(|d| d["metadata"]["name"].as_str() == Some("lokistack-zones-config"))
        .expect("config");
    let loki = config["data"]["config.yaml"].as_str().expect("config.yaml");
    assert!(
        loki.contains("backend: local")
            && loki.contains("alertmanager_url: http://alertmanager-operated.monitoring.svc:9093"),
        "{loki}"
    );

    let bad = dir.path().join("bad-ruler.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(samples().join("rulerconfig.yaml"))
            .expect("sample")
            .replace("evaluationInterval: 1m", "evaluationInterval: often"),
    )
    .expect("write");
    let out = run(&[
        "render",
        "-f",
        stack.to_str().unwrap(),
        "--rules",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("spec.evaluationInterval"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn version_names_the_release_and_the_commit() {
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let want = format!("loki-zone-operator {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&want), "{line}");
    // In a checkout, the commit is HEAD's (the build script reads it); `make release`
    // and the Dockerfile pass it as LZO_GIT_COMMIT.
    let commit = line[want.len()..].trim_end().trim_end_matches(')');
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    // `LZO_GIT_COMMIT=... cargo test` builds and runs with the same environment.
    match (std::env::var("LZO_GIT_COMMIT").ok(), head) {
        (Some(given), _) if !given.trim().is_empty() => assert_eq!(commit, given.trim()),
        (_, Some(head)) => assert_eq!(commit, head, "{line}"),
        (_, None) => assert_eq!(commit, "unknown", "{line}"),
    }
}
