//! The `LokiStack` API (`loki.grafana.com/v1`), compatible with the Go Loki Operator for
//! the fields this operator supports.
//!
//! Doc comments become the CRD's field descriptions. Static rules live here as OpenAPI
//! constraints and CEL rules; `checks/validate.rs` checks the same rules again in the
//! reconciler and in `render`, because a stack stored before a rule existed never met it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodAntiAffinity, Toleration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A qualified label name: an optional DNS-subdomain prefix and `/`, then a name of at most
/// 63 characters. The prefix length (253) is checked by the reconciler and by `maxLength`.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// 253 for the prefix, 1 for the slash, 63 for the name.
pub const QUALIFIED_NAME_MAX_LEN: usize = 317;
pub const MAX_ZONE_ENTRIES: usize = 3;
/// More copies than this are a typo, not a plan (every copy is a full ingester write).
pub const MAX_REPLICATION_FACTOR: i32 = 15;
/// Per component; far above any real stack, low enough that a typo is caught.
pub const MAX_REPLICAS: i32 = 1000;
pub const MAX_SKEW: i32 = 100;
/// `spec.replication.zoneOutage.recoverAfter`: a whole number of seconds, minutes or
/// hours (up to six digits, no leading zero), at least [`RECOVER_AFTER_FLOOR_SECS`]:
/// `300s` and up, `5m` and up, `1h` and up. A pattern, so every server refuses less.
pub const RECOVER_AFTER_PATTERN: &str =
    r"^([1-9][0-9]{0,5}h|([5-9]|[1-9][0-9]{1,5})m|([3-9][0-9]{2}|[1-9][0-9]{3,5})s)$";
/// The shortest `recoverAfter`: what Kubernetes itself waits before it evicts the pods of
/// an unreachable node (the default `tolerationSeconds` of its NoExecute taints). A node
/// NotReady for less is most often a restarting kubelet or a short partition, which
/// still runs its pods.
pub const RECOVER_AFTER_FLOOR_SECS: u64 = 300;

pub const RULE_REPLICATION_EXCLUSIVE: &str =
    "!(has(self.replication) && has(self.replicationFactor))";
pub const RULE_REPLICATION_EXCLUSIVE_MSG: &str =
    "set replication.factor or the deprecated replicationFactor, not both";
pub const RULE_UNIQUE_KEYS: &str =
    "self.all(z, self.filter(y, y.topologyKey == z.topologyKey).size() == 1)";
pub const RULE_UNIQUE_KEYS_MSG: &str = "each topologyKey may appear only once in zones";
pub const RULE_KEY_PREFIX: &str = "self.topologyKey.matches('^([^/]{1,253}/)?[^/]+$')";
pub const RULE_KEY_PREFIX_MSG: &str =
    "the prefix of topologyKey (before the /) may have at most 253 characters";
pub const RULE_TLS_S3: &str = "!has(self.tls) || self.secret.type == 's3'";
pub const RULE_TLS_S3_MSG: &str =
    "tls (a custom CA bundle) is supported for storage type s3 only: remove it";
/// Loki runs with `-config.expand-env=true`: a `$` in a string the operator writes into
/// its configuration would be expanded from the Loki pod's environment, which holds the
/// object store's credentials. So no string of the spec that reaches Loki's
/// configuration may hold one (`render/limits.rs` writes these two). Selectors are
/// refused at admission by a pattern, which every server enforces (a CEL rule over
/// unbounded maps of unbounded lists exceeds the CEL cost budget); tenant names, map
/// keys that a CRD schema cannot constrain, by the reconciler (`checks/validate.rs`).
pub const NO_DOLLAR_PATTERN: &str = r"^[^$]*$";
/// A namespace's name: a DNS-1123 label.
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// The characters Loki takes in a tenant ID (at most 150 of them, and never `.` or `..`).
/// The ID is also a directory of the ruler's rule store, so no `/` may pass.
pub const TENANT_ID_PATTERN: &str = r"^[a-zA-Z0-9!._*'()-]+$";
pub const TENANT_ID_MAX_LEN: usize = 150;
pub const SELECTOR_NO_DOLLAR_MSG: &str =
    "a stream selector may not contain $: Loki expands $ in its configuration from its environment (-config.expand-env), where the object store credentials are; remove it (LogQL regular expressions are anchored already)";
pub const TENANT_NO_DOLLAR_MSG: &str =
    "a tenant name may not contain $: Loki expands $ in its configuration from its environment (-config.expand-env), where the object store credentials are; rename the tenant";
