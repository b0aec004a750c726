//! Render: a pure function of (the stack, the operator's settings, what was observed) to
//! the typed Kubernetes objects of one stack.
//!
//! Objects come from the tera templates in `templates/`, embedded at build time. Each is
//! rendered to YAML and parsed into its k8s-openapi type, so a template typo fails a unit
//! test, and a test proves that parsing drops no field.

pub mod input;
pub mod kinds;
pub mod limits;
pub mod network;
pub mod rules;

pub use input::RenderInput;

#[cfg(test)]
mod config_reference_tests;
#[cfg(test)]
mod pod_security_tests;
#[cfg(test)]
mod render_tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ObjectMeta;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tera::Tera;

use crate::checks::kube_version::{
    KubeVersion, PREFER_SAME_ZONE_SINCE, ZONE_LABELS_AT_BINDING_SINCE,
};
use crate::checks::validate::reads_zone_label;
use crate::model::api::{LokiStack, MemberListSpec, ObjectStorageSchemaVersion};
use crate::model::defaults::{Component, EffectiveComponent, EffectiveStack, WorkloadKind};
use crate::model::names;
use crate::model::storage;
use crate::ruler::names as rulernames;

/// Templates, embedded at build time: (name, source).
const TEMPLATES: &[(&str, &str)] = &[
    (
        "_macros.tera",
        include_str!("../../../templates/_macros.tera"),
    ),
    ("_zone.tera", include_str!("../../../templates/_zone.tera")),
    ("_pod.tera", include_str!("../../../templates/_pod.tera")),
    (
        "configmap.yaml.tera",
        include_str!("../../../templates/configmap.yaml.tera"),
    ),
    (
        "deployment.yaml.tera",
        include_str!("../../../templates/deployment.yaml.tera"),
    ),
    (
        "statefulset.yaml.tera",
        include_str!("../../../templates/statefulset.yaml.tera"),
    ),
    (
        "service.yaml.tera",
        include_str!("../../../templates/service.yaml.tera"),
    ),
    (
        "pdb.yaml.tera",
        include_str!("../../../templates/pdb.yaml.tera"),
    ),
    (
        "networkpolicy.yaml.tera",
        include_str!("../../../templates/networkpolicy.yaml.tera"),
    ),
    (
        "serviceaccount.yaml.tera",
        include_str!("../../../templates/serviceaccount.yaml.tera"),
    ),
    (
        "loki-config.yaml.tera",
        include_str!("../../../templates/loki-config.yaml.tera"),
    ),
    (
        "runtime-config.yaml.tera",
        include_str!("../../../templates/runtime-config.yaml.tera"),
    ),
];

/// The default Loki image: the version the Go Loki Operator ships.
pub const DEFAULT_LOKI_IMAGE: &str = "docker.io/grafana/loki:3.7.3";
/// The default image of the zone init container, by the tag of the zone-wait crate's
/// version (released installs name it by digest).
pub const DEFAULT_ZONE_WAIT_IMAGE: &str = loki_zone_wait::DEFAULT_IMAGE;
pub const DEFAULT_ZONE_WAIT_TIMEOUT: &str = "10m";
/// The namespace `make deploy` installs the operator in.
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "loki-zone-operator-system";

/// The operator's own settings that shape what it renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub loki_image: String,
    /// The image of the `az-annotation-check` init container (loki-zone-wait).
    pub zone_wait_image: String,
    /// How long the init container waits for the zone annotation (e.g. `10m`).
    pub zone_wait_timeout: String,
    /// The operator's own namespace: its pods ask ingesters to leave the ring, which
    /// the stacks' NetworkPolicies must let through.
    pub operator_namespace: String,
    /// How the entry Services ask for zone-local routing: by the server's version.
    pub traffic_distribution: TrafficDistribution,
    /// The server copies `topology.kubernetes.io/zone` onto pods at binding
    /// ([`ZONE_LABELS_AT_BINDING_SINCE`]); false when its version is not known.
    pub zone_labels_at_binding: bool,
    /// The `fsGroup` of Loki's pods, which makes their volumes writable by Loki's group;
    /// `None` where the platform assigns each namespace's groups itself and refuses a
    /// fixed one (OpenShift's restricted-v2: [`FsGroup`]).
    pub pod_fs_group: Option<i64>,
}

/// The group Loki's image runs as (`loki:x:10001`), given to its volumes by default.
pub const LOKI_FS_GROUP: i64 = 10001;

/// How the operator chooses the pods' `fsGroup` (`--fs-group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsGroup {
    /// [`LOKI_FS_GROUP`], unless the server serves OpenShift's SecurityContextConstraints
    /// (`security.openshift.io`), whose restricted-v2 assigns the namespace's own group
    /// to every pod and refuses one outside its range: then none.
    Auto,
    /// None: the platform (or an admission policy) sets it.
    None,
    /// This group.
    Fixed(i64),
}

