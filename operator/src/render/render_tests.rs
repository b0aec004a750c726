//! Tests of the render step: every template for every size and zone setting parses into
//! its type without losing a field, carries the zone pieces exactly when zones are set,
//! and produces a Loki config with the zone-aware ring settings.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

use crate::model::api::{LokiStack, LokiStackSize, ObjectStorageSecretType, RulesSpec};
use crate::model::defaults::{effective, Component};
use crate::model::names;
use crate::render::{
    documents, loki_config, parse, render, to_yaml_stream, Child, RenderInput, Settings,
};
use crate::testing::{stack, stack_spec, zoned_spec, ZONE};

const RACK: &str = "example.com/rack";

fn render_stack(s: &LokiStack) -> Vec<Child> {
    render(
        &RenderInput::new(s, effective(&s.spec)),
        &Settings::default(),
    )
    .expect("render")
}

pub(super) fn pod_templates(children: &[Child]) -> Vec<(String, PodTemplateSpec)> {
    children
        .iter()
        .filter_map(|c| match c {
            Child::Deployment(d) => Some((c.name().to_string(), d.spec.as_ref()?.template.clone())),
            Child::StatefulSet(s) => {
                Some((c.name().to_string(), s.spec.as_ref()?.template.clone()))
            }
            _ => None,
        })
        .collect()
}

pub(super) fn all_variants() -> Vec<(String, LokiStack)> {
    let mut out = Vec::new();
    for size in LokiStackSize::ALL {
        let zone_settings: [&[&str]; 3] = [&[], &[ZONE], &[ZONE, RACK]];
        for keys in zone_settings {
            for st in ObjectStorageSecretType::ALL {
                let mut spec = if keys.is_empty() {
                    stack_spec(size)
                } else {
                    zoned_spec(size, 2, keys)
                };
                spec.storage.secret.type_ = st;
                spec.rules = Some(RulesSpec {
                    enabled: true,
                    ..Default::default()
                });
                out.push((
                    format!("{} zones={keys:?} storage={}", size.as_str(), st.as_str()),
                    stack("lokistack-dev", spec),
                ));
            }
        }
    }
    out
}

#[test]
fn parsing_drops_no_field() {
    let mut checked = 0;
    for (label, s) in all_variants() {
        let docs = documents(
            &RenderInput::new(&s, effective(&s.spec)),
            &Settings::default(),
        )
        .expect("documents");
        for doc in &docs {
            let raw: Value = serde_yaml_ng::from_str(&doc.text).expect("template output is YAML");
            let typed = parse(doc)
                .unwrap_or_else(|e| panic!("{label}: {e}"))
                .to_json()
                .expect("json");
            assert_eq!(
                raw, typed,
                "{label}: {} lost or changed a field in parsing",
                doc.template
            );
            checked += 1;
        }
    }
    // 5 sizes x 3 zone settings x 5 storage types, 31 objects each (ServiceAccount,
    // ConfigMap, gossip Service, and 4 per component with the ruler).
    assert_eq!(checked, 5 * 3 * 5 * 31);
}

#[test]
fn objects_have_reference_names_labels_and_owner() {
    let s = stack("lokistack-dev", stack_spec(LokiStackSize::Small));
    let children = render_stack(&s);
    let names_by_kind: Vec<(&str, &str)> = children.iter().map(|c| (c.kind(), c.name())).collect();
    for want in [
        ("ServiceAccount", "lokistack-dev"),
        ("ConfigMap", "lokistack-dev-config"),
        ("Service", "lokistack-dev-gossip-ring"),
        ("Service", "lokistack-dev-ingester-http"),
        ("Service", "lokistack-dev-ingester-grpc"),
        ("StatefulSet", "lokistack-dev-ingester"),
        ("StatefulSet", "lokistack-dev-compactor"),
        ("StatefulSet", "lokistack-dev-index-gateway"),
        ("Deployment", "lokistack-dev-distributor"),
        ("Deployment", "lokistack-dev-querier"),
        ("Deployment", "lokistack-dev-query-frontend"),
        ("PodDisruptionBudget", "lokistack-dev-querier"),
    ] {
        assert!(names_by_kind.contains(&want), "missing {want:?}");
    }
    // No ruler unless enabled.
    assert!(!names_by_kind.iter().any(|(_, n)| n.contains("ruler")));
    for c in &children {
        let meta = c.meta();
        let labels = meta.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(names::LABEL_NAME).map(String::as_str),
            Some("lokistack")
        );
        assert_eq!(
            labels.get(names::LABEL_INSTANCE).map(String::as_str),
            Some("lokistack-dev")
        );
        assert_eq!(
            labels.get(names::LABEL_MANAGED_BY).map(String::as_str),
            Some("lokistack-controller")
        );
        let owner = &meta.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("LokiStack", Some(true))
        );
        assert_eq!(owner.uid, s.metadata.uid.clone().expect("uid"));
    }
    let svc = |name: &str| {
        children.iter().find_map(|c| match c {
            Child::Service(s) if c.name() == name => s.spec.clone(),
            _ => None,
        })
    };
    let grpc = svc("lokistack-dev-ingester-grpc").expect("grpc svc");
    assert_eq!(grpc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(grpc.ports.expect("ports")[0].port, 9095);
    let gossip = svc("lokistack-dev-gossip-ring").expect("gossip svc");
    assert_eq!(gossip.ports.expect("ports")[0].port, 7946);
    assert_eq!(
        svc("lokistack-dev-querier-http")
            .expect("http")
            .ports
            .expect("ports")[0]
            .port,
        3100
    );
}