pub const BLOCKED_NO_DOLLAR_MSG: &str =
    "a blocked query pattern may not contain $: Loki expands $ in its configuration from its environment (-config.expand-env), where the object store credentials are; remove it (a regular expression can end with \\z instead)";
pub const OTLP_NO_DOLLAR_MSG: &str =
    "an OTLP attribute name may not contain $: Loki expands $ in its configuration from its environment (-config.expand-env), where the object store credentials are; remove it (these regular expressions are anchored already)";
pub const OTLP_DROP_STREAM_LABEL_MSG: &str =
    "can not drop an OTLP attribute also listed as a stream label (here or in spec.limits.global.otlp.streamLabels); remove it from one of the two lists";
pub const RULE_IPV6_ADDR_TYPE: &str =
    "!(has(self.enableIPv6) && self.enableIPv6 && has(self.instanceAddrType) && self.instanceAddrType == 'default')";
pub const RULE_IPV6_ADDR_TYPE_MSG: &str =
    "instanceAddrType \"default\" cannot be used with enableIPv6 at the same time: IPv6 advertises the pod IP; set podIP or leave instanceAddrType unset";
/// The stack's name is a DNS-1035 label because its Services are named after it, and a
/// Service name must be one; Kubernetes admits any DNS subdomain as a custom resource's
/// name (`1stack`, `my.stack`), whose Services it would then refuse after the pods exist.
pub const RULE_NAME_DNS_LABEL: &str = "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";
pub const RULE_NAME_DNS_LABEL_MSG: &str =
    "a LokiStack name must start with a lowercase letter and hold only lowercase letters, digits and '-', ending with a letter or digit (a DNS-1035 label), because its Services are named after it: recreate the stack under such a name";
pub const RULE_NAME_LENGTH: &str = "self.metadata.name.size() <= 38";
pub const RULE_NAME_LENGTH_MSG: &str =
    "a LokiStack name may have at most 38 characters, so that every object it creates has a valid name";

/// A field of the Go Loki Operator's LokiStack that this operator accepts and stores
/// unchanged but does not act on. Declaring it (rather than leaving it out of the schema)
/// is what makes replacing the Go operator's CRD with this one lose nothing: the API
/// server prunes undeclared fields. A stack that sets one gets a Warning condition naming
/// it (`model/go_compat.rs`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(transparent)]
pub struct KeptObject(pub serde_json::Value);

impl JsonSchema for KeptObject {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KeptObject".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// The CRD. kube-derive leaves `metadata` out of the root schema; it is declared here with
/// its name alone (the one field Kubernetes lets a CRD describe there), because a CEL
/// rule's `fieldPath` must point into the schema: without it, current servers reject a
/// long name without naming `metadata.name`.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = LokiStack::crd();
    let string = JSONSchemaProps {
        type_: Some("string".into()),
        ..JSONSchemaProps::default()
    };
    let metadata = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(BTreeMap::from([("name".to_string(), string)])),
        ..JSONSchemaProps::default()
    };
    for version in &mut crd.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(root) = root {
            bound_kubernetes_integers(root);
            if let Some(properties) = root.properties.as_mut() {
                properties.insert("metadata".to_string(), metadata.clone());
            }
        }
    }
    crd
}

/// The bounds of the integers of Kubernetes' own types the spec embeds (their schemas
/// come from k8s-openapi, which has none), so that admission refuses what the decoder
/// would: a weighted affinity term's weight is 1 to 100, as the API server checks it in a
/// pod; a toleration's seconds are held to what a JSON number holds exactly (2^53 - 1
/// either way), which no real toleration nears.
fn bound_kubernetes_integers(node: &mut JSONSchemaProps) {
    const EXACT: f64 = 9_007_199_254_740_991.0;
    for (name, child) in node.properties.iter_mut().flatten() {
        if child.type_.as_deref() == Some("integer") {
            let bounds = match name.as_str() {
                "weight" => Some((1.0, 100.0)),
                "tolerationSeconds" => Some((-EXACT, EXACT)),
                _ => None,
            };
            if let Some((min, max)) = bounds {
                child.minimum.get_or_insert(min);
                child.maximum.get_or_insert(max);
            }
        }
        bound_kubernetes_integers(child);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = node.items.as_mut() {
        bound_kubernetes_integers(items);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(more)) = node.additional_properties.as_mut() {
        bound_kubernetes_integers(more);
    }
}

/// LokiStack is a Loki deployment: its size, its object storage and how it replicates.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "loki.grafana.com",
    version = "v1",
    kind = "LokiStack",
    plural = "lokistacks",
    doc = "LokiStack is a Grafana Loki deployment whose log streams can be replicated across availability zones.",
    namespaced,
    // `kubectl get logging` (or `loki`) lists every kind of the operator.
    category = "logging",
    category = "loki",
    status = "LokiStackStatus",
    printcolumn = r#"{"name":"Size","type":"string","jsonPath":".spec.size"}"#,
    printcolumn = r#"{"name":"Replication factor","type":"integer","jsonPath":".status.replication.factor"}"#,
    printcolumn = r#"{"name":"Zones","type":"string","jsonPath":".status.replication.zones"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.replication.zonesAvailable"}"#,
    printcolumn = r#"{"name":"Tolerated","type":"integer","jsonPath":".status.replication.zoneFailuresTolerated"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new(RULE_NAME_LENGTH).message(RULE_NAME_LENGTH_MSG).field_path(".metadata.name"),
    validation = Rule::new(RULE_NAME_DNS_LABEL).message(RULE_NAME_DNS_LABEL_MSG).field_path(".metadata.name")
)]
#[x_kube(validation = Rule::new(RULE_REPLICATION_EXCLUSIVE).message(RULE_REPLICATION_EXCLUSIVE_MSG).field_path(".replicationFactor"))]
#[serde(rename_all = "camelCase")]
pub struct LokiStackSpec {
    /// The t-shirt size of the deployment: replicas, resources and volume sizes per component.
    pub size: LokiStackSize,

