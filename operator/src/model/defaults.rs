//! Defaults, in one place: the size table, the effective replication factor, and the
//! per-component overrides. Everything downstream (zone check, render, status) reads an
//! [`EffectiveStack`], never the raw spec, so a default cannot be applied twice or forgotten.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde::Serialize;

use crate::model::api::{
    LokiComponentSpec, LokiStackSize, LokiStackSpec, ObjectStorageSchema,
    ObjectStorageSchemaVersion, ReplicationSpec, ZoneSpec,
};
use crate::model::conditions::Reason;
use crate::model::names;
use crate::model::storage::StoreParams;

/// The default schema period for a stack that names none: TSDB index, schema v13.
pub const DEFAULT_SCHEMA_DATE: &str = "2024-04-02";

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    Compactor,
    Distributor,
    Ingester,
    Querier,
    QueryFrontend,
    IndexGateway,
    Ruler,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

impl Component {
    pub const ALL: [Component; 7] = [
        Component::Compactor,
        Component::Distributor,
        Component::Ingester,
        Component::Querier,
        Component::QueryFrontend,
        Component::IndexGateway,
        Component::Ruler,
    ];

    /// Queriers and rulers ask the ingesters for recent data: the read path of the
    /// ingester ring, which is turned zone-aware after the write path.
    pub fn reads_ingesters(self) -> bool {
        matches!(self, Component::Querier | Component::Ruler)
    }

    /// The value of `app.kubernetes.io/component`, the `-target` flag and the name suffix.
    pub fn name(self) -> &'static str {
        match self {
            Component::Compactor => "compactor",
            Component::Distributor => "distributor",
            Component::Ingester => "ingester",
            Component::Querier => "querier",
            Component::QueryFrontend => "query-frontend",
            Component::IndexGateway => "index-gateway",
            Component::Ruler => "ruler",
        }
    }

    pub fn from_name(name: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn kind(self) -> WorkloadKind {
        match self {
            Component::Distributor | Component::Querier | Component::QueryFrontend => {
                WorkloadKind::Deployment
            }
            Component::Compactor
            | Component::Ingester
            | Component::IndexGateway
            | Component::Ruler => WorkloadKind::StatefulSet,
        }
    }

    pub fn workload_name(self, stack: &str) -> String {
        format!("{stack}-{}", self.name())
    }

    /// Whether `claim` is one of the PersistentVolumeClaims the StatefulSet of this
    /// component creates for the stack: `<volume>-<stack>-<component>-<ordinal>`. The
    /// ordinal must be all digits, so stack `a` never claims what stack `a-ingester` has.
    pub fn owns_claim(self, stack: &str, claim: &str) -> bool {
        if self.kind() != WorkloadKind::StatefulSet {
            return false;
        }
        let workload = self.workload_name(stack);
        [names::PVC_STORAGE, names::PVC_WAL].iter().any(|v| {
            claim
                .strip_prefix(v)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.strip_prefix(workload.as_str()))
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }

    pub fn http_service_name(self, stack: &str) -> String {
        format!("{stack}-{}-http", self.name())
    }

    pub fn grpc_service_name(self, stack: &str) -> String {
        format!("{stack}-{}-grpc", self.name())
    }

    /// The component's field under `spec.template`.
    pub fn spec_field(self) -> &'static str {
        match self {
            Component::Compactor => "compactor",
            Component::Distributor => "distributor",
            Component::Ingester => "ingester",
            Component::Querier => "querier",
            Component::QueryFrontend => "queryFrontend",
            Component::IndexGateway => "indexGateway",
            Component::Ruler => "ruler",
        }
    }

    pub fn template(self, spec: &LokiStackSpec) -> Option<&LokiComponentSpec> {
        let t = spec.template.as_ref()?;
        match self {
            Component::Compactor => t.compactor.as_ref(),
            Component::Distributor => t.distributor.as_ref(),
            Component::Ingester => t.ingester.as_ref(),
            Component::Querier => t.querier.as_ref(),
            Component::QueryFrontend => t.query_frontend.as_ref(),
            Component::IndexGateway => t.index_gateway.as_ref(),
            Component::Ruler => t.ruler.as_ref(),
        }
    }
}

/// CPU and memory requests of one container; `None` for 1x.demo, which sets none.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Requests {
    pub cpu: &'static str,
    pub memory: &'static str,
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub name: &'static str,
    pub mount_path: &'static str,
    pub size: &'static str,
}