#[test]
fn offline_render_without_uid_has_no_owner_reference() {
    let mut s = stack("lokistack-dev", stack_spec(LokiStackSize::Demo));
    s.metadata.uid = None;
    for c in render_stack(&s) {
        assert!(c.meta().owner_references.is_none(), "{}", c.name());
    }
}

#[test]
fn every_zone_aware_pod_carries_every_zone_piece() {
    let s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE, RACK]),
    );
    let children = render_stack(&s);
    let pods = pod_templates(&children);
    assert_eq!(pods.len(), 6, "six workloads without the ruler");
    for (name, pod) in pods {
        let meta = pod.metadata.expect("pod meta");
        let labels = meta.labels.expect("labels");
        assert_eq!(
            labels.get(names::LABEL_ZONE_AWARE).map(String::as_str),
            Some("enabled"),
            "{name}"
        );
        let ann = meta.annotations.expect("annotations");
        assert_eq!(
            ann.get(names::ANNOTATION_ZONE_LABELS).map(String::as_str),
            Some("topology.kubernetes.io/zone,example.com/rack"),
            "{name}"
        );
        let spec = pod.spec.expect("pod spec");
        let component = labels.get(names::LABEL_COMPONENT).expect("component");
        let constraints = spec
            .topology_spread_constraints
            .expect("spread constraints");
        assert_eq!(
            constraints
                .iter()
                .map(|c| c.topology_key.as_str())
                .collect::<Vec<_>>(),
            vec![ZONE, RACK, names::LABEL_HOSTNAME],
            "{name}"
        );
        for (i, c) in constraints.iter().enumerate() {
            // Zones are hard; the spread over one zone's nodes is soft, so a zone with
            // fewer nodes than replicas still schedules them all.
            let want = if i < 2 {
                "DoNotSchedule"
            } else {
                "ScheduleAnyway"
            };
            assert_eq!(c.when_unsatisfiable, want, "{name} {}", c.topology_key);
            assert_eq!(c.max_skew, 1);
            assert_eq!(c.node_taints_policy.as_deref(), Some("Honor"));
            let sel = c
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .expect("selector");
            assert_eq!(sel.len(), 2);
            assert_eq!(sel.get(names::LABEL_COMPONENT), Some(component));
            assert_eq!(
                sel.get(names::LABEL_INSTANCE).map(String::as_str),
                Some("lokistack-dev")
            );
        }
        let init = spec.init_containers.expect("init containers");
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].name, names::INIT_CONTAINER_ZONE);
        assert_eq!(
            init[0].image.as_deref(),
            Some(Settings::default().zone_wait_image.as_str())
        );
        assert_eq!(
            init[0].args.clone().expect("args"),
            vec![
                "--file",
                "/etc/az-annotation/az",
                "--field",
                "metadata.annotations['loki.grafana.com/availability-zone']",
                "--timeout",
                "10m"
            ]
        );
        // The init container accepts what the operator renders (its own parser).
        let args = init[0].args.clone().unwrap_or_default();
        assert!(
            matches!(
                loki_zone_wait::parse_args(args.into_iter()),
                Ok(loki_zone_wait::Parsed::Run(a)) if a.timeout.as_secs() == 600
            ),
            "loki-zone-wait refuses the rendered arguments"
        );
        assert!(
            init[0].command.is_none(),
            "no shell: the image's entrypoint runs"
        );
        let sc = init[0]
            .security_context
            .clone()
            .expect("init security context");
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        let volume = spec
            .volumes
            .expect("volumes")
            .into_iter()
            .find(|v| v.name == names::VOLUME_ZONE)
            .expect("zone volume");
        let item = &volume.downward_api.and_then(|d| d.items).expect("items")[0];
        assert_eq!(item.path, names::ZONE_FILE_NAME);
        assert_eq!(
            item.field_ref.as_ref().map(|f| f.field_path.as_str()),
            Some("metadata.annotations['loki.grafana.com/availability-zone']")
        );
        for container in &spec.containers {
            let env = container.env.clone().unwrap_or_default();
            let zone = env
                .iter()
                .find(|e| e.name == names::ENV_ZONE)
                .unwrap_or_else(|| panic!("{name}: no zone env"));
            let path = zone
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            assert_eq!(
                path,
                Some("metadata.annotations['loki.grafana.com/availability-zone']"),
                "{name}"
            );
        }
    }
}

/// Deployments spread a rollout's new pods among themselves (`matchLabelKeys`), and
/// every constraint leaves tainted nodes, such as a lost zone's, out of its domains.
#[test]
fn deployments_spread_rollouts_by_pod_template_hash_and_every_spread_honours_taints() {
    let s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE, RACK]),
    );
    let templates = pod_templates(&render_stack(&s));
    assert!(templates.len() >= 6, "{}", templates.len());
    for (name, pod) in templates {
        let spread = pod
            .spec
            .and_then(|p| p.topology_spread_constraints)
            .expect("spread constraints");
        // Two zone keys and the hostname.
        assert_eq!(spread.len(), 3, "{name}");
        let deployment = ["-distributor", "-querier", "-query-frontend"]
            .iter()
            .any(|c| name.ends_with(c));
        for c in spread {
            assert_eq!(c.node_taints_policy.as_deref(), Some("Honor"), "{name}");
            assert_eq!(
                c.match_label_keys,
                deployment.then(|| vec!["pod-template-hash".to_string()]),
                "{name}"
            );
        }
    }
}