    /// Object storage for chunks and index.
    pub storage: ObjectStorageSpec,

    /// StorageClass of the components' PersistentVolumeClaims; the cluster default when unset.
    /// For zone-aware stacks use a class with `volumeBindingMode: WaitForFirstConsumer`, so
    /// that each volume is created in the zone its pod was scheduled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// How log streams are replicated, and across which failure domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationSpec>,

    /// Deprecated: use replication.factor. Copied into replication.factor when that is unset;
    /// setting both is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REPLICATION_FACTOR))]
    pub replication_factor: Option<i32>,

    /// The ruler, which evaluates recording and alerting rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<RulesSpec>,

    /// Per-component overrides of replicas, node selector and tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<LokiTemplateSpec>,

    /// Ingestion and query limits and retention, for all tenants and per tenant (the Go
    /// Loki Operator's names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,

    /// Managed: the operator reconciles the stack. Unmanaged: it writes nothing for it.
    #[serde(default)]
    pub management_state: ManagementState,

    /// Go Loki Operator field (tenancy through its gateway): kept, not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<KeptObject>,

    /// Go Loki Operator field (cluster-wide proxy settings): kept, not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<KeptObject>,

    /// How the ring members (memberlist) advertise themselves to each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_ring: Option<HashRingSpec>,

    /// NetworkPolicies around the stack's pods. Unset: none (the Go operator's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policies: Option<NetworkPoliciesSpec>,
}

/// Which NetworkPolicies the operator creates for a stack.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPoliciesSpec {
    /// `None`: no NetworkPolicy (those the operator created are removed).
    /// `RestrictIngressEgress`: the stack's pods accept only each other, clients on the
    /// push and query paths (distributor, query frontend, ruler), and the operator (an
    /// ingester leaving the ring); they reach only each other, DNS, object storage and,
    /// from the ruler, the Alertmanagers and remote-write endpoint of its RulerConfig.
    pub rule_set: NetworkPolicyRuleSet,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkPolicyRuleSet {
    None,
    RestrictIngressEgress,
}

/// The t-shirt sizes of the Go Loki Operator.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LokiStackSize {
    #[serde(rename = "1x.demo")]
    Demo,
    #[serde(rename = "1x.pico")]
    Pico,
    #[serde(rename = "1x.extra-small")]
    ExtraSmall,
    #[serde(rename = "1x.small")]
    Small,
    #[serde(rename = "1x.medium")]
    Medium,
}

impl LokiStackSize {
    pub const ALL: [LokiStackSize; 5] = [
        LokiStackSize::Demo,
        LokiStackSize::Pico,
        LokiStackSize::ExtraSmall,
        LokiStackSize::Small,
        LokiStackSize::Medium,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LokiStackSize::Demo => "1x.demo",
            LokiStackSize::Pico => "1x.pico",
            LokiStackSize::ExtraSmall => "1x.extra-small",
            LokiStackSize::Small => "1x.small",
            LokiStackSize::Medium => "1x.medium",
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ManagementState {
    #[default]
    Managed,
    Unmanaged,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RULE_TLS_S3).message(RULE_TLS_S3_MSG).field_path(".tls"))]
pub struct ObjectStorageSpec {
    /// Schema periods of the index. Defaults to v13 from 2024-04-02.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A list map keyed by date: every server rejects two periods that start the same day.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["effectiveDate"]))]
    pub schemas: Vec<ObjectStorageSchema>,

