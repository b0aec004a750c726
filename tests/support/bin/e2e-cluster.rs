//! `e2e-cluster up DIR` starts the local control plane, the node simulator (3 zones x 2
//! nodes) and the install manifests, leaves them running, and prints how to reach them;
//! `e2e-cluster down DIR` stops everything it started, by PID.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kube::{Client, Config};
use loki_zone_operator_tests::harness::ControlPlane;
use loki_zone_operator_tests::nodesim::NodeSim;
use loki_zone_operator_tests::operator;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

async fn admin_client(kubeconfig: &Path) -> Result<Client> {
    let config = Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("pids")
}

async fn up(dir: &Path) -> Result<()> {
    if pid_file(dir).exists() {
        bail!(
            "{} already holds a running cluster: run `e2e-cluster down {}` first",
            dir.display(),
            dir.display()
        );
    }
    let cp = ControlPlane::start(dir)?;
    let client = admin_client(&cp.admin_kubeconfig).await?;
    let docs = operator::kustomize()?;
    let (crds, rest): (Vec<_>, Vec<_>) = docs
        .into_iter()
        .partition(|d| d["kind"] == "CustomResourceDefinition");
    operator::install(&client, &crds).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    operator::install(&client, &rest).await?;
    let sim = NodeSim::new(client.clone());
    sim.install_storage_class().await?;
    sim.create_zones(&ZONES, 2).await?;
    let op_kubeconfig = operator::service_account_kubeconfig(&client, &cp).await?;
    let mut pids = cp.pids();
    // The simulator keeps running in its own process.
    let exe = std::env::current_exe()?;
    let log = fs::File::create(dir.join("nodesim.log"))?;
    let child = std::process::Command::new(exe)
        .args(["simulate"])
        .arg(&cp.admin_kubeconfig)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    pids.push(child.id());
    fs::write(
        pid_file(dir),
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    )?;
    println!("KUBECONFIG={}", cp.admin_kubeconfig.display());
    println!("OPERATOR_KUBECONFIG={}", op_kubeconfig.display());
    cp.detach();
    Ok(())
}

async fn simulate(kubeconfig: &Path) -> Result<()> {
    let client = admin_client(kubeconfig).await?;
    let handles = NodeSim::new(client).run();
    futures::future::join_all(handles).await;
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    let Ok(text) = fs::read_to_string(pid_file(dir)) else {
        println!("no cluster running in {}", dir.display());
        return Ok(());
    };
    let pids: Vec<&str> = text.lines().rev().collect();
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", pid])
            .status();
    }
    std::thread::sleep(Duration::from_secs(2));
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", pid])
            .stderr(std::process::Stdio::null())
            .status();
    }
    fs::remove_file(pid_file(dir))?;
    println!("stopped {} processes", pids.len());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["up", dir] => up(Path::new(dir)).await,
        ["down", dir] => down(Path::new(dir)),
        ["simulate", kubeconfig] => simulate(Path::new(kubeconfig)).await,
        _ => bail!("usage: e2e-cluster up DIR | down DIR"),
    }
    .context("e2e-cluster")
}
