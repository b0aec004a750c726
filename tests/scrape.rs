//! The scrape objects we ship (manifests/components/monitoring, and the loki-mixin
//! variant), translated into Prometheus scrape configurations as the Prometheus Operator
//! would (`loki_zone_operator_tests::scrape`), then run the way Prometheus runs them:
//! against the targets its Kubernetes discovery would find for the operator and for the
//! sample zone-aware stack as the operator renders it, relabeled as Prometheus relabels
//! (a small evaluator below, regular expressions anchored as Prometheus anchors them).
//! Every Loki component gets the job the Go Loki Operator's dashboards select, or with
//! the mixin component the one the loki-mixin's select; nothing is dropped on the way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use loki_zone_operator::model::api::LokiStack;
use loki_zone_operator::render::{render, RenderInput, Settings};
use loki_zone_operator_tests::bundle::{kustomize, write_overlay};
use loki_zone_operator_tests::repo_root;
use loki_zone_operator_tests::scrape::{
    prometheus_yml, relabeling, rule_file, sanitize, scrape_configs, Discovery, PrometheusConfig,
};
use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{Expr, VectorSelector};
use serde_json::{json, Value};

/// The Loki components, as `app.kubernetes.io/component` names them.
const COMPONENTS: [&str; 7] = [
    "distributor",
    "ingester",
    "querier",
    "query-frontend",
    "compactor",
    "index-gateway",
    "ruler",
];
/// Where the sample stack runs in these tests.
const STACK_NS: &str = "loki";
const ZONE_ANNOTATION: &str = "loki.grafana.com/availability-zone";
/// The label Kubernetes copies onto a pod at binding from 1.35.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The job selector of the Go Loki Operator's dashboards for a component
/// (operator/internal/manifests/openshift/internal/dashboards/static/*.json:
/// `job=~".+-distributor-http"`).
fn go_dashboard_job(component: &str) -> String {
    format!(".+-{component}-http")
}

/// The loki-mixin's (production/loki-mixin/dashboards: `job=~"($namespace)/distributor"`),
/// with Grafana's `$namespace` filled in.
fn mixin_dashboard_job(namespace: &str, component: &str) -> String {
    format!("({namespace})/{component}")
}

/// An anchored regular expression as Prometheus compiles one of a relabeling or a
/// matcher (`^(?:re)$`), through the PromQL parser the tests already use (compiled once
/// per thread).
fn regex(re: &str) -> Matcher {
    thread_local! {
        static COMPILED: std::cell::RefCell<BTreeMap<String, Matcher>> = Default::default();
    }
    if let Some(m) = COMPILED.with(|c| c.borrow().get(re).cloned()) {
        return m;
    }
    let expr = promql_parser::parser::parse(&format!("x{{l=~`(?:{re})`}}"))
        .unwrap_or_else(|e| panic!("regex {re}: {e}"));
    let m = match expr {
        Expr::VectorSelector(vs) => vs
            .matchers
            .matchers
            .into_iter()
            .find(|m| m.name == "l")
            .expect("the matcher"),
        other => panic!("{other:?}"),
    };
    COMPILED.with(|c| c.borrow_mut().insert(re.to_string(), m.clone()));
    m
}

/// `template` expanded with the captures of `m` on `value` ($1, ${1}, as Go's
/// Regexp.Expand), or None if it does not match.
fn expand(m: &Matcher, value: &str, template: &str) -> Option<String> {
    let MatchOp::Re(re) = &m.op else {
        panic!("not a regex matcher")
    };
    let caps = re.captures(value)?;
    let mut out = String::new();
    caps.expand(template, &mut out);
    Some(out)
}

type Labels = BTreeMap<String, String>;

/// Prometheus's relabeling of one target: false if it is dropped.
fn relabel(labels: &mut Labels, configs: &[Value]) -> bool {
    for c in configs {
        let action = c["action"].as_str().unwrap_or("replace");
        let separator = c["separator"].as_str().unwrap_or(";");
        let value = c["source_labels"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|l| {
                        labels
                            .get(l.as_str().expect("label"))
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect::<Vec<_>>()
                    .join(separator)
            })
            .unwrap_or_default();
        let re = regex(c["regex"].as_str().unwrap_or("(.*)"));
        let replacement = c["replacement"].as_str().unwrap_or("$1");
        match action {
            "replace" => {
                if let Some(res) = expand(&re, &value, replacement) {
                    let target = expand(&re, &value, c["target_label"].as_str().expect("target"))
                        .expect("matched");
                    if res.is_empty() {
                        labels.remove(&target);
                    } else {
                        labels.insert(target, res);
                    }
                }
            }
            "keep" if !re.is_match(&value) => return false,
            "drop" if re.is_match(&value) => return false,
            "keep" | "drop" => {}
            "labelmap" => {
                let add: Vec<(String, String)> = labels
                    .iter()
                    .filter_map(|(k, v)| expand(&re, k, replacement).map(|n| (n, v.clone())))
                    .collect();
                labels.extend(add);
            }
            "labeldrop" => labels.retain(|k, _| !re.is_match(k)),
            "labelkeep" => labels.retain(|k, _| re.is_match(k)),
            other => panic!("relabel action {other} is not simulated"),
        }
    }
    true
}

