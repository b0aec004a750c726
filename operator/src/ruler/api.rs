//! The ruler's API (`loki.grafana.com/v1`), as the Go Loki Operator serves it:
//! `AlertingRule` and `RecordingRule` (rule groups of one tenant, picked by a stack's
//! `spec.rules.selector` and `namespaceSelector`) and `RulerConfig` (the ruler settings
//! of the stack of the same name and namespace).
//!
//! The schemas keep every field and default of the Go operator's, so objects written for
//! it are read unchanged. What its validating webhooks checked is checked here: durations
//! and tenant IDs by patterns and group names by a list map, which every API server
//! enforces, a few cross-field rules in CEL; and, because an object may predate a rule
//! and CEL cannot parse LogQL, again by the reconciler (`ruler/check.rs`), which names
//! the field in the rule's status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A duration as Prometheus writes it (`1m`, `1h30m`, `500ms`, `0`): the Go operator's
/// pattern, anchored (theirs matches any string and left the check to a webhook).
pub const PROM_DURATION_PATTERN: &str =
    r"^((([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?|0)$";
pub use crate::model::api::{TENANT_ID_MAX_LEN, TENANT_ID_PATTERN};
pub const RULE_TENANT_NOT_DOTS: &str = "self.tenantID != '.' && self.tenantID != '..'";
pub const RULE_TENANT_NOT_DOTS_MSG: &str =
    "tenantID may not be . or .., which Loki refuses as a tenant";
pub const RULE_HEADER_AUTH_EXCLUSIVE: &str =
    "!(has(self.credentials) && has(self.credentialsFile))";
pub const RULE_HEADER_AUTH_EXCLUSIVE_MSG: &str = "set credentials or credentialsFile, not both";

fn default_interval() -> String {
    "1m".into()
}

/// The most alerts or series one rule of a group may be limited to: a rule that needs
/// more is past what one ruler evaluates well. Every integer the API takes has a maximum,
/// so that a stored object always decodes and no setting asks the ruler for the
/// impossible.
pub const MAX_GROUP_LIMIT: i64 = 1_000_000;
/// The most notifications or samples a queue may hold (per shard for remote write):
/// each is held in the ruler's memory.
pub const MAX_QUEUE_CAPACITY: i64 = 1_000_000;
/// The most remote-write shards: each is a connection and a queue of its own.
pub const MAX_SHARDS: i64 = 10_000;
/// The largest modulus of a `hashmod` relabel step.
pub const MAX_MODULUS: i64 = 1_000_000;

/// The status of a rule or ruler configuration: the operator sets `Ready` (loaded by
/// which stacks, or why not) on the objects a stack with rules enabled picks.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// Conditions of the object, with a message that says what to change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Alerting rules of one tenant, evaluated by the ruler of every LokiStack whose
/// `spec.rules` selects them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "loki.grafana.com",
    version = "v1",
    kind = "AlertingRule",
    plural = "alertingrules",
    doc = "AlertingRule is a set of Loki alerting rule groups of one tenant, loaded by the ruler of every LokiStack whose spec.rules selects it.",
    namespaced,
    // `kubectl get logging` (or `loki`) lists every kind of the operator.
    category = "logging",
    category = "loki",
    status = "RuleStatus",
    printcolumn = r#"{"name":"Tenant","type":"string","jsonPath":".spec.tenantID"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(RULE_TENANT_NOT_DOTS).message(RULE_TENANT_NOT_DOTS_MSG).field_path(".tenantID"))]
#[serde(rename_all = "camelCase")]
pub struct AlertingRuleSpec {
    /// The tenant whose logs the rules query, and under which they are evaluated.
    #[serde(rename = "tenantID")]
    #[schemars(length(min = 1, max = TENANT_ID_MAX_LEN), regex(pattern = TENANT_ID_PATTERN))]
    pub tenant_id: String,

    /// Groups of alerting rules; each group's name is unique in the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub groups: Vec<AlertingRuleGroup>,
}

