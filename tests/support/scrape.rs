//! Prometheus scrape configurations from the ServiceMonitors and PodMonitors we ship,
//! written the way the Prometheus Operator generates them, for a Prometheus that runs
//! without the Prometheus Operator (the real-node check, `hack/real-node/prometheus.sh`).
//!
//! One `scrape_configs` entry per endpoint of each object, named as the Prometheus
//! Operator names it (`serviceMonitor/<namespace>/<name>/<index>`,
//! `podMonitor/<namespace>/<name>/<index>`), with Kubernetes service discovery (role
//! `endpoints` for a ServiceMonitor, `pod` for a PodMonitor) in the namespaces its
//! `namespaceSelector` names (every namespace for `any: true`, else the object's own),
//! and these relabelings, in this order:
//!
//! 1. the job name kept in `__tmp_prometheus_job_name`;
//! 2. keep only targets whose Service (PodMonitor: pod) has every label of
//!    `selector.matchLabels` and satisfies every `matchExpressions` entry;
//! 3. keep only the endpoint's port, by name (`port`), or the pod's container port
//!    (`targetPort`, by name or number);
//! 4. `namespace`, `pod` and `container` (and for a ServiceMonitor `node` or `pod` from the
//!    endpoint's target, and `service`) from the discovered object;
//! 5. unless `filterRunning: false`, drop pods that have ended (`Failed`, `Succeeded`);
//! 6. `targetLabels` (Service labels) and `podTargetLabels` (pod labels) copied over;
//! 7. `job`: the Service's name (PodMonitor: `<namespace>/<name>` of the PodMonitor), or
//!    the value of its `jobLabel` label where it has one;
//! 8. `endpoint`: the port's name (or number);
//! 9. the endpoint's own `relabelings`, as written.
//!
//! The Prometheus Operator's hashmod sharding is left out: with one shard it keeps every
//! target. A field this module does not translate (TLS and authentication of the scrape,
//! limits it does not know) is an error naming it, never silently dropped.
//!
//! Debian's Prometheus (the `prometheus` package, 2.42) is built without Kubernetes
//! discovery (Debian removed it in 1.5.0, NEWS.Debian: "Kubernetes support has been
//! completely removed"): [`PrometheusConfig::http_sd`] replaces each job's
//! `kubernetes_sd_configs` with an `http_sd_configs` entry whose URL carries the role and
//! namespaces, for a stand-in that lists the same objects and serves the same
//! `__meta_kubernetes_*` labels (`hack/real-node/k8s-sd.py`); every relabeling stays as
//! it is.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

/// Where and how Prometheus reaches the API server for its service discovery. Everything
/// `None`: in-cluster (the pod's ServiceAccount).
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    pub api_server: Option<String>,
    pub ca_file: Option<String>,
    pub bearer_token_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

/// What `prometheus.yml` holds besides the scrape configurations.
#[derive(Clone, Debug)]
pub struct PrometheusConfig {
    pub discovery: Discovery,
    /// `global.scrape_interval`, used by endpoints that set no interval.
    pub scrape_interval: String,
    /// Replaces every endpoint's `interval` (a test that cannot wait 30 s per sample).
    pub interval_override: Option<String>,
    pub evaluation_interval: String,
    pub rule_files: Vec<String>,
    /// (URL, refresh interval) of an HTTP discovery stand-in for Kubernetes discovery
    /// (see the module's documentation); `None` keeps `kubernetes_sd_configs`.
    pub http_sd: Option<(String, String)>,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            discovery: Discovery::default(),
            scrape_interval: "30s".into(),
            interval_override: None,
            evaluation_interval: "30s".into(),
            rule_files: Vec::new(),
            http_sd: None,
        }
    }
}