/// Strings that only a zone-aware stack may produce.
const ZONE_TRACES: &[&str] = &[
    "topologySpreadConstraints",
    "az-annotation",
    "loki.grafana.com/zone-aware",
    "loki.grafana.com/availability-zone",
    "INSTANCE_AVAILABILITY_ZONE",
    "zone_awareness_enabled",
    "instance_availability_zone",
    "loki-zone-wait",
    "ScheduleAnyway",
    "kubernetes.io/hostname",
    "OnDelete",
    "trafficDistribution",
];

#[test]
fn statefulsets_of_zone_aware_stacks_are_rolled_by_the_operator() {
    let strategies = |s: &LokiStack| -> Vec<(String, String)> {
        render_stack(s)
            .iter()
            .filter_map(|c| match c {
                Child::StatefulSet(st) => Some((
                    c.name().to_string(),
                    st.spec.as_ref()?.update_strategy.as_ref()?.type_.clone()?,
                )),
                _ => None,
            })
            .collect()
    };
    let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
    spec.rules = Some(RulesSpec {
        enabled: true,
        ..Default::default()
    });
    let zoned = stack("lokistack-dev", spec.clone());
    let got = strategies(&zoned);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "lokistack-dev-compactor",
            "lokistack-dev-ingester",
            "lokistack-dev-index-gateway",
            "lokistack-dev-ruler"
        ]
    );
    assert!(got.iter().all(|(_, t)| t == "OnDelete"), "{got:?}");
    spec.replication = None;
    let plain = stack("lokistack-dev", spec);
    let got = strategies(&plain);
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|(_, t)| t == "RollingUpdate"), "{got:?}");
}

/// The query frontend's `/ready` fails until a querier connects to it, and queriers find
/// it through its headless gRPC Service, which lists only Ready pods: its readiness
/// probe is the build-info path, as in the Go Loki Operator. Found on real kubelets
/// (hack/real-node, real Loki 3.7.3): with `/ready` the frontend never became Ready.
#[test]
fn the_query_frontend_is_ready_before_a_querier_connects() {
    let s = stack("lokistack-dev", stack_spec(LokiStackSize::Demo));
    let pods = pod_templates(&render_stack(&s));
    let frontends = pods
        .iter()
        .filter(|(n, _)| n.ends_with("-query-frontend"))
        .count();
    assert_eq!(frontends, 1, "one query frontend");
    for (name, pod) in pods {
        let c = &pod.spec.expect("spec").containers[0];
        let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .and_then(|h| h.path.clone())
                .expect("an HTTP probe")
        };
        let want = if name.ends_with("-query-frontend") {
            names::PATH_BUILD_INFO
        } else {
            names::PATH_READY
        };
        assert_eq!(path(&c.readiness_probe), want, "{name}");
        assert_eq!(path(&c.liveness_probe), names::PATH_BUILD_INFO, "{name}");
    }
}

#[test]
fn zone_aware_pods_prefer_distinct_nodes_within_a_zone() {
    let s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    for (name, pod) in pod_templates(&render_stack(&s)) {
        let labels = pod.metadata.and_then(|m| m.labels).expect("labels");
        let spread = pod
            .spec
            .and_then(|s| s.topology_spread_constraints)
            .expect("spread constraints");
        let host: Vec<_> = spread
            .iter()
            .filter(|c| c.topology_key == names::LABEL_HOSTNAME)
            .collect();
        assert_eq!(host.len(), 1, "{name}");
        assert_eq!(host[0].when_unsatisfiable, "ScheduleAnyway", "{name}");
        assert_eq!(host[0].max_skew, 1, "{name}");
        let sel = host[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .expect("selector");
        assert_eq!(
            sel.get(names::LABEL_COMPONENT),
            labels.get(names::LABEL_COMPONENT)
        );
        assert_eq!(
            sel.get(names::LABEL_INSTANCE),
            labels.get(names::LABEL_INSTANCE)
        );
    }
}

#[test]
fn removing_zones_removes_every_zone_piece() {
    let zoned = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    let before = to_yaml_stream(&render_stack(&zoned)).expect("yaml");
    for t in ZONE_TRACES {
        assert!(before.contains(t), "zone-aware render lacks {t}");
    }
    let mut plain = zoned.clone();
    plain
        .spec
        .replication
        .as_mut()
        .expect("replication")
        .zones
        .clear();
    let after = to_yaml_stream(&render_stack(&plain)).expect("yaml");
    for t in ZONE_TRACES {
        assert!(!after.contains(t), "{t} left after zones were removed");
    }
}

/// The zone-local routing each entry Service asks for, by Service name.
fn service_routing(children: &[Child]) -> Vec<(String, Option<String>, Option<String>)> {
    children
        .iter()
        .filter_map(|c| match c {
            Child::Service(s) => Some((
                s.metadata.name.clone().unwrap_or_default(),
                s.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.iter().next())
                    .map(|(k, v)| format!("{k}={v}")),
                s.spec.as_ref().and_then(|s| s.traffic_distribution.clone()),
            )),
            _ => None,
        })
        .filter(|(_, a, t)| a.is_some() || t.is_some())
        .collect()
}