/// A group of alerting rules, evaluated together at one interval.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertingRuleGroup {
    /// Name of the group, unique in the object.
    #[schemars(length(min = 1))]
    pub name: String,

    /// How often the group is evaluated (a Prometheus duration).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub interval: String,

    /// The most alerts a rule of the group may produce; 0 is no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GROUP_LIMIT))]
    pub limit: Option<i32>,

    /// The alerting rules.
    pub rules: Vec<AlertingRuleGroupSpec>,
}

/// One alerting rule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertingRuleGroupSpec {
    /// The name of the alert. Several rules of a group may share it (a warning and a
    /// critical threshold of one alert, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub alert: Option<String>,

    /// The LogQL metric expression to evaluate; every series it returns is a pending or
    /// firing alert.
    pub expr: String,

    /// How long a series must be returned before its alert fires (a Prometheus duration).
    #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub for_: Option<String>,

    /// Annotations to add to each alert; they may use Prometheus templates
    /// (`{{ $labels.namespace }}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Labels to add to each alert.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Recording rules of one tenant, evaluated by the ruler of every LokiStack whose
/// `spec.rules` selects them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "loki.grafana.com",
    version = "v1",
    kind = "RecordingRule",
    plural = "recordingrules",
    doc = "RecordingRule is a set of Loki recording rule groups of one tenant, loaded by the ruler of every LokiStack whose spec.rules selects it.",
    namespaced,
    // `kubectl get logging` (or `loki`) lists every kind of the operator.
    category = "logging",
    category = "loki",
    status = "RuleStatus",
    printcolumn = r#"{"name":"Tenant","type":"string","jsonPath":".spec.tenantID"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(RULE_TENANT_NOT_DOTS).message(RULE_TENANT_NOT_DOTS_MSG).field_path(".tenantID"))]
#[serde(rename_all = "camelCase")]
pub struct RecordingRuleSpec {
    /// The tenant whose logs the rules query, and under which they are evaluated.
    #[serde(rename = "tenantID")]
    #[schemars(length(min = 1, max = TENANT_ID_MAX_LEN), regex(pattern = TENANT_ID_PATTERN))]
    pub tenant_id: String,

    /// Groups of recording rules; each group's name is unique in the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub groups: Vec<RecordingRuleGroup>,
}

/// A group of recording rules, evaluated together at one interval.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordingRuleGroup {
    /// Name of the group, unique in the object.
    #[schemars(length(min = 1))]
    pub name: String,

    /// How often the group is evaluated (a Prometheus duration).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub interval: String,

    /// The most series a rule of the group may produce; 0 is no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_GROUP_LIMIT))]
    pub limit: Option<i32>,

    /// The recording rules.
    pub rules: Vec<RecordingRuleGroupSpec>,
}

/// One recording rule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordingRuleGroupSpec {
    /// The name of the series to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub record: Option<String>,

    /// The LogQL metric expression to evaluate.
    pub expr: String,

    /// Labels to add to each series.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// The ruler settings of the LokiStack of the same name in the same namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "loki.grafana.com",
    version = "v1",
    kind = "RulerConfig",
    plural = "rulerconfigs",
    doc = "RulerConfig holds the ruler settings (evaluation, Alertmanager, remote write) of the LokiStack of the same name and namespace.",
    namespaced,
    // `kubectl get logging` (or `loki`) lists every kind of the operator.
    category = "logging",
    category = "loki",
    status = "RuleStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RulerConfigSpec {
    /// How often rules are evaluated (a Prometheus duration).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub evaluation_interval: String,

    /// How often the ruler looks for changed rule files (a Prometheus duration).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub poll_interval: String,

    /// Where firing alerts are sent.
    #[serde(
        rename = "alertmanager",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub alertmanager: Option<AlertManagerSpec>,

    /// Where recording rules' series are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_write: Option<RemoteWriteSpec>,

    /// Per tenant: an Alertmanager of its own, in place of the one above.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, RulerOverrides>,
}