/// One component of a stack, with every default resolved.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct EffectiveComponent {
    pub component: Component,
    pub replicas: i32,
    pub requests: Option<Requests>,
    pub volumes: Vec<Volume>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

/// A stack's spec with every default resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveStack {
    pub size: LokiStackSize,
    pub replication_factor: i32,
    /// Empty when the stack is not zone-aware.
    pub zones: Vec<ZoneSpec>,
    pub schemas: Vec<ObjectStorageSchema>,
    /// The components this stack runs, in [`Component::ALL`] order.
    pub components: Vec<EffectiveComponent>,
    /// What the storage Secret says beyond its key names (the S3 endpoint); empty until
    /// the plan reads the Secret, and when rendering offline.
    pub store: StoreParams,
    /// The entry Services (distributor and query-frontend HTTP) ask Kubernetes to keep a
    /// client's traffic in its zone: on for zone-aware stacks unless their annotation
    /// ([`names::ANNOTATION_ZONE_LOCAL_SERVICES`]) says `"false"`; set by the plan.
    pub zone_local_services: bool,
    /// Loki's memberlist gossips zone-aware (members within their zone, ingesters as the
    /// bridges between zones): on for zone-aware stacks unless their annotation
    /// ([`names::ANNOTATION_ZONE_AWARE_GOSSIP`]) says `"false"` or a zone's name is
    /// longer than Loki takes ([`names::MAX_GOSSIP_ZONE_BYTES`]); set by the plan.
    pub zone_gossip: bool,
    /// The stack lets its pods read their zone from the label Kubernetes copies at
    /// binding: on unless its annotation ([`names::ANNOTATION_ZONE_FROM_POD_LABEL`])
    /// says `"false"`; set by the plan.
    pub zone_from_pod_label_allowed: bool,
    /// How many ingesters the PodDisruptionBudget lets go at once: 1, unless the
    /// zone-disruption webhook decides the stack's evictions, when it is the per-zone
    /// maximum; set by the plan.
    pub ingester_disruptions: i32,
    /// Queriers and rulers read the ingester ring zone-aware. False, in a zone-aware
    /// stack, while zones are being turned on or off: they then read their own config
    /// file with the ring's zone awareness off; set by the plan (`staging.rs`).
    pub read_path_zone_aware: bool,
    /// The ruler's rule files and settings; set by the plan from the AlertingRules,
    /// RecordingRules and RulerConfig it picks (`ruler/`).
    pub ruler: RulerInput,
}

/// One rule file for the ruler: the groups of one AlertingRule or RecordingRule.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleFile {
    /// The file's name in the tenant's directory: `<namespace>-<name>-<uid>.yaml`, the
    /// Go Loki Operator's, unique per object.
    pub key: String,
    pub tenant: String,
    /// The object's `spec.groups`, as stored.
    pub groups: serde_json::Value,
}

/// What the ruler of one stack is given, resolved by the plan from the rules it picks
/// and its RulerConfig (`ruler/settings.rs`): plain values, ready to render.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RulerInput {
    /// The rule files of the AlertingRules and RecordingRules the stack picks, each
    /// valid. `None` when `spec.rules.selector` is unset: the ruler then keeps its rules
    /// in the object store, written through Loki's rules API.
    pub files: Option<Vec<RuleFile>>,
    /// Loki's `ruler` settings from the RulerConfig, key to value, every `$` doubled.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Per tenant, its `ruler_alertmanager_config` for the runtime config.
    pub tenant_overrides: BTreeMap<String, serde_json::Value>,
    /// The remote-write Secret the ruler pods mount.
    pub remote_write_secret: Option<String>,
    /// The ports the ruler sends alerts and series to (its NetworkPolicy).
    pub egress_ports: Vec<i32>,
}

impl EffectiveStack {
    pub fn component(&self, c: Component) -> Option<&EffectiveComponent> {
        self.components.iter().find(|e| e.component == c)
    }

    /// [`zone_aware`] of the spec this was resolved from: `zones` is its list, copied.
    pub fn zone_aware(&self) -> bool {
        !self.zones.is_empty()
    }

    pub fn topology_keys(&self) -> Vec<&str> {
        self.zones.iter().map(|z| z.topology_key.as_str()).collect()
    }
}

/// The size's default replication factor, as the Go Loki Operator sets it.
pub fn default_replication_factor(size: LokiStackSize) -> i32 {
    match size {
        LokiStackSize::Demo => 1,
        _ => 2,
    }
}