/// The entry Services of a zone-aware stack ask for zone-local routing with
/// `trafficDistribution` alone: no annotation (the topology annotations an operator
/// before 1.31 set go with the next server-side apply, which no longer sends them).
#[test]
fn entry_services_of_zone_aware_stacks_ask_for_zone_local_routing() {
    let zoned = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
    let entry = ["s-distributor-http", "s-query-frontend-http"]
        .map(|n| (n.to_string(), None, Some("PreferClose".to_string())))
        .to_vec();
    assert_eq!(service_routing(&render_stack(&zoned)), entry);
    // A stack without zones, or one switched off by the plan, asks for nothing.
    let plain = stack("s", stack_spec(LokiStackSize::Small));
    assert_eq!(service_routing(&render_stack(&plain)), vec![]);
    let mut eff = effective(&zoned.spec);
    assert!(eff.zone_local_services);
    eff.zone_local_services = false;
    let off = render(&RenderInput::new(&zoned, eff), &Settings::default()).expect("render");
    assert_eq!(service_routing(&off), vec![]);
}

/// From 1.34 the entry Services ask for `PreferSameZone`, the name 1.35 no longer warns
/// about; before, and when the version is not known, `PreferClose`, which every
/// supported server takes. Nothing else in the stack changes with it.
#[test]
fn the_entry_services_name_the_routing_as_the_server_takes_it() {
    use crate::checks::kube_version::KubeVersion;
    use crate::render::TrafficDistribution;
    use TrafficDistribution::{PreferClose, PreferSameZone};
    let v = |major, minor| Some(KubeVersion { major, minor });
    let table = [
        (None, PreferClose),
        (v(1, 33), PreferClose),
        (v(1, 34), PreferSameZone),
        (v(1, 35), PreferSameZone),
        (v(2, 0), PreferSameZone),
    ];
    for (version, want) in table {
        assert_eq!(
            TrafficDistribution::for_version(version),
            want,
            "{version:?}"
        );
    }
    let zoned = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
    let input = RenderInput::new(&zoned, effective(&zoned.spec));
    let same_zone = Settings {
        traffic_distribution: TrafficDistribution::PreferSameZone,
        ..Settings::default()
    };
    let new = render(&input, &same_zone).expect("render");
    let entry = ["s-distributor-http", "s-query-frontend-http"]
        .map(|n| (n.to_string(), None, Some("PreferSameZone".to_string())))
        .to_vec();
    assert_eq!(service_routing(&new), entry);
    let old = to_yaml_stream(&render(&input, &Settings::default()).expect("render")).expect("yaml");
    let new = to_yaml_stream(&new).expect("yaml");
    assert_eq!(new.replace("PreferSameZone", "PreferClose"), old);
}

fn config_of(s: &LokiStack) -> Value {
    let text = loki_config(&RenderInput::new(s, effective(&s.spec))).expect("config");
    serde_yaml_ng::from_str(&text).expect("config is YAML")
}

#[test]
fn loki_config_is_zone_aware_exactly_when_zones_are_set() {
    let zoned = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 3, &[ZONE]),
    );
    let c = config_of(&zoned);
    assert_eq!(
        c["common"]["ring"]["zone_awareness_enabled"],
        Value::Bool(true)
    );
    assert_eq!(
        c["common"]["ring"]["instance_availability_zone"],
        "${INSTANCE_AVAILABILITY_ZONE}"
    );
    assert_eq!(c["ingester"]["lifecycler"]["ring"]["replication_factor"], 3);
    assert_eq!(c["common"]["replication_factor"], 3);
    assert_eq!(
        c["memberlist"]["join_members"][0],
        "lokistack-dev-gossip-ring.logging.svc.cluster.local:7946"
    );
    assert_eq!(
        c["storage_config"]["use_thanos_objstore"],
        Value::Bool(true)
    );
    assert_eq!(c["schema_config"]["configs"][0]["schema"], "v13");
    assert_eq!(c["schema_config"]["configs"][0]["store"], "tsdb");
    let plain = stack("lokistack-dev", stack_spec(LokiStackSize::Small));
    let c = config_of(&plain);
    assert!(c["common"]["ring"].get("zone_awareness_enabled").is_none());
    assert!(c["common"]["ring"]
        .get("instance_availability_zone")
        .is_none());
}

/// Zone-aware ingesters keep their ring entry and tokens across restarts (on their
/// storage volume), and can be told to leave for good; others keep Loki's defaults.
#[test]
fn zone_aware_ingesters_keep_their_place_in_the_ring() {
    let zoned = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 3, &[ZONE]),
    );
    let c = config_of(&zoned);
    let lifecycler = &c["ingester"]["lifecycler"];
    assert_eq!(lifecycler["tokens_file_path"], names::RING_TOKENS_FILE);
    assert_eq!(lifecycler["unregister_on_shutdown"], Value::Bool(false));
    assert_eq!(
        lifecycler["readiness_check_ring_health"],
        Value::Bool(false)
    );
    assert_eq!(c["ingester"]["shutdown_marker_path"], names::DATA_DIR);
    let eff = effective(&zoned.spec);
    let storage = eff
        .component(Component::Ingester)
        .expect("ingester")
        .volumes
        .iter()
        .find(|v| v.name == names::PVC_STORAGE)
        .expect("storage volume");
    assert!(
        names::RING_TOKENS_FILE.starts_with(&format!("{}/", storage.mount_path)),
        "the tokens file must be on the ingester's volume"
    );
    let plain = config_of(&stack("lokistack-dev", stack_spec(LokiStackSize::Small)));
    for key in ["tokens_file_path", "unregister_on_shutdown"] {
        assert!(plain["ingester"]["lifecycler"].get(key).is_none(), "{key}");
    }
    assert!(plain["ingester"].get("shutdown_marker_path").is_none());
}