/// A label name as Prometheus's Kubernetes discovery writes it into a meta label: every
/// character that is not a letter, digit or underscore becomes an underscore.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The Prometheus Operator's kinds, `ServiceMonitor` or `PodMonitor`.
pub fn is_monitor(object: &Value) -> bool {
    object["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("monitoring.coreos.com/"))
        && matches!(
            object["kind"].as_str(),
            Some("ServiceMonitor" | "PodMonitor")
        )
}

/// One `scrape_configs` entry per endpoint of every ServiceMonitor and PodMonitor among
/// `objects` (other kinds are skipped), in the order of the objects.
pub fn scrape_configs(objects: &[Value], discovery: &Discovery) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| is_monitor(o)) {
        let what = format!(
            "{} {}/{}",
            o["kind"].as_str().unwrap_or_default(),
            o["metadata"]["namespace"].as_str().unwrap_or("-"),
            o["metadata"]["name"].as_str().unwrap_or("-")
        );
        out.extend(monitor(o, discovery).with_context(|| what)?);
    }
    Ok(out)
}

/// The rule groups of every PrometheusRule among `objects`, as a Prometheus rule file
/// (`{groups: [...]}`).
pub fn rule_file(objects: &[Value]) -> Result<Value> {
    let mut groups = Vec::new();
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "PrometheusRule" && o["apiVersion"] == "monitoring.coreos.com/v1")
    {
        let g = o["spec"]["groups"].as_array().with_context(|| {
            format!(
                "PrometheusRule {} has no spec.groups",
                o["metadata"]["name"].as_str().unwrap_or("-")
            )
        })?;
        groups.extend(g.iter().cloned());
    }
    Ok(json!({ "groups": groups }))
}

/// A whole `prometheus.yml`: global intervals, the rule files, and the scrape
/// configurations of `objects`.
pub fn prometheus_yml(objects: &[Value], cfg: &PrometheusConfig) -> Result<String> {
    let mut jobs = scrape_configs(objects, &cfg.discovery)?;
    if let Some(interval) = &cfg.interval_override {
        for j in &mut jobs {
            j["scrape_interval"] = json!(interval);
            if j.get("scrape_timeout").is_some() {
                bail!(
                    "{}: sets a scrape timeout; an interval override would make it invalid",
                    j["job_name"]
                );
            }
        }
    }
    if let Some((url, refresh)) = &cfg.http_sd {
        via_http_sd(&mut jobs, url, refresh)?;
    }
    let doc = json!({
        "global": {
            "scrape_interval": cfg.scrape_interval,
            "scrape_timeout": cfg.interval_override.as_deref().unwrap_or("10s"),
            "evaluation_interval": cfg.evaluation_interval,
        },
        "rule_files": cfg.rule_files,
        "scrape_configs": jobs,
    });
    Ok(serde_yaml_ng::to_string(&doc)?)
}

/// Each job's `kubernetes_sd_configs` replaced by an `http_sd_configs` entry at `url`
/// with `role=<role>` and one `namespace=<name>` per namespace it discovers in (none for
/// every namespace), polled every `refresh`.
pub fn via_http_sd(jobs: &mut [Value], url: &str, refresh: &str) -> Result<()> {
    for j in jobs {
        let obj = j.as_object_mut().context("a scrape config")?;
        let sd = obj
            .remove("kubernetes_sd_configs")
            .context("a scrape config without kubernetes_sd_configs")?;
        let sd = &sd[0];
        let mut query = format!("role={}", sd["role"].as_str().context("role")?);
        for n in sd["namespaces"]["names"].as_array().into_iter().flatten() {
            query.push_str(&format!("&namespace={}", n.as_str().context("namespace")?));
        }
        obj.insert(
            "http_sd_configs".into(),
            json!([{"url": format!("{url}?{query}"), "refresh_interval": refresh}]),
        );
    }
    Ok(())
}

const SERVICE_MONITOR_SPEC: &[&str] = &[
    "selector",
    "namespaceSelector",
    "endpoints",
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
    "sampleLimit",
    "targetLimit",
];
const POD_MONITOR_SPEC: &[&str] = &[
    "selector",
    "namespaceSelector",
    "podMetricsEndpoints",
    "jobLabel",
    "podTargetLabels",
    "sampleLimit",
    "targetLimit",
];
const ENDPOINT: &[&str] = &[
    "port",
    "targetPort",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "params",
    "relabelings",
    "metricRelabelings",
    "filterRunning",
];
const RELABEL: &[(&str, &str)] = &[
    ("sourceLabels", "source_labels"),
    ("separator", "separator"),
    ("targetLabel", "target_label"),
    ("regex", "regex"),
    ("modulus", "modulus"),
    ("replacement", "replacement"),
    ("action", "action"),
];

