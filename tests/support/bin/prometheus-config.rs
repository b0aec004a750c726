//! `prometheus-config`: a whole `prometheus.yml` from the ServiceMonitors, PodMonitors and
//! PrometheusRules of a kustomize output, translated as the Prometheus Operator would
//! (`loki_zone_operator_tests::scrape`), for a Prometheus that runs without it. The
//! real-node check (`hack/real-node/prometheus.sh`) runs it.
//!
//! ```text
//! kubectl kustomize OVERLAY | prometheus-config --objects - --out prometheus.yml \
//!     [--api-server URL] [--ca-file FILE] [--bearer-token-file FILE | --cert-file FILE --key-file FILE] \
//!     [--rules-out FILE] [--rule-file FILE]... \
//!     [--scrape-interval 30s] [--interval-override 5s] [--evaluation-interval 30s] \
//!     [--http-sd URL [--http-sd-refresh 5s]]
//! ```
//!
//! `--http-sd URL` discovers through an HTTP stand-in for Kubernetes discovery instead
//! (Debian's Prometheus has none; see `loki_zone_operator_tests::scrape`).
//!
//! `--rules-out FILE` writes the `spec.groups` of every PrometheusRule to FILE as a
//! Prometheus rule file and lists it under `rule_files`.

use std::io::Read;

use anyhow::{bail, Context, Result};
use loki_zone_operator_tests::bundle::parse_stream;
use loki_zone_operator_tests::scrape::{
    prometheus_yml, rule_file, scrape_configs, PrometheusConfig,
};

fn main() -> Result<()> {
    let mut cfg = PrometheusConfig::default();
    let (mut objects_from, mut out, mut rules_out, mut http_sd) = (None, None, None, None);
    let mut refresh = "5s".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--objects" => objects_from = Some(value()?),
            "--out" => out = Some(value()?),
            "--api-server" => cfg.discovery.api_server = Some(value()?),
            "--ca-file" => cfg.discovery.ca_file = Some(value()?),
            "--bearer-token-file" => cfg.discovery.bearer_token_file = Some(value()?),
            "--cert-file" => cfg.discovery.cert_file = Some(value()?),
            "--key-file" => cfg.discovery.key_file = Some(value()?),
            "--rules-out" => rules_out = Some(value()?),
            "--rule-file" => cfg.rule_files.push(value()?),
            "--scrape-interval" => cfg.scrape_interval = value()?,
            "--interval-override" => cfg.interval_override = Some(value()?),
            "--evaluation-interval" => cfg.evaluation_interval = value()?,
            "--http-sd" => http_sd = Some(value()?),
            "--http-sd-refresh" => refresh = value()?,
            other => bail!(
                "unknown argument {other} (see the head of tests/support/bin/prometheus-config.rs)"
            ),
        }
    }
    cfg.http_sd = http_sd.map(|url| (url, refresh));
    let from = objects_from.context("--objects FILE (or - for stdin) is required")?;
    let text = if from == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&from).with_context(|| format!("reading {from}"))?
    };
    let objects = parse_stream(&text)?;
    if let Some(path) = &rules_out {
        let rules = rule_file(&objects)?;
        if rules["groups"].as_array().is_none_or(|g| g.is_empty()) {
            bail!("--rules-out: no PrometheusRule with groups among the objects");
        }
        std::fs::write(path, serde_yaml_ng::to_string(&rules)?)
            .with_context(|| format!("writing {path}"))?;
        cfg.rule_files.push(path.clone());
    }
    let jobs = scrape_configs(&objects, &cfg.discovery)?.len();
    if jobs == 0 {
        bail!("no ServiceMonitor or PodMonitor among the objects");
    }
    let yml = prometheus_yml(&objects, &cfg)?;
    match &out {
        Some(path) => std::fs::write(path, yml).with_context(|| format!("writing {path}"))?,
        None => print!("{yml}"),
    }
    eprintln!(
        "prometheus-config: {jobs} scrape jobs, {} rule file(s)",
        cfg.rule_files.len()
    );
    Ok(())
}