#[test]
fn zone_values_stay_strings_after_env_expansion() {
    let zoned = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    let text = loki_config(&RenderInput::new(&zoned, effective(&zoned.spec))).expect("config");
    for zone in ["1", "true", "null", "eu-west-1a", "0x10"] {
        // What Loki does with -config.expand-env=true before it parses the YAML.
        let expanded = text.replace("${INSTANCE_AVAILABILITY_ZONE}", zone);
        let c: Value = serde_yaml_ng::from_str(&expanded).expect("yaml");
        assert_eq!(
            c["common"]["ring"]["instance_availability_zone"],
            Value::String(zone.into())
        );
    }
}

#[test]
fn loki_config_reads_credentials_from_env_for_every_storage_type() {
    for st in ObjectStorageSecretType::ALL {
        let mut spec = stack_spec(LokiStackSize::Small);
        spec.storage.secret.type_ = st;
        let s = stack("lokistack-dev", spec);
        let c = config_of(&s);
        let block = crate::model::storage::config_block(st);
        let store = &c["common"]["storage"]["object_store"][block];
        assert!(store.is_object(), "{st:?}: no object_store.{block}");
        for f in crate::model::storage::fields(st) {
            if f.client_env.is_some() {
                // Read by the store's client from the environment: never in the config.
                assert!(
                    !store
                        .to_string()
                        .contains(&crate::model::storage::env_name(f)),
                    "{st:?}"
                );
                continue;
            }
            assert_eq!(
                store[f.config_key],
                format!("${{{}}}", crate::model::storage::env_name(f)),
                "{st:?}"
            );
        }
        assert_eq!(
            c["schema_config"]["configs"][0]["object_store"],
            st.as_str()
        );
        // And the containers get exactly those variables from the Secret.
        let children = render_stack(&s);
        let (_, pod) = pod_templates(&children).into_iter().next().expect("pod");
        let env = pod.spec.expect("spec").containers[0]
            .env
            .clone()
            .expect("env");
        for f in crate::model::storage::fields(st) {
            let e = env
                .iter()
                .find(|e| e.name == crate::model::storage::env_name(f))
                .expect("env var");
            let key = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .expect("secret ref");
            assert_eq!(
                (key.name.as_str(), key.key.as_str()),
                ("loki-s3", f.secret_key)
            );
            assert_eq!(key.optional, Some(!f.required));
        }
    }
}

#[test]
fn old_schemas_get_boltdb_and_no_structured_metadata() {
    use crate::model::api::{ObjectStorageSchema, ObjectStorageSchemaVersion};
    let mut spec = stack_spec(LokiStackSize::Small);
    spec.storage.schemas = vec![ObjectStorageSchema {
        version: ObjectStorageSchemaVersion::V12,
        effective_date: "2022-06-01".into(),
    }];
    let c = config_of(&stack("s", spec.clone()));
    assert_eq!(c["schema_config"]["configs"][0]["store"], "boltdb-shipper");
    assert_eq!(
        c["limits_config"]["allow_structured_metadata"],
        Value::Bool(false)
    );
    spec.storage.schemas.push(ObjectStorageSchema {
        version: ObjectStorageSchemaVersion::V13,
        effective_date: "2024-04-02".into(),
    });
    let c = config_of(&stack("s", spec));
    assert_eq!(c["schema_config"]["configs"][1]["store"], "tsdb");
    assert_eq!(
        c["limits_config"]["allow_structured_metadata"],
        Value::Bool(true)
    );
}

#[test]
fn config_change_changes_the_pod_hash() {
    let hash = |rf| {
        let s = stack("s", zoned_spec(LokiStackSize::Small, rf, &[ZONE]));
        let (_, pod) = pod_templates(&render_stack(&s))
            .into_iter()
            .next()
            .expect("pod");
        pod.metadata
            .and_then(|m| m.annotations)
            .and_then(|a| a.get(names::ANNOTATION_CONFIG_HASH).cloned())
            .expect("hash")
    };
    assert_eq!(hash(2), hash(2));
    assert_ne!(hash(2), hash(3));
}

#[test]
fn statefulsets_claim_the_reference_volumes() {
    let s = stack("s", stack_spec(LokiStackSize::Small));
    let children = render_stack(&s);
    let claims = |suffix: &str| -> Vec<(String, String)> {
        children
            .iter()
            .find_map(|c| match c {
                Child::StatefulSet(s) if c.name().ends_with(suffix) => {
                    s.spec.clone()?.volume_claim_templates
                }
                _ => None,
            })
            .expect("claims")
            .into_iter()
            .map(|p| {
                let size = p
                    .spec
                    .and_then(|s| s.resources)
                    .and_then(|r| r.requests)
                    .and_then(|r| r.get("storage").cloned());
                (
                    p.metadata.name.unwrap_or_default(),
                    size.map(|q| q.0).unwrap_or_default(),
                )
            })
            .collect()
    };
    assert_eq!(
        claims("-ingester"),
        vec![
            ("storage".into(), "10Gi".into()),
            ("wal".into(), "150Gi".into())
        ]
    );
    assert_eq!(
        claims("-index-gateway"),
        vec![("storage".into(), "50Gi".into())]
    );
    assert_eq!(
        claims("-compactor"),
        vec![("storage".into(), "10Gi".into())]
    );
}

fn snapshot_stream(s: &LokiStack) -> String {
    to_yaml_stream(&render_stack(s)).expect("yaml")
}

#[test]
fn snapshot_each_size_without_zones() {
    for size in LokiStackSize::ALL {
        let s = stack("lokistack-dev", stack_spec(size));
        insta::assert_snapshot!(format!("size_{}", size.as_str()), snapshot_stream(&s));
    }
}