fn only_known(what: &str, v: &Value, known: &[&str]) -> Result<()> {
    if let Some(map) = v.as_object() {
        for k in map.keys() {
            if !known.contains(&k.as_str()) {
                bail!("{what}.{k} is not translated into a scrape configuration");
            }
        }
    }
    Ok(())
}

fn str_list(v: &Value, what: &str) -> Result<Vec<String>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(String::from)
                    .with_context(|| format!("{what}: not a string: {i}"))
            })
            .collect(),
        other => bail!("{what}: not a list: {other}"),
    }
}

fn relabel(source: &[&str], target: &str, regex: Option<&str>, replacement: Option<&str>) -> Value {
    let mut r = Map::new();
    if !source.is_empty() {
        r.insert("source_labels".into(), json!(source));
    }
    if let Some(re) = regex {
        r.insert("regex".into(), json!(re));
    }
    r.insert("target_label".into(), json!(target));
    if let Some(rep) = replacement {
        r.insert("replacement".into(), json!(rep));
    }
    r.insert("action".into(), json!("replace"));
    Value::Object(r)
}

fn filter(action: &str, source: &[String], regex: &str) -> Value {
    json!({"action": action, "source_labels": source, "regex": regex})
}

/// Regular-expression metacharacters escaped, so that a label value matches itself only.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The keep and drop rules of a label selector over the discovered object's labels
/// (`meta` is `service` or `pod`).
fn selector_rules(selector: &Value, meta: &str) -> Result<Vec<Value>> {
    only_known("selector", selector, &["matchLabels", "matchExpressions"])?;
    let label = |k: &str| format!("__meta_kubernetes_{meta}_label_{}", sanitize(k));
    let present = |k: &str| format!("__meta_kubernetes_{meta}_labelpresent_{}", sanitize(k));
    let mut rules = Vec::new();
    let labels: BTreeMap<String, String> = match &selector["matchLabels"] {
        Value::Null => BTreeMap::new(),
        v => serde_json::from_value(v.clone()).context("selector.matchLabels")?,
    };
    for (k, v) in &labels {
        rules.push(filter(
            "keep",
            &[label(k), present(k)],
            &format!("({});true", quote_meta(v)),
        ));
    }
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        only_known(
            "selector.matchExpressions[]",
            e,
            &["key", "operator", "values"],
        )?;
        let key = e["key"].as_str().context("matchExpressions[].key")?;
        let values = str_list(&e["values"], "matchExpressions[].values")?;
        let alternatives = values
            .iter()
            .map(|v| quote_meta(v))
            .collect::<Vec<_>>()
            .join("|");
        match e["operator"].as_str() {
            Some("In") => rules.push(filter(
                "keep",
                &[label(key), present(key)],
                &format!("({alternatives});true"),
            )),
            Some("NotIn") => rules.push(filter(
                "drop",
                &[label(key), present(key)],
                &format!("({alternatives});true"),
            )),
            Some("Exists") => rules.push(filter("keep", &[present(key)], "true")),
            Some("DoesNotExist") => rules.push(filter("drop", &[present(key)], "true")),
            other => bail!("matchExpressions[].operator {other:?}"),
        }
    }
    Ok(rules)
}

/// A relabeling as the Prometheus Operator's CRDs spell it (camelCase, `action` in
/// either case), as Prometheus takes it.
pub fn relabeling(r: &Value) -> Result<Value> {
    let map = r.as_object().context("a relabeling is not an object")?;
    let mut out = Map::new();
    for (k, v) in map {
        let Some((_, snake)) = RELABEL.iter().find(|(camel, _)| camel == k) else {
            bail!("relabeling field {k} is not translated");
        };
        let v = if k == "action" {
            json!(v.as_str().context("action")?.to_ascii_lowercase())
        } else {
            v.clone()
        };
        out.insert(snake.to_string(), v);
    }
    Ok(Value::Object(out))
}

fn relabelings(v: &Value, what: &str) -> Result<Vec<Value>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, r)| relabeling(r).with_context(|| format!("{what}[{i}]")))
            .collect(),
        other => bail!("{what}: not a list: {other}"),
    }
}

