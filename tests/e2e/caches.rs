//! Each object is cached once per process: a freshly started operator fills one cache per
//! kind, namespace and label selector, however many of its parts read it (the
//! reconciler, the annotator, the webhooks of every replica, the webhook registration).
//! Counted from the API server's audit log, which records every request of the
//! operator's ServiceAccount: a cache starts with one list, then watches. The lists are
//! counted, because the audit log records a watch only when it ends (minutes later).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Result};
use serde_json::Value;

use loki_zone_operator_tests::operator;

use super::Env;

/// What the operator watches, as the audit log names the resource, each at least once.
const WATCHED: [&str; 17] = [
    "lokistacks",
    "alertingrules",
    "recordingrules",
    "rulerconfigs",
    "namespaces",
    "nodes",
    "pods",
    "persistentvolumes",
    "storageclasses",
    "statefulsets",
    "deployments",
    "services",
    "configmaps",
    "serviceaccounts",
    "poddisruptionbudgets",
    "networkpolicies",
    // The nodes' Leases in kube-node-lease (the fast failover's evidence).
    "leases",
];

fn audit_len(path: &Path) -> usize {
    std::fs::metadata(path).map_or(0, |m| m.len() as usize)
}

/// The label selector of a request URI, as sent (URL-encoded), or "" without one.
fn label_selector(uri: &str) -> String {
    uri.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("labelSelector="))
        .unwrap_or_default()
        .to_string()
}

/// The operator's first-page lists after byte `from`, by what they list (resource,
/// namespace, label selector). A list continued over several pages counts once.
fn lists(path: &Path, from: usize) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let user = operator::service_account_user();
    let mut out = BTreeMap::new();
    for line in text[from.min(text.len())..].lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let uri = ev["requestURI"].as_str().unwrap_or_default();
        if ev["user"]["username"] != user.as_str()
            || ev["verb"] != "list"
            || ev["stage"] != "ResponseComplete"
            || uri.contains("continue=")
        {
            continue;
        }
        let what = format!(
            "{} in {} with {:?}",
            ev["objectRef"]["resource"].as_str().unwrap_or_default(),
            ev["objectRef"]["namespace"]
                .as_str()
                .unwrap_or("all namespaces"),
            label_selector(uri),
        );
        *out.entry(what).or_insert(0) += 1;
    }
    out
}

/// A restarted operator fills the cache of every kind exactly once.
pub async fn each_kind_is_watched_once_per_process(env: &mut Env) -> Result<()> {
    let audit = env.cp.dir.join("audit.log");
    env.stop_operator();
    let from = audit_len(&audit);
    env.start_operator().await?;
    // Ready means every cache has listed; a moment more lets the leader's term start,
    // which must fill no cache of its own.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let open = lists(&audit, from);
    let missing: Vec<&str> = WATCHED
        .into_iter()
        .filter(|r| !open.keys().any(|k| k.starts_with(&format!("{r} in "))))
        .collect();
    ensure!(
        missing.is_empty(),
        "no list of {missing:?} in the audit log; listed: {open:#?}"
    );
    let twice: Vec<_> = open.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(
        twice.is_empty(),
        "cached more than once by one process: {twice:?} (every list: {open:#?})"
    );
    println!("    {} caches, each listed once", open.len());
    Ok(())
}
