//! The CRD admission table, shared by the e2e scenario and by `tests/admission.rs` (on
//! the kube-apiserver of both ends of the supported range): LokiStacks the API server
//! must reject, each with the field its error must name, and LokiStacks it must accept
//! (the samples, the bundle's alm-examples, and values at every bound).
//!
//! Every OpenAPI bound and every `x-kubernetes-validations` rule of the generated CRD has
//! at least one rejecting case; `tests/admission.rs` checks that against the CRD itself,
//! so a new rule without a case fails there.

use anyhow::{bail, Context, Result};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use loki_zone_operator::model::api::{
    LokiStack, MAX_REPLICAS, MAX_REPLICATION_FACTOR, MAX_SKEW, QUALIFIED_NAME_MAX_LEN,
    RULE_IPV6_ADDR_TYPE_MSG, RULE_KEY_PREFIX_MSG, RULE_NAME_DNS_LABEL_MSG, RULE_NAME_LENGTH_MSG,
    RULE_REPLICATION_EXCLUSIVE_MSG, RULE_TLS_S3_MSG, RULE_UNIQUE_KEYS_MSG,
};
use loki_zone_operator::model::names::MAX_STACK_NAME_LEN;
use serde_json::{json, Value};

use crate::repo_root;

/// The zone label the cases use.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// A case that every API server rejects at admission (OpenAPI bounds, list maps).
pub const EVERY_SERVER: u32 = 0;
/// A case only CEL rejects: Kubernetes 1.25 and later. Older servers accept it and the
/// reconciler reports it as a Degraded `InvalidSpec` condition naming the field.
pub const CEL: u32 = 25;

/// Every component of `spec.template`, as the CRD names it.
pub const COMPONENTS: [&str; 7] = [
    "compactor",
    "distributor",
    "ingester",
    "querier",
    "queryFrontend",
    "indexGateway",
    "ruler",
];

/// A LokiStack the API server must reject.
pub struct Invalid {
    /// Also the stack's metadata.name (unique in the table).
    pub name: String,
    pub body: Value,
    /// The field the error must name, indexed (`spec.replication.zones[0].maxSkew`);
    /// [`names_field`] also accepts it without the index, as older servers wrote it.
    pub field: String,
    /// The first Kubernetes minor version that rejects it at admission.
    pub rejected_since: u32,
    /// The message of the CEL rule it breaks: on servers with CEL (1.25+) the error
    /// carries it, which shows the rule itself rejected the stack.
    pub cel_message: Option<&'static str>,
}

/// A LokiStack the API server must accept.
pub struct Valid {
    /// What it is, for reports; its metadata.name is unique in the table.
    pub name: String,
    pub body: Value,
}

/// A minimal valid stack named `name`.
pub fn stack(name: &str) -> Value {
    json!({
        "apiVersion": "loki.grafana.com/v1",
        "kind": "LokiStack",
        "metadata": {"name": name},
        "spec": {"size": "1x.demo", "storage": {"secret": {"name": "loki-s3", "type": "s3"}}},
    })
}

fn with(name: &str, mutate: impl FnOnce(&mut Value)) -> Value {
    let mut v = stack(name);
    mutate(&mut v);
    v
}

/// Sets the JSON value at a dotted path under `spec` (objects created on the way).
fn set(v: &mut Value, path: &str, value: Value) {
    let mut at = &mut v["spec"];
    for key in path.split('.') {
        at = &mut at[key];
    }
    *at = value;
}

struct Table(Vec<Invalid>);

impl Table {
    fn case(&mut self, name: &str, field: &str, since: u32, mutate: impl FnOnce(&mut Value)) {
        self.0.push(Invalid {
            name: name.to_string(),
            body: with(name, mutate),
            field: field.to_string(),
            rejected_since: since,
            cel_message: None,
        });
    }

    /// A case that breaks a CEL rule, whose message the error must carry on CEL servers.
    fn cel(
        &mut self,
        name: &str,
        field: &str,
        message: &'static str,
        mutate: impl FnOnce(&mut Value),
    ) {
        self.case(name, field, CEL, mutate);
        if let Some(last) = self.0.last_mut() {
            last.cel_message = Some(message);
        }
    }

    /// `spec.<path>` set to `value` is rejected, naming `spec.<path>`.
    fn bad(&mut self, name: &str, path: &str, value: Value) {
        let field = format!("spec.{path}");
        self.case(name, &field, EVERY_SERVER, |v| set(v, path, value));
    }
}

/// Every invalid case, in a stable order.
pub fn invalid_cases() -> Vec<Invalid> {
    let mut t = Table(Vec::new());
    top_level(&mut t);
    storage(&mut t);
    replication(&mut t);
    for (i, c) in COMPONENTS.iter().enumerate() {
        let path = format!("template.{c}.replicas");
        t.bad(&format!("replicas-below-0-{i}"), &path, json!(-1));
        t.bad(
            &format!("replicas-above-max-{i}"),
            &path,
            json!(MAX_REPLICAS + 1),
        );
    }
    limits(&mut t);
    rule_selectors(&mut t);
    rule_tenant_grants(&mut t);
    network_policies(&mut t);
    hash_ring(&mut t);
    for (i, c) in COMPONENTS.iter().enumerate() {
        pod_anti_affinity(&mut t, i, c);
    }
    t.0
}

