//! Two leaders never act at once. A leader whose connections to the API server stall
//! (accepted, never answered: a dead link, a hung load balancer) stops leading when its
//! renew deadline passes, before a standby can take the Lease; when its link comes back
//! it writes nothing, although a new stack is waiting to be applied.
//!
//! The leader talks to the API server through a proxy (`support/proxy.rs`) whose
//! connections come from 127.0.0.2, so the audit log tells its requests from the
//! standby's, which come from 127.0.0.1 under the same ServiceAccount.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use serde_json::Value;

use loki_zone_operator_tests::nodesim::eventually;
use loki_zone_operator_tests::operator::{self, Operator};
use loki_zone_operator_tests::proxy::{StallingProxy, SOURCE_IP};

use super::{create_stack, namespace, stack_json, wait_condition, Env, WAIT};

const LEASE: &str = "loki-zone-operator";
const NS: &str = "e2e-stalled-leader";

/// The operator's writes the API server received from `source` after `after`, and the
/// number of its reads, from byte `from` of the audit log on.
fn requests_from(
    audit: &Path,
    from: usize,
    source: &str,
    after: Timestamp,
) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let user = operator::service_account_user();
    let (mut writes, mut reads) = (Vec::new(), 0);
    for line in text[from.min(text.len())..].lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let from_source = ev["sourceIPs"]
            .as_array()
            .is_some_and(|ips| ips.iter().any(|ip| ip == source));
        let received = ev["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok());
        if ev["user"]["username"] != user.as_str() || !from_source || received <= Some(after) {
            continue;
        }
        match ev["verb"].as_str().unwrap_or_default() {
            "create" | "update" | "patch" | "delete" | "deletecollection" => writes.push(format!(
                "{} {} {}",
                ev["verb"], ev["objectRef"]["resource"], ev["objectRef"]["name"]
            )),
            _ => reads += 1,
        }
    }
    (writes, reads)
}

/// The timestamp (RFC 3339, UTC, fixed width: comparable as text) of the last line of an
/// operator log that contains `what`.
fn logged_at(log: &str, what: &str) -> Option<String> {
    let line = log.lines().rev().find(|l| l.contains(what))?;
    // Without the colour escapes, a line starts with its timestamp.
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for e in chars.by_ref() {
                if e == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain.split_whitespace().next().map(str::to_string)
}

async fn holder(leases: &Api<Lease>) -> Result<String> {
    Ok(leases
        .get(LEASE)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

pub async fn a_stalled_leader_stops_before_a_standby_takes_over(env: &mut Env) -> Result<()> {
    let text = std::fs::read_to_string(&env.operator_kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("no server in the operator's kubeconfig")?
        .trim()
        .to_string();
    let upstream: SocketAddr = server.trim_start_matches("https://").parse()?;
    let proxy = StallingProxy::start(upstream).await?;
    let dir = env.cp.dir.join("stalled-leader");
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        text.replace(&server, &format!("https://{}", proxy.addr)),
    )?;
    let leases: Api<Lease> = Api::namespaced(env.admin.clone(), operator::NAMESPACE);
    env.stop_operator();
    let args = |identity| ["--resync", "2s", "--identity", identity];
    let mut leader = Operator::start(&kubeconfig, &dir, &args("stalled-leader"))?;
    leader.wait_ready(Duration::from_secs(60)).await?;
    eventually("the proxied replica to lead", WAIT, || async {
        Ok((holder(&leases).await? == "stalled-leader").then_some(()))
    })
    .await?;
    let standby_dir = env.cp.dir.join("stalled-standby");
    std::fs::create_dir_all(&standby_dir)?;
    let mut standby = Operator::start(&env.operator_kubeconfig, &standby_dir, &args("standby"))?;
    let result = async {
        standby.wait_ready(Duration::from_secs(60)).await?;
        let audit = env.cp.dir.join("audit.log");
        // A write the leader sent before the stall but that the stalled proxy delivers
        // only after it would look like a write after the term: stall only once the
        // leader's first term (with nothing changed, it writes nothing) has gone quiet.
        eventually("the leader quiet before the stall", WAIT, || async {
            let before = std::fs::metadata(&audit).map_or(0, |m| m.len() as usize);
            let since = Timestamp::now();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (writes, _) = requests_from(&audit, before, SOURCE_IP, since);
            // Lease renewals go on while it leads.
            Ok(writes
                .iter()
                .all(|w| w.contains("\"leases\""))
                .then_some(()))
        })
        .await?;
        let from = std::fs::metadata(&audit).map_or(0, |m| m.len() as usize);
        proxy.stall();
        let stalled_at = Instant::now();
        // What the leader sent before the stall (its first term re-applies every stack)
        // is its right; from now on nothing of it may reach the server while it leads.
        let stalled_wall = Timestamp::now();
        // Work for whoever leads.
        namespace(env, NS).await?;
        create_stack(env, NS, stack_json("s", "1x.demo", Value::Null)).await?;
        eventually("the standby to lead", WAIT, || async {
            Ok((holder(&leases).await? == "standby").then_some(()))
        })
        .await?;
        let took_over = stalled_at.elapsed();
        wait_condition(env, NS, "s", "Ready", Some("ReadyComponents")).await?;
        proxy.heal();
        // Time to reconnect, re-list and, were it still leading, reconcile the new stack.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (writes, reads) = requests_from(&audit, from, SOURCE_IP, stalled_wall);
        ensure!(
            reads > 0,
            "nothing of the healed replica reached the API server: the check proves nothing"
        );
        ensure!(
            writes.is_empty(),
            "the old leader wrote after the standby took over: {writes:?}"
        );
        let log = std::fs::read_to_string(dir.join("operator.log"))?;
        // Everything the leader does stopped before the standby could take over.
        let ended = logged_at(&log, "leadership term ended").context("the old leader's term did not end")?;
        let standby_log = std::fs::read_to_string(standby_dir.join("operator.log"))?;
        let began = logged_at(&standby_log, "became leader").context("the standby never led")?;
        ensure!(
            ended < began,
            "the old leader's term ended at {ended}, after the standby began to lead at {began}"
        );
        ensure!(
            log.contains("within its renew deadline"),
            "the old leader did not step down at its renew deadline:\n{log}"
        );
        println!("    the standby led {took_over:.1?} after the leader's link stalled; the old leader wrote nothing after ({reads} reads once its link was back)");
        Ok(())
    }
    .await;
    leader.stop();
    standby.stop();
    env.start_operator().await?;
    result
}