fn default_replicas(size: LokiStackSize, c: Component) -> i32 {
    use Component::*;
    use LokiStackSize::*;
    match (size, c) {
        // The compactor is a singleton whatever the size.
        (_, Compactor) => 1,
        (Demo, _) => 1,
        (_, Ingester) => 3,
        (Medium, Querier) => 3,
        _ => 2,
    }
}

/// Requests per size. Ingester and querier figures are the Go Loki Operator's; for the
/// other components these are our own modest figures, sized to the components' light work.
fn requests(size: LokiStackSize, c: Component) -> Option<Requests> {
    use Component::*;
    use LokiStackSize::*;
    let r = |cpu, memory| Some(Requests { cpu, memory });
    match (size, c) {
        (Demo, _) => None,
        (Pico, Ingester) => r("500m", "3Gi"),
        (ExtraSmall, Ingester) => r("1", "5376Mi"),
        (Small, Ingester) => r("2500m", "13568Mi"),
        (Medium, Ingester) => r("6", "30Gi"),
        (Pico, Querier) => r("750m", "1536Mi"),
        (ExtraSmall, Querier) => r("1500m", "3Gi"),
        (Small, Querier) => r("4", "4Gi"),
        (Medium, Querier) => r("6", "10Gi"),
        (Pico | ExtraSmall, _) => r("250m", "512Mi"),
        (Small, _) => r("500m", "1Gi"),
        (Medium, _) => r("1", "2Gi"),
    }
}

fn volumes(size: LokiStackSize, c: Component) -> Vec<Volume> {
    let demo = size == LokiStackSize::Demo;
    let storage = |size| Volume {
        name: names::PVC_STORAGE,
        mount_path: names::DATA_DIR,
        size,
    };
    let wal = |size| Volume {
        name: names::PVC_WAL,
        mount_path: names::WAL_DIR,
        size,
    };
    match c {
        Component::Ingester if demo => vec![storage("10Gi"), wal("10Gi")],
        Component::Ingester => vec![storage("10Gi"), wal("150Gi")],
        Component::Ruler => vec![wal("10Gi"), storage("10Gi")],
        Component::Compactor => vec![storage("10Gi")],
        Component::IndexGateway if demo => vec![storage("10Gi")],
        Component::IndexGateway => vec![storage("50Gi")],
        Component::Distributor | Component::Querier | Component::QueryFrontend => vec![],
    }
}

/// The replication factor in effect: `replication.factor`, else the deprecated
/// `replicationFactor`, else the size's default.
pub fn replication_factor(spec: &LokiStackSpec) -> i32 {
    spec.replication
        .as_ref()
        .and_then(|r| r.factor)
        .or(spec.replication_factor)
        .filter(|f| *f >= 1)
        .unwrap_or_else(|| default_replication_factor(spec.size))
}

/// Whether the stack spreads copies over zones: `spec.replication.zones` is not empty.
/// The single definition: [`EffectiveStack::zone_aware`] reads the zones copied from the
/// same list, and the caches' routing (`caches::stacks::is_zone_aware`) decodes
/// `spec.replication` and asks [`replication_zone_aware`].
pub fn zone_aware(spec: &LokiStackSpec) -> bool {
    replication_zone_aware(spec.replication.as_ref())
}

pub fn replication_zone_aware(replication: Option<&ReplicationSpec>) -> bool {
    replication.is_some_and(|r| !r.zones.is_empty())
}

/// The Go Loki Operator's two standing Warnings, under its reasons, so that its alert
/// `LokistackSchemaUpgradesRequired` and a migrated user's tooling see them: the newest
/// schema period is older than v13, and (for a stack without zones, whose zone check says
/// more) ingesters no more than the replication factor, so that a restarted ingester can
/// stop the writes of its streams; 1x.demo, one ingester by design, is spared. The newest period is the one with the latest date,
/// whatever the list's order (the Go operator reads the list's last entry).
pub fn advisories(eff: &EffectiveStack) -> Vec<(Reason, String)> {
    let mut out = Vec::new();
    if let Some(newest) = eff
        .schemas
        .iter()
        .max_by(|a, b| a.effective_date.cmp(&b.effective_date))
        .filter(|s| s.version != ObjectStorageSchemaVersion::V13)
    {
        out.push((
            Reason::StorageNeedsSchemaUpdate,
            format!(
                "the newest schema period ({} from {}) is older than v13: add a v13 period to spec.storage.schemas, effective on a future date",
                newest.version.as_str(),
                newest.effective_date
            ),
        ));
    }
    let ingesters = eff.component(Component::Ingester).map_or(0, |c| c.replicas);
    if !eff.zone_aware() && eff.size != LokiStackSize::Demo && ingesters <= eff.replication_factor {
        out.push((
            Reason::InsufficientIngesterReplicas,
            format!(
                "{ingesters} ingester(s) for replication factor {}: while one restarts, the streams it holds cannot write a quorum of copies. Set spec.template.ingester.replicas above the factor",
                eff.replication_factor
            ),
        ));
    }
    out
}