/// The Go Loki Operator's memberlist settings: enums, and IPv6 with the default address.
fn hash_ring(t: &mut Table) {
    t.bad("hash-ring-type", "hashRing.type", json!("consul"));
    t.bad(
        "hash-ring-addr-type",
        "hashRing.memberlist.instanceAddrType",
        json!("hostIP"),
    );
    t.cel(
        "hash-ring-ipv6-default-addr",
        "spec.hashRing.memberlist.instanceAddrType",
        RULE_IPV6_ADDR_TYPE_MSG,
        |v| {
            let m = json!({"instanceAddrType": "default", "enableIPv6": true});
            set(
                v,
                "hashRing",
                json!({"type": "memberlist", "memberlist": m}),
            );
        },
    );
}

/// Kubernetes' PodAntiAffinity schema, under every component: the required fields of a
/// term (in both lists) and of its selectors, and a weighted term's weight and term.
fn pod_anti_affinity(t: &mut Table, i: usize, component: &str) {
    const REQ: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREF: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    let at = format!("template.{component}.podAntiAffinity");
    let host = json!("kubernetes.io/hostname");
    let terms = [
        ("no-topology-key", "topologyKey", json!({})),
        (
            "label-no-key",
            "labelSelector.matchExpressions[0].key",
            json!({"topologyKey": host, "labelSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
        ),
        (
            "label-no-op",
            "labelSelector.matchExpressions[0].operator",
            json!({"topologyKey": host, "labelSelector": {"matchExpressions": [{"key": "a"}]}}),
        ),
        (
            "ns-no-key",
            "namespaceSelector.matchExpressions[0].key",
            json!({"topologyKey": host, "namespaceSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
        ),
        (
            "ns-no-op",
            "namespaceSelector.matchExpressions[0].operator",
            json!({"topologyKey": host, "namespaceSelector": {"matchExpressions": [{"key": "a"}]}}),
        ),
    ];
    for (name, field, term) in terms {
        let anti = json!({ REQ: [term.clone()] });
        t.case(
            &format!("anti-{i}-req-{name}"),
            &format!("spec.{at}.{REQ}[0].{field}"),
            EVERY_SERVER,
            |v| set(v, &at, anti),
        );
        let anti = json!({ PREF: [{"weight": 1, "podAffinityTerm": term}] });
        t.case(
            &format!("anti-{i}-pref-{name}"),
            &format!("spec.{at}.{PREF}[0].podAffinityTerm.{field}"),
            EVERY_SERVER,
            |v| set(v, &at, anti),
        );
    }
    let weighted = [
        (
            "no-weight",
            "weight",
            json!({"podAffinityTerm": {"topologyKey": host}}),
        ),
        ("no-term", "podAffinityTerm", json!({"weight": 1})),
    ];
    for (name, field, item) in weighted {
        t.case(
            &format!("anti-{i}-pref-{name}"),
            &format!("spec.{at}.{PREF}[0].{field}"),
            EVERY_SERVER,
            |v| set(v, &at, json!({ PREF: [item] })),
        );
    }
    // A weight is 1 to 100, as in a pod; a toleration's seconds fit a JSON number.
    for (name, weight) in [("weight-0", 0), ("weight-101", 101)] {
        let item = json!({"weight": weight, "podAffinityTerm": {"topologyKey": host}});
        t.case(
            &format!("anti-{i}-pref-{name}"),
            &format!("spec.{at}.{PREF}[0].weight"),
            EVERY_SERVER,
            |v| set(v, &at, json!({ PREF: [item] })),
        );
    }
    let tolerations = format!("template.{component}.tolerations");
    for (name, seconds) in [
        ("below-min", -9_007_199_254_740_992_i64),
        ("above-max", 9_007_199_254_740_992_i64),
    ] {
        let item = json!({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds});
        t.case(
            &format!("toleration-{i}-seconds-{name}"),
            &format!("spec.{tolerations}[0].tolerationSeconds"),
            EVERY_SERVER,
            |v| set(v, &tolerations, json!([item])),
        );
    }
}

/// The Go Loki Operator's rule selectors are kept, with Kubernetes' LabelSelector schema.
fn rule_selectors(t: &mut Table) {
    for selector in ["selector", "namespaceSelector"] {
        for (missing, present) in [
            ("key", ("operator", "Exists")),
            ("operator", ("key", "team")),
        ] {
            let field = format!("spec.rules.{selector}.matchExpressions[0].{missing}");
            t.case(
                &format!("rules-{selector}-no-{missing}").to_lowercase(),
                &field,
                EVERY_SERVER,
                |v| {
                    set(
                        v,
                        &format!("rules.{selector}.matchExpressions"),
                        json!([{ present.0: present.1 }]),
                    )
                },
            );
        }
    }
}

/// `spec.rules.allowedTenants`: names as Kubernetes and Loki take them, never empty,
/// lists bounded.
fn rule_tenant_grants(t: &mut Table) {
    let many = |item: &str| json!(vec![item; 101]);
    let grant = json!({"namespaces": ["team-a"], "tenants": ["a"]});
    let with = |key: &str, value: Value| {
        let mut g = grant.clone();
        if value.is_null() {
            g.as_object_mut().map(|o| o.remove(key));
        } else {
            g[key] = value;
        }
        g
    };
    let at = "spec.rules.allowedTenants[0]";
    let cases = [
        (
            "tenant-slash",
            format!("{at}.tenants[0]"),
            with("tenants", json!(["a/b"])),
        ),
        (
            "tenant-empty",
            format!("{at}.tenants[0]"),
            with("tenants", json!([""])),
        ),
        (
            "tenant-long",
            format!("{at}.tenants[0]"),
            with("tenants", json!(["t".repeat(151)])),
        ),
        (
            "tenants-none",
            format!("{at}.tenants"),
            with("tenants", json!([])),
        ),
        (
            "tenants-many",
            format!("{at}.tenants"),
            with("tenants", many("a")),
        ),
        (
            "tenants-missing",
            format!("{at}.tenants"),
            with("tenants", Value::Null),
        ),
        (
            "namespace-upper",
            format!("{at}.namespaces[0]"),
            with("namespaces", json!(["Team-A"])),
        ),
        (
            "namespace-empty",
            format!("{at}.namespaces[0]"),
            with("namespaces", json!([""])),
        ),
        (
            "namespace-long",
            format!("{at}.namespaces[0]"),
            with("namespaces", json!(["n".repeat(64)])),
        ),
        (
            "namespaces-many",
            format!("{at}.namespaces"),
            with("namespaces", many("n")),
        ),
        (
            "namespaces-missing",
            format!("{at}.namespaces"),
            with("namespaces", Value::Null),
        ),
    ];
    for (name, field, g) in cases {
        t.case(&format!("rules-grant-{name}"), &field, EVERY_SERVER, |v| {
            set(v, "rules.allowedTenants", json!([g]))
        });
    }
    t.bad(
        "rules-grants-many",
        "rules.allowedTenants",
        json!(vec![grant; 101]),
    );
}

/// `spec.networkPolicies`: the rule set is required, and one of the Go operator's two.
fn network_policies(t: &mut Table) {
    t.bad(
        "network-policies-unknown-rule-set",
        "networkPolicies.ruleSet",
        json!("AllowAll"),
    );
    t.case(
        "network-policies-no-rule-set",
        "spec.networkPolicies.ruleSet",
        EVERY_SERVER,
        |v| set(v, "networkPolicies", json!({})),
    );
}

fn top_level(t: &mut Table) {
    t.case("no-spec", "spec", EVERY_SERVER, |v| {
        v.as_object_mut().map(|o| o.remove("spec"));
    });
    t.bad("bad-size", "size", json!("2x.huge"));
    t.case("no-size", "spec.size", EVERY_SERVER, |v| {
        v["spec"].as_object_mut().map(|s| s.remove("size"));
    });
    t.case("no-storage", "spec.storage", EVERY_SERVER, |v| {
        v["spec"].as_object_mut().map(|s| s.remove("storage"));
    });
    t.bad(
        "bad-management-state",
        "managementState",
        json!("Sometimes"),
    );
    t.bad("rf-below-1", "replicationFactor", json!(0));
    t.bad(
        "rf-above-max",
        "replicationFactor",
        json!(MAX_REPLICATION_FACTOR + 1),
    );
    let long = "a".repeat(MAX_STACK_NAME_LEN + 1);
    t.cel(&long, "metadata.name", RULE_NAME_LENGTH_MSG, |_| {});
    // Admitted by Kubernetes as a custom resource's name, refused as a Service's.
    t.cel("1stack", "metadata.name", RULE_NAME_DNS_LABEL_MSG, |_| {});
    t.cel("my.stack", "metadata.name", RULE_NAME_DNS_LABEL_MSG, |_| {});
    t.cel(
        "both-factors",
        "spec.replicationFactor",
        RULE_REPLICATION_EXCLUSIVE_MSG,
        |v| {
            set(v, "replicationFactor", json!(2));
            set(v, "replication.factor", json!(2));
        },
    );
}

fn storage(t: &mut Table) {
    t.bad("bad-type", "storage.secret.type", json!("ftp"));
    t.bad("empty-secret-name", "storage.secret.name", json!(""));
    t.bad(
        "bad-credential-mode",
        "storage.secret.credentialMode",
        json!("sts"),
    );
    t.case("no-secret", "spec.storage.secret", EVERY_SERVER, |v| {
        set(v, "storage", json!({}));
    });
    t.case(
        "no-secret-type",
        "spec.storage.secret.type",
        EVERY_SERVER,
        |v| {
            set(v, "storage.secret", json!({"name": "loki-s3"}));
        },
    );
    t.case(
        "no-secret-name",
        "spec.storage.secret.name",
        EVERY_SERVER,
        |v| {
            set(v, "storage.secret", json!({"type": "s3"}));
        },
    );
    let schema = |version: &str, date: &str| json!([{"version": version, "effectiveDate": date}]);
    t.case(
        "bad-schema-version",
        "spec.storage.schemas[0].version",
        EVERY_SERVER,
        |v| set(v, "storage.schemas", schema("v9", "2024-04-02")),
    );
    t.case(
        "bad-schema-date",
        "spec.storage.schemas[0].effectiveDate",
        EVERY_SERVER,
        |v| set(v, "storage.schemas", schema("v13", "yesterday")),
    );
    t.case(
        "no-schema-version",
        "spec.storage.schemas[0].version",
        EVERY_SERVER,
        |v| {
            set(
                v,
                "storage.schemas",
                json!([{"effectiveDate": "2024-04-02"}]),
            )
        },
    );
    // The pattern alone admits it; the format checks the calendar.
    t.case(
        "schema-date-not-a-day",
        "spec.storage.schemas[0].effectiveDate",
        EVERY_SERVER,
        |v| set(v, "storage.schemas", schema("v13", "2024-02-31")),
    );
    t.case(
        "no-schema-date",
        "spec.storage.schemas[0].effectiveDate",
        EVERY_SERVER,
        |v| set(v, "storage.schemas", json!([{"version": "v13"}])),
    );
    // A list map keyed by date: every server rejects a date given twice, naming the entry.
    t.case("dup-dates", "spec.storage.schemas[1]", EVERY_SERVER, |v| {
        let two = json!([
            {"version": "v12", "effectiveDate": "2024-04-02"},
            {"version": "v13", "effectiveDate": "2024-04-02"},
        ]);
        set(v, "storage.schemas", two);
    });
    t.bad("tls-empty-ca", "storage.tls.caName", json!(""));
    t.bad("tls-long-ca", "storage.tls.caName", json!("a".repeat(254)));
    t.case("tls-no-ca", "spec.storage.tls.caName", EVERY_SERVER, |v| {
        set(v, "storage.tls", json!({"caKey": "ca.crt"}));
    });
    t.case("tls-bad-key", "spec.storage.tls.caKey", EVERY_SERVER, |v| {
        set(v, "storage.tls", json!({"caName": "ca", "caKey": "a/b"}));
    });
    t.case(
        "tls-empty-key",
        "spec.storage.tls.caKey",
        EVERY_SERVER,
        |v| {
            set(v, "storage.tls", json!({"caName": "ca", "caKey": ""}));
        },
    );
    t.case(
        "tls-long-key",
        "spec.storage.tls.caKey",
        EVERY_SERVER,
        |v| {
            set(
                v,
                "storage.tls",
                json!({"caName": "ca", "caKey": "a".repeat(254)}),
            );
        },
    );
    t.cel("tls-for-gcs", "spec.storage.tls", RULE_TLS_S3_MSG, |v| {
        set(v, "storage.secret.type", json!("gcs"));
        set(v, "storage.tls", json!({"caName": "ca"}));
    });
}

fn replication(t: &mut Table) {
    t.bad("factor-below-1", "replication.factor", json!(0));
    t.bad(
        "factor-above-max",
        "replication.factor",
        json!(MAX_REPLICATION_FACTOR + 1),
    );
    t.bad(
        "max-unavailable-per-zone-below-1",
        "replication.maxUnavailablePerZone",
        json!(0),
    );
    t.bad(
        "max-unavailable-per-zone-above-max",
        "replication.maxUnavailablePerZone",
        json!(MAX_REPLICAS + 1),
    );
    let zone_case = |t: &mut Table, name: &str, field: &str, since: u32, zones: Value| {
        t.case(name, field, since, |v| set(v, "replication.zones", zones));
    };
    let key0 = "spec.replication.zones[0].topologyKey";
    let skew0 = "spec.replication.zones[0].maxSkew";
    let z = |key: &str| json!([{"topologyKey": key}]);
    zone_case(
        t,
        "skew-below-1",
        skew0,
        EVERY_SERVER,
        json!([{"topologyKey": ZONE, "maxSkew": 0}]),
    );
    zone_case(
        t,
        "skew-above-max",
        skew0,
        EVERY_SERVER,
        json!([{"topologyKey": ZONE, "maxSkew": MAX_SKEW + 1}]),
    );
    zone_case(t, "key-not-a-label", key0, EVERY_SERVER, z("not a label"));
    zone_case(t, "key-empty", key0, EVERY_SERVER, z(""));
    zone_case(t, "key-two-slashes", key0, EVERY_SERVER, z("a/b/c"));
    zone_case(
        t,
        "key-upper-prefix",
        key0,
        EVERY_SERVER,
        z("Topology.io/zone"),
    );
    zone_case(
        t,
        "key-name-over-63",
        key0,
        EVERY_SERVER,
        z(&format!("x.io/{}", "a".repeat(64))),
    );
    let too_long = format!(
        "{}/{}",
        "a".repeat(253),
        "b".repeat(QUALIFIED_NAME_MAX_LEN - 253)
    );
    zone_case(t, "key-over-max-length", key0, EVERY_SERVER, z(&too_long));
    // The pattern cannot count the prefix: only CEL bounds it to 253 characters.
    let long_prefix = z(&format!("{}/zone", "a".repeat(254)));
    t.cel("key-prefix-over-253", key0, RULE_KEY_PREFIX_MSG, |v| {
        set(v, "replication.zones", long_prefix)
    });
    zone_case(
        t,
        "key-missing",
        key0,
        EVERY_SERVER,
        json!([{"maxSkew": 1}]),
    );
    zone_case(
        t,
        "many-zones",
        "spec.replication.zones",
        EVERY_SERVER,
        json!([{"topologyKey": "a"}, {"topologyKey": "b"}, {"topologyKey": "c"}, {"topologyKey": "d"}]),
    );
    // A list map keyed by topologyKey: every server rejects a key given twice, naming the
    // entry; CEL servers say why in words as well.
    zone_case(
        t,
        "dup-keys",
        "spec.replication.zones[1]",
        EVERY_SERVER,
        json!([{"topologyKey": ZONE}, {"topologyKey": ZONE, "maxSkew": 2}]),
    );
    if let Some(last) = t.0.last_mut() {
        last.cel_message = Some(RULE_UNIQUE_KEYS_MSG);
    }
    for (name, value) in [
        ("recover-after-unit", "15d"),
        ("recover-after-empty", ""),
        ("recover-after-huge", "1234567m"),
        // Below the floor of 5 minutes (see RECOVER_AFTER_FLOOR_SECS).
        ("recover-after-zero", "0s"),
        ("recover-after-299s", "299s"),
        ("recover-after-4m", "4m"),
        ("recover-after-0h", "0h"),
    ] {
        t.bad(name, "replication.zoneOutage.recoverAfter", json!(value));
    }
}

/// The limits of every tenant and of one named tenant share a schema; both are checked.
fn limits(t: &mut Table) {
    let bounds: [(&str, i64, i64); 15] = [
        ("ingestion.ingestionRate", 1, 100_000),
        ("ingestion.ingestionBurstSize", 1, 100_000),
        ("ingestion.maxLineSize", 1, 104_857_600),
        ("ingestion.maxGlobalStreamsPerTenant", 1, 100_000_000),
        ("ingestion.maxLabelNameLength", 1, 65_536),
        ("ingestion.maxLabelValueLength", 1, 65_536),
        ("ingestion.maxLabelNamesPerSeries", 1, 1_000),
        ("ingestion.perStreamRateLimit", 1, 100_000),
        ("ingestion.perStreamRateLimitBurst", 1, 100_000),
        ("ingestion.perStreamDesiredRate", 1, 100_000),
        ("queries.maxEntriesLimitPerQuery", 1, 100_000_000),
        ("queries.maxQuerySeries", 1, 100_000_000),
        ("queries.maxChunksPerQuery", 1, 100_000_000),
        ("queries.cardinalityLimit", 1, 100_000_000),
        ("queries.maxVolumeSeries", 1, 100_000_000),
    ];
    for (scope, tag) in [("global", "g"), ("tenants.team-a", "t")] {
        let at = |path: &str| format!("limits.{scope}.{path}");
        for (i, (path, min, max)) in bounds.iter().enumerate() {
            t.bad(
                &format!("limit-{tag}{i}-below-min"),
                &at(path),
                json!(min - 1),
            );
            t.bad(
                &format!("limit-{tag}{i}-above-max"),
                &at(path),
                json!(max + 1),
            );
        }
        t.bad(
            &format!("query-timeout-{tag}"),
            &at("queries.queryTimeout"),
            json!("3 minutes"),
        );
        t.bad(
            &format!("retention-{tag}-below-0"),
            &at("retention.days"),
            json!(-1),
        );
        t.bad(
            &format!("retention-{tag}-above-max"),
            &at("retention.days"),
            json!(36_501),
        );
        let retention = at("retention");
        let field = |key: &str| format!("spec.{retention}.{key}");
        t.case(
            &format!("retention-{tag}-no-days"),
            &field("days"),
            EVERY_SERVER,
            |v| {
                set(v, &retention, json!({}));
            },
        );
        let stream = |s: Value| json!({"days": 7, "streams": [s]});
        let selector = "{a=\"b\"}";
        let streams = [
            (
                "days-below-0",
                "days",
                json!({"days": -1, "selector": selector}),
            ),
            (
                "days-above-max",
                "days",
                json!({"days": 36_501, "selector": selector}),
            ),
            (
                "priority-below-0",
                "priority",
                json!({"days": 1, "priority": -1, "selector": selector}),
            ),
            (
                "priority-above-max",
                "priority",
                json!({"days": 1, "priority": 2_147_483_648_i64, "selector": selector}),
            ),
            (
                "selector-short",
                "selector",
                json!({"days": 1, "selector": "{}"}),
            ),
            ("no-selector", "selector", json!({"days": 1})),
            ("no-days", "days", json!({"selector": selector})),
        ];
        for (name, key, s) in streams {
            let f = field(&format!("streams[0].{key}"));
            t.case(&format!("stream-{tag}-{name}"), &f, EVERY_SERVER, |v| {
                set(v, &retention, stream(s));
            });
        }
        // Loki would expand it from its environment, where the credentials are. (A `$` in
        // a tenant name is a map key, which a CRD cannot constrain: the reconciler refuses
        // it, see checks/validate.rs.)
        let f = field("streams[0].selector");
        t.case(&format!("stream-{tag}-dollar"), &f, EVERY_SERVER, |v| {
            let s = json!({"days": 1, "selector": "{a=\"${AWS_SECRET_ACCESS_KEY}\"}"});
            set(v, &retention, stream(s));
        });
        blocked_and_otlp(t, scope, tag);
    }
}

/// Blocked queries and OTLP attribute rules: names required, no `$` in what reaches
/// Loki's config, query types from the enum.
fn blocked_and_otlp(t: &mut Table, scope: &str, tag: &str) {
    let blocked = format!("limits.{scope}.queries.blocked");
    let cases = [
        (
            "dollar",
            "pattern",
            json!({"pattern": "{a=\"${AWS_SECRET_ACCESS_KEY}\"}"}),
        ),
        (
            "type",
            "types[0]",
            json!({"pattern": "x", "types": ["all"]}),
        ),
    ];
    let cases = cases.into_iter().chain([
        (
            "hash-below-min",
            "hash",
            json!({"hash": -2_147_483_649_i64}),
        ),
        ("hash-above-max", "hash", json!({"hash": 4_294_967_296_i64})),
    ]);
    for (name, key, item) in cases {
        let f = format!("spec.{blocked}[0].{key}");
        t.case(&format!("blocked-{tag}-{name}"), &f, EVERY_SERVER, |v| {
            set(v, &blocked, json!([item]));
        });
    }
    let lists = [
        ("labels", "streamLabels.resourceAttributes"),
        ("resource", "drop.resourceAttributes"),
        ("scope", "drop.scopeAttributes"),
        ("log", "drop.logAttributes"),
    ];
    for (short, list) in lists {
        let path = format!("limits.{scope}.otlp.{list}");
        let f = format!("spec.{path}[0].name");
        let cases = [
            ("no-name", json!({"regex": true})),
            ("dollar", json!({"name": "k8s.${HOSTNAME}"})),
        ];
        for (name, item) in cases {
            t.case(
                &format!("otlp-{tag}-{short}-{name}"),
                &f,
                EVERY_SERVER,
                |v| {
                    set(v, &path, json!([item]));
                },
            );
        }
    }
}

/// Every valid case: the samples, the bundle's alm-examples, and values at the bounds.
pub fn valid_cases() -> Result<Vec<Valid>> {
    let mut cases = Vec::new();
    for (origin, body) in published_examples()? {
        // Renamed so the samples (some share a name) live side by side; their names are
        // short, and the name bound has its own cases.
        let name = format!("example-{}", cases.len());
        let mut body = body;
        body["metadata"] = json!({"name": name});
        cases.push(Valid {
            name: format!("{name} ({origin})"),
            body,
        });
    }
    let mut bound = |name: &str, mutate: &dyn Fn(&mut Value)| {
        cases.push(Valid {
            name: name.to_string(),
            body: with(name, mutate),
        });
    };
    bound(&"a".repeat(MAX_STACK_NAME_LEN), &|_| {});
    // The Go Loki Operator's fields this operator keeps without acting on.
    bound("go-operator-fields", &|v| {
        set(v, "tenants", json!({"mode": "openshift-logging"}));
        set(v, "hashRing", json!({"type": "memberlist"}));
        set(v, "template.gateway", json!({"replicas": 2}));
        set(v, "template.ingester.podAntiAffinity", json!({}));
        set(v, "storage.secret.credentialMode", json!("token"));
        set(v, "rules.selector", json!({"matchLabels": {"team": "a"}}));
        set(v, "limits.global.otlp", json!({"streamLabels": {}}));
    });
    // The Go Loki Operator's fields this operator acts on, with every part set.
    bound("go-operator-ring-otlp-blocked", &|v| {
        let memberlist = json!({"instanceAddrType": "podIP", "enableIPv6": true});
        set(
            v,
            "hashRing",
            json!({"type": "memberlist", "memberlist": memberlist}),
        );
        let term = json!({
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "ingester"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["logs"]}]},
            "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            "namespaces": ["logs"],
        });
        let anti = json!({
            "requiredDuringSchedulingIgnoredDuringExecution": [term],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term},
                {"weight": 100, "podAffinityTerm": term},
            ],
        });
        for c in COMPONENTS {
            set(v, &format!("template.{c}.podAntiAffinity"), anti.clone());
        }
        let attrs =
            |name: &str| json!([{"name": name}, {"name": format!("{name}\\..+"), "regex": true}]);
        let otlp = |label: &str| {
            json!({
                "streamLabels": {"resourceAttributes": attrs(label)},
                "drop": {"resourceAttributes": attrs("process"), "scopeAttributes": attrs("scope"), "logAttributes": attrs("log")},
            })
        };
        let blocked = json!([
            {"pattern": "{a=\"b\"} |= \"x\"", "types": ["filter", "limited", "metric"]},
            {"pattern": ".*secret.*\\z", "regex": true},
            {"hash": -2147483648}, {"hash": 2147483647},
        ]);
        set(v, "limits.global.otlp", otlp("k8s.namespace.name"));
        set(v, "limits.global.queries.blocked", blocked.clone());
        set(v, "limits.tenants.team-a.otlp", otlp("service.name"));
        set(v, "limits.tenants.team-a.queries.blocked", blocked);
    });
    bound("factors-min", &|v| set(v, "replication.factor", json!(1)));
    bound("factors-max", &|v| {
        set(v, "replication.factor", json!(MAX_REPLICATION_FACTOR))
    });
    bound("rf-min", &|v| set(v, "replicationFactor", json!(1)));
    bound("rf-max", &|v| {
        set(v, "replicationFactor", json!(MAX_REPLICATION_FACTOR))
    });
    let longest_key = format!(
        "{}/{}",
        "a".repeat(253),
        "b".repeat(QUALIFIED_NAME_MAX_LEN - 254)
    );
    bound("zones-at-bounds", &|v| {
        let zones = json!([
            {"topologyKey": ZONE, "maxSkew": 1},
            {"topologyKey": "rack", "maxSkew": MAX_SKEW},
            {"topologyKey": longest_key},
        ]);
        set(
            v,
            "replication",
            json!({"factor": 3, "zones": zones, "zoneOutage": {"recoverAfter": "999999h"}, "maxUnavailablePerZone": MAX_REPLICAS}),
        );
    });
    bound("max-unavailable-per-zone-min", &|v| {
        set(v, "replication.maxUnavailablePerZone", json!(1))
    });
    bound("replicas-min", &|v| {
        for c in COMPONENTS {
            set(v, &format!("template.{c}.replicas"), json!(0));
        }
    });
    bound("replicas-max", &|v| {
        for c in COMPONENTS {
            set(v, &format!("template.{c}.replicas"), json!(MAX_REPLICAS));
        }
        set(v, "template.ingester.nodeSelector", json!({"pool": "loki"}));
        set(
            v,
            "template.ingester.tolerations",
            json!([{"key": "dedicated", "operator": "Equal", "value": "loki", "effect": "NoSchedule"}]),
        );
    });
    bound("tls-s3", &|v| {
        set(
            v,
            "storage.tls",
            json!({"caName": "a".repeat(253), "caKey": "service-ca.crt"}),
        );
        let schemas = json!([
            {"version": "v11", "effectiveDate": "2020-01-01"},
            {"version": "v12", "effectiveDate": "2022-01-01"},
            {"version": "v13", "effectiveDate": "2024-04-02"},
        ]);
        set(v, "storage.schemas", schemas);
    });
    bound("limits-min", &|v| set(v, "limits", limits_at(1, 0)));
    bound("limits-max", &|v| {
        set(v, "limits", limits_at(i64::MAX, 36_500))
    });
    bound("unmanaged-ruler", &|v| {
        set(v, "managementState", json!("Unmanaged"));
        set(v, "rules", json!({"enabled": true}));
        set(v, "storageClassName", json!("zonal"));
    });
    for (size, store) in ["1x.pico", "1x.extra-small", "1x.small", "1x.medium"]
        .into_iter()
        .zip(["gcs", "azure", "swift", "alibabacloud"])
    {
        bound(&format!("size-{}-{store}", size.replace('.', "-")), &|v| {
            set(v, "size", json!(size));
            set(v, "storage.secret.type", json!(store));
        });
    }
    Ok(cases)
}