    /// The Secret, in the stack's namespace, that holds the object storage credentials.
    pub secret: ObjectStorageSecretSpec,

    /// A CA bundle to verify the object store's certificate with, for stores behind a
    /// private CA (on-premises S3 such as MinIO or Ceph RGW). Storage type s3 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ObjectStorageTlsSpec>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStorageTlsSpec {
    /// The ConfigMap, in the stack's namespace, that holds the CA bundle.
    #[serde(rename = "caName")]
    #[schemars(length(min = 1, max = 253))]
    pub ca_name: String,
    /// The key of the CA bundle in that ConfigMap. Defaults to `service-ca.crt`.
    #[serde(rename = "caKey", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub ca_key: Option<String>,
}

impl ObjectStorageTlsSpec {
    pub const DEFAULT_CA_KEY: &'static str = "service-ca.crt";

    pub fn ca_key(&self) -> &str {
        self.ca_key.as_deref().unwrap_or(Self::DEFAULT_CA_KEY)
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStorageSchema {
    /// The schema version of this period.
    pub version: ObjectStorageSchemaVersion,
    /// The first day (UTC, YYYY-MM-DD) this schema applies to.
    // The pattern is the Go Loki Operator's; the format makes the API server check the
    // calendar too (2024-02-31 is no day), as the reconciler does.
    #[schemars(regex(pattern = r"^([0-9]{4,})([-]([0-9]{2})){2}$"), extend("format" = "date"))]
    pub effective_date: String,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStorageSchemaVersion {
    V11,
    V12,
    V13,
}

impl ObjectStorageSchemaVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectStorageSchemaVersion::V11 => "v11",
            ObjectStorageSchemaVersion::V12 => "v12",
            ObjectStorageSchemaVersion::V13 => "v13",
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStorageSecretSpec {
    /// The kind of object storage; it decides which keys the Secret must hold.
    #[serde(rename = "type")]
    pub type_: ObjectStorageSecretType,
    /// The name of the Secret in the stack's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Go Loki Operator field. This operator reads static credentials from the Secret;
    /// `token` and `token-cco` (short-lived cloud tokens) are kept but not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "credential_mode_schema")]
    pub credential_mode: Option<CredentialMode>,
}

/// Without this, an optional enum's schema lists `null` among its values, which is not a
/// value the field takes.
fn credential_mode_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["static", "token", "token-cco"],
    })
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialMode {
    #[serde(rename = "static")]
    Static,
    #[serde(rename = "token")]
    Token,
    #[serde(rename = "token-cco")]
    TokenCco,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStorageSecretType {
    S3,
    Gcs,
    Azure,
    Swift,
    Alibabacloud,
}

impl ObjectStorageSecretType {
    pub const ALL: [ObjectStorageSecretType; 5] = [
        ObjectStorageSecretType::S3,
        ObjectStorageSecretType::Gcs,
        ObjectStorageSecretType::Azure,
        ObjectStorageSecretType::Swift,
        ObjectStorageSecretType::Alibabacloud,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ObjectStorageSecretType::S3 => "s3",
            ObjectStorageSecretType::Gcs => "gcs",
            ObjectStorageSecretType::Azure => "azure",
            ObjectStorageSecretType::Swift => "swift",
            ObjectStorageSecretType::Alibabacloud => "alibabacloud",
        }
    }
}

/// Replication of log streams.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// How many ingesters receive a copy of each stream. Defaults to the size's factor.
    /// With zones, each copy lands in a different zone, so the cluster needs at least this
    /// many zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REPLICATION_FACTOR))]
    pub factor: Option<i32>,

    /// Node labels that define the failure domains. With zones set, every component is
    /// spread across them and Loki places at most one copy of a stream per zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    // A list map keyed by topologyKey, so every server (CEL or not) rejects a key given
    // twice, naming the entry; the CEL rule says why in words.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["topologyKey"]))]
    #[x_kube(validation = Rule::new(RULE_UNIQUE_KEYS).message(RULE_UNIQUE_KEYS_MSG))]
    pub zones: Vec<ZoneSpec>,

    /// What the operator may do by itself when a zone is lost. Off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_outage: Option<ZoneOutageSpec>,

    /// With zones, ring members (the StatefulSets) are rolled zone by zone by the
    /// operator: all outdated pods of one zone are restarted at once, and the next zone
    /// starts once they are Ready again. This caps how many pods of one zone are
    /// restarted at the same time. Unset: the whole zone at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_REPLICAS))]
    pub max_unavailable_per_zone: Option<i32>,
}

