//! The binary's offline commands, as a user runs them: exit codes and messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

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
    // Every document parses; 6 workloads each carry the init container.
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("document"))
        .collect();
    let workloads: Vec<&serde_yaml_ng::Value> = docs
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("StatefulSet" | "Deployment")))
        .collect();
    assert_eq!(workloads.len(), 6);
    for w in workloads {
        let init = &w["spec"]["template"]["spec"]["initContainers"][0];
        assert_eq!(init["name"].as_str(), Some("az-annotation-check"));
        assert_eq!(init["args"][0].as_str(), Some("wait-for-zone"));
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

#[test]
fn crd_command_prints_the_committed_crd() {
    let out = run(&["crd"]);
    assert_eq!(out.status.code(), Some(0));
    let committed =
        std::fs::read_to_string(samples().join("../crd/loki.grafana.com_lokistacks.yaml"))
            .expect("crd");
    assert_eq!(text(&out.stdout), committed);
}

#[test]
fn crd_for_old_servers_leaves_out_cel_rules_only() {
    let modern = text(&run(&["crd", "--kube-version", "1.30"]).stdout);
    let old = text(&run(&["crd", "--kube-version", "1.20"]).stdout);
    assert_eq!(modern.matches("x-kubernetes-validations").count(), 5);
    assert!(!old.contains("x-kubernetes-validations"));
    let strip = |s: &str| {
        s.lines()
            .filter(|l| {
                !l.contains("rule:")
                    && !l.contains("message:")
                    && !l.contains("fieldPath:")
                    && !l.contains("x-kubernetes-validations")
            })
            .count()
    };
    // Only the rules (3 lines each with their key) differ.
    assert_eq!(strip(&modern), strip(&old));
}

#[test]
fn wait_for_zone_exits_zero_and_prints_the_zone_written_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("az");
    std::fs::write(&file, "").expect("write");
    let child = bin()
        .args([
            "wait-for-zone",
            "--file",
            file.to_str().unwrap(),
            "--timeout",
            "20s",
            "--interval",
            "50ms",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&file, "eu-west-1b").expect("write zone");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).trim(), "eu-west-1b");
}

#[test]
fn wait_for_zone_times_out_non_zero_naming_the_annotation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("az");
    std::fs::write(&file, "").expect("write");
    let out = run(&[
        "wait-for-zone",
        "--file",
        file.to_str().unwrap(),
        "--timeout",
        "300ms",
        "--interval",
        "50ms",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("loki.grafana.com/availability-zone"),
        "{stderr}"
    );
    assert!(stderr.contains("timed out"), "{stderr}");
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