impl std::str::FromStr for FsGroup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(FsGroup::Auto),
            "none" => Ok(FsGroup::None),
            n => n
                .parse::<i64>()
                .ok()
                .filter(|g| *g >= 0)
                .map(FsGroup::Fixed)
                .ok_or_else(|| {
                    format!("invalid fsGroup {s:?}: auto, none or a group ID (e.g. 10001)")
                }),
        }
    }
}

impl FsGroup {
    /// The pods' `fsGroup` on a server that does (or does not) assign groups itself.
    pub fn resolve(self, platform_assigns_groups: bool) -> Option<i64> {
        match self {
            FsGroup::Auto if platform_assigns_groups => None,
            FsGroup::Auto => Some(LOKI_FS_GROUP),
            FsGroup::None => None,
            FsGroup::Fixed(g) => Some(g),
        }
    }
}

/// The `trafficDistribution` value of a zone-aware stack's entry Services. Both mean the
/// same to kube-proxy: endpoints of the client's zone whenever it has any, every
/// endpoint when it has none (so a lost zone never strands a client).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrafficDistribution {
    /// Every supported server takes it; 1.35 warns that it is deprecated. The value when
    /// the target's version is not known.
    #[default]
    PreferClose,
    /// Its name from 1.34 on ([`PREFER_SAME_ZONE_SINCE`]); refused before.
    PreferSameZone,
}

impl TrafficDistribution {
    /// What a server of `version` takes without a warning; `None` (unknown): the value
    /// every supported server takes.
    pub fn for_version(version: Option<KubeVersion>) -> TrafficDistribution {
        match version {
            Some(v) if v >= PREFER_SAME_ZONE_SINCE => TrafficDistribution::PreferSameZone,
            _ => TrafficDistribution::PreferClose,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TrafficDistribution::PreferClose => "PreferClose",
            TrafficDistribution::PreferSameZone => "PreferSameZone",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            loki_image: DEFAULT_LOKI_IMAGE.into(),
            zone_wait_image: DEFAULT_ZONE_WAIT_IMAGE.into(),
            zone_wait_timeout: DEFAULT_ZONE_WAIT_TIMEOUT.into(),
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
            traffic_distribution: TrafficDistribution::default(),
            zone_labels_at_binding: false,
            pod_fs_group: Some(LOKI_FS_GROUP),
        }
    }
}

impl Settings {
    /// What a server of `version` serves: its traffic distribution and whether it copies
    /// the zone label at binding; `None` (unknown): what every supported server does.
    pub fn for_server(mut self, version: Option<KubeVersion>) -> Settings {
        self.traffic_distribution = TrafficDistribution::for_version(version);
        self.zone_labels_at_binding = version.is_some_and(|v| v >= ZONE_LABELS_AT_BINDING_SINCE);
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("embedded templates failed to load: {0}")]
    Templates(String),
    #[error("template {template} failed to render: {message}")]
    Template {
        template: &'static str,
        message: String,
    },
    #[error("template {template} produced YAML that is not a valid {kind}: {source}\n{excerpt}")]
    Parse {
        template: &'static str,
        kind: &'static str,
        #[source]
        source: serde_yaml_ng::Error,
        /// The rendered lines around the error, numbered.
        excerpt: String,
    },
    #[error("stack has no name")]
    NoName,
}

/// One rendered object of a stack.
#[derive(Clone, Debug, PartialEq)]
pub enum Child {
    ServiceAccount(ServiceAccount),
    ConfigMap(ConfigMap),
    Service(Service),
    NetworkPolicy(NetworkPolicy),
    Deployment(Deployment),
    StatefulSet(StatefulSet),
    PodDisruptionBudget(PodDisruptionBudget),
}

impl Child {
    pub fn kind(&self) -> &'static str {
        match self {
            Child::ServiceAccount(_) => "ServiceAccount",
            Child::ConfigMap(_) => "ConfigMap",
            Child::Service(_) => "Service",
            Child::NetworkPolicy(_) => "NetworkPolicy",
            Child::Deployment(_) => "Deployment",
            Child::StatefulSet(_) => "StatefulSet",
            Child::PodDisruptionBudget(_) => "PodDisruptionBudget",
        }
    }

    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Child::ServiceAccount(o) => &o.metadata,
            Child::ConfigMap(o) => &o.metadata,
            Child::Service(o) => &o.metadata,
            Child::NetworkPolicy(o) => &o.metadata,
            Child::Deployment(o) => &o.metadata,
            Child::StatefulSet(o) => &o.metadata,
            Child::PodDisruptionBudget(o) => &o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// Whether this is a ConfigMap of rule files, whose content comes from rule objects
    /// rather than from the LokiStack.
    pub fn is_rules(&self) -> bool {
        matches!(self, Child::ConfigMap(_))
            && self
                .meta()
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(rulernames::ANNOTATION_RULES_TENANT))
    }

    /// The object as JSON, with `apiVersion` and `kind`: what a server-side apply sends.
    pub fn to_json(&self) -> Result<Value, serde_json::Error> {
        match self {
            Child::ServiceAccount(o) => serde_json::to_value(o),
            Child::ConfigMap(o) => serde_json::to_value(o),
            Child::Service(o) => serde_json::to_value(o),
            Child::NetworkPolicy(o) => serde_json::to_value(o),
            Child::Deployment(o) => serde_json::to_value(o),
            Child::StatefulSet(o) => serde_json::to_value(o),
            Child::PodDisruptionBudget(o) => serde_json::to_value(o),
        }
    }
}