/// Opt-in recovery from a zone outage.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ZoneOutageSpec {
    /// Once a zone is unavailable and the node of a pod of the compactor, index gateway
    /// or ruler there has been lost (not Ready, unreachable or out of service) or gone
    /// this long (for example `15m`), the pod is moved to an available zone: the
    /// operator deletes its claims in the lost zone, force-deletes the pod and its
    /// StatefulSet recreates it elsewhere. A cordoned or draining zone moves nothing. Their state lives in object storage;
    /// only a local cache (for the ruler, results not yet written) is lost. Ingesters are
    /// never moved, nor a component's only pod whose node is not fenced (out of service,
    /// or its Node deleted): its replacement could run beside it. At least `5m` (`300s`):
    /// a node is NotReady that briefly after a kubelet restart or a short partition.
    /// Needs the optional zone-outage-recovery RBAC component; without it the Warning
    /// condition lists the commands to run. Unset: nothing is moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = RECOVER_AFTER_PATTERN))]
    pub recover_after: Option<String>,
}

/// One failure-domain label.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RULE_KEY_PREFIX).message(RULE_KEY_PREFIX_MSG).field_path(".topologyKey"))]
pub struct ZoneSpec {
    /// The node label whose values are the failure domains, for example
    /// `topology.kubernetes.io/zone`.
    #[schemars(length(min = 1, max = 317), regex(pattern = QUALIFIED_NAME_PATTERN))]
    pub topology_key: String,

    /// The most pods of one component that one domain may hold above another.
    #[serde(default = "default_max_skew")]
    #[schemars(range(min = 1, max = MAX_SKEW))]
    pub max_skew: i32,
}

fn default_max_skew() -> i32 {
    1
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RulesSpec {
    /// Deploy the ruler.
    #[serde(default)]
    pub enabled: bool,
    /// The AlertingRules and RecordingRules the ruler loads, by their labels (`{}`:
    /// all). Unset: no rule object is loaded, and the ruler keeps its rules in the object
    /// store, written through Loki's rules API; set: the ruler reads the rule files of
    /// the objects it picks, and the rules API is read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The namespaces, besides the stack's own, whose rules are picked, by their labels
    /// (`{}`: every namespace). Unset: the stack's namespace only. In the namespaced
    /// mode, only the watched namespaces are searched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// The tenants whose logs the rules of other namespaces than the stack's may read.
    /// A rule names its tenant itself (`spec.tenantID`): without this, whoever may write
    /// a rule in a namespace `namespaceSelector` picks would evaluate LogQL over any
    /// tenant's logs and carry the results out in alerts and recorded series. Rules in
    /// the stack's own namespace may name any tenant; a rule of another namespace whose
    /// tenant no entry grants it is not loaded, and its status and the stack's say so.
    /// Not in the Go Loki Operator, whose gateway decides tenancy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub allowed_tenants: Vec<RuleTenantGrant>,
}

/// The rules of these namespaces may name these tenants.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuleTenantGrant {
    /// Namespaces, by name.
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN)))]
    pub namespaces: Vec<String>,
    /// Tenant IDs, as rules name them in `spec.tenantID`.
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = TENANT_ID_MAX_LEN), regex(pattern = TENANT_ID_PATTERN)))]
    pub tenants: Vec<String>,
}

/// The hash ring: Loki's ring members find each other over memberlist.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HashRingSpec {
    /// The ring's store; memberlist is the only one.
    #[serde(rename = "type", default)]
    pub type_: HashRingType,
    /// Memberlist settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memberlist: Option<MemberListSpec>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HashRingType {
    #[default]
    #[serde(rename = "memberlist")]
    Memberlist,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RULE_IPV6_ADDR_TYPE).message(RULE_IPV6_ADDR_TYPE_MSG).field_path(".instanceAddrType"))]
pub struct MemberListSpec {
    /// The address a ring member advertises: `default`, the first address of a private
    /// network interface (RFC 1918 or RFC 6598) of the pod, which is Loki's own choice;
    /// or `podIP`, the pod's IP from the cluster's pod network, for pod networks without
    /// private addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "instance_addr_type_schema")]
    pub instance_addr_type: Option<InstanceAddrType>,
    /// Advertise IPv6 addresses (single-stack IPv6 or dual-stack clusters). It implies
    /// the pod IP as the address, so instanceAddrType may not be `default` with it.
    #[serde(
        rename = "enableIPv6",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_ipv6: Option<bool>,
}

impl MemberListSpec {
    pub fn ipv6(&self) -> bool {
        self.enable_ipv6.unwrap_or(false)
    }