/// A pod of the simulated cluster.
#[derive(Clone, Debug)]
struct Pod {
    namespace: String,
    name: String,
    ip: String,
    labels: Labels,
    annotations: Labels,
    /// (container, port name, port number)
    ports: Vec<(String, String, u64)>,
}

/// The Services and pods Prometheus's discovery would see.
struct Cluster {
    services: Vec<Value>,
    pods: Vec<Pod>,
}

fn string_map(v: &Value) -> Labels {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

impl Cluster {
    /// The Services of `objects`, and a pod per replica of each Deployment and
    /// StatefulSet; zone-aware pods get their zone annotation, round-robin over three
    /// zones, as the operator writes it at bind.
    fn of(objects: &[Value]) -> Cluster {
        let mut services = Vec::new();
        let mut pods = Vec::new();
        for o in objects {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("default");
            match o["kind"].as_str() {
                Some("Service") => services.push(o.clone()),
                Some("Deployment" | "StatefulSet") => {
                    let t = &o["spec"]["template"];
                    let labels = string_map(&t["metadata"]["labels"]);
                    let mut ports = Vec::new();
                    for c in t["spec"]["containers"].as_array().expect("containers") {
                        for p in c["ports"].as_array().into_iter().flatten() {
                            ports.push((
                                c["name"].as_str().expect("container").to_string(),
                                p["name"].as_str().unwrap_or_default().to_string(),
                                p["containerPort"].as_u64().expect("containerPort"),
                            ));
                        }
                    }
                    for i in 0..o["spec"]["replicas"].as_u64().unwrap_or(1) {
                        let mut annotations = string_map(&t["metadata"]["annotations"]);
                        let mut labels = labels.clone();
                        let zone_aware = labels
                            .get("loki.grafana.com/zone-aware")
                            .map(String::as_str)
                            == Some("enabled");
                        // Every other pod as Kubernetes 1.35 zones a pod that reads the
                        // label (the label only); the others as the operator zones them.
                        let zone = ZONES[i as usize % 3].to_string();
                        match (zone_aware, i % 2) {
                            (true, 0) => annotations.insert(ZONE_ANNOTATION.into(), zone),
                            (true, _) => labels.insert(ZONE_LABEL.into(), zone),
                            (false, _) => None,
                        };
                        pods.push(Pod {
                            namespace: ns.to_string(),
                            name: format!("{}-{i}", o["metadata"]["name"].as_str().expect("name")),
                            ip: format!("10.88.{}.{}", pods.len() / 200 + 1, pods.len() % 200 + 2),
                            labels,
                            annotations,
                            ports: ports.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        Cluster { services, pods }
    }

    fn pod_meta(p: &Pod, l: &mut Labels) {
        l.insert("__meta_kubernetes_namespace".into(), p.namespace.clone());
        l.insert("__meta_kubernetes_pod_name".into(), p.name.clone());
        l.insert("__meta_kubernetes_pod_ip".into(), p.ip.clone());
        l.insert("__meta_kubernetes_pod_phase".into(), "Running".into());
        l.insert("__meta_kubernetes_pod_ready".into(), "true".into());
        for (k, v) in &p.labels {
            l.insert(
                format!("__meta_kubernetes_pod_label_{}", sanitize(k)),
                v.clone(),
            );
            l.insert(
                format!("__meta_kubernetes_pod_labelpresent_{}", sanitize(k)),
                "true".into(),
            );
        }
        for (k, v) in &p.annotations {
            l.insert(
                format!("__meta_kubernetes_pod_annotation_{}", sanitize(k)),
                v.clone(),
            );
            l.insert(
                format!("__meta_kubernetes_pod_annotationpresent_{}", sanitize(k)),
                "true".into(),
            );
        }
    }

    /// The targets Kubernetes discovery gives a scrape configuration, before relabeling:
    /// role `endpoints` (every port of every Service, for each ready pod it selects) or
    /// `pod` (every container port of every pod), in its namespaces.
    fn discover(&self, job: &Value) -> Vec<Labels> {
        let sd = &job["kubernetes_sd_configs"][0];
        let in_scope = |ns: &str| {
            sd["namespaces"]["names"]
                .as_array()
                .is_none_or(|n| n.iter().any(|x| x == ns))
        };
        let base = |l: &mut Labels| {
            l.insert(
                "job".into(),
                job["job_name"].as_str().expect("job_name").into(),
            );
            l.insert(
                "__metrics_path__".into(),
                job["metrics_path"].as_str().unwrap_or("/metrics").into(),
            );
            l.insert(
                "__scheme__".into(),
                job["scheme"].as_str().unwrap_or("http").into(),
            );
        };
        let mut out = Vec::new();
        match sd["role"].as_str() {
            Some("endpoints") => {
                for s in &self.services {
                    let ns = s["metadata"]["namespace"].as_str().unwrap_or("default");
                    if !in_scope(ns) {
                        continue;
                    }
                    let selector = string_map(&s["spec"]["selector"]);
                    for p in self.pods.iter().filter(|p| {
                        p.namespace == ns
                            && !selector.is_empty()
                            && selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
                    }) {
                        for sp in s["spec"]["ports"].as_array().expect("ports") {
                            let target = &sp["targetPort"];
                            let Some((container, cport_name, number)) =
                                p.ports.iter().find(|(_, name, number)| match target {
                                    Value::String(t) => t == name,
                                    Value::Number(n) => n.as_u64() == Some(*number),
                                    _ => sp["port"].as_u64() == Some(*number),
                                })
                            else {
                                continue;
                            };
                            let mut l = Labels::new();
                            base(&mut l);
                            l.insert("__address__".into(), format!("{}:{number}", p.ip));
                            l.insert(
                                "__meta_kubernetes_service_name".into(),
                                s["metadata"]["name"].as_str().expect("name").into(),
                            );
                            for (k, v) in string_map(&s["metadata"]["labels"]) {
                                l.insert(
                                    format!("__meta_kubernetes_service_label_{}", sanitize(&k)),
                                    v,
                                );
                                l.insert(
                                    format!(
                                        "__meta_kubernetes_service_labelpresent_{}",
                                        sanitize(&k)
                                    ),
                                    "true".into(),
                                );
                            }
                            l.insert(
                                "__meta_kubernetes_endpoint_port_name".into(),
                                sp["name"].as_str().unwrap_or_default().into(),
                            );
                            l.insert("__meta_kubernetes_endpoint_ready".into(), "true".into());
                            l.insert(
                                "__meta_kubernetes_endpoint_address_target_kind".into(),
                                "Pod".into(),
                            );
                            l.insert(
                                "__meta_kubernetes_endpoint_address_target_name".into(),
                                p.name.clone(),
                            );
                            Self::pod_meta(p, &mut l);
                            l.insert(
                                "__meta_kubernetes_pod_container_name".into(),
                                container.clone(),
                            );
                            l.insert(
                                "__meta_kubernetes_pod_container_port_name".into(),
                                cport_name.clone(),
                            );
                            l.insert(
                                "__meta_kubernetes_pod_container_port_number".into(),
                                number.to_string(),
                            );
                            out.push(l);
                        }
                    }
                }
            }
            Some("pod") => {
                for p in self.pods.iter().filter(|p| in_scope(&p.namespace)) {
                    for (container, name, number) in &p.ports {
                        let mut l = Labels::new();
                        base(&mut l);
                        l.insert("__address__".into(), format!("{}:{number}", p.ip));
                        Self::pod_meta(p, &mut l);
                        l.insert(
                            "__meta_kubernetes_pod_container_name".into(),
                            container.clone(),
                        );
                        l.insert(
                            "__meta_kubernetes_pod_container_port_name".into(),
                            name.clone(),
                        );
                        l.insert(
                            "__meta_kubernetes_pod_container_port_number".into(),
                            number.to_string(),
                        );
                        out.push(l);
                    }
                }
            }
            other => panic!("role {other:?} is not simulated"),
        }
        out
    }

    /// The targets of every scrape configuration, relabeled: each one's labels as
    /// Prometheus stores them (meta labels gone, `instance` defaulted to the address).
    fn targets(&self, jobs: &[Value]) -> Vec<Labels> {
        let mut out = Vec::new();
        for job in jobs {
            let configs = job["relabel_configs"].as_array().expect("relabel_configs");
            for mut l in self.discover(job) {
                if !relabel(&mut l, configs) {
                    continue;
                }
                let address = l["__address__"].clone();
                l.retain(|k, _| !k.starts_with("__"));
                l.entry("instance".into()).or_insert(address);
                out.push(l);
            }
        }
        out
    }
}

/// The kustomize output of an overlay of manifests/operator with `components`.
fn overlay(name: &str, components: &[&str], body: &str) -> Vec<Value> {
    let dir = repo_root().join("target/scrape-test").join(name);
    write_overlay(&dir, components, body).expect("overlay");
    kustomize(&dir).expect("kubectl kustomize")
}

/// The sample zone-aware stack as the operator renders it, in namespace `loki`.
fn sample_stack() -> (String, Vec<Value>) {
    let path = repo_root().join("manifests/samples/lokistack-zone-aware.yaml");
    let mut stack: LokiStack =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("sample")).expect("yaml");
    stack.metadata.namespace = Some(STACK_NS.into());
    stack.metadata.uid = Some("uid".into());
    let children =
        render(&RenderInput::of_spec(&stack), &Settings::default()).expect("the sample renders");
    let name = stack.metadata.name.clone().expect("name");
    (
        name,
        children
            .iter()
            .map(|c| c.to_json().expect("json"))
            .collect(),
    )
}

/// The operator's install plus the sample stack, and the targets of `objects`' monitors.
fn scraped(objects: &[Value]) -> (String, Cluster, Vec<Value>, Vec<Labels>) {
    let (stack, children) = sample_stack();
    let mut all: Vec<Value> = objects.to_vec();
    all.extend(children);
    let cluster = Cluster::of(&all);
    let jobs = scrape_configs(objects, &Discovery::default()).expect("translation");
    let targets = cluster.targets(&jobs);
    (stack, cluster, jobs, targets)
}

fn component_of(pod: &Pod) -> Option<&str> {
    (pod.labels.get("app.kubernetes.io/name").map(String::as_str) == Some("lokistack"))
        .then(|| {
            pod.labels
                .get("app.kubernetes.io/component")
                .map(String::as_str)
        })
        .flatten()
}

#[test]
fn every_loki_component_is_scraped_under_the_go_operators_job_name() {
    let objects = overlay("go", &["monitoring"], "");
    let (stack, cluster, _, targets) = scraped(&objects);
    let loki_pods: Vec<&Pod> = cluster
        .pods
        .iter()
        .filter(|p| component_of(p).is_some())
        .collect();
    for c in COMPONENTS {
        let pods: Vec<&&Pod> = loki_pods
            .iter()
            .filter(|p| component_of(p) == Some(c))
            .collect();
        assert!(!pods.is_empty(), "the sample stack renders no {c}");
        let of_c: Vec<&Labels> = targets
            .iter()
            .filter(|t| t.get("container").map(String::as_str) == Some(&format!("loki-{c}")))
            .collect();
        assert_eq!(
            of_c.len(),
            pods.len(),
            "{c}: one target per pod (the http Service only, not grpc): {of_c:#?}"
        );
        let want_job = format!("{stack}-{c}-http");
        let go = regex(&go_dashboard_job(c));
        for (t, p) in of_c.iter().zip(&pods) {
            assert_eq!(t["job"], want_job, "{c}: {t:?}");
            assert!(
                go.is_match(&t["job"]),
                "{c}: job {} does not match the Go dashboards' job=~\"{}\"",
                t["job"],
                go_dashboard_job(c)
            );
            for other in COMPONENTS.iter().filter(|o| **o != c && !c.ends_with(*o)) {
                assert!(
                    !regex(&go_dashboard_job(other)).is_match(&t["job"]),
                    "{c}'s job {} matches {other}'s selector",
                    t["job"]
                );
            }
            assert_eq!(t["namespace"], STACK_NS);
            assert_eq!(t["service"], want_job);
            assert_eq!(t["endpoint"], "metrics");
            assert!(t["instance"].ends_with(":3100"), "{t:?}");
            assert_eq!(
                t.get("zone"),
                p.annotations
                    .get(ZONE_ANNOTATION)
                    .or(p.labels.get(ZONE_LABEL)),
                "{c}: the zone label is the pod's zone annotation, else its zone label"
            );
            assert!(t.contains_key("zone"), "{c}: zone-aware pods get a zone");
        }
        let pod_names: BTreeSet<&str> = of_c.iter().map(|t| t["pod"].as_str()).collect();
        let want: BTreeSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(pod_names, want, "{c}: the pod label names each pod");
    }
    // The operator, under the job of its metrics Service, in its own namespace.
    let operator: Vec<&Labels> = targets
        .iter()
        .filter(|t| t["job"] == "loki-zone-operator-metrics")
        .collect();
    assert_eq!(operator.len(), 2, "both replicas: {operator:#?}");
    for t in &operator {
        assert_eq!(t["namespace"], "loki-zone-operator-system");
        assert_eq!(t["container"], "manager");
        assert!(t["instance"].ends_with(":8080"), "{t:?}");
    }
    // Nothing else is scraped: not the grpc or gossip Services, not the webhook port.
    assert_eq!(targets.len(), loki_pods.len() + 2, "{targets:#?}");
}

#[test]
fn the_loki_mixin_component_names_jobs_namespace_slash_component() {
    let objects = overlay("mixin", &["monitoring", "monitoring-loki-mixin"], "");
    let (_, _, _, targets) = scraped(&objects);
    for c in COMPONENTS {
        let of_c: Vec<&Labels> = targets
            .iter()
            .filter(|t| t.get("container").map(String::as_str) == Some(&format!("loki-{c}")))
            .collect();
        assert!(!of_c.is_empty(), "{c}: no target");
        for t in of_c {
            assert_eq!(t["job"], format!("{STACK_NS}/{c}"), "{t:?}");
            assert!(
                regex(&mixin_dashboard_job(STACK_NS, c)).is_match(&t["job"]),
                "{c}: job {} does not match the loki-mixin's job=~\"($namespace)/{c}\"",
                t["job"]
            );
            assert!(t.contains_key("zone"), "{c}: the zone label stays: {t:?}");
        }
    }
    assert!(
        targets
            .iter()
            .filter(|t| t["container"] == "manager")
            .all(|t| t["job"] == "loki-zone-operator-metrics"),
        "the operator's job is left as it is"
    );
}

#[test]
fn each_endpoints_relabelings_close_its_scrape_config() {
    for (name, components) in [
        ("go", vec!["monitoring"]),
        ("mixin", vec!["monitoring", "monitoring-loki-mixin"]),
    ] {
        let objects = overlay(name, &components, "");
        let jobs = scrape_configs(&objects, &Discovery::default()).expect("translation");
        for o in objects.iter().filter(|o| o["kind"] == "ServiceMonitor") {
            let ns = o["metadata"]["namespace"].as_str().expect("namespace");
            let n = o["metadata"]["name"].as_str().expect("name");
            for (i, ep) in o["spec"]["endpoints"]
                .as_array()
                .expect("endpoints")
                .iter()
                .enumerate()
            {
                let job = jobs
                    .iter()
                    .find(|j| j["job_name"] == format!("serviceMonitor/{ns}/{n}/{i}"))
                    .unwrap_or_else(|| panic!("{name}: no job for {ns}/{n}/{i}"));
                let want: Vec<Value> = ep["relabelings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| relabeling(r).expect("relabeling"))
                    .collect();
                let got = job["relabel_configs"].as_array().expect("relabel_configs");
                assert!(
                    got.ends_with(&want),
                    "{name}: {n}: its relabelings, in order, close the scrape config: {got:#?}"
                );
                assert_eq!(
                    job["scrape_interval"], ep["interval"],
                    "{name}: {n}: interval"
                );
                if let Some(path) = ep["path"].as_str() {
                    assert_eq!(job["metrics_path"], path);
                }
            }
        }
        if name == "mixin" {
            let zone_then_job = |j: &&Value| {
                let r = j["relabel_configs"].as_array().expect("relabel_configs");
                let tail: Vec<&str> = r[r.len() - 2..]
                    .iter()
                    .map(|x| x["target_label"].as_str().unwrap_or_default())
                    .collect();
                tail == ["zone", "job"]
            };
            assert_eq!(
                jobs.iter().filter(zone_then_job).count(),
                COMPONENTS.len(),
                "each Loki job: the zone, then the mixin's job"
            );
        }
    }
}

#[test]
fn every_monitor_and_endpoint_becomes_one_job_and_unknown_fields_are_refused() {
    let objects = overlay("go", &["monitoring"], "");
    let monitors: Vec<&Value> = objects
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("ServiceMonitor" | "PodMonitor")))
        .collect();
    assert_eq!(
        monitors.len(),
        COMPONENTS.len() + 1,
        "a ServiceMonitor per component and the operator's"
    );
    let endpoints: usize = monitors
        .iter()
        .map(|m| m["spec"]["endpoints"].as_array().expect("endpoints").len())
        .sum();
    let jobs = scrape_configs(&objects, &Discovery::default()).expect("translation");
    assert_eq!(jobs.len(), endpoints, "one job per endpoint, none dropped");
    let names: BTreeSet<&str> = jobs.iter().filter_map(|j| j["job_name"].as_str()).collect();
    assert_eq!(names.len(), jobs.len(), "job names are unique");
    for c in COMPONENTS {
        let job = jobs
            .iter()
            .find(|j| {
                j["job_name"] == format!("serviceMonitor/loki-zone-operator-system/lokistack-{c}/0")
            })
            .unwrap_or_else(|| panic!("no job for {c}"));
        assert!(
            job["kubernetes_sd_configs"][0].get("namespaces").is_none(),
            "{c}: namespaceSelector any: every namespace"
        );
    }
    let operator = jobs
        .iter()
        .find(|j| j["job_name"] == "serviceMonitor/loki-zone-operator-system/loki-zone-operator/0")
        .expect("the operator's job");
    assert_eq!(
        operator["kubernetes_sd_configs"][0]["namespaces"]["names"],
        json!(["loki-zone-operator-system"]),
        "no namespaceSelector: the ServiceMonitor's own namespace"
    );

    // A field the translation does not know is an error naming it, never dropped.
    let mut sm = monitors[1].clone();
    sm["spec"]["endpoints"][0]["tlsConfig"] = json!({"insecureSkipVerify": true});
    let err = scrape_configs(&[sm], &Discovery::default()).expect_err("tlsConfig");
    assert!(format!("{err:#}").contains("tlsConfig"), "{err:#}");
    let mut sm = monitors[1].clone();
    sm["spec"]["attachMetadata"] = json!({"node": true});
    let err = scrape_configs(&[sm], &Discovery::default()).expect_err("attachMetadata");
    assert!(format!("{err:#}").contains("attachMetadata"), "{err:#}");
    let mut sm = monitors[1].clone();
    sm["spec"]["endpoints"][0]["relabelings"][0]["sourceLabel"] = json!("x");
    let err = scrape_configs(&[sm], &Discovery::default()).expect_err("a misspelt field");
    assert!(format!("{err:#}").contains("sourceLabel"), "{err:#}");
}

#[test]
fn a_pod_monitor_translates_as_the_prometheus_operator_would() {
    let pm = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "lokistack-components", "namespace": "monitoring"},
        "spec": {
            "namespaceSelector": {"matchNames": [STACK_NS]},
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "lokistack"},
                "matchExpressions": [
                    {"key": "app.kubernetes.io/component", "operator": "In", "values": ["ingester", "distributor"]},
                    {"key": "loki.grafana.com/zone-aware", "operator": "Exists"},
                ],
            },
            "podTargetLabels": ["app.kubernetes.io/component"],
            "podMetricsEndpoints": [{"port": "metrics", "interval": "15s"}],
        },
    });
    let (_, cluster, jobs, targets) = scraped(std::slice::from_ref(&pm));
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        jobs[0]["job_name"],
        "podMonitor/monitoring/lokistack-components/0"
    );
    assert_eq!(jobs[0]["kubernetes_sd_configs"][0]["role"], "pod");
    let want = cluster
        .pods
        .iter()
        .filter(|p| matches!(component_of(p), Some("ingester" | "distributor")))
        .count();
    assert!(want > 0);
    assert_eq!(targets.len(), want, "{targets:#?}");
    for t in &targets {
        assert_eq!(t["job"], "monitoring/lokistack-components");
        assert!(["ingester", "distributor"].contains(&t["app_kubernetes_io_component"].as_str()));
        assert_eq!(t["endpoint"], "metrics");
        assert_eq!(t["namespace"], STACK_NS);
    }
    // jobLabel: the pod's label instead.
    let mut pm = pm;
    pm["spec"]["jobLabel"] = json!("app.kubernetes.io/component");
    let (_, _, _, targets) = scraped(&[pm]);
    assert!(targets
        .iter()
        .all(|t| t["job"] == t["app_kubernetes_io_component"]));
}