fn engine() -> Result<&'static Tera, RenderError> {
    static ENGINE: OnceLock<Result<Tera, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut tera = Tera::default();
            tera.add_raw_templates(TEMPLATES.to_vec())
                .map_err(|e| format!("{e:?}"))?;
            Ok(tera)
        })
        .as_ref()
        .map_err(|e| RenderError::Templates(e.clone()))
}

fn render_text(template: &'static str, ctx: &Value) -> Result<String, RenderError> {
    let tera_err = |e: tera::Error| {
        // tera nests the useful part of the message in its source chain.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        RenderError::Template { template, message }
    };
    let context = tera::Context::from_value(ctx.clone()).map_err(tera_err)?;
    engine()?.render(template, &context).map_err(tera_err)
}

/// One rendered template: YAML text not yet parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub template: &'static str,
    pub kind: &'static str,
    pub text: String,
}

fn document(
    template: &'static str,
    kind: &'static str,
    ctx: &Value,
) -> Result<Document, RenderError> {
    Ok(Document {
        template,
        kind,
        text: render_text(template, ctx)?,
    })
}

fn parse_as<T: DeserializeOwned>(doc: &Document) -> Result<T, RenderError> {
    serde_yaml_ng::from_str(&doc.text).map_err(|source| {
        let line = source.location().map(|l| l.line()).unwrap_or(1);
        let excerpt = doc
            .text
            .lines()
            .enumerate()
            .skip(line.saturating_sub(4))
            .take(7)
            .map(|(i, l)| format!("{:>4} | {l}", i + 1))
            .collect::<Vec<_>>()
            .join("\n");
        RenderError::Parse {
            template: doc.template,
            kind: doc.kind,
            source,
            excerpt,
        }
    })
}

/// Parses a document into its k8s-openapi type.
pub fn parse(doc: &Document) -> Result<Child, RenderError> {
    Ok(match doc.kind {
        "ServiceAccount" => Child::ServiceAccount(parse_as(doc)?),
        "ConfigMap" => Child::ConfigMap(parse_as(doc)?),
        "Service" => Child::Service(parse_as(doc)?),
        "NetworkPolicy" => Child::NetworkPolicy(parse_as(doc)?),
        "Deployment" => Child::Deployment(parse_as(doc)?),
        "StatefulSet" => Child::StatefulSet(parse_as(doc)?),
        "PodDisruptionBudget" => Child::PodDisruptionBudget(parse_as(doc)?),
        other => {
            return Err(RenderError::Template {
                template: doc.template,
                message: format!("unknown kind {other}"),
            })
        }
    })
}