#[test]
fn snapshot_small_with_one_zone_key() {
    let s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    insta::assert_snapshot!("small_zones_one_key", snapshot_stream(&s));
}

#[test]
fn snapshot_small_with_two_zone_keys() {
    let s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 3, &[ZONE, RACK]),
    );
    insta::assert_snapshot!("small_zones_two_keys", snapshot_stream(&s));
}

#[test]
fn snapshot_zones_removed() {
    let mut s = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    s.spec
        .replication
        .as_mut()
        .expect("replication")
        .zones
        .clear();
    // Turning zones off leaves no zone piece behind: exactly what a stack that never had
    // zones renders (a separate snapshot would only repeat the plain one).
    let never = stack("lokistack-dev", stack_spec(LokiStackSize::Small));
    assert_eq!(snapshot_stream(&s), snapshot_stream(&never));
}

#[test]
fn snapshot_loki_config_per_storage_type() {
    for st in ObjectStorageSecretType::ALL {
        let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
        spec.storage.secret.type_ = st;
        let s = stack("lokistack-dev", spec);
        let text = loki_config(&RenderInput::new(&s, effective(&s.spec))).expect("config");
        insta::assert_snapshot!(format!("loki_config_{}", st.as_str()), text);
    }
}

#[test]
fn ruler_renders_when_enabled() {
    let mut spec = zoned_spec(LokiStackSize::Small, 2, &[ZONE]);
    spec.rules = Some(RulesSpec {
        enabled: true,
        ..Default::default()
    });
    let children = render_stack(&stack("s", spec));
    assert!(children
        .iter()
        .any(|c| c.kind() == "StatefulSet" && c.name() == "s-ruler"));
    let eff = effective(&stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE])).spec);
    assert!(eff.component(Component::Ruler).is_none());
}

#[test]
fn limits_and_retention_reach_loki_and_tenant_changes_restart_nothing() {
    use crate::model::api::{LimitsSpec, LimitsTemplateSpec, RetentionLimitSpec};
    let mut spec = stack_spec(LokiStackSize::Small);
    let retention = |days| LimitsTemplateSpec {
        retention: Some(RetentionLimitSpec {
            days,
            streams: vec![],
        }),
        ..Default::default()
    };
    spec.limits = Some(LimitsSpec {
        global: Some(retention(30)),
        tenants: [("audit".to_string(), retention(365))].into(),
    });
    let s = stack("s", spec.clone());
    let c = config_of(&s);
    assert_eq!(c["limits_config"]["retention_period"], "720h");
    assert_eq!(c["compactor"]["retention_enabled"], true);
    assert_eq!(c["compactor"]["delete_request_store"], "s3");
    let docs = documents(
        &RenderInput::new(&s, effective(&s.spec)),
        &Settings::default(),
    )
    .expect("documents");
    let runtime = |docs: &[crate::render::Document]| -> String {
        let cm = docs
            .iter()
            .find(|d| d.kind == "ConfigMap")
            .expect("configmap");
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&cm.text).expect("yaml");
        v["data"][names::RUNTIME_CONFIG_FILE]
            .as_str()
            .expect("runtime")
            .to_string()
    };
    let overrides: serde_yaml_ng::Value = serde_yaml_ng::from_str(&runtime(&docs)).expect("yaml");
    assert_eq!(overrides["overrides"]["audit"]["retention_period"], "8760h");

    // Another tenant limit: the runtime config changes, the pods' config hash does not.
    let mut spec2 = spec;
    spec2
        .limits
        .as_mut()
        .expect("limits")
        .tenants
        .insert("dev".into(), retention(1));
    let s2 = stack("s", spec2);
    let docs2 = documents(
        &RenderInput::new(&s2, effective(&s2.spec)),
        &Settings::default(),
    )
    .expect("documents");
    assert_ne!(runtime(&docs), runtime(&docs2));
    let hashes = |s: &LokiStack| -> Vec<String> {
        pod_templates(&render_stack(s))
            .into_iter()
            .map(|(_, t)| {
                t.metadata.and_then(|m| m.annotations).expect("ann")[names::ANNOTATION_CONFIG_HASH]
                    .clone()
            })
            .collect()
    };
    assert_eq!(hashes(&s), hashes(&s2));
}

#[test]
fn a_storage_ca_is_mounted_in_every_loki_pod_and_named_in_the_config() {
    let mut spec = zoned_spec(LokiStackSize::Small, 3, &[ZONE]);
    spec.rules = Some(RulesSpec {
        enabled: true,
        ..Default::default()
    });
    spec.storage.tls = Some(crate::model::api::ObjectStorageTlsSpec {
        ca_name: "minio-ca".into(),
        ca_key: Some("ca.pem".into()),
    });
    let s = stack("s", spec);
    let templates = pod_templates(&render_stack(&s));
    assert!(templates.len() >= 7, "{}", templates.len());
    for (name, t) in templates {
        let pod = t.spec.expect("pod spec");
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == names::VOLUME_STORAGE_CA)
            .unwrap_or_else(|| panic!("{name}: no CA volume"));
        let cm = volume.config_map.as_ref().expect("from a ConfigMap");
        assert_eq!(cm.name, "minio-ca");
        let loki = &pod.containers[0];
        assert!(
            loki.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == names::VOLUME_STORAGE_CA
                    && m.mount_path == names::STORAGE_CA_MOUNT_DIR
                    && m.read_only == Some(true)),
            "{name}: CA not mounted"
        );
    }
    let config = config_of(&s);
    for block in [
        &config["common"]["storage"]["object_store"]["s3"],
        &config["ruler_storage"]["s3"],
    ] {
        assert_eq!(
            block["http"]["tls_ca_path"],
            Value::from("/var/run/tls/storage/ca/ca.pem")
        );
    }
}