/// Resolves every default. Pure; the static rules (`checks/validate.rs`) are checked before.
pub fn effective(spec: &LokiStackSpec) -> EffectiveStack {
    let ruler_enabled = spec.rules.as_ref().is_some_and(|r| r.enabled);
    let components = Component::ALL
        .into_iter()
        .filter(|c| *c != Component::Ruler || ruler_enabled)
        .map(|c| {
            let t = c.template(spec);
            let replicas = match c {
                Component::Compactor => 1,
                _ => t
                    .and_then(|t| t.replicas)
                    .unwrap_or_else(|| default_replicas(spec.size, c)),
            };
            EffectiveComponent {
                component: c,
                replicas,
                requests: requests(spec.size, c),
                volumes: volumes(spec.size, c),
                node_selector: t.and_then(|t| t.node_selector.clone()).unwrap_or_default(),
                tolerations: t.and_then(|t| t.tolerations.clone()).unwrap_or_default(),
            }
        })
        .collect();
    let schemas = if spec.storage.schemas.is_empty() {
        vec![ObjectStorageSchema {
            version: ObjectStorageSchemaVersion::V13,
            effective_date: DEFAULT_SCHEMA_DATE.to_string(),
        }]
    } else {
        let mut s = spec.storage.schemas.clone();
        s.sort_by(|a, b| a.effective_date.cmp(&b.effective_date));
        s
    };
    EffectiveStack {
        size: spec.size,
        replication_factor: replication_factor(spec),
        zones: spec
            .replication
            .as_ref()
            .map(|r| r.zones.clone())
            .unwrap_or_default(),
        schemas,
        components,
        store: StoreParams::default(),
        zone_local_services: zone_aware(spec),
        zone_gossip: zone_aware(spec),
        zone_from_pod_label_allowed: true,
        ingester_disruptions: 1,
        read_path_zone_aware: true,
        ruler: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::stack_spec;

    #[test]
    fn replicas_follow_the_size_table() {
        let table = [
            (LokiStackSize::Demo, [1, 1, 1, 1, 1, 1, 1]),
            (LokiStackSize::Pico, [1, 2, 3, 2, 2, 2, 2]),
            (LokiStackSize::ExtraSmall, [1, 2, 3, 2, 2, 2, 2]),
            (LokiStackSize::Small, [1, 2, 3, 2, 2, 2, 2]),
            (LokiStackSize::Medium, [1, 2, 3, 3, 2, 2, 2]),
        ];
        for (size, want) in table {
            for (c, n) in Component::ALL.into_iter().zip(want) {
                assert_eq!(default_replicas(size, c), n, "{size:?} {c:?}");
            }
        }
    }

    #[test]
    fn the_go_operators_advisories_follow_the_newest_schema_and_the_ingesters() {
        let reasons = |spec: &LokiStackSpec| -> Vec<Reason> {
            advisories(&effective(spec))
                .into_iter()
                .map(|(r, _)| r)
                .collect()
        };
        let mut spec = stack_spec(LokiStackSize::Small);
        assert_eq!(
            reasons(&spec),
            vec![],
            "defaults: v13, 3 ingesters for factor 2"
        );
        // The newest period decides, whatever the list's order.
        let period = |version, date: &str| ObjectStorageSchema {
            version,
            effective_date: date.into(),
        };
        spec.storage.schemas = vec![
            period(ObjectStorageSchemaVersion::V13, "2024-06-01"),
            period(ObjectStorageSchemaVersion::V12, "2023-01-01"),
        ];
        assert_eq!(reasons(&spec), vec![]);
        spec.storage.schemas = vec![
            period(ObjectStorageSchemaVersion::V13, "2022-06-01"),
            period(ObjectStorageSchemaVersion::V12, "2023-01-01"),
        ];
        assert_eq!(reasons(&spec), vec![Reason::StorageNeedsSchemaUpdate]);
        spec.storage.schemas.clear();
        spec.replication_factor = Some(3);
        assert_eq!(reasons(&spec), vec![Reason::InsufficientIngesterReplicas]);
        // A zone-aware stack: the zone check says more; 1x.demo: one ingester by design.
        spec.replication = Some(ReplicationSpec {
            factor: Some(3),
            zones: vec![ZoneSpec {
                topology_key: "topology.kubernetes.io/zone".into(),
                max_skew: 1,
            }],
            zone_outage: None,
            max_unavailable_per_zone: None,
        });
        assert_eq!(reasons(&spec), vec![]);
        assert_eq!(reasons(&stack_spec(LokiStackSize::Demo)), vec![]);
    }

    #[test]
    fn deprecated_factor_feeds_replication_factor_when_unset() {
        let mut spec = stack_spec(LokiStackSize::Small);
        assert_eq!(replication_factor(&spec), 2);
        spec.replication_factor = Some(3);
        assert_eq!(replication_factor(&spec), 3);
        spec.replication_factor = None;
        spec.replication = Some(ReplicationSpec {
            factor: Some(1),
            zones: vec![],
            zone_outage: None,
            max_unavailable_per_zone: None,
        });
        assert_eq!(replication_factor(&spec), 1);
        assert_eq!(replication_factor(&stack_spec(LokiStackSize::Demo)), 1);
    }

    #[test]
    fn overrides_win_but_the_compactor_stays_single() {
        let mut spec = stack_spec(LokiStackSize::Small);
        let over = LokiComponentSpec {
            replicas: Some(5),
            node_selector: Some([("pool".to_string(), "loki".to_string())].into()),
            ..Default::default()
        };
        spec.template = Some(crate::model::api::LokiTemplateSpec {
            compactor: Some(over.clone()),
            querier: Some(over),
            ..Default::default()
        });
        let e = effective(&spec);
        assert_eq!(e.component(Component::Querier).map(|c| c.replicas), Some(5));
        let compactor = e.component(Component::Compactor).expect("compactor");
        assert_eq!(compactor.replicas, 1);
        assert_eq!(
            compactor.node_selector.get("pool").map(String::as_str),
            Some("loki")
        );
    }

    #[test]
    fn ruler_only_when_enabled() {
        let mut spec = stack_spec(LokiStackSize::Small);
        assert!(effective(&spec).component(Component::Ruler).is_none());
        spec.rules = Some(crate::model::api::RulesSpec {
            enabled: true,
            ..Default::default()
        });
        assert!(effective(&spec).component(Component::Ruler).is_some());
    }

    #[test]
    fn schemas_default_to_v13_and_sort_by_date() {
        let mut spec = stack_spec(LokiStackSize::Demo);
        assert_eq!(
            effective(&spec).schemas[0].version,
            ObjectStorageSchemaVersion::V13
        );
        spec.storage.schemas = vec![
            ObjectStorageSchema {
                version: ObjectStorageSchemaVersion::V13,
                effective_date: "2024-04-02".into(),
            },
            ObjectStorageSchema {
                version: ObjectStorageSchemaVersion::V12,
                effective_date: "2022-01-01".into(),
            },
        ];
        let s = effective(&spec).schemas;
        assert_eq!(s[0].effective_date, "2022-01-01");
    }

    #[test]
    fn a_stack_owns_exactly_its_statefulsets_claims() {
        let owns =
            |stack: &str, claim: &str| Component::ALL.iter().any(|c| c.owns_claim(stack, claim));
        assert!(owns("s", "storage-s-ingester-0"));
        assert!(owns("s", "wal-s-ingester-12"));
        assert!(owns("s", "storage-s-compactor-0"));
        assert!(owns("s", "storage-s-index-gateway-1"));
        assert!(!owns("s", "storage-s-querier-0"), "queriers have no claims");
        assert!(!owns("s", "storage-s-ingester-"));
        assert!(!owns("s", "storage-s-ingester-0x"));
        assert!(!owns("s", "data-s-ingester-0"));
        // Another stack whose name extends this one's.
        assert!(!owns("s", "storage-s-ingester-ingester-0"));
        assert!(owns("s-ingester", "storage-s-ingester-ingester-0"));
    }
}