/// Labels on every object of a stack, as the Go Loki Operator sets them.
pub fn common_labels(stack: &str) -> BTreeMap<String, String> {
    [
        (names::LABEL_NAME, names::LABEL_NAME_VALUE),
        (names::LABEL_INSTANCE, stack),
        (names::LABEL_MANAGED_BY, names::LABEL_CONTROLLER_VALUE),
        (names::LABEL_CREATED_BY, names::LABEL_CONTROLLER_VALUE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub fn component_labels(stack: &str, c: Component) -> BTreeMap<String, String> {
    let mut l = common_labels(stack);
    l.insert(names::LABEL_COMPONENT.into(), c.name().into());
    l
}

/// The spread constraint's selector: one component of one stack.
pub fn spread_selector(stack: &str, c: Component) -> BTreeMap<String, String> {
    [
        (names::LABEL_COMPONENT.to_string(), c.name().to_string()),
        (names::LABEL_INSTANCE.to_string(), stack.to_string()),
    ]
    .into()
}

fn svc_dns(stack: &LokiStack, service: &str, port: i32) -> String {
    let ns = stack.namespace().unwrap_or_else(|| "default".into());
    format!("{service}.{ns}.svc.cluster.local:{port}")
}

/// Per-size process settings: our own conservative figures.
fn sizing(eff: &EffectiveStack) -> Value {
    use crate::model::api::LokiStackSize::*;
    let (concurrent, wal) = match eff.size {
        Demo => (2, "512MB"),
        Pico => (2, "1GB"),
        ExtraSmall => (4, "2GB"),
        Small => (4, "6GB"),
        Medium => (8, "12GB"),
    };
    json!({
        "querier_max_concurrent": concurrent,
        "wal_replay_memory_ceiling": wal,
    })
}

/// The Loki configuration (`config.yaml`) of a stack.
pub fn loki_config(input: &RenderInput) -> Result<String, RenderError> {
    loki_config_with(input.stack, &input.eff, input.eff.zone_aware())
}

/// The read path's configuration while zones are turned on or off
/// ([`names::CONFIG_READ_FILE`]): `config.yaml` with the ring's zone awareness off, so
/// queriers and rulers ask every ingester. `None` when the read path reads `config.yaml`.
pub fn loki_read_config(input: &RenderInput) -> Result<Option<String>, RenderError> {
    let eff = &input.eff;
    if !eff.zone_aware() || eff.read_path_zone_aware {
        return Ok(None);
    }
    loki_config_with(input.stack, eff, false).map(Some)
}

fn loki_config_with(
    stack: &LokiStack,
    eff: &EffectiveStack,
    zone_awareness: bool,
) -> Result<String, RenderError> {
    let name = stack.metadata.name.as_deref().ok_or(RenderError::NoName)?;
    let st = stack.spec.storage.secret.type_;
    let fields: Vec<Value> =
        storage::config_fields(st, &eff.store, stack.spec.storage.tls.as_ref())
            .into_iter()
            .map(|(key, value)| json!({"config_key": key, "value": value}))
            .collect();
    let schemas: Vec<Value> = eff
        .schemas
        .iter()
        .map(|s| {
            let store = match s.version {
                ObjectStorageSchemaVersion::V13 => "tsdb",
                _ => "boltdb-shipper",
            };
            json!({"from": s.effective_date, "store": store, "schema": s.version.as_str()})
        })
        .collect();
    let boltdb = eff
        .schemas
        .iter()
        .any(|s| s.version != ObjectStorageSchemaVersion::V13);
    // Loki refuses structured metadata unless the newest period is a v13 TSDB schema.
    let v13_last = eff
        .schemas
        .last()
        .is_some_and(|s| s.version == ObjectStorageSchemaVersion::V13);
    let ruler = ruler_ctx(eff)?;
    let ctx = json!({
        "ports": {"http": names::PORT_HTTP, "grpc": names::PORT_GRPC, "gossip": names::PORT_GOSSIP},
        "paths": {"data": names::DATA_DIR, "wal": names::WAL_DIR, "ring_tokens": names::RING_TOKENS_FILE},
        "replication_factor": eff.replication_factor,
        "zone_expansion": eff.zone_aware().then(|| format!("${{{}}}", names::ENV_ZONE)),
        "zone_awareness": zone_awareness,
        "zone_gossip": eff.zone_aware() && eff.zone_gossip,
        "storage": {"block": storage::config_block(st), "backend": st.as_str(), "fields": fields},
        "schemas": schemas,
        "boltdb": boltdb,
        "allow_structured_metadata": v13_last,
        "ruler": ruler,
        "hash_ring": hash_ring_ctx(stack),
        "otlp_set": limits::otlp_set(stack.spec.limits.as_ref()),
        "limits": sizing(eff),
        "limits_config": limits::global(eff.size, stack.spec.limits.as_ref()),
        "retention": limits::retention_enabled(stack.spec.limits.as_ref()),
        "addresses": {
            "compactor_grpc": svc_dns(stack, &Component::Compactor.grpc_service_name(name), names::PORT_GRPC),
            // dns+: Loki's gRPC client resolves every replica behind the headless Service.
            "index_gateway_grpc": format!("dns+{}", svc_dns(stack, &Component::IndexGateway.grpc_service_name(name), names::PORT_GRPC)),
            "query_frontend_grpc": svc_dns(stack, &Component::QueryFrontend.grpc_service_name(name), names::PORT_GRPC),
            "querier_http": svc_dns(stack, &Component::Querier.http_service_name(name), names::PORT_HTTP),
            "gossip": svc_dns(stack, &names::gossip_service_name(name), names::PORT_GOSSIP),
        },
    });
    render_text("loki-config.yaml.tera", &ctx)
}

/// The ruler's part of the Loki config: where its rules are, and its RulerConfig's
/// settings; `null` without a ruler.
fn ruler_ctx(eff: &EffectiveStack) -> Result<Value, RenderError> {
    if eff.component(Component::Ruler).is_none() {
        return Ok(Value::Null);
    }
    let settings = rules::ruler_settings_yaml(eff).map_err(|e| RenderError::Template {
        template: "loki-config.yaml.tera",
        message: format!("the RulerConfig settings: {e}"),
    })?;
    Ok(json!({
        "local": rules::local_rules(eff),
        "rules_dir": rulernames::RULES_DIR,
        "settings": settings,
    }))
}

/// The Go Loki Operator's variable for a ring member's pod IP (`spec.hashRing.memberlist`),
/// under the same name, so a taken-over pod template keeps it.
pub const ENV_INSTANCE_ADDR: &str = "HASH_RING_INSTANCE_ADDR";

fn memberlist(stack: &LokiStack) -> Option<&MemberListSpec> {
    stack.spec.hash_ring.as_ref()?.memberlist.as_ref()
}

/// Whether ring members advertise their pod IP (`instanceAddrType: podIP`, or IPv6).
fn advertise_pod_ip(stack: &LokiStack) -> bool {
    memberlist(stack).is_some_and(MemberListSpec::advertise_pod_ip)
}

/// `spec.hashRing.memberlist` for the Loki config: the address to advertise (Loki
/// expands the pod's variable) and IPv6.
fn hash_ring_ctx(stack: &LokiStack) -> Value {
    json!({
        "instance_addr": advertise_pod_ip(stack).then(|| format!("${{{ENV_INSTANCE_ADDR}}}")),
        "ipv6": memberlist(stack).is_some_and(MemberListSpec::ipv6),
    })
}

/// SHA-256 over the ConfigMap's files, in key order: the pod annotation that rolls pods
/// when the configuration changes.
pub fn config_hash(files: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in files {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(v.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn stack_ctx(stack: &LokiStack) -> Value {
    json!({
        "name": stack.metadata.name,
        "namespace": stack.namespace().unwrap_or_else(|| "default".into()),
        // Without a uid (offline rendering) there is no owner reference.
        "uid": stack.metadata.uid,
    })
}

fn zone_ctx(eff: &EffectiveStack, settings: &Settings, kind: WorkloadKind) -> Value {
    if !eff.zone_aware() {
        return Value::Null;
    }
    // A StatefulSet replaces pods in place and its pods follow their volumes' zones, so
    // only Deployments need their rollout spread by pod-template-hash.
    let match_label_keys = (kind == WorkloadKind::Deployment).then(|| vec!["pod-template-hash"]);
    let keys = eff.topology_keys();
    let from_label = reads_zone_label(
        &keys,
        settings.zone_labels_at_binding,
        eff.zone_from_pod_label_allowed,
    );
    // Where Loki and the init container read the zone: the label Kubernetes copies at
    // binding, or the annotation the webhook or the annotator writes.
    let field_path = match from_label {
        true => format!("metadata.labels['{}']", names::LABEL_TOPOLOGY_ZONE),
        false => format!("metadata.annotations['{}']", names::ANNOTATION_ZONE),
    };
    json!({
        "entries": eff.zones,
        "keys_joined": keys.join(names::ZONE_KEYS_SEPARATOR),
        "source_annotation": names::ANNOTATION_ZONE_SOURCE,
        "source": from_label.then_some(names::ZONE_SOURCE_POD_LABEL),
        "label": names::LABEL_ZONE_AWARE,
        "label_value": names::LABEL_ZONE_AWARE_VALUE,
        "keys_annotation": names::ANNOTATION_ZONE_LABELS,
        "annotation": names::ANNOTATION_ZONE,
        "field_path": field_path,
        "env": names::ENV_ZONE,
        "init_container": names::INIT_CONTAINER_ZONE,
        "volume": names::VOLUME_ZONE,
        "mount_dir": names::ZONE_MOUNT_DIR,
        "file_name": names::ZONE_FILE_NAME,
        "file": names::zone_file_path(),
        "image": settings.zone_wait_image,
        "timeout": settings.zone_wait_timeout,
        "match_label_keys": match_label_keys,
        "hostname_key": names::LABEL_HOSTNAME,
    })
}

/// The volumes of a component's pods: StatefulSets keep data on claims, Deployments get
/// an emptyDir at the same paths; plus the storage Secret where the store reads a file.
fn pod_volumes(stack: &LokiStack, c: &EffectiveComponent) -> Value {
    let (claims, empty_dirs) = match c.component.kind() {
        WorkloadKind::StatefulSet => (c.volumes.clone(), vec![]),
        WorkloadKind::Deployment => (
            vec![],
            vec![crate::model::defaults::Volume {
                name: names::PVC_STORAGE,
                mount_path: names::DATA_DIR,
                size: "",
            }],
        ),
    };
    let data_volumes: Vec<_> = claims.iter().chain(empty_dirs.iter()).collect();
    let secret = &stack.spec.storage.secret;
    let secret_volume = storage::secret_mount(secret.type_).map(|dir| {
        json!({"name": names::VOLUME_STORAGE_SECRET, "mount_path": dir, "secret": secret.name})
    });
    let ca_volume = stack.spec.storage.tls.as_ref().map(|tls| {
        json!({"name": names::VOLUME_STORAGE_CA, "mount_path": names::STORAGE_CA_MOUNT_DIR, "config_map": tls.ca_name})
    });
    json!({
        "data_volumes": data_volumes,
        "empty_dirs": empty_dirs,
        "claims": claims,
        "storage_class": stack.spec.storage_class_name,
        "secret_volume": secret_volume,
        "ca_volume": ca_volume,
    })
}

/// The Loki container: image, target, config flags, ports, storage environment.
fn container(
    stack: &LokiStack,
    c: &EffectiveComponent,
    settings: &Settings,
    config_file: &str,
) -> Value {
    let comp = c.component;
    let ports = [
        (names::PORT_NAME_HTTP, names::PORT_HTTP),
        (names::PORT_NAME_GRPC, names::PORT_GRPC),
        (names::PORT_NAME_GOSSIP, names::PORT_GOSSIP),
    ];
    let secret = &stack.spec.storage.secret;
    json!({
        "container_name": format!("loki-{}", comp.name()),
        "image": settings.loki_image,
        "args": [
            format!("-target={}", comp.name()),
            format!("-config.file={}/{}", names::CONFIG_MOUNT_DIR, config_file),
            format!("-runtime-config.file={}/{}", names::CONFIG_MOUNT_DIR, names::RUNTIME_CONFIG_FILE),
            "-config.expand-env=true",
        ],
        "ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p})).collect::<Vec<_>>(),
        "http_port": names::PORT_HTTP,
        "readiness_path": readiness_path(comp),
        "liveness_path": names::PATH_BUILD_INFO,
        "env": storage::env(secret.type_, &secret.name),
        "instance_addr_env": advertise_pod_ip(stack).then_some(ENV_INSTANCE_ADDR),
        "requests": c.requests,
        "config_volume": names::VOLUME_CONFIG,
        "config_mount_dir": names::CONFIG_MOUNT_DIR,
    })
}

/// The ruler's rule files and remote-write credentials; none for other components.
fn ruler_volumes(
    eff: &EffectiveStack,
    comp: Component,
    rule_maps: &[rules::RulesConfigMap],
) -> Value {
    let ruler = comp == Component::Ruler;
    let remote_write = eff
        .ruler
        .remote_write_secret
        .as_ref()
        .filter(|_| ruler)
        .map(|secret| {
            json!({"name": rulernames::VOLUME_REMOTE_WRITE_SECRET, "mount_path": rulernames::REMOTE_WRITE_SECRET_DIR, "secret": secret})
        });
    json!({
        "rule_volumes": if ruler { rules::volumes(rule_maps) } else { json!([]) },
        "remote_write_volume": remote_write,
    })
}

/// The path of a component's readiness probe (`names::PATH_BUILD_INFO` says why the
/// query frontend's differs).
fn readiness_path(comp: Component) -> &'static str {
    match comp {
        Component::QueryFrontend => names::PATH_BUILD_INFO,
        _ => names::PATH_READY,
    }
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The update strategy of the stack's StatefulSets. With zones the operator rolls them
/// itself, one zone at a time (`plan/rollout.rs`, `act/rollout.rs`): the StatefulSet controller's own
/// rolling update goes by ordinal and would restart pods of every zone in turn.
fn update_strategy(eff: &EffectiveStack) -> &'static str {
    if eff.zone_aware() {
        names::UPDATE_STRATEGY_ON_DELETE
    } else {
        "RollingUpdate"
    }
}

/// What the objects of every component of a stack are rendered with, beside the stack.
struct Shared<'a> {
    settings: &'a Settings,
    /// The config file each component reads, and its hash.
    hashes: &'a ConfigHashes,
    /// The ruler's rules ConfigMaps, which its pods mount.
    rule_maps: &'a [rules::RulesConfigMap],
}

fn workload(
    stack: &LokiStack,
    name: &str,
    eff: &EffectiveStack,
    c: &EffectiveComponent,
    shared: &Shared<'_>,
) -> Result<Document, RenderError> {
    let Shared {
        settings,
        hashes: config,
        rule_maps,
    } = shared;
    let comp = c.component;
    let kind = comp.kind();
    let (config_file, config_hash) = config.of(comp);
    let mut pod_labels = component_labels(name, comp);
    pod_labels.insert(names::LABEL_GOSSIP.into(), "true".into());
    let zone = zone_ctx(eff, settings, kind);
    let anti_affinity = comp
        .template(&stack.spec)
        .and_then(|t| t.pod_anti_affinity.as_ref());
    let mut ctx = json!({
        "stack": stack_ctx(stack),
        "name": comp.workload_name(name),
        "labels": component_labels(name, comp),
        "selector": component_labels(name, comp),
        "spread_selector": spread_selector(name, comp),
        "pod_labels": pod_labels,
        "replicas": c.replicas,
        "grpc_service": comp.grpc_service_name(name),
        "config_hash_annotation": names::ANNOTATION_CONFIG_HASH,
        "config_hash": config_hash,
        "service_account": names::service_account_name(name),
        "node_selector": c.node_selector,
        "tolerations": c.tolerations,
        "zone": zone,
        "pod_anti_affinity": anti_affinity,
        "config_map": names::config_map_name(name),
        "update_strategy": update_strategy(eff),
        "fs_group": settings.pod_fs_group,
    });
    merge(&mut ctx, container(stack, c, settings, config_file));
    // The ingesters bridge the zone-aware gossip between zones: every zone of the ring
    // has one (they are spread zone by zone), and losing a zone takes only its own
    // bridges; Loki gossips with every zone while a zone has members but no live bridge.
    if comp == Component::Ingester && eff.zone_aware() && eff.zone_gossip {
        if let Some(args) = ctx["args"].as_array_mut() {
            args.push(names::FLAG_GOSSIP_BRIDGE.into());
        }
    }
    merge(&mut ctx, pod_volumes(stack, c));
    merge(&mut ctx, ruler_volumes(eff, comp, rule_maps));
    match kind {
        WorkloadKind::Deployment => document("deployment.yaml.tera", "Deployment", &ctx),
        WorkloadKind::StatefulSet => document("statefulset.yaml.tera", "StatefulSet", &ctx),
    }
}

/// How one Service is reached: its port, whether it is headless (resolves to the pods),
/// publishes pods before they are Ready, and asks for zone-local routing.
struct Reach<'a> {
    port: (&'a str, i32),
    headless: bool,
    publish_not_ready: bool,
    /// `trafficDistribution` ([`TrafficDistribution`]): kube-proxy (or a service mesh
    /// reading the same field) sends a client to endpoints of its own zone whenever that
    /// zone has any, and to every endpoint when it has none.
    zone_local: Option<TrafficDistribution>,
}

fn service(
    stack: &LokiStack,
    name: String,
    labels: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
    reach: Reach<'_>,
) -> Result<Document, RenderError> {
    let ctx = json!({
        "stack": stack_ctx(stack),
        "name": name,
        "labels": labels,
        "selector": selector,
        "port": {"name": reach.port.0, "port": reach.port.1},
        "headless": reach.headless,
        "publish_not_ready": reach.publish_not_ready,
        "traffic_distribution": reach.zone_local.map(TrafficDistribution::as_str),
    });
    document("service.yaml.tera", "Service", &ctx)
}

/// Every object of one stack, typed, in apply order: ServiceAccount, ConfigMap, Services,
/// then per component its workload and PDB.
pub fn render(input: &RenderInput, settings: &Settings) -> Result<Vec<Child>, RenderError> {
    documents(input, settings)?.iter().map(parse).collect()
}

/// The rendered templates of one stack, before parsing.
pub fn documents(input: &RenderInput, settings: &Settings) -> Result<Vec<Document>, RenderError> {
    let (stack, eff) = (input.stack, &input.eff);
    let name = stack.metadata.name.clone().ok_or(RenderError::NoName)?;
    let common = common_labels(&name);
    let sa_ctx = json!({"stack": stack_ctx(stack), "name": names::service_account_name(&name), "labels": common});
    let mut out = vec![document(
        "serviceaccount.yaml.tera",
        "ServiceAccount",
        &sa_ctx,
    )?];
    let (config_map, hashes) = config_map(input, &name)?;
    out.push(config_map);
    let rule_maps = rule_config_maps(eff, &name)?;
    for cm in &rule_maps {
        out.push(rules_config_map(stack, &name, cm)?);
    }
    out.push(gossip_service(stack, &name)?);
    for p in network::policies(input, &settings.operator_namespace) {
        let ctx = json!({
            "stack": stack_ctx(stack),
            "name": p.name,
            "labels": common,
            "pod_selector": p.pod_selector,
            "policy_types": p.policy_types,
            "ingress": p.ingress,
            "egress": p.egress,
        });
        out.push(document("networkpolicy.yaml.tera", "NetworkPolicy", &ctx)?);
    }
    let shared = Shared {
        settings,
        hashes: &hashes,
        rule_maps: &rule_maps,
    };
    for c in &eff.components {
        out.extend(component_documents(stack, &name, eff, c, &shared)?);
    }
    Ok(out)
}

/// The rules ConfigMaps of a ruler that reads rule files; none otherwise.
fn rule_config_maps(
    eff: &EffectiveStack,
    name: &str,
) -> Result<Vec<rules::RulesConfigMap>, RenderError> {
    match (&eff.ruler.files, rules::local_rules(eff)) {
        (Some(files), true) => rules::config_maps(name, files).map_err(|e| RenderError::Template {
            template: "rule files",
            message: e.to_string(),
        }),
        _ => Ok(Vec::new()),
    }
}

fn rules_config_map(
    stack: &LokiStack,
    name: &str,
    cm: &rules::RulesConfigMap,
) -> Result<Document, RenderError> {
    let annotations: BTreeMap<&str, &str> =
        [(rulernames::ANNOTATION_RULES_TENANT, cm.tenant.as_str())].into();
    let ctx = json!({
        "stack": stack_ctx(stack),
        "name": cm.name,
        "labels": component_labels(name, Component::Ruler),
        "annotations": annotations,
        "files": cm.files,
    });
    document("configmap.yaml.tera", "ConfigMap", &ctx)
}

/// The config file each component reads, with the hash that rolls its pods when that
/// file changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigHashes {
    main: String,
    /// Of [`names::CONFIG_READ_FILE`], while the read path has its own config.
    read: Option<String>,
}

impl ConfigHashes {
    fn new(main: &str, read: Option<&str>) -> ConfigHashes {
        // The runtime config is left out: Loki reloads it, so a tenant's limits change
        // without restarting any pod.
        let one = |file: &str, content: &str| {
            config_hash(&[(file.to_string(), content.to_string())].into())
        };
        ConfigHashes {
            main: one(names::CONFIG_FILE, main),
            read: read.map(|r| one(names::CONFIG_READ_FILE, r)),
        }
    }

    /// The file `comp` reads and its hash.
    pub fn of(&self, comp: Component) -> (&'static str, &str) {
        match &self.read {
            Some(read) if comp.reads_ingesters() => (names::CONFIG_READ_FILE, read),
            _ => (names::CONFIG_FILE, &self.main),
        }
    }
}

/// The config hashes of a stack's components, as [`render`] writes them on the pods.
pub fn config_hashes(input: &RenderInput) -> Result<ConfigHashes, RenderError> {
    let main = loki_config(input)?;
    let read = loki_read_config(input)?;
    Ok(ConfigHashes::new(&main, read.as_deref()))
}

/// The ConfigMap with Loki's config files, and the hashes that roll pods when they change.
fn config_map(input: &RenderInput, name: &str) -> Result<(Document, ConfigHashes), RenderError> {
    let (stack, eff) = (input.stack, &input.eff);
    let main = loki_config(input)?;
    let read = loki_read_config(input)?;
    let hashes = ConfigHashes::new(&main, read.as_deref());
    let mut files: BTreeMap<String, String> = [
        (names::CONFIG_FILE.to_string(), main),
        (
            names::RUNTIME_CONFIG_FILE.to_string(),
            render_text(
                "runtime-config.yaml.tera",
                &json!({"overrides": runtime_overrides(stack, eff)}),
            )?,
        ),
    ]
    .into();
    if let Some(read) = read {
        files.insert(names::CONFIG_READ_FILE.to_string(), read);
    }
    let ctx = json!({"stack": stack_ctx(stack), "name": names::config_map_name(name), "labels": common_labels(name), "files": files});
    Ok((document("configmap.yaml.tera", "ConfigMap", &ctx)?, hashes))
}

/// Per tenant, its limits (`spec.limits.tenants`) and its Alertmanager
/// (`RulerConfig.spec.overrides`).
fn runtime_overrides(stack: &LokiStack, eff: &EffectiveStack) -> Value {
    let mut overrides = limits::tenant_overrides(stack.spec.limits.as_ref());
    let ruler = eff.component(Component::Ruler).is_some();
    for (tenant, am) in eff.ruler.tenant_overrides.iter().filter(|_| ruler) {
        if let Some(map) = overrides.as_object_mut() {
            let entry = map.entry(tenant.clone()).or_insert_with(|| json!({}));
            if let Some(e) = entry.as_object_mut() {
                e.insert("ruler_alertmanager_config".into(), am.clone());
            }
        }
    }
    overrides
}

/// The headless Service through which ring members find each other; it publishes pods
/// before they are Ready, since they must join the ring to become Ready.
fn gossip_service(stack: &LokiStack, name: &str) -> Result<Document, RenderError> {
    let selector: BTreeMap<String, String> = [
        (names::LABEL_INSTANCE.to_string(), name.to_string()),
        (names::LABEL_GOSSIP.to_string(), "true".to_string()),
    ]
    .into();
    service(
        stack,
        names::gossip_service_name(name),
        common_labels(name),
        selector,
        Reach {
            port: (names::PORT_NAME_GOSSIP, names::PORT_GOSSIP),
            headless: true,
            publish_not_ready: true,
            zone_local: None,
        },
    )
}

/// A component's HTTP and gRPC Services, its workload and its PodDisruptionBudget.
fn component_documents(
    stack: &LokiStack,
    name: &str,
    eff: &EffectiveStack,
    c: &EffectiveComponent,
    shared: &Shared<'_>,
) -> Result<Vec<Document>, RenderError> {
    let comp = c.component;
    let labels = component_labels(name, comp);
    let http = (names::PORT_NAME_HTTP, names::PORT_HTTP);
    let grpc = (names::PORT_NAME_GRPC, names::PORT_GRPC);
    let max_unavailable = match comp {
        Component::Ingester => eff.ingester_disruptions.max(1),
        _ => 1,
    };
    let pdb_ctx = json!({"stack": stack_ctx(stack), "name": comp.workload_name(name), "labels": labels, "selector": labels, "max_unavailable": max_unavailable});
    // Clients dial these two through their ClusterIP: kube-proxy can keep a client's
    // pushes and queries in its zone. The gRPC Services are headless (clients resolve
    // every pod and pick themselves), and ring members dial each other by pod address,
    // so nothing asked there would change a route.
    let entry = matches!(comp, Component::Distributor | Component::QueryFrontend);
    let zone_local =
        (entry && eff.zone_local_services).then_some(shared.settings.traffic_distribution);
    Ok(vec![
        service(
            stack,
            comp.http_service_name(name),
            labels.clone(),
            labels.clone(),
            Reach {
                port: http,
                headless: false,
                publish_not_ready: false,
                zone_local,
            },
        )?,
        service(
            stack,
            comp.grpc_service_name(name),
            labels.clone(),
            labels.clone(),
            Reach {
                port: grpc,
                headless: true,
                publish_not_ready: false,
                zone_local: None,
            },
        )?,
        workload(stack, name, eff, c, shared)?,
        document("pdb.yaml.tera", "PodDisruptionBudget", &pdb_ctx)?,
    ])
}

/// Serialises objects as one multi-document YAML stream (`kubectl apply -f -` accepts it).
pub fn to_yaml_stream(children: &[Child]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for c in children {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(
            &c.to_json()
                .map_err(<serde_yaml_ng::Error as serde::ser::Error>::custom)?,
        )?);
    }
    Ok(out)
}