/// Limits with every bounded value at its minimum (`min` 1) or maximum (`min` MAX).
fn limits_at(min: i64, days: i64) -> Value {
    let pick = |max: i64| if min == i64::MAX { max } else { min };
    let ingestion = json!({
        "ingestionRate": pick(100_000), "ingestionBurstSize": pick(100_000),
        "maxLineSize": pick(104_857_600), "maxGlobalStreamsPerTenant": pick(100_000_000),
        "maxLabelNameLength": pick(65_536), "maxLabelValueLength": pick(65_536),
        "maxLabelNamesPerSeries": pick(1_000), "perStreamRateLimit": pick(100_000),
        "perStreamRateLimitBurst": pick(100_000), "perStreamDesiredRate": pick(100_000),
    });
    let queries = json!({
        "maxEntriesLimitPerQuery": pick(100_000_000), "maxQuerySeries": pick(100_000_000),
        "maxChunksPerQuery": pick(100_000_000), "cardinalityLimit": pick(100_000_000),
        "maxVolumeSeries": pick(100_000_000), "queryTimeout": "1m30s",
    });
    let retention =
        json!({"days": days, "streams": [{"days": days, "priority": 0, "selector": "{a=\"b\"}"}]});
    let all = json!({"ingestion": ingestion, "queries": queries, "retention": retention});
    json!({"global": all, "tenants": {"team-a": all}})
}