/// Every vector selector of a PromQL expression: its matchers on `job` and `namespace`.
fn selectors(expr: &str) -> Vec<Vec<Matcher>> {
    struct Walk(Vec<Vec<Matcher>>);
    impl promql_parser::util::ExprVisitor for Walk {
        type Error = ();
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
            let vs: Option<&VectorSelector> = match e {
                Expr::VectorSelector(vs) => Some(vs),
                Expr::MatrixSelector(ms) => Some(&ms.vs),
                _ => None,
            };
            if let Some(vs) = vs {
                self.0.push(
                    vs.matchers
                        .matchers
                        .iter()
                        .filter(|m| m.name == "job" || m.name == "namespace")
                        .cloned()
                        .collect(),
                );
            }
            Ok(true)
        }
    }
    let ast = promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut w = Walk(Vec::new());
    promql_parser::util::walk_expr(&mut w, &ast).expect("walk");
    w.0
}

#[test]
fn our_loki_dashboard_selects_the_jobs_the_scrape_config_gives() {
    let objects = overlay("go", &["monitoring"], "");
    let (stack, _, _, targets) = scraped(&objects);
    let text = std::fs::read_to_string(
        repo_root().join("manifests/components/monitoring/lokistack-reads-writes.json"),
    )
    .expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("json");
    let mut checked = 0;
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"]
                .as_str()
                .expect("expr")
                .replace("$__rate_interval", "1m")
                .replace("$namespace", STACK_NS)
                .replace("$stack", &stack);
            for sel in selectors(&expr) {
                assert!(
                    sel.iter().any(|m| m.name == "job"),
                    "{}: every selector names its job: {expr}",
                    p["title"]
                );
                assert!(
                    targets.iter().any(|l| sel
                        .iter()
                        .all(|m| m.is_match(l.get(&m.name).map(String::as_str).unwrap_or("")))),
                    "{}: no target of the sample stack matches {sel:?}",
                    p["title"]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "{checked} selectors");
}

/// Whether `v` has a key `label` inside any selector (a map under a key that selects).
fn in_a_selector(v: &Value, inside: bool, label: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| {
            (inside && k == label)
                || in_a_selector(
                    x,
                    inside || k.to_ascii_lowercase().ends_with("selector") || k == "matchLabels",
                    label,
                )
        }),
        Value::Array(items) => items.iter().any(|x| in_a_selector(x, inside, label)),
        _ => false,
    }
}

