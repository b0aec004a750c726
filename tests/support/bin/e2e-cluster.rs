//! `e2e-cluster up DIR` starts the local control plane, the node simulator (3 zones x 2
//! nodes) and the install manifests, leaves them running, and prints how to reach them;
//! `e2e-cluster demo DIR` does the same, starts the operator, applies the zone-aware
//! sample and prints where every pod landed; `e2e-cluster down DIR` stops everything it
//! started, by PID.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use loki_zone_operator_tests::harness::ControlPlane;
use loki_zone_operator_tests::nodesim::NodeSim;
use loki_zone_operator_tests::{client_for, operator};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("pids")
}

struct Up {
    admin_kubeconfig: PathBuf,
    operator_kubeconfig: PathBuf,
}

async fn up(dir: &Path) -> Result<Up> {
    if pid_file(dir).exists() {
        bail!(
            "{} already holds a running cluster: run `e2e-cluster down {}` first",
            dir.display(),
            dir.display()
        );
    }
    let cp = ControlPlane::start(dir)?;
    let client = client_for(&cp.admin_kubeconfig).await?;
    operator::deploy(&cp.admin_kubeconfig)?;
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
    let admin_kubeconfig = cp.admin_kubeconfig.clone();
    cp.detach();
    Ok(Up {
        admin_kubeconfig,
        operator_kubeconfig: op_kubeconfig,
    })
}

fn add_pid(dir: &Path, pid: u32) -> Result<()> {
    let mut text = fs::read_to_string(pid_file(dir)).unwrap_or_default();
    text.push_str(&format!("\n{pid}"));
    fs::write(pid_file(dir), text)?;
    Ok(())
}

async fn demo(dir: &Path) -> Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
    use kube::api::{Api, ListParams, PostParams};
    use kube::ResourceExt;
    use loki_zone_operator::model::api::LokiStack;
    use loki_zone_operator_tests::nodesim::{eventually, ZONE};

    println!("starting a Kubernetes 1.35 control plane with 6 simulated nodes in 3 zones ...");
    let up = up(dir).await?;
    let client = client_for(&up.admin_kubeconfig).await?;
    let log = fs::File::create(dir.join("operator.log"))?;
    let op = std::process::Command::new(operator::operator_bin()?)
        .args([
            "run",
            "--health-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--lease-namespace",
            operator::NAMESPACE,
        ])
        .env("KUBECONFIG", &up.operator_kubeconfig)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the operator")?;
    add_pid(dir, op.id())?;
    println!(
        "operator running as ServiceAccount {}/{} (log: {})",
        operator::NAMESPACE,
        operator::SERVICE_ACCOUNT,
        dir.join("operator.log").display()
    );

    let ns = "demo";
    let root = loki_zone_operator_tests::repo_root().join("manifests/samples");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let secret: Secret =
        serde_yaml_ng::from_str(&fs::read_to_string(root.join("secret-s3.yaml"))?)?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let stack: LokiStack =
        serde_yaml_ng::from_str(&fs::read_to_string(root.join("lokistack-zone-aware.yaml"))?)?;
    let name = stack.name_any();
    let stacks: Api<LokiStack> = Api::namespaced(client.clone(), ns);
    stacks.create(&PostParams::default(), &stack).await?;
    println!("applied manifests/samples/lokistack-zone-aware.yaml in namespace {ns}; waiting for Ready ...");
    let ready = eventually(
        "the sample stack to become Ready",
        Duration::from_secs(180),
        || async {
            let s = stacks.get(&name).await?;
            let ok = s.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            Ok(ok.then_some(s))
        },
    )
    .await?;

    let nodes: std::collections::BTreeMap<String, Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect();
    let mut pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items;
    pods.sort_by_key(|p| {
        (
            p.labels().get("app.kubernetes.io/component").cloned(),
            p.name_any(),
        )
    });
    println!(
        "\n{:<16} {:<48} {:<16} {:<8} ANNOTATION",
        "COMPONENT", "POD", "NODE", "ZONE"
    );
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let zone = nodes
            .get(&node)
            .and_then(|n| n.labels().get(ZONE).cloned())
            .unwrap_or_default();
        let ann = loki_zone_operator::checks::podzone::zone_as_read(p)
            .unwrap_or("-")
            .to_string();
        let component = p
            .labels()
            .get("app.kubernetes.io/component")
            .cloned()
            .unwrap_or_default();
        println!(
            "{component:<16} {:<48} {node:<16} {zone:<8} {ann}",
            p.name_any()
        );
    }
    let status = ready.status.unwrap_or_default();
    println!("\nconditions of {ns}/{name}:");
    for c in &status.conditions {
        println!(
            "  {:<9} {:<6} {:<24} {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    let replication = serde_yaml_ng::to_string(&status.replication)?;
    println!("\nstatus.replication:");
    for line in replication.lines() {
        println!("  {line}");
    }
    println!("\nThe cluster keeps running. Reach it with:\n  export KUBECONFIG={}\n  kubectl get lokistacks -A\nStop it with: make demo-down", up.admin_kubeconfig.display());
    Ok(())
}

async fn simulate(kubeconfig: &Path) -> Result<()> {
    let client = client_for(kubeconfig).await?;
    NodeSim::new(client).run().forever().await;
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
        ["up", dir] => {
            let up = up(Path::new(dir)).await?;
            println!("KUBECONFIG={}", up.admin_kubeconfig.display());
            println!("OPERATOR_KUBECONFIG={}", up.operator_kubeconfig.display());
            Ok(())
        }
        ["demo", dir] => demo(Path::new(dir)).await,
        ["down", dir] => down(Path::new(dir)),
        ["simulate", kubeconfig] => simulate(Path::new(kubeconfig)).await,
        _ => bail!("usage: e2e-cluster up DIR | demo DIR | down DIR"),
    }
    .context("e2e-cluster")
}