    /// Whether ring members advertise their pod IP rather than Loki's own choice.
    pub fn advertise_pod_ip(&self) -> bool {
        self.ipv6() || self.instance_addr_type == Some(InstanceAddrType::PodIp)
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceAddrType {
    #[serde(rename = "default")]
    Default,
    #[serde(rename = "podIP")]
    PodIp,
}

/// As `credential_mode_schema`: no `null` among an optional enum's values.
fn instance_addr_type_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["default", "podIP"],
    })
}

/// Limits for every tenant, and per tenant on top of those.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Limits of every tenant (Loki's limits_config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<LimitsTemplateSpec>,
    /// Limits of named tenants, changed without restarting any pod (Loki's runtime
    /// overrides). A tenant name may not contain `$`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, LimitsTemplateSpec>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LimitsTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingestion: Option<IngestionLimitSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<QueryLimitSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionLimitSpec>,
    /// Which OpenTelemetry (OTLP) attributes become stream labels and which are
    /// dropped; every other attribute is stored as structured metadata. Setting it
    /// anywhere (for every tenant or for one) turns off Loki's default list of resource
    /// attributes that become stream labels, for every tenant, as the Go Loki Operator
    /// does. A tenant's setting adds to the one for every tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpSpec>,
}

/// OTLP attributes, named as OpenTelemetry names them (`k8s.namespace.name`), not as
/// Loki turns them into labels.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OtlpSpec {
    /// The resource attributes that become stream labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_labels: Option<OtlpStreamLabelSpec>,
    /// The attributes dropped before the entry is stored. An attribute that is also a
    /// stream label may not be dropped by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<OtlpMetadataSpec>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OtlpStreamLabelSpec {
    /// Resource attributes that become stream labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_attributes: Vec<OtlpAttributeReference>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OtlpMetadataSpec {
    /// Resource attributes to drop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_attributes: Vec<OtlpAttributeReference>,
    /// Scope attributes to drop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope_attributes: Vec<OtlpAttributeReference>,
    /// Log record attributes to drop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_attributes: Vec<OtlpAttributeReference>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OtlpAttributeReference {
    /// An attribute's name or, with `regex`, a regular expression matching whole names
    /// (anchored; Prometheus syntax). It may not contain `$`, which Loki would expand
    /// from its environment (where the storage credentials are). A regular expression
    /// that does not compile stops Loki from loading its configuration.
    #[schemars(regex(pattern = NO_DOLLAR_PATTERN))]
    pub name: String,
    /// Treat `name` as a regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<bool>,
}

impl OtlpAttributeReference {
    pub fn is_regex(&self) -> bool {
        self.regex.unwrap_or(false)
    }
}

impl BlockedQuerySpec {
    pub fn is_regex(&self) -> bool {
        self.regex.unwrap_or(false)
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngestionLimitSpec {
    /// Per-tenant ingestion rate, in MB per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub ingestion_rate: Option<i32>,
    /// Per-tenant burst above the rate, in MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub ingestion_burst_size: Option<i32>,
    /// Longest accepted log line, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 104857600))]
    pub max_line_size: Option<i32>,
    /// Active streams per tenant, across the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub max_global_streams_per_tenant: Option<i32>,
    /// Longest label name, in characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_label_name_length: Option<i32>,
    /// Longest label value, in characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_label_value_length: Option<i32>,
    /// Most label names one stream may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_label_names_per_series: Option<i32>,
    /// Rate one stream may push, in MB per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub per_stream_rate_limit: Option<i32>,
    /// Burst one stream may push above its rate, in MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub per_stream_rate_limit_burst: Option<i32>,
    /// Rate per stream above which Loki shards a stream, in MB per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub per_stream_desired_rate: Option<i32>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct QueryLimitSpec {
    /// Most log lines one query returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub max_entries_limit_per_query: Option<i32>,
    /// Most series one metric query returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub max_query_series: Option<i32>,
    /// How long a query may run, as a Prometheus duration (e.g. 3m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d|w|y))+$"))]
    pub query_timeout: Option<String>,
    /// Most chunks one query may fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub max_chunks_per_query: Option<i32>,
    /// Most series an index query (labels, series, volume) may touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub cardinality_limit: Option<i32>,
    /// Most series a log-volume response aggregates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub max_volume_series: Option<i32>,
    /// Queries Loki refuses to run (Loki's blocked_queries): by hash, exact text or
    /// regular expression, optionally only of some query types. The Go Loki Operator
    /// offers it per tenant; here it may also be set for every tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Vec<BlockedQuerySpec>>,
}

/// A query to refuse. Loki checks, in order: a hash, when set, must equal the query's
/// hash; otherwise the pattern must equal the query (surrounding spaces aside) or, with
/// `regex`, match anywhere in it. A rule with neither hash nor pattern refuses every
/// query of its types.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct BlockedQuerySpec {
    /// The 32-bit FNV-1 hash of the query string, as Loki logs it. The API stores it as a
    /// signed 32-bit integer (the Go Loki Operator's type): a hash above 2147483647 is
    /// written as that value minus 4294967296, and reaches Loki as the hash itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2147483648, max = 2147483647))]
    pub hash: Option<i32>,
    /// The query's text, or with `regex` a regular expression (Go's RE2 syntax, matched
    /// anywhere in the query: use `\z` to anchor at its end). It may not contain `$`,
    /// which Loki would expand from its environment (where the storage credentials are).
    /// Loki ignores (and logs) a regular expression that does not compile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = NO_DOLLAR_PATTERN))]
    pub pattern: Option<String>,
    /// Whether the pattern is a regular expression; otherwise it must equal the query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<bool>,
    /// The query types the rule applies to (filter, limited, metric); all when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<BlockedQueryType>,
}

/// The kinds of query Loki tells apart when it blocks one.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BlockedQueryType {
    /// A log query with a line filter.
    Filter,
    /// A log query without a filter and without aggregation.
    Limited,
    /// A metric query (with an aggregation).
    Metric,
}