/// The LokiStacks users are shown: `manifests/samples/lokistack-*.yaml` and the bundle
/// CSV's alm-examples, with where each came from.
pub fn published_examples() -> Result<Vec<(String, Value)>> {
    let root = repo_root();
    let mut out = Vec::new();
    let mut samples: Vec<_> = std::fs::read_dir(root.join("manifests/samples"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lokistack-"))
        })
        .collect();
    samples.sort();
    for path in samples {
        let text = std::fs::read_to_string(&path)?;
        let body: Value =
            serde_yaml_ng::from_str(&text).with_context(|| format!("{}", path.display()))?;
        out.push((
            format!(
                "manifests/samples/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
            body,
        ));
    }
    let csv_path = root.join("bundle/manifests/loki-zone-operator.clusterserviceversion.yaml");
    let csv: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&csv_path)?)?;
    let examples = csv["metadata"]["annotations"]["alm-examples"]
        .as_str()
        .context("the CSV has no alm-examples")?;
    let examples: Vec<Value> = serde_json::from_str(examples).context("alm-examples")?;
    // The ruler's kinds among them are checked apart (tests/admission.rs).
    for (i, e) in examples.into_iter().enumerate() {
        if e["kind"] == "LokiStack" {
            out.push((format!("alm-examples[{i}]"), e));
        }
    }
    if out.len() < 3 {
        bail!(
            "expected at least two samples and one alm-example, found {}",
            out.len()
        );
    }
    Ok(out)
}