fn sd_config(role: &str, namespaces: &Option<Vec<String>>, d: &Discovery) -> Value {
    let mut sd = Map::new();
    sd.insert("role".into(), json!(role));
    if let Some(url) = &d.api_server {
        sd.insert("api_server".into(), json!(url));
    }
    let mut tls = Map::new();
    if let Some(ca) = &d.ca_file {
        tls.insert("ca_file".into(), json!(ca));
    }
    if let Some(cert) = &d.cert_file {
        tls.insert("cert_file".into(), json!(cert));
    }
    if let Some(key) = &d.key_file {
        tls.insert("key_file".into(), json!(key));
    }
    if !tls.is_empty() {
        sd.insert("tls_config".into(), Value::Object(tls));
    }
    if let Some(token) = &d.bearer_token_file {
        sd.insert(
            "authorization".into(),
            json!({"type": "Bearer", "credentials_file": token}),
        );
    }
    if let Some(names) = namespaces {
        sd.insert("namespaces".into(), json!({ "names": names }));
    }
    Value::Object(sd)
}

/// The namespaces to discover in: `None` for every namespace.
fn namespaces(spec: &Value, own: &str) -> Result<Option<Vec<String>>> {
    let sel = &spec["namespaceSelector"];
    only_known("namespaceSelector", sel, &["any", "matchNames"])?;
    if sel["any"].as_bool() == Some(true) {
        return Ok(None);
    }
    let names = str_list(&sel["matchNames"], "namespaceSelector.matchNames")?;
    Ok(Some(if names.is_empty() {
        vec![own.to_string()]
    } else {
        names
    }))
}