impl BlockedQueryType {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockedQueryType::Filter => "filter",
            BlockedQueryType::Limited => "limited",
            BlockedQueryType::Metric => "metric",
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetentionLimitSpec {
    /// Days log lines are kept; 0 keeps them forever.
    #[schemars(range(min = 0, max = 36500))]
    pub days: i32,
    /// Other retention for streams matching a selector; the highest priority wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<RetentionStreamSpec>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetentionStreamSpec {
    #[schemars(range(min = 0, max = 36500))]
    pub days: i32,
    #[serde(default)]
    #[schemars(range(min = 0, max = 2147483647))]
    pub priority: i32,
    /// A LogQL stream selector, e.g. {namespace="dev"}. It may not contain `$`, which
    /// Loki would expand from its environment (where the storage credentials are).
    #[schemars(length(min = 3), regex(pattern = NO_DOLLAR_PATTERN))]
    pub selector: String,
}

/// Per-component overrides.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LokiTemplateSpec {
    /// The compactor (always one replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compactor: Option<LokiComponentSpec>,
    /// The distributors, which receive pushes and forward each stream to its ingesters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributor: Option<LokiComponentSpec>,
    /// The ingesters, which hold the copies of each stream; their node selector and tolerations decide which nodes count as zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingester: Option<LokiComponentSpec>,
    /// The queriers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub querier: Option<LokiComponentSpec>,
    /// The query frontends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_frontend: Option<LokiComponentSpec>,
    /// The index gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_gateway: Option<LokiComponentSpec>,
    /// The ruler, when spec.rules.enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ruler: Option<LokiComponentSpec>,
    /// Go Loki Operator field (its multi-tenancy gateway): kept, not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<KeptObject>,
    /// Go Loki Operator field (resource limits equal to requests): kept, not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_requests_as_limits: Option<bool>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LokiComponentSpec {
    /// Replicas of this component; the size's default when unset. The compactor always
    /// runs one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// Node labels the component's pods must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the component's pods tolerate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Pod anti-affinity of the component's pods, as in a pod spec (for example, keep
    /// two ingesters of one stack off one node). Zone-aware stacks keep their topology
    /// spread constraints beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
}

/// What the operator observed and did.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LokiStackStatus {
    /// Ready, Pending, Failed, Degraded and Warning, each with a reason and a message that
    /// says what to change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Pod names by phase (Failed, Pending, Running, Ready), per component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<LokiStackComponentStatus>,
    /// The replication the cluster can give this stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationStatus>,
    /// The generation of the spec that was last applied. It stays behind while the zone
    /// check holds a new spec back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The zone-by-zone rollout of the ring members of a zone-aware stack, while one is
    /// under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// Where turning zones on or off for a running stack stands: the write path
    /// (distributors, ingesters) and the read path (queriers, rulers) switch in turn, so
    /// that no query misses data meanwhile. Absent for a stack without zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_awareness: Option<ZoneAwarenessStatus>,
}