/// Per-tenant ruler settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RulerOverrides {
    /// The tenant's Alertmanager.
    #[serde(
        rename = "alertmanager",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub alertmanager: Option<AlertManagerSpec>,
}

/// Where and how the ruler sends alerts.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerSpec {
    /// The URL of the alerts' return path (the `generatorURL` of each alert).
    #[serde(
        rename = "externalUrl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_url: Option<String>,

    /// Labels added to every alert.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub external_labels: BTreeMap<String, String>,

    /// Use the Alertmanager v2 API.
    #[serde(rename = "enableV2", default)]
    pub enable_v2: bool,

    /// Alertmanager URLs; each is its own group. Several replicas behind one name are
    /// found with `discovery`.
    pub endpoints: Vec<String>,

    /// DNS discovery of the Alertmanager hosts.
    #[serde(rename = "discovery", default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<AlertManagerDiscoverySpec>,

    /// The queue of notifications to the Alertmanager.
    #[serde(
        rename = "notificationQueue",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub notification_queue: Option<AlertManagerNotificationQueueSpec>,

    /// Relabelling of alerts before they are sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relabel_configs: Vec<RelabelConfig>,

    /// How the ruler connects to the Alertmanager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<AlertManagerClientConfig>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerDiscoverySpec {
    /// Look the hosts up with DNS SRV records.
    #[serde(rename = "enableSRV", default)]
    pub enable_srv: bool,

    /// How often the hosts are looked up again (a Prometheus duration).
    #[serde(default = "default_interval")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub refresh_interval: String,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerNotificationQueueSpec {
    /// Notifications the queue holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_QUEUE_CAPACITY))]
    pub capacity: Option<i32>,
    /// HTTP timeout of a notification (a Prometheus duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// The longest outage after which the `for` state of alerts is restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub for_outage_tolerance: Option<String>,
    /// The least time between an alert and its restored `for` state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub for_grace_period: Option<String>,
    /// The least time before an alert is sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub resend_delay: Option<String>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerClientConfig {
    /// TLS to the Alertmanager (files the ruler pod must have).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<AlertManagerClientTlsConfig>,
    /// An `Authorization` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_auth: Option<AlertManagerClientHeaderAuth>,
    /// HTTP basic authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<AlertManagerClientBasicAuth>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerClientTlsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RULE_HEADER_AUTH_EXCLUSIVE).message(RULE_HEADER_AUTH_EXCLUSIVE_MSG).field_path(".credentials"))]
pub struct AlertManagerClientHeaderAuth {
    /// The authentication scheme (`Bearer`, ...).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The credentials, written into the ruler's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
    /// A file in the ruler pod with the credentials; not with `credentials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<String>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AlertManagerClientBasicAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Written into the ruler's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// Remote write of the recording rules' series.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RemoteWriteSpec {
    /// Turn remote write on.
    #[serde(default)]
    pub enabled: bool,
    /// The least time between two reloads of the remote-write settings.
    #[serde(default = "default_refresh_period")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub refresh_period: String,
    /// The remote-write endpoint.
    #[serde(rename = "client", default, skip_serializing_if = "Option::is_none")]
    pub client: Option<RemoteWriteClientSpec>,
    /// The queue of samples to send.
    #[serde(rename = "queue", default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<RemoteWriteClientQueueSpec>,
}

fn default_refresh_period() -> String {
    "10s".into()
}

