//! The binary as the kubelet runs it: exit status and output.

use std::process::Command;
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loki-zone-wait"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exits_zero_and_prints_the_zone_written_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("az");
    std::fs::write(&file, "").expect("write");
    let child = bin()
        .args(["--file", file.to_str().unwrap(), "--timeout", "20s"])
        .args(["--interval", "50ms"])
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
fn times_out_with_status_1_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("az");
    std::fs::write(&file, "").expect("write");
    let field = "metadata.annotations['loki.grafana.com/availability-zone']";
    let out = bin()
        .args(["--file", file.to_str().unwrap(), "--field", field])
        .args(["--timeout", "300ms", "--interval", "50ms"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(field), "{stderr}");
    assert!(stderr.contains("timed out"), "{stderr}");
}

#[test]
fn a_usage_error_exits_2_with_the_usage() {
    let out = bin().args(["wait-for-zone"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("usage: loki-zone-wait"), "{stderr}");
}