/// A zone-aware stack with the Go Loki Operator's ring, anti-affinity, OTLP and
/// blocked-query fields set.
fn go_operator_fields_stack() -> LokiStack {
    let spec = serde_json::json!({
        "size": "1x.small",
        "storage": {"secret": {"name": "loki-s3", "type": "s3"}},
        "replication": {"factor": 2, "zones": [{"topologyKey": ZONE}]},
        "hashRing": {"type": "memberlist", "memberlist": {"instanceAddrType": "podIP", "enableIPv6": true}},
        "template": {
            "ingester": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app.kubernetes.io/component": "ingester"}}, "topologyKey": "kubernetes.io/hostname"},
            ]}},
            "distributor": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app.kubernetes.io/component": "distributor"}}, "topologyKey": "kubernetes.io/hostname"}},
            ]}},
        },
        "limits": {
            "global": {"otlp": {
                "streamLabels": {"resourceAttributes": [{"name": "k8s.namespace.name"}, {"name": "k8s\\.pod\\..+", "regex": true}]},
                "drop": {"logAttributes": [{"name": "log.iostream"}]},
            }},
            "tenants": {"team-a": {
                "queries": {"blocked": [{"pattern": ".*secret.*", "regex": true, "types": ["filter"]}, {"hash": 1234}]},
                "otlp": {"streamLabels": {"resourceAttributes": [{"name": "service.name"}]}},
            }},
        },
    });
    stack("lokistack-dev", serde_json::from_value(spec).expect("spec"))
}

#[test]
fn ring_address_and_anti_affinity_reach_every_pod_and_parse_losslessly() {
    let s = go_operator_fields_stack();
    let docs = documents(
        &RenderInput::new(&s, effective(&s.spec)),
        &Settings::default(),
    )
    .expect("documents");
    for doc in &docs {
        let raw: Value = serde_yaml_ng::from_str(&doc.text).expect("YAML");
        let typed = parse(doc).expect("parses").to_json().expect("json");
        assert_eq!(raw, typed, "{} lost a field in parsing", doc.template);
    }
    let children: Vec<Child> = docs.iter().map(|d| parse(d).expect("parses")).collect();
    for (name, t) in pod_templates(&children) {
        let pod = t.spec.expect("spec");
        let env = pod.containers[0].env.clone().unwrap_or_default();
        let addr = env
            .iter()
            .find(|e| e.name == "HASH_RING_INSTANCE_ADDR")
            .unwrap_or_else(|| panic!("{name}: no HASH_RING_INSTANCE_ADDR"));
        let field = addr.value_from.as_ref().and_then(|v| v.field_ref.as_ref());
        assert_eq!(field.map(|f| f.field_path.as_str()), Some("status.podIP"));
        let affinity = pod.affinity.unwrap_or_default();
        let anti = affinity.pod_anti_affinity;
        match name.as_str() {
            "lokistack-dev-ingester" => assert!(anti
                .and_then(|a| a.required_during_scheduling_ignored_during_execution)
                .is_some_and(|r| r[0].topology_key == "kubernetes.io/hostname")),
            "lokistack-dev-distributor" => assert!(anti
                .and_then(|a| a.preferred_during_scheduling_ignored_during_execution)
                .is_some_and(|p| p[0].weight == 50)),
            other => assert!(anti.is_none(), "{other}"),
        }
    }
    let c = config_of(&s);
    assert_eq!(
        c["common"]["ring"]["instance_addr"],
        "${HASH_RING_INSTANCE_ADDR}"
    );
    assert_eq!(
        c["memberlist"]["advertise_addr"],
        "${HASH_RING_INSTANCE_ADDR}"
    );
    assert_eq!(c["ingester"]["lifecycler"]["enable_inet6"], true);
    assert_eq!(
        c["distributor"]["otlp_config"]["default_resource_attributes_as_index_labels"],
        serde_json::json!([])
    );
}

#[test]
fn without_the_ring_and_otlp_fields_the_config_has_none_of_them() {
    let plain = stack(
        "lokistack-dev",
        zoned_spec(LokiStackSize::Small, 2, &[ZONE]),
    );
    let c = config_of(&plain);
    assert!(c["common"]["ring"].get("instance_addr").is_none());
    assert!(c["memberlist"].get("advertise_addr").is_none());
    assert!(c["distributor"].get("otlp_config").is_none());
    assert!(c["ingester"]["lifecycler"].get("enable_inet6").is_none());
}