fn monitor(o: &Value, d: &Discovery) -> Result<Vec<Value>> {
    let service = o["kind"] == "ServiceMonitor";
    let spec = &o["spec"];
    only_known(
        "spec",
        spec,
        if service {
            SERVICE_MONITOR_SPEC
        } else {
            POD_MONITOR_SPEC
        },
    )?;
    let ns = o["metadata"]["namespace"]
        .as_str()
        .context("metadata.namespace (kustomize sets the operator's)")?;
    let name = o["metadata"]["name"].as_str().context("metadata.name")?;
    let (kind_prefix, role, meta, endpoints_key) = if service {
        ("serviceMonitor", "endpoints", "service", "endpoints")
    } else {
        ("podMonitor", "pod", "pod", "podMetricsEndpoints")
    };
    let endpoints = spec[endpoints_key]
        .as_array()
        .with_context(|| format!("spec.{endpoints_key}"))?;
    if endpoints.is_empty() {
        bail!("spec.{endpoints_key} is empty: the object would scrape nothing");
    }
    let namespaces = namespaces(spec, ns)?;
    let selector = selector_rules(&spec["selector"], meta)?;
    let mut out = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        let what = format!("spec.{endpoints_key}[{i}]");
        only_known(&what, ep, ENDPOINT)?;
        let job_name = format!("{kind_prefix}/{ns}/{name}/{i}");
        let mut rules = vec![relabel(&["job"], "__tmp_prometheus_job_name", None, None)];
        rules.extend(selector.iter().cloned());
        // The port: the endpoint's (Service) or the container's.
        let port_name = ep["port"].as_str();
        let endpoint_label = match (port_name, &ep["targetPort"]) {
            (Some(p), _) if service => {
                rules.push(filter(
                    "keep",
                    &["__meta_kubernetes_endpoint_port_name".into()],
                    &quote_meta(p),
                ));
                p.to_string()
            }
            (Some(p), _) => {
                rules.push(filter(
                    "keep",
                    &["__meta_kubernetes_pod_container_port_name".into()],
                    &quote_meta(p),
                ));
                p.to_string()
            }
            (None, Value::String(p)) => {
                rules.push(filter(
                    "keep",
                    &["__meta_kubernetes_pod_container_port_name".into()],
                    &quote_meta(p),
                ));
                p.clone()
            }
            (None, Value::Number(n)) => {
                rules.push(filter(
                    "keep",
                    &["__meta_kubernetes_pod_container_port_number".into()],
                    &n.to_string(),
                ));
                n.to_string()
            }
            _ => bail!("{what}: neither port nor targetPort"),
        };
        if service {
            for (regex, target) in [("Node;(.*)", "node"), ("Pod;(.*)", "pod")] {
                let mut r = relabel(
                    &[
                        "__meta_kubernetes_endpoint_address_target_kind",
                        "__meta_kubernetes_endpoint_address_target_name",
                    ],
                    target,
                    Some(regex),
                    Some("${1}"),
                );
                r["separator"] = json!(";");
                rules.push(r);
            }
        }
        rules.push(relabel(
            &["__meta_kubernetes_namespace"],
            "namespace",
            None,
            None,
        ));
        if service {
            rules.push(relabel(
                &["__meta_kubernetes_service_name"],
                "service",
                None,
                None,
            ));
        }
        rules.push(relabel(&["__meta_kubernetes_pod_name"], "pod", None, None));
        rules.push(relabel(
            &["__meta_kubernetes_pod_container_name"],
            "container",
            None,
            None,
        ));
        if ep["filterRunning"].as_bool() != Some(false) {
            rules.push(filter(
                "drop",
                &["__meta_kubernetes_pod_phase".into()],
                "(Failed|Succeeded)",
            ));
        }
        if service {
            for l in str_list(&spec["targetLabels"], "spec.targetLabels")? {
                rules.push(relabel(
                    &[&format!("__meta_kubernetes_service_label_{}", sanitize(&l))],
                    &sanitize(&l),
                    Some("(.+)"),
                    Some("${1}"),
                ));
            }
        }
        for l in str_list(&spec["podTargetLabels"], "spec.podTargetLabels")? {
            rules.push(relabel(
                &[&format!("__meta_kubernetes_pod_label_{}", sanitize(&l))],
                &sanitize(&l),
                Some("(.+)"),
                Some("${1}"),
            ));
        }
        if service {
            rules.push(relabel(
                &["__meta_kubernetes_service_name"],
                "job",
                None,
                Some("${1}"),
            ));
        } else {
            rules.push(relabel(&[], "job", None, Some(&format!("{ns}/{name}"))));
        }
        if let Some(job_label) = spec["jobLabel"].as_str() {
            rules.push(relabel(
                &[&format!(
                    "__meta_kubernetes_{meta}_label_{}",
                    sanitize(job_label)
                )],
                "job",
                Some("(.+)"),
                Some("${1}"),
            ));
        }
        rules.push(relabel(&[], "endpoint", None, Some(&endpoint_label)));
        rules.extend(relabelings(
            &ep["relabelings"],
            &format!("{what}.relabelings"),
        )?);

        let mut job = Map::new();
        job.insert("job_name".into(), json!(job_name));
        job.insert(
            "kubernetes_sd_configs".into(),
            json!([sd_config(role, &namespaces, d)]),
        );
        if let Some(v) = ep["interval"].as_str() {
            job.insert("scrape_interval".into(), json!(v));
        }
        if let Some(v) = ep["scrapeTimeout"].as_str() {
            job.insert("scrape_timeout".into(), json!(v));
        }
        job.insert(
            "metrics_path".into(),
            json!(ep["path"].as_str().unwrap_or("/metrics")),
        );
        job.insert(
            "scheme".into(),
            json!(ep["scheme"].as_str().unwrap_or("http")),
        );
        job.insert(
            "honor_labels".into(),
            json!(ep["honorLabels"].as_bool().unwrap_or(false)),
        );
        if let Some(v) = ep["honorTimestamps"].as_bool() {
            job.insert("honor_timestamps".into(), json!(v));
        }
        if !ep["params"].is_null() {
            job.insert("params".into(), ep["params"].clone());
        }
        if let Some(v) = spec["sampleLimit"].as_u64() {
            job.insert("sample_limit".into(), json!(v));
        }
        if let Some(v) = spec["targetLimit"].as_u64() {
            job.insert("target_limit".into(), json!(v));
        }
        job.insert("relabel_configs".into(), Value::Array(rules));
        let metric = relabelings(
            &ep["metricRelabelings"],
            &format!("{what}.metricRelabelings"),
        )?;
        if !metric.is_empty() {
            job.insert("metric_relabel_configs".into(), Value::Array(metric));
        }
        out.push(Value::Object(job));
    }
    Ok(out)
}