#[test]
fn a_release_label_for_kube_prometheus_stack_lands_on_every_monitor_and_rule_and_in_no_selector() {
    let labels =
        "labels:\n- pairs:\n    release: kube-prometheus-stack\n  includeSelectors: false\n";
    // Over the whole install, as docs/monitoring.md shows first.
    let whole = overlay("release", &["monitoring"], labels);
    // And a kustomization of the monitoring objects alone, beside the install.
    let dir = repo_root().join("target/scrape-test/release-alone");
    std::fs::create_dir_all(&dir).expect("dir");
    let monitoring = repo_root()
        .join("manifests/components/monitoring")
        .canonicalize()
        .expect("component");
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "namespace: loki-zone-operator-system\ncomponents:\n- {}\n{labels}",
            relative(&dir.canonicalize().expect("dir"), &monitoring)
        ),
    )
    .expect("kustomization");
    let alone = kustomize(&dir).expect("kubectl kustomize");
    for (name, objects) in [("whole install", &whole), ("monitoring alone", &alone)] {
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "ServiceMonitor").count(),
            COMPONENTS.len() + 1,
            "{name}: {kinds:?}"
        );
        assert!(kinds.contains(&"PrometheusRule"), "{name}");
        for o in objects.iter() {
            let kind = o["kind"].as_str().unwrap_or_default();
            if matches!(kind, "ServiceMonitor" | "PodMonitor" | "PrometheusRule") {
                assert_eq!(
                    o["metadata"]["labels"]["release"], "kube-prometheus-stack",
                    "{name}: {kind} {}",
                    o["metadata"]["name"]
                );
            }
            assert!(
                !in_a_selector(o, false, "release"),
                "{name}: {kind} {} has the release label in a selector",
                o["metadata"]["name"]
            );
        }
        // Nor does it narrow what is scraped.
        let jobs = scrape_configs(objects, &Discovery::default()).expect("translation");
        assert!(!serde_json::to_string(&jobs)
            .expect("json")
            .contains("release"));
        if name == "monitoring alone" {
            assert!(
                objects.iter().all(|o| matches!(
                    o["kind"].as_str(),
                    Some("ServiceMonitor" | "PrometheusRule" | "ConfigMap")
                )),
                "{name}: only the monitoring objects: {kinds:?}"
            );
        }
    }
}

fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); f.len() - common];
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[test]
fn a_whole_prometheus_yml_with_the_rules_and_promtool_accepts_it() {
    let objects = overlay("go", &["monitoring"], "");
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = rule_file(&objects).expect("rules");
    let groups = rules["groups"].as_array().expect("groups");
    assert!(
        groups
            .iter()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .any(|r| r["alert"] == "LokiStackZoneUnavailable"),
        "the PrometheusRule's groups: {rules}"
    );
    let rules_path = dir.path().join("rules.yml");
    std::fs::write(&rules_path, serde_yaml_ng::to_string(&rules).expect("yaml")).expect("write");
    let (ca, token) = (dir.path().join("ca.crt"), dir.path().join("token"));
    std::fs::write(&ca, "").expect("ca");
    std::fs::write(&token, "t").expect("token");
    let cfg = PrometheusConfig {
        discovery: Discovery {
            api_server: Some("https://10.88.0.1:6443".into()),
            ca_file: Some(ca.display().to_string()),
            bearer_token_file: Some(token.display().to_string()),
            ..Discovery::default()
        },
        interval_override: Some("5s".into()),
        evaluation_interval: "5s".into(),
        rule_files: vec![rules_path.display().to_string()],
        ..PrometheusConfig::default()
    };
    let yml = prometheus_yml(&objects, &cfg).expect("prometheus.yml");
    let doc: Value = serde_yaml_ng::from_str(&yml).expect("yaml");
    assert_eq!(doc["global"]["evaluation_interval"], "5s");
    assert_eq!(doc["rule_files"], json!([rules_path.display().to_string()]));
    let jobs = doc["scrape_configs"].as_array().expect("scrape_configs");
    assert_eq!(jobs.len(), COMPONENTS.len() + 1);
    for j in jobs {
        assert_eq!(j["scrape_interval"], "5s", "the override");
        let sd = &j["kubernetes_sd_configs"][0];
        assert_eq!(sd["api_server"], "https://10.88.0.1:6443");
        assert_eq!(sd["tls_config"]["ca_file"], ca.display().to_string());
        assert_eq!(
            sd["authorization"]["credentials_file"],
            token.display().to_string()
        );
    }
    // Debian's Prometheus has no Kubernetes discovery: the real-node check discovers
    // through an HTTP stand-in; the jobs are the same but for that entry.
    let via = PrometheusConfig {
        http_sd: Some(("http://127.0.0.1:9091/sd".into(), "5s".into())),
        ..cfg.clone()
    };
    let doc_via: Value =
        serde_yaml_ng::from_str(&prometheus_yml(&objects, &via).expect("yml")).expect("yaml");
    for (a, b) in jobs
        .iter()
        .zip(doc_via["scrape_configs"].as_array().expect("jobs"))
    {
        let mut a = a.clone();
        let sd = a
            .as_object_mut()
            .expect("job")
            .remove("kubernetes_sd_configs")
            .expect("sd");
        let mut b = b.clone();
        let http = b
            .as_object_mut()
            .expect("job")
            .remove("http_sd_configs")
            .expect("http sd");
        assert_eq!(a, b, "only the discovery differs");
        let url = http[0]["url"].as_str().expect("url");
        assert!(
            url.starts_with("http://127.0.0.1:9091/sd?role=endpoints"),
            "{url}"
        );
        match sd[0]["namespaces"]["names"].as_array() {
            Some(names) => {
                for n in names {
                    assert!(url.contains(&format!("&namespace={}", n.as_str().expect("ns"))));
                }
            }
            None => assert!(!url.contains("namespace="), "{url}"),
        }
    }
    let check = |name: &str, yml: &str| -> Option<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, yml).expect("write");
        match std::process::Command::new("promtool")
            .args(["check", "config"])
            .arg(&path)
            .output()
        {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => {
                eprintln!("!! promtool not run ({e}): {name} was checked for its structure only");
                None
            }
        }
    };
    if let Some(err) = check(
        "prometheus-http-sd.yml",
        &prometheus_yml(&objects, &via).expect("yml"),
    ) {
        panic!("promtool check config: {err}");
    }
    match check("prometheus.yml", &yml) {
        None => {}
        // Debian's build: every field but the discovery was accepted above.
        Some(err) if err.contains("field kubernetes_sd_configs not found") => eprintln!(
            "!! this promtool has no Kubernetes discovery (Debian's build): prometheus.yml \
             checked with the HTTP discovery stand-in only"
        ),
        Some(err) => panic!("promtool check config: {err}"),
    }
}