/// `spec.replication.zones[0].maxSkew` -> `spec.replication.zones.maxSkew`. Only numeric
/// indexes go: a message listing several errors is itself wrapped in `[...]`.
pub fn unindexed(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && after[digits..].starts_with(']') {
            rest = &after[digits + 1..];
        } else {
            out.push('[');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Whether an error message names `field`: current servers write list items with their
/// index (`zones[0].maxSkew`), older ones (1.20) wrote it without (`zones.maxSkew`).
pub fn names_field(message: &str, field: &str) -> bool {
    message.contains(field) || unindexed(message).contains(&unindexed(field))
}

/// Creates `body` as raw JSON (the typed API could not even hold some of these values);
/// `dry_run` validates and admits it without storing it.
pub async fn create(
    client: &kube::Client,
    ns: &str,
    body: &Value,
    dry_run: bool,
) -> std::result::Result<(), kube::Error> {
    let obj: DynamicObject =
        serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
    let ar = ApiResource::erase::<LokiStack>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let pp = PostParams {
        dry_run,
        ..PostParams::default()
    };
    api.create(&pp, &obj).await.map(|_| ())
}

/// Checks that the server rejected `case` as invalid (422) naming its field, and, on a
/// server with CEL (`minor` 25+), with the message of the CEL rule the case breaks.
pub fn expect_rejected(
    case: &Invalid,
    minor: u32,
    result: std::result::Result<(), kube::Error>,
) -> Result<()> {
    let rule = case.cel_message.filter(|_| minor >= CEL);
    match result {
        Err(kube::Error::Api(e))
            if e.code == 422
                && names_field(&e.message, &case.field)
                && rule.is_none_or(|m| e.message.contains(m)) =>
        {
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 422 && names_field(&e.message, &case.field) => bail!(
            "{}: rejected naming {}, but not by its CEL rule ({:?}): {}",
            case.name,
            case.field,
            rule.unwrap_or_default(),
            e.message
        ),
        Err(kube::Error::Api(e)) => bail!(
            "{}: rejected with {} but without naming {}: {}",
            case.name,
            e.code,
            case.field,
            e.message
        ),
        Err(e) => bail!("{}: unexpected error {e}", case.name),
        Ok(()) => bail!(
            "{}: the API server accepted an invalid spec (want {} named)",
            case.name,
            case.field
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unindexed_drops_only_list_indexes() {
        assert_eq!(unindexed("a.zones[0].maxSkew"), "a.zones.maxSkew");
        assert_eq!(unindexed("a.b[12][3].c"), "a.b.c");
        assert_eq!(
            unindexed("[spec.zones[1].key: bad, spec.x: worse]"),
            "[spec.zones.key: bad, spec.x: worse]"
        );
        assert_eq!(unindexed("[x"), "[x");
    }

    #[test]
    fn a_field_is_named_with_or_without_its_index() {
        let m = "[spec.replication.zones.topologyKey: Invalid value: \"\"]";
        assert!(names_field(m, "spec.replication.zones[0].topologyKey"));
        assert!(names_field("spec.z[0].k: x", "spec.z[0].k"));
        assert!(!names_field("spec.z[0].other: x", "spec.z[0].k"));
    }
}