fn default_true() -> bool {
    true
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteWriteAuthType {
    #[serde(rename = "basic")]
    Basic,
    #[serde(rename = "bearer")]
    Bearer,
}

impl RemoteWriteAuthType {
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteWriteAuthType::Basic => "basic",
            RemoteWriteAuthType::Bearer => "bearer",
        }
    }

    /// The keys its Secret must hold, non-empty.
    pub fn secret_keys(self) -> &'static [&'static str] {
        match self {
            RemoteWriteAuthType::Basic => &["username", "password"],
            RemoteWriteAuthType::Bearer => &["bearer_token"],
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RemoteWriteClientSpec {
    /// Name of the remote-write endpoint.
    pub name: String,
    /// URL the samples are sent to.
    pub url: String,
    /// Timeout of a request (a Prometheus duration).
    #[serde(default = "default_remote_timeout")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub timeout: String,
    /// `basic` (the Secret holds `username` and `password`) or `bearer` (it holds
    /// `bearer_token`).
    #[serde(rename = "authorization")]
    pub authorization_type: RemoteWriteAuthType,
    /// The Secret, in the stack's namespace, with the credentials. It is mounted into the
    /// ruler pods: the credentials never enter the ruler's configuration.
    #[schemars(length(min = 1, max = 253))]
    pub authorization_secret_name: String,
    /// HTTP headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_headers: BTreeMap<String, String>,
    /// Relabelling of the series before they are sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relabel_configs: Vec<RelabelConfig>,
    /// An HTTP proxy.
    #[serde(rename = "proxyUrl", default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// Follow HTTP redirects.
    #[serde(default = "default_true")]
    pub follow_redirects: bool,
}

fn default_remote_timeout() -> String {
    "30s".into()
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RemoteWriteClientQueueSpec {
    /// Samples each shard holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_QUEUE_CAPACITY))]
    pub capacity: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_SHARDS))]
    pub max_shards: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_SHARDS))]
    pub min_shards: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_QUEUE_CAPACITY))]
    pub max_samples_per_send: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub batch_send_deadline: Option<String>,
    #[serde(
        rename = "minBackOffPeriod",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub min_back_off_period: Option<String>,
    #[serde(
        rename = "maxBackOffPeriod",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1), regex(pattern = PROM_DURATION_PATTERN))]
    pub max_back_off_period: Option<String>,
}

/// A Prometheus relabel step (`alert_relabel_configs`, `write_relabel_configs`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RelabelConfig {
    /// Labels whose values, joined with `separator`, are matched against `regex`.
    pub source_labels: Vec<String>,
    #[serde(default = "default_separator")]
    pub separator: String,
    /// The label a `replace` writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_label: Option<String>,
    #[serde(default = "default_regex")]
    pub regex: String,
    /// The modulus of a `hashmod` step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_MODULUS))]
    pub modulus: Option<u64>,
    /// What a `replace` writes; `$1` is the regex's first group.
    #[serde(default = "default_replacement")]
    pub replacement: String,
    #[serde(default)]
    #[schemars(schema_with = "relabel_action_schema")]
    pub action: RelabelAction,
}

fn default_separator() -> String {
    ";".into()
}

fn default_regex() -> String {
    "(.*)".into()
}

fn default_replacement() -> String {
    "$1".into()
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RelabelAction {
    Drop,
    Hashmod,
    Keep,
    Labeldrop,
    Labelkeep,
    Labelmap,
    #[default]
    Replace,
}

impl RelabelAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RelabelAction::Drop => "drop",
            RelabelAction::Hashmod => "hashmod",
            RelabelAction::Keep => "keep",
            RelabelAction::Labeldrop => "labeldrop",
            RelabelAction::Labelkeep => "labelkeep",
            RelabelAction::Labelmap => "labelmap",
            RelabelAction::Replace => "replace",
        }
    }
}

/// The Go operator's enum and default, without the `null` schemars would list.
fn relabel_action_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["drop", "hashmod", "keep", "labeldrop", "labelkeep", "labelmap", "replace"],
        "default": "replace",
    })
}

/// Every CRD this operator serves, LokiStack first: what `loki-zone-operator crd`
/// prints and `manifests/crd/` holds.
pub fn crds(
) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![
        crate::model::api::crd(),
        AlertingRule::crd(),
        RecordingRule::crd(),
        RulerConfig::crd(),
    ]
}