/// Zone-aware replication of a stack, stage by stage. Queriers read zone-aware only once
/// every stream in the ingesters was written zone-aware: a zone-aware querier stops
/// asking a zone's ingesters once the other zones answered, and a stream written before
/// the switch may have had every copy in that zone.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ZoneAwarenessStatus {
    pub stage: ZoneAwarenessStage,
    /// When the queriers and rulers turn zone-aware (stage Enabling): once the write
    /// path runs zone-aware, after the window in which queriers ask ingesters for data
    /// (`querier.query_ingesters_within`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_path_at: Option<Time>,
    /// The zones the write path is spread over. Kept here so that turning zones off
    /// keeps them on the write path until the read path has left them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<RecordedZone>,
    /// What the current stage waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A zone of `spec.replication.zones`, as recorded in the status: the spec checked it
/// already, so it carries none of the spec's validation rules (which would cost the API
/// server a rule evaluation on every status write).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedZone {
    /// The node label whose values are the failure domains.
    pub topology_key: String,
    /// The most pods of one component that one domain may hold above another.
    pub max_skew: i32,
}

impl From<&ZoneSpec> for RecordedZone {
    fn from(z: &ZoneSpec) -> Self {
        RecordedZone {
            topology_key: z.topology_key.clone(),
            max_skew: z.max_skew,
        }
    }
}

impl From<&RecordedZone> for ZoneSpec {
    fn from(z: &RecordedZone) -> Self {
        ZoneSpec {
            topology_key: z.topology_key.clone(),
            max_skew: z.max_skew,
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ZoneAwarenessStage {
    /// The write path is zone-aware (or turning so); the read path is not yet.
    Enabling,
    /// Both paths are zone-aware.
    #[default]
    Enabled,
    /// Zones are being turned off: the read path has left zone awareness (or is leaving
    /// it); the write path follows once it has.
    Disabling,
}

impl ZoneAwarenessStage {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneAwarenessStage::Enabling => "Enabling",
            ZoneAwarenessStage::Enabled => "Enabled",
            ZoneAwarenessStage::Disabling => "Disabling",
        }
    }
}

/// A zone-by-zone rollout: the operator restarts the outdated pods of one zone at a
/// time, and starts the next zone once every pod of the previous one is updated and Ready.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The zone whose pods are being restarted, or were restarted and are not all Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Per zone, in the order they are rolled: pods at their StatefulSet's update
    /// revision, and all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneRolloutStatus>,
    /// What the rollout waits for before it restarts more pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ZoneRolloutStatus {
    pub zone: String,
    pub updated: i32,
    pub total: i32,
}

/// Pod phase (Failed, Pending, Running, Ready) to pod names.
pub type PodStatusMap = BTreeMap<String, Vec<String>>;

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LokiStackComponentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compactor: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributor: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingester: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub querier: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_frontend: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_gateway: Option<PodStatusMap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ruler: Option<PodStatusMap>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    /// The replication factor in effect.
    pub factor: i32,
    /// The zones found on eligible nodes (topology label values joined with `_`).
    #[serde(default)]
    pub zones: Vec<String>,
    /// Copies of a stream that must be written for a push to succeed: floor(factor/2)+1.
    pub write_quorum: i32,
    /// Zones that can be lost while writes still succeed; negative means writes fail even
    /// with every zone up. Unset when the stack is not zone-aware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_failures_tolerated: Option<i32>,
    /// Nodes not counted because they are not Ready, cordoned, tainted, outside the node
    /// selector, or lack a topology label.
    #[serde(default)]
    pub ineligible_nodes: i32,
    /// Zone-aware pods the operator could not give a zone, because their node lacks a
    /// topology label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_without_zone: Vec<String>,
    /// The known zones that are not lost: those with a node that can run pods now, and
    /// those in maintenance (cordoned or draining), whose pods still serve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones_available: Vec<String>,
    /// Whether every stream can still write a quorum of copies: unavailable zones, and
    /// zones in maintenance whose ingesters are not all Ready, count as lost.
    /// Unset when the stack is not zone-aware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_quorum_met: Option<bool>,
    /// Per known zone: its nodes and the stack's ingesters, ready and in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zone_status: Vec<ZoneStatus>,
}

/// One known zone, as the operator sees it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ZoneStatus {
    pub zone: String,
    /// `Available` (a node can run pods now), `Maintenance` (every node that is up is
    /// cordoned or draining: planned work, its pods serve until drained) or
    /// `Unavailable` (every node it has is not Ready, unreachable, out of service, or
    /// gone: an outage). Always set by this version; absent in a status an older one
    /// wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Not `Unavailable`.
    pub available: bool,
    pub nodes_ready: i32,
    pub nodes: i32,
    /// The stack's ingesters that run in this zone (by their zone annotation).
    pub ingesters_ready: i32,
    pub ingesters: i32,
}