/// Zone-aware gossip: memberlist routes by zone with the pod's zone, as a member, and
/// only the ingesters bridge zones; off, neither the block nor the flag.
#[test]
fn zone_aware_gossip_makes_ingesters_the_bridges() {
    let s = stack("z", zoned_spec(LokiStackSize::Small, 3, &[ZONE]));
    let args = |eff: &crate::model::defaults::EffectiveStack, c: Component| -> Vec<String> {
        let children =
            render(&RenderInput::new(&s, eff.clone()), &Settings::default()).expect("render");
        pod_templates(&children)
            .into_iter()
            .filter(|(name, _)| *name == c.workload_name("z"))
            .flat_map(|(_, t)| t.spec.map(|s| s.containers).unwrap_or_default())
            .flat_map(|c| c.args.unwrap_or_default())
            .collect()
    };
    let on = effective(&s.spec);
    assert!(on.zone_gossip);
    let routing = &config_of(&s)["memberlist"]["zone_aware_routing"];
    assert_eq!(routing["enabled"], true);
    assert_eq!(routing["role"], "member");
    assert_eq!(
        routing["instance_availability_zone"],
        format!("${{{}}}", names::ENV_ZONE)
    );
    assert!(args(&on, Component::Ingester).contains(&names::FLAG_GOSSIP_BRIDGE.to_string()));
    for c in [
        Component::Distributor,
        Component::Querier,
        Component::Compactor,
    ] {
        assert!(
            !args(&on, c)
                .iter()
                .any(|a| a.contains("zone-aware-routing")),
            "{c:?}"
        );
    }
    let off = crate::model::defaults::EffectiveStack {
        zone_gossip: false,
        ..on
    };
    assert!(!args(&off, Component::Ingester)
        .iter()
        .any(|a| a.contains("zone-aware-routing")));
    let plain = config_of(&stack("p", stack_spec(LokiStackSize::Small)));
    assert!(plain["memberlist"].get("zone_aware_routing").is_none());
}

#[test]
fn zone_aware_stacks_bound_the_waits_on_a_lost_zone() {
    let zoned = config_of(&stack("z", zoned_spec(LokiStackSize::Small, 3, &[ZONE])));
    assert_eq!(zoned["server"]["grpc_server_keepalive_time"], "30s");
    assert_eq!(zoned["distributor"]["push_worker_count"], 1024);
    assert_eq!(zoned["common"]["ring"]["heartbeat_timeout"], "1m");
    let plain = config_of(&stack("p", stack_spec(LokiStackSize::Small)));
    assert!(plain["server"].get("grpc_server_keepalive_time").is_none());
    assert!(plain.get("distributor").is_none());
}

#[test]
fn snapshot_go_operator_fields() {
    let s = go_operator_fields_stack();
    let docs = documents(
        &RenderInput::new(&s, effective(&s.spec)),
        &Settings::default(),
    )
    .expect("documents");
    let mut out = String::new();
    for doc in &docs {
        let child = parse(doc).expect("parses");
        let wanted = match &child {
            Child::ConfigMap(_) => true,
            Child::StatefulSet(_) | Child::Deployment(_) => ["-ingester", "-distributor"]
                .iter()
                .any(|c| child.name().ends_with(c)),
            _ => false,
        };
        if wanted {
            out.push_str(&to_yaml_stream(&[child]).expect("yaml"));
        }
    }
    insta::assert_snapshot!("go_operator_fields", out);
}

/// On a server that copies `topology.kubernetes.io/zone` onto pods at binding (1.35), a
/// stack whose only key it is reads the zone from that label: Loki's variable and the
/// init container's file point at it, and the pods say so (`zone-source`). Nothing else
/// changes. Another key, an older or unknown server, or the stack's opt-out keep the
/// annotation.
#[test]
fn pods_read_the_zone_label_kubernetes_copies_at_binding_where_it_does() {
    use crate::checks::kube_version::KubeVersion;
    let label_path = "metadata.labels['topology.kubernetes.io/zone']";
    let annotation_path = "metadata.annotations['loki.grafana.com/availability-zone']";
    let copies = Settings::default().for_server(Some(KubeVersion {
        major: 1,
        minor: 35,
    }));
    let older = Settings::default().for_server(Some(KubeVersion {
        major: 1,
        minor: 34,
    }));
    assert!(copies.zone_labels_at_binding && !older.zone_labels_at_binding);
    let zoned = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE]));
    let input = RenderInput::new(&zoned, effective(&zoned.spec));
    let native = render(&input, &copies).expect("render");
    let templates = pod_templates(&native);
    assert!(templates.len() >= 6, "{}", templates.len());
    for (name, t) in &templates {
        let source = t.metadata.as_ref().and_then(|m| m.annotations.as_ref());
        let source = source.and_then(|a| a.get(names::ANNOTATION_ZONE_SOURCE));
        assert_eq!(
            source.map(String::as_str),
            Some(names::ZONE_SOURCE_POD_LABEL),
            "{name}"
        );
    }
    let yaml = |children: &[Child]| to_yaml_stream(children).expect("yaml");
    let marker = format!(
        "\n        {}: {}",
        names::ANNOTATION_ZONE_SOURCE,
        names::ZONE_SOURCE_POD_LABEL
    );
    let annotation = yaml(&render(&input, &older).expect("render"));
    let undone = yaml(&native)
        .replace(label_path, annotation_path)
        .replace(&marker, "");
    // The label, not the annotation, everywhere the zone is read; the rest unchanged.
    assert!(!yaml(&native).contains(annotation_path));
    assert_eq!(undone, annotation);
    // Two keys: Kubernetes copies only the zone, so the annotation stays.
    let two = stack("s", zoned_spec(LokiStackSize::Small, 2, &[ZONE, RACK]));
    let two_input = RenderInput::new(&two, effective(&two.spec));
    assert_eq!(
        yaml(&render(&two_input, &copies).expect("render")),
        yaml(&render(&two_input, &older).expect("render"))
    );
    // The stack's opt-out keeps the annotation on a server that copies the label.
    let mut eff = effective(&zoned.spec);
    eff.zone_from_pod_label_allowed = false;
    let opted_out = render(&RenderInput::new(&zoned, eff), &copies).expect("render");
    assert_eq!(yaml(&opted_out), annotation);
}
