//! The install paths users take, checked the way the tools they use would check them.
//!
//! OLM: the bundle matches manifests/ (no drift); the CSV passes the checks of
//! operator-sdk's bundle validation that matter (required fields, names and versions,
//! install modes, `alm-examples` against the CRD, owned CRDs against the bundle's files,
//! icon, related images, size), and OLM's own ClusterServiceVersion schema accepts it on
//! a real API server (server-side dry-run), as it accepts the examples against our CRD.
//!
//! kustomize: overlays compose (an `images:` entry also changes `RELATED_IMAGE_ZONE_WAIT`,
//! a `namespace:` moves every object and RBAC subject, a `namePrefix` renames what the
//! operator is told about too), the optional pieces are components, and the result
//! applies on the test API server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use loki_zone_operator::checks::kube_version::{KubeVersion, MIN_KUBE_VERSION};
use loki_zone_operator::model::names;
use loki_zone_operator_tests::bundle::{
    self, annotations, kustomize, kustomize_operator, kustomize_text, write_overlay, CHANNEL,
    CHILD_KINDS, ICON, ICON_MEDIATYPE, PACKAGE, VERSION,
};
use loki_zone_operator_tests::harness::ControlPlane;
use loki_zone_operator_tests::{client_for, repo_root, runtime};
use serde_json::{json, Value};

const CSV_FILE: &str = "bundle/manifests/loki-zone-operator.clusterserviceversion.yaml";
const BASE_IMAGE: &str = "ghcr.io/loki-zone-operator/loki-zone-operator";
const BASE_ZONE_WAIT: &str = "ghcr.io/loki-zone-operator/loki-zone-wait";
const BASE_NAMESPACE: &str = "loki-zone-operator-system";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("yaml")
}

/// The committed CSV (the drift test ties it to the generator).
fn csv() -> Value {
    yaml(&read(CSV_FILE))
}

/// Every manifest of the bundle's manifests/ directory: (file name, object).
fn bundle_manifests() -> Vec<(String, Value)> {
    let dir = repo_root().join("bundle/manifests");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("bundle/manifests")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read");
            (file_name(&p), yaml(&text))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn examples(csv: &Value) -> Vec<Value> {
    let text = csv["metadata"]["annotations"]["alm-examples"]
        .as_str()
        .expect("alm-examples annotation");
    serde_json::from_str(text).expect("alm-examples is a JSON array of objects")
}

/// The bundle's CRDs (LokiStack first): each must be the one generated from the API types.
fn bundle_crds() -> Vec<Value> {
    loki_zone_operator_tests::apidoc::CRD_FILES
        .iter()
        .map(|f| yaml(&read(&format!("bundle/manifests/{f}"))))
        .collect()
}

/// The schema of the bundle CRD of `kind`.
fn crd_schema_of(kind: &str) -> Value {
    bundle_crds()
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD of {kind} in the bundle"))["spec"]["versions"][0]
        ["schema"]["openAPIV3Schema"]
        .clone()
}

fn crd_schema() -> Value {
    crd_schema_of("LokiStack")
}

// ---------------------------------------------------------------------------------
// The bundle as files

#[test]
fn committed_bundle_matches_manifests() {
    for (path, want) in bundle::files().expect("generate bundle") {
        let got = std::fs::read_to_string(repo_root().join(&path)).unwrap_or_default();
        assert!(
            got == want,
            "{path} drifted from manifests/: run `make bundle`"
        );
    }
}

/// A DNS-1123 subdomain that is also a valid label value (OLM labels objects with it).
fn is_dns_subdomain_and_label_value(name: &str) -> bool {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    ok_chars && name.len() <= 63 && ends_ok(name.chars().next()) && ends_ok(name.chars().last())
}

fn semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

#[test]
fn csv_names_versions_and_required_fields() {
    let csv = csv();
    assert_eq!(csv["apiVersion"], "operators.coreos.com/v1alpha1");
    assert_eq!(csv["kind"], "ClusterServiceVersion");
    let name = csv["metadata"]["name"].as_str().expect("metadata.name");
    assert_eq!(name, format!("{PACKAGE}.v{VERSION}"), "<package>.v<semver>");
    assert!(is_dns_subdomain_and_label_value(name), "{name}");
    let spec = &csv["spec"];
    assert_eq!(spec["version"], VERSION);
    assert!(semver(VERSION), "spec.version {VERSION} is not semver");
    assert_eq!(spec["minKubeVersion"], bundle::min_kube_version());
    assert_eq!(spec["minKubeVersion"], "1.31.0");
    assert!(
        semver(&bundle::min_kube_version()),
        "minKubeVersion is not semver"
    );
    for field in ["displayName", "description", "maturity"] {
        let v = spec[field].as_str().unwrap_or_default();
        assert!(!v.trim().is_empty(), "spec.{field} missing");
    }
    assert!(!strs(&spec["keywords"]).is_empty(), "spec.keywords");
    assert!(
        !spec["provider"]["name"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "spec.provider.name"
    );
    let maintainers = spec["maintainers"].as_array().expect("maintainers");
    assert!(!maintainers.is_empty());
    for m in maintainers {
        let email = m["email"].as_str().unwrap_or_default();
        let (local, domain) = email.split_once('@').unwrap_or_default();
        assert!(
            !m["name"].as_str().unwrap_or_default().is_empty()
                && !local.is_empty()
                && domain.contains('.'),
            "maintainer needs a name and a valid email: {m}"
        );
    }
    for l in spec["links"].as_array().expect("links") {
        let url = l["url"].as_str().unwrap_or_default();
        assert!(
            !l["name"].as_str().unwrap_or_default().is_empty()
                && url.starts_with("https://")
                && !url.contains(char::is_whitespace),
            "link needs a name and a URL: {l}"
        );
    }
    // The values OperatorHub accepts.
    let capabilities = [
        "Basic Install",
        "Seamless Upgrades",
        "Full Lifecycle",
        "Deep Insights",
        "Auto Pilot",
    ];
    let annotations = &csv["metadata"]["annotations"];
    let capability = annotations["capabilities"].as_str().unwrap_or_default();
    assert!(capabilities.contains(&capability), "{capability}");
    let categories = [
        "AI/Machine Learning",
        "Application Runtime",
        "Big Data",
        "Cloud Provider",
        "Developer Tools",
        "Database",
        "Integration & Delivery",
        "Logging & Tracing",
        "Modernization & Migration",
        "Monitoring",
        "Networking",
        "OpenShift Optional",
        "Security",
        "Storage",
        "Streaming & Messaging",
    ];
    for c in annotations["categories"]
        .as_str()
        .unwrap_or_default()
        .split(',')
    {
        assert!(categories.contains(&c.trim()), "unknown category {c:?}");
    }
}

#[test]
fn install_modes_are_the_ones_the_operator_supports() {
    let csv = csv();
    let modes = csv["spec"]["installModes"]
        .as_array()
        .expect("installModes");
    let types: Vec<&str> = modes.iter().filter_map(|m| m["type"].as_str()).collect();
    let unique: BTreeSet<&str> = types.iter().copied().collect();
    assert_eq!(
        types.len(),
        unique.len(),
        "duplicate install modes: {types:?}"
    );
    assert_eq!(
        unique,
        BTreeSet::from([
            "AllNamespaces",
            "MultiNamespace",
            "OwnNamespace",
            "SingleNamespace"
        ]),
        "every install mode is stated"
    );
    let supported: Vec<&str> = modes
        .iter()
        .filter(|m| m["supported"] == true)
        .filter_map(|m| m["type"].as_str())
        .collect();
    // WATCH_NAMESPACES confines the operator to OLM's target namespaces, and every
    // namespaced right is in `permissions`, which OLM grants per target namespace.
    assert_eq!(
        supported,
        vec![
            "OwnNamespace",
            "SingleNamespace",
            "MultiNamespace",
            "AllNamespaces"
        ]
    );
    let install = &csv["spec"]["install"]["spec"];
    let env = install["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    let watch = env
        .iter()
        .find(|e| e["name"] == "WATCH_NAMESPACES")
        .expect("WATCH_NAMESPACES");
    assert_eq!(
        watch["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['olm.targetNamespaces']"
    );
}

/// The resources a rule names.
fn rule_resources(rules: &Value) -> Vec<(String, String, Vec<String>)> {
    rules
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|r| {
            let verbs: Vec<String> = strs(&r["verbs"]).iter().map(|v| v.to_string()).collect();
            let groups = strs(&r["apiGroups"]);
            strs(&r["resources"])
                .into_iter()
                .flat_map(move |res| {
                    let verbs = verbs.clone();
                    groups
                        .clone()
                        .into_iter()
                        .map(move |g| (g.to_string(), res.to_string(), verbs.clone()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The rules of every `permissions` entry of the CSV (OLM makes a Role of each).
fn csv_permission_rules(install: &Value) -> Value {
    Value::Array(
        install["permissions"]
            .as_array()
            .expect("permissions")
            .iter()
            .flat_map(|p| p["rules"].as_array().cloned().expect("rules"))
            .collect(),
    )
}

const CLUSTER_SCOPED_READS: [&str; 5] = [
    "nodes",
    "persistentvolumes",
    "storageclasses",
    "customresourcedefinitions",
    "namespaces",
];

/// The one namespaced kind read cluster-wide: Leases, for the nodes' in `kube-node-lease`
/// (the fast failover). A ClusterRole cannot name one namespace, and a Role there would
/// move with an overlay's `namespace:`.
const CLUSTER_WIDE_READS: [&str; 1] = ["leases"];

#[test]
fn csv_splits_namespaced_rights_from_cluster_reads() {
    let csv = csv();
    let install = &csv["spec"]["install"]["spec"];
    // clusterPermissions: only cluster-scoped kinds, only reads.
    for (_, res, verbs) in rule_resources(&install["clusterPermissions"][0]["rules"]) {
        assert!(
            CLUSTER_SCOPED_READS.contains(&res.as_str())
                || CLUSTER_WIDE_READS.contains(&res.as_str()),
            "clusterPermissions grant {res}"
        );
        for v in verbs {
            assert!(["get", "list", "watch"].contains(&v.as_str()), "{res}: {v}");
        }
    }
    // permissions: every namespaced right; no cluster-scoped kind (OLM would make it a
    // Role, where it grants nothing).
    let namespaced = rule_resources(&csv_permission_rules(install));
    for (_, res, _) in &namespaced {
        assert!(!CLUSTER_SCOPED_READS.contains(&res.as_str()), "{res}");
    }
    let has = |res: &str, verb: &str| {
        namespaced
            .iter()
            .any(|(_, r, v)| r == res && v.iter().any(|x| x == verb))
    };
    for (res, verb) in [
        ("lokistacks", "watch"),
        ("lokistacks/status", "patch"),
        ("alertingrules", "watch"),
        ("recordingrules", "watch"),
        ("rulerconfigs", "watch"),
        ("alertingrules/status", "patch"),
        ("pods", "patch"),
        ("pods/status", "patch"),
        ("statefulsets", "create"),
        ("events", "create"),
        ("leases", "update"),
        ("secrets", "get"),
    ] {
        assert!(has(res, verb), "permissions lack {verb} {res}");
    }
    assert!(!has("secrets", "list") && !has("secrets", "watch"));
}

/// The Lease the operator leads on: the default of its `--lease-name` (env LEASE_NAME),
/// read from operator/src/main.rs so that a changed default fails here.
fn default_lease_name() -> String {
    let main = read("operator/src/main.rs");
    let line = main
        .lines()
        .find(|l| l.contains("env = \"LEASE_NAME\""))
        .expect("the LEASE_NAME argument in operator/src/main.rs");
    let (_, rest) = line
        .split_once("default_value = \"")
        .expect("a default_value on the LEASE_NAME line");
    rest.split('"').next().unwrap_or_default().to_string()
}

/// Lease rules grant `get` and `update` on the operator's own Lease only, by name, and
/// `create` (which cannot be limited to a name) alone; nothing else on Leases.
fn leases_only_by_name(what: &str, rules: &Value, lease: &str) {
    let mut by_name = BTreeSet::new();
    let mut create = false;
    for r in rules.as_array().expect("rules") {
        if !strs(&r["resources"]).contains(&"leases") {
            continue;
        }
        assert_eq!(strs(&r["apiGroups"]), vec!["coordination.k8s.io"], "{what}");
        assert_eq!(strs(&r["resources"]), vec!["leases"], "{what}: {r}");
        let verbs = strs(&r["verbs"]);
        if verbs == vec!["create"] && r.get("resourceNames").is_none() {
            create = true;
            continue;
        }
        assert_eq!(
            strs(&r["resourceNames"]),
            vec![lease],
            "{what}: a Lease rule not limited to the operator's Lease: {r}"
        );
        for v in verbs {
            assert!(["get", "update"].contains(&v), "{what}: {v} on leases");
            by_name.insert(v);
        }
    }
    assert_eq!(by_name, BTreeSet::from(["get", "update"]), "{what}");
    assert!(create, "{what}: no create on leases");
}

#[test]
fn leases_are_written_only_by_name_and_read_only_as_the_nodes() {
    let lease = default_lease_name();
    assert_eq!(lease, "loki-zone-operator");
    let base = kustomize_operator().expect("kustomize");
    let role = bundle::named(&base, "Role", bundle::LEADER_ELECTION_ROLE).expect("Role");
    leases_only_by_name("the leader-election Role", &role["rules"], &lease);
    // No other Role or ClusterRole of any install mentions Leases, but the cluster
    // reader's read of the nodes' (`node_leases_read_only`).
    let dir = scratch("leases-namespaced");
    bundle::write_namespaced_overlay(&dir, &["team-a"], "").expect("overlay");
    for objects in [base.clone(), kustomize(&dir).expect("kustomize")] {
        for o in objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        {
            if o["metadata"]["name"] == bundle::CLUSTER_READER {
                node_leases_read_only("the cluster reader", &o["rules"]);
                continue;
            }
            let mentions = rule_resources(&o["rules"])
                .iter()
                .any(|(_, res, _)| res == "leases");
            assert_eq!(
                mentions,
                o["metadata"]["name"] == bundle::LEADER_ELECTION_ROLE,
                "{} {}",
                o["kind"],
                o["metadata"]["name"]
            );
        }
    }
    // The CSV: the Lease rules are `permissions` (a Role in the operator's namespace; in
    // AllNamespaces mode OLM lifts every permission to a ClusterRole, and the names still
    // keep other Leases, such as kube-system's and the nodes', out of reach), a Role of
    // their own, and never `clusterPermissions`.
    let csv = csv();
    let install = &csv["spec"]["install"]["spec"];
    node_leases_read_only(
        "the CSV's clusterPermissions",
        &install["clusterPermissions"][0]["rules"],
    );
    let permissions = install["permissions"].as_array().expect("permissions");
    let with_leases: Vec<&Value> = permissions
        .iter()
        .filter(|p| {
            rule_resources(&p["rules"])
                .iter()
                .any(|(_, res, _)| res == "leases")
        })
        .collect();
    assert_eq!(with_leases.len(), 1, "one permissions entry for the Lease");
    assert_eq!(with_leases[0]["rules"], role["rules"]);
    leases_only_by_name("the CSV", &csv_permission_rules(install), &lease);
}

/// The rules grant Leases exactly once, read-only: the nodes' Leases the fast failover
/// watches (`get`, `list`, `watch`), never by name, never a write.
fn node_leases_read_only(what: &str, rules: &Value) {
    let leases: Vec<&Value> = rules
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| strs(&r["resources"]).contains(&"leases"))
        .collect();
    assert_eq!(leases.len(), 1, "{what}: one rule on Leases");
    let r = leases[0];
    assert_eq!(strs(&r["apiGroups"]), vec!["coordination.k8s.io"], "{what}");
    assert_eq!(strs(&r["resources"]), vec!["leases"], "{what}");
    assert_eq!(strs(&r["verbs"]), vec!["get", "list", "watch"], "{what}");
}

/// The Role of the zone-at-bind webhook's certificate (kustomize installs only; OLM
/// manages the certificate itself).
const WEBHOOK_CERT_ROLE: &str = "loki-zone-operator-webhook-cert";
const WEBHOOK_CONFIGURATION_ROLE: &str = "loki-zone-operator-webhook-configuration";

/// The webhook certificate's Role writes one Secret, by name, and lists nothing.
fn webhook_certificate_only(name: &str, rules: &Value) {
    for r in rules.as_array().expect("rules") {
        let verbs = strs(&r["verbs"]);
        assert_eq!(strs(&r["resources"]), vec!["secrets"], "{name}");
        if verbs == vec!["create"] {
            continue; // create cannot be limited to a name
        }
        assert_eq!(verbs, vec!["get", "update"], "{name}");
        assert_eq!(
            strs(&r["resourceNames"]),
            vec![loki_zone_operator::model::names::WEBHOOK_CERT_SECRET],
            "{name}"
        );
    }
}

#[test]
fn secrets_are_only_read_by_name_in_every_install() {
    let dir = scratch("secrets-namespaced");
    bundle::write_namespaced_overlay(&dir, &["team-a"], "").expect("overlay");
    let installs = [
        ("make deploy", kustomize_operator().expect("kustomize")),
        ("namespaced", kustomize(&dir).expect("kustomize")),
    ];
    let csv = csv();
    let install = &csv["spec"]["install"]["spec"];
    let mut rules: Vec<(String, Value)> = installs
        .iter()
        .flat_map(|(name, objects)| {
            objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
                .map(move |o| {
                    (
                        format!("{name} {}", o["metadata"]["name"]),
                        o["rules"].clone(),
                    )
                })
        })
        .collect();
    rules.push(("CSV permissions".into(), csv_permission_rules(install)));
    rules.push((
        "CSV clusterPermissions".into(),
        install["clusterPermissions"][0]["rules"].clone(),
    ));
    let mut readers = 0;
    for (name, r) in rules {
        if name.ends_with(&format!("\"{WEBHOOK_CERT_ROLE}\"")) {
            webhook_certificate_only(&name, &r);
            continue;
        }
        for (_, res, verbs) in rule_resources(&r) {
            if res == "secrets" {
                assert_eq!(verbs, vec!["get"], "{name}");
                readers += 1;
            }
            assert!(
                res != "*" && !verbs.iter().any(|v| v == "*"),
                "{name}: wildcard"
            );
        }
    }
    assert_eq!(
        readers, 3,
        "the ClusterRole, the namespace's Role and the CSV"
    );
}

#[test]
fn namespaced_mode_has_roles_in_the_watched_namespaces_only() {
    let dir = scratch("namespaced");
    bundle::write_namespaced_overlay(&dir, &["team-a", "team-b"], "").expect("overlay");
    let objects = kustomize(&dir).expect("kustomize");
    let base = kustomize_operator().expect("kustomize");
    let namespaced_rules = &bundle::named(&base, "ClusterRole", bundle::NAMESPACED_RULES)
        .expect("ClusterRole")["rules"];
    // No ClusterRole but the cluster reads; a Role with the very rules of the default
    // install's ClusterRole in each watched namespace, bound to the operator.
    // Besides them, only the webhook configuration, which is cluster-scoped: one object,
    // by name.
    let cluster_roles: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .collect();
    let role_names: BTreeSet<&str> = cluster_roles
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        role_names,
        BTreeSet::from([bundle::CLUSTER_READER, WEBHOOK_CONFIGURATION_ROLE])
    );
    for role in &cluster_roles {
        if role["metadata"]["name"] == WEBHOOK_CONFIGURATION_ROLE {
            let rules: Vec<(Vec<&str>, Vec<&str>)> = role["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .map(|r| (strs(&r["resources"]), strs(&r["resourceNames"])))
                .collect();
            let one = |kind, name| (vec![kind], vec![name]);
            assert_eq!(
                rules,
                vec![
                    one(
                        "mutatingwebhookconfigurations",
                        loki_zone_operator::model::names::WEBHOOK_CONFIGURATION
                    ),
                    one(
                        "validatingwebhookconfigurations",
                        loki_zone_operator::model::names::WEBHOOK_DISRUPTION_CONFIGURATION
                    ),
                    // Itself, read by name: the owner of both configurations.
                    one(
                        "clusterroles",
                        loki_zone_operator::model::names::WEBHOOK_CONFIGURATION_CLUSTER_ROLE
                    ),
                ]
            );
            continue;
        }
        for (_, res, verbs) in rule_resources(&role["rules"]) {
            assert!(
                CLUSTER_SCOPED_READS.contains(&res.as_str())
                    || CLUSTER_WIDE_READS.contains(&res.as_str()),
                "{res}"
            );
            assert!(verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str())));
        }
    }
    let bindings: BTreeSet<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding")
        .filter_map(|b| b["roleRef"]["name"].as_str())
        .collect();
    assert_eq!(
        bindings,
        BTreeSet::from([bundle::CLUSTER_READER, WEBHOOK_CONFIGURATION_ROLE])
    );
    for ns in ["team-a", "team-b"] {
        let in_ns = |kind: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["namespace"] == ns)
                .unwrap_or_else(|| panic!("no {kind} in {ns}"))
        };
        assert_eq!(&in_ns("Role")["rules"], namespaced_rules, "{ns}");
        let rb = in_ns("RoleBinding");
        assert_eq!(rb["roleRef"]["kind"], "Role");
        assert_eq!(
            rb["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "loki-zone-operator", "namespace": BASE_NAMESPACE})
        );
    }
    let d = deployment(&objects);
    assert_eq!(env_value(d, "WATCH_NAMESPACES"), "team-a,team-b");
    let parsed = loki_zone_operator::caches::scope::Scope::parse("team-a,team-b");
    assert!(parsed.is_ok_and(|s| s.contains("team-b") && !s.contains("default")));
    // The component alone leaves a placeholder the operator refuses, naming it.
    let bare = scratch("namespaced-bare");
    write_overlay(&bare, &["namespaced"], "").expect("overlay");
    let objects = kustomize(&bare).expect("kustomize");
    let placeholder = env_value(deployment(&objects), "WATCH_NAMESPACES");
    assert!(placeholder.starts_with("SET-ME"), "{placeholder}");
    assert!(loki_zone_operator::caches::scope::Scope::parse(placeholder).is_err());
}

/// The zone-outage recovery in the namespaced mode: the same rules as the component's
/// ClusterRole, as a Role in each watched namespace that opts in, bound to the operator;
/// nothing cluster-wide and nothing elsewhere.
#[test]
fn namespaced_recovery_rights_are_roles_in_the_watched_namespaces() {
    const RECOVERY: &str = "loki-zone-operator-zone-outage-recovery";
    let component = scratch("recovery-cluster-wide");
    write_overlay(&component, &["zone-outage-recovery"], "").expect("overlay");
    let cluster_wide = kustomize(&component).expect("kustomize");
    let cluster_rules = &bundle::named(&cluster_wide, "ClusterRole", RECOVERY)
        .expect("the component's ClusterRole")["rules"];
    let role_file = yaml(&read(
        "manifests/watched-namespace/zone-outage-recovery/role.yaml",
    ));
    assert_eq!(
        &role_file["rules"], cluster_rules,
        "the per-namespace Role and the component's ClusterRole differ"
    );

    let dir = scratch("recovery-namespaced");
    bundle::write_namespaced_overlay_with(
        &dir,
        &["team-a", "team-b"],
        &["watched-namespace/zone-outage-recovery"],
        "",
    )
    .expect("overlay");
    let objects = kustomize(&dir).expect("kustomize");
    for o in &objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        if kind == "ClusterRole" || kind == "ClusterRoleBinding" {
            assert_ne!(
                o["metadata"]["name"], RECOVERY,
                "{kind} in the namespaced mode"
            );
            if kind == "ClusterRole" {
                for (_, res, _) in rule_resources(&o["rules"]) {
                    assert_ne!(res, "persistentvolumeclaims", "{kind} grants claims");
                }
            }
        }
    }
    for ns in ["team-a", "team-b"] {
        let named_in = |kind: &str| {
            objects
                .iter()
                .find(|o| {
                    o["kind"] == kind
                        && o["metadata"]["name"] == RECOVERY
                        && o["metadata"]["namespace"] == ns
                })
                .unwrap_or_else(|| panic!("no {kind} {RECOVERY} in {ns}"))
        };
        assert_eq!(&named_in("Role")["rules"], cluster_rules, "{ns}");
        let rb = named_in("RoleBinding");
        assert_eq!(
            rb["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RECOVERY})
        );
        assert_eq!(
            rb["subjects"],
            json!([{"kind": "ServiceAccount", "name": "loki-zone-operator", "namespace": BASE_NAMESPACE}])
        );
    }
    // Claims: read by name and deleted, never listed or watched, in both forms.
    for (_, res, verbs) in rule_resources(cluster_rules) {
        if res == "persistentvolumeclaims" {
            assert_eq!(verbs, vec!["get", "delete"]);
        }
    }
}

#[test]
fn owned_crds_match_the_bundle_crd_files() {
    let csv = csv();
    let owned = csv["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .expect("owned CRDs");
    let mut from_csv = BTreeSet::new();
    for o in owned {
        let name = o["name"].as_str().expect("owned[].name");
        let (_, group) = name.split_once('.').expect("owned[].name is plural.group");
        from_csv.insert((
            group.to_string(),
            o["version"].as_str().expect("version").to_string(),
            o["kind"].as_str().expect("kind").to_string(),
        ));
        assert!(
            !o["description"].as_str().unwrap_or_default().is_empty(),
            "owned CRD {name} needs a description"
        );
        // OLM's schema requires kind, name and version on every listed resource.
        let resources = o["resources"].as_array().expect("resources");
        let kinds: Vec<&str> = resources
            .iter()
            .filter_map(|r| r["kind"].as_str())
            .collect();
        if o["kind"] == "LokiStack" {
            assert_eq!(kinds, CHILD_KINDS.to_vec());
        } else {
            assert_eq!(
                kinds,
                ["ConfigMap"],
                "a rule becomes rule files in ConfigMaps"
            );
        }
        for r in resources {
            for key in ["kind", "name", "version"] {
                assert!(r[key].is_string(), "resources[] without {key}: {r}");
            }
        }
    }
    let mut from_files = BTreeSet::new();
    let mut service_accounts = Vec::new();
    for (file, obj) in bundle_manifests() {
        match obj["kind"].as_str().unwrap_or_default() {
            "CustomResourceDefinition" => {
                let spec = &obj["spec"];
                for v in spec["versions"].as_array().expect("versions") {
                    from_files.insert((
                        spec["group"].as_str().unwrap_or_default().to_string(),
                        v["name"].as_str().unwrap_or_default().to_string(),
                        spec["names"]["kind"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    ));
                }
                assert_eq!(
                    obj["metadata"]["name"],
                    format!(
                        "{}.{}",
                        spec["names"]["plural"].as_str().unwrap_or_default(),
                        spec["group"].as_str().unwrap_or_default()
                    ),
                    "{file}"
                );
            }
            "ServiceAccount" => service_accounts.push(obj["metadata"]["name"].clone()),
            "ClusterServiceVersion" => {}
            // The operator's own budget, in its namespace (two_replicas_in_olm_too).
            "PodDisruptionBudget" => {}
            other => panic!("{file}: unexpected kind {other} in the bundle"),
        }
    }
    assert_eq!(
        from_csv, from_files,
        "owned CRDs and the bundle's CRD files disagree"
    );
    // OLM creates the CSV's ServiceAccount itself; a manifest of it would conflict.
    let sa = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
        ["serviceAccountName"];
    assert!(
        !service_accounts.contains(sa),
        "ServiceAccount {sa} in the bundle"
    );
    // The bundle's CRDs are the generated ones (never edited by hand).
    for f in loki_zone_operator_tests::apidoc::CRD_FILES {
        assert_eq!(
            read(&format!("bundle/manifests/{f}")),
            read(&format!("manifests/crd/{f}")),
            "{f}"
        );
    }
}

/// `path` (a descriptor path such as `replication.zones[0].topologyKey`) in `schema`.
fn schema_has_path(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for part in path.split('.') {
        let (name, indexed) = match part.split_once('[') {
            Some((n, _)) => (n, true),
            None => (part, false),
        };
        node = &node["properties"][name];
        if indexed {
            node = &node["items"];
        }
        if node.is_null() {
            return false;
        }
    }
    true
}

#[test]
fn descriptors_name_fields_of_the_crd() {
    let csv = csv();
    let owned = &csv["spec"]["customresourcedefinitions"]["owned"][0];
    let schema = crd_schema();
    for (key, section) in [("specDescriptors", "spec"), ("statusDescriptors", "status")] {
        let descriptors = owned[key].as_array().expect(key);
        assert!(!descriptors.is_empty(), "{key}");
        for d in descriptors {
            let path = d["path"].as_str().expect("path");
            assert!(
                schema_has_path(&schema["properties"][section], path),
                "{key} path {path} is not a field of {section}"
            );
        }
    }
    // The zone fields a user looks for in the console.
    let paths: Vec<&str> = owned["specDescriptors"]
        .as_array()
        .expect("specDescriptors")
        .iter()
        .filter_map(|d| d["path"].as_str())
        .collect();
    for p in ["replication.factor", "replication.zones[0].topologyKey"] {
        assert!(paths.contains(&p), "spec descriptor {p}");
    }
    assert!(!schema_has_path(
        &schema["properties"]["spec"],
        "replication.nope"
    ));
}

fn openapi_errors(schema: &Value, object: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).expect("CRD schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path))
        .collect()
}

fn cel_errors(schema: &Value, object: &Value) -> Vec<String> {
    kube_cel::Validator::new()
        .validate(schema, object, None)
        .into_iter()
        .map(|e| format!("{}: {}", e.field_path, e.message))
        .collect()
}

#[test]
fn alm_examples_are_valid_zone_aware_stacks_of_the_owned_crd() {
    let csv = csv();
    let examples = examples(&csv);
    assert!(!examples.is_empty(), "alm-examples is empty");
    let owned: BTreeSet<(String, String)> = csv["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .expect("owned")
        .iter()
        .map(|o| {
            let group = o["name"].as_str().unwrap_or_default();
            let group = group.split_once('.').map(|g| g.1).unwrap_or_default();
            (
                format!("{group}/{}", o["version"].as_str().unwrap_or_default()),
                o["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut seen = BTreeSet::new();
    for ex in &examples {
        let gvk = (
            ex["apiVersion"].as_str().unwrap_or_default().to_string(),
            ex["kind"].as_str().unwrap_or_default().to_string(),
        );
        assert!(
            owned.contains(&gvk),
            "example of an API the CSV does not own: {gvk:?}"
        );
        let schema = crd_schema_of(&gvk.1);
        seen.insert(gvk.clone());
        assert_eq!(openapi_errors(&schema, ex), Vec::<String>::new(), "{ex}");
        assert_eq!(cel_errors(&schema, ex), Vec::<String>::new(), "{ex}");
        if gvk.1 != "LokiStack" {
            rule_example_is_picked_and_valid(ex, &examples[0]);
            continue;
        }
        let typed: loki_zone_operator::model::api::LokiStack =
            serde_json::from_value(ex.clone()).expect("example deserializes as a LokiStack");
        assert_eq!(
            loki_zone_operator::checks::validate::validate(&typed.spec),
            Ok(())
        );
        // What users copy from the console must survive a zone: three copies, so a
        // quorum of two is left when one zone is lost.
        let replication = &ex["spec"]["replication"];
        assert_eq!(
            replication["zones"][0]["topologyKey"],
            "topology.kubernetes.io/zone"
        );
        assert!(
            replication["factor"].as_u64().unwrap_or(0) >= 3,
            "RF below 3 cannot survive a zone: {replication}"
        );
    }
    assert_eq!(seen, owned, "every owned API needs an example");
    // The validators above do reject: an invalid example would be caught.
    let mut bad = examples[0].clone();
    bad["spec"]["replication"]["factor"] = json!(0);
    assert!(!openapi_errors(&crd_schema(), &bad).is_empty());
}

/// A rule example is valid as the reconciler checks it, and the stack example picks it
/// (a RulerConfig: it has the stack's name).
fn rule_example_is_picked_and_valid(ex: &Value, stack: &Value) {
    use loki_zone_operator::model::api::LokiStack;
    use loki_zone_operator::ruler::api::{AlertingRule, RecordingRule, RulerConfig};
    use loki_zone_operator::ruler::check as rules;
    let stack: LokiStack = serde_json::from_value(stack.clone()).expect("stack example");
    let errors = match ex["kind"].as_str().unwrap_or_default() {
        "AlertingRule" => rules::check_alerting_rule(
            &serde_json::from_value::<AlertingRule>(ex.clone())
                .expect("decodes")
                .spec,
        ),
        "RecordingRule" => rules::check_recording_rule(
            &serde_json::from_value::<RecordingRule>(ex.clone())
                .expect("decodes")
                .spec,
        ),
        _ => {
            assert_eq!(
                ex["metadata"]["name"],
                stack.metadata.name.clone().unwrap_or_default().as_str()
            );
            rules::check_ruler_config(
                &serde_json::from_value::<RulerConfig>(ex.clone())
                    .expect("decodes")
                    .spec,
            )
        }
    };
    assert!(errors.is_empty(), "{errors:?}: {ex}");
    if ex["kind"] != "RulerConfig" {
        let labels: std::collections::BTreeMap<String, String> =
            serde_json::from_value(ex["metadata"]["labels"].clone()).unwrap_or_default();
        let spec = stack
            .spec
            .rules
            .as_ref()
            .expect("the stack example enables rules");
        assert!(
            rules::selects(spec, "ns", "ns", &labels, None),
            "the stack example does not pick {ex}"
        );
    }
}

#[test]
fn icon_is_one_base64_image_with_a_mediatype() {
    let csv = csv();
    let icons = csv["spec"]["icon"].as_array().expect("spec.icon");
    assert_eq!(icons.len(), 1, "OperatorHub wants exactly one icon");
    let icon = &icons[0];
    let mediatype = icon["mediatype"].as_str().unwrap_or_default();
    assert!(
        ["image/gif", "image/jpeg", "image/png", "image/svg+xml"].contains(&mediatype),
        "mediatype {mediatype:?}"
    );
    assert_eq!(mediatype, ICON_MEDIATYPE);
    let data = base64::engine::general_purpose::STANDARD
        .decode(icon["base64data"].as_str().unwrap_or_default())
        .expect("base64data is base64");
    assert_eq!(
        data,
        std::fs::read(repo_root().join(ICON)).expect("icon file")
    );
    let svg = String::from_utf8(data).expect("SVG is text");
    let root = svg.trim_start();
    assert!(
        root.starts_with("<svg") && root.contains("xmlns=\"http://www.w3.org/2000/svg\""),
        "not an SVG document"
    );
    assert!(root.contains("viewBox=") && root.trim_end().ends_with("</svg>"));
    // Every element opened is closed: a truncated file would not render.
    // Each `<` opens a tag or closes one; each opened tag ends in `/>` or has a `</`.
    assert_eq!(
        root.matches('<').count(),
        2 * root.matches("</").count() + root.matches("/>").count()
    );
}

/// A container image reference with a registry, a repository and a tag or digest.
fn is_image_reference(image: &str) -> bool {
    let (name, reference) = match image.split_once('@') {
        Some((n, d)) => (n, d.starts_with("sha256:") && d.len() == 71),
        None => match image.rsplit_once(':') {
            Some((n, tag)) if !tag.contains('/') => (n, !tag.is_empty() && tag.len() <= 128),
            _ => (image, false),
        },
    };
    let repo_ok = name.split('/').count() >= 2
        && name.split('/').skip(1).all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        });
    reference && repo_ok && !image.contains(char::is_whitespace)
}

/// The samples apply as they are: every LokiStack sample names a storage Secret that a
/// Secret sample defines, of the stack's storage type, and every Secret sample belongs
/// to a storage type (`secret-<type>.yaml`).
#[test]
fn every_sample_stack_names_a_secret_a_sample_defines() {
    let dir = repo_root().join("manifests/samples");
    let mut secrets = BTreeMap::new();
    let mut stacks = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("samples") {
        let path = entry.expect("entry").path();
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let doc: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("read")).expect("yaml");
        match doc["kind"].as_str() {
            Some("Secret") => {
                let type_ = file
                    .strip_prefix("secret-")
                    .and_then(|f| f.strip_suffix(".yaml"))
                    .unwrap_or_else(|| panic!("{file}: a Secret sample is secret-<type>.yaml"));
                let name = doc["metadata"]["name"].as_str().expect("name").to_string();
                secrets.insert(name, type_.to_string());
            }
            Some("LokiStack") => stacks.push((file, doc)),
            _ => {}
        }
    }
    assert!(stacks.len() >= 2, "{stacks:?}");
    for (file, stack) in stacks {
        let secret = &stack["spec"]["storage"]["secret"];
        let name = secret["name"].as_str().expect("secret name");
        assert_eq!(
            secrets.get(name).map(String::as_str),
            secret["type"].as_str(),
            "{file} names the {} Secret {name}; the Secret samples: {secrets:?}",
            secret["type"]
        );
    }
}

#[test]
fn related_images_are_every_image_the_operator_runs() {
    let csv = csv();
    let container = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
        ["containers"][0];
    let env = |name: &str| {
        container["env"]
            .as_array()
            .and_then(|e| e.iter().find(|v| v["name"] == name))
            .and_then(|v| v["value"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let operator = container["image"].as_str().expect("image").to_string();
    assert_eq!(
        env("RELATED_IMAGE_ZONE_WAIT"),
        loki_zone_operator::render::DEFAULT_ZONE_WAIT_IMAGE,
        "the init container image"
    );
    assert_eq!(
        env("RELATED_IMAGE_LOKI"),
        loki_zone_operator::render::DEFAULT_LOKI_IMAGE
    );
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], operator);
    let related: BTreeMap<&str, &str> = csv["spec"]["relatedImages"]
        .as_array()
        .expect("relatedImages")
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap_or_default(),
                i["image"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        related,
        BTreeMap::from([
            ("loki", loki_zone_operator::render::DEFAULT_LOKI_IMAGE),
            ("loki-zone-operator", operator.as_str()),
            (
                "loki-zone-wait",
                loki_zone_operator::render::DEFAULT_ZONE_WAIT_IMAGE
            ),
        ])
    );
    for image in related.values() {
        assert!(
            is_image_reference(image),
            "{image} is not a pullable reference"
        );
    }
    assert!(!is_image_reference("loki-zone-operator"));
    assert!(!is_image_reference("ghcr.io/Org/x:v1"));
}

#[test]
fn bundle_metadata_channels_and_size() {
    let docker = read("bundle.Dockerfile");
    let meta = yaml(&read("bundle/metadata/annotations.yaml"));
    for (k, v) in annotations() {
        assert!(
            docker.contains(&format!("LABEL {k}={v}")),
            "bundle.Dockerfile lacks {k}"
        );
        assert_eq!(meta["annotations"][k], v.as_str(), "annotations.yaml {k}");
    }
    let a = &meta["annotations"];
    assert_eq!(
        a["operators.operatorframework.io.bundle.mediatype.v1"],
        "registry+v1"
    );
    let channels: Vec<&str> = a["operators.operatorframework.io.bundle.channels.v1"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .collect();
    let default = a["operators.operatorframework.io.bundle.channel.default.v1"]
        .as_str()
        .unwrap_or_default();
    assert!(
        channels.contains(&default),
        "default channel {default} not in {channels:?}"
    );
    assert_eq!(default, CHANNEL);
    for c in channels {
        assert!(
            ["candidate", "fast", "stable"]
                .iter()
                .any(|p| c.starts_with(p)),
            "channel {c} does not follow OLM's naming convention"
        );
    }
    // OLM stages a bundle in one ConfigMap: it must stay well below 1 MiB.
    let size: u64 = bundle_manifests()
        .iter()
        .map(|(f, _)| {
            std::fs::metadata(repo_root().join("bundle/manifests").join(f))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum();
    assert!(size < 1 << 20, "bundle manifests are {size} bytes");
}

#[test]
fn csv_install_equals_the_kustomize_install() {
    let csv = csv();
    let install = &csv["spec"]["install"]["spec"];
    let objects = kustomize_operator().expect("kustomize");
    let get = |kind: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .expect(kind)
            .clone()
    };
    let cluster_role = |name: &str| {
        bundle::named(&objects, "ClusterRole", name)
            .expect("ClusterRole")
            .clone()
    };
    assert_eq!(
        install["clusterPermissions"][0]["rules"],
        cluster_role(bundle::CLUSTER_READER)["rules"]
    );
    // The namespaced rules, then the leader-election Role: each a Role of its own.
    let lease_role = bundle::named(&objects, "Role", bundle::LEADER_ELECTION_ROLE)
        .expect("Role")
        .clone();
    let permissions: Vec<&Value> = install["permissions"]
        .as_array()
        .expect("permissions")
        .iter()
        .map(|p| &p["rules"])
        .collect();
    assert_eq!(
        permissions,
        vec![
            &cluster_role(bundle::NAMESPACED_RULES)["rules"],
            &lease_role["rules"]
        ]
    );
    assert_eq!(
        install["deployments"][0]["spec"],
        bundle::olm_deployment_spec(&get("Deployment")).expect("deployment")
    );
    for p in install["permissions"].as_array().expect("permissions") {
        assert_eq!(
            p["serviceAccountName"],
            get("ServiceAccount")["metadata"]["name"]
        );
    }
    assert_eq!(
        install["clusterPermissions"][0]["serviceAccountName"],
        get("ServiceAccount")["metadata"]["name"]
    );
    // operator-sdk warns when an operator may create CRDs: OLM manages those.
    for (perms, rules) in [
        (
            "clusterPermissions",
            install["clusterPermissions"][0]["rules"].clone(),
        ),
        ("permissions", csv_permission_rules(install)),
    ] {
        for rule in rules.as_array().expect("rules") {
            let crds = strs(&rule["apiGroups"]).contains(&"apiextensions.k8s.io");
            let writes = strs(&rule["verbs"])
                .iter()
                .any(|v| ["create", "patch", "*"].contains(v));
            assert!(!(crds && writes), "{perms} may write CRDs: {rule}");
        }
    }
    for c in install["deployments"][0]["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
    {
        assert!(c["resources"]["requests"].is_object(), "resource requests");
    }
}

// ---------------------------------------------------------------------------------
// kustomize

fn scratch(name: &str) -> PathBuf {
    let dir = repo_root().join(".e2e/kustomize").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn deployment(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment")
}

fn env_value<'a>(deployment: &'a Value, name: &str) -> &'a str {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| e.iter().find(|v| v["name"] == name))
        .and_then(|v| v["value"].as_str())
        .unwrap_or_default()
}

/// An `images:` entry renames the image where it is a container's and where it is a
/// `RELATED_IMAGE_*` value, and nothing else: the operator's image entry leaves the zone
/// init container's alone (they are different images since issue 52), and the other way
/// round.
#[test]
fn image_overlays_rewrite_each_image_where_it_is_named() {
    let dir = scratch("images");
    write_overlay(
        &dir,
        &[],
        &format!("images:\n- name: {BASE_IMAGE}\n  newName: registry.example.com/team/lzo\n  newTag: dev-1\n"),
    )
    .expect("overlay");
    let text = kustomize_text(&dir).expect("kustomize");
    let objects = bundle::parse_stream(&text).expect("yaml");
    let d = deployment(&objects);
    let image = d["spec"]["template"]["spec"]["containers"][0]["image"].as_str();
    assert_eq!(image, Some("registry.example.com/team/lzo:dev-1"));
    assert_eq!(
        env_value(d, "RELATED_IMAGE_ZONE_WAIT"),
        loki_zone_operator::render::DEFAULT_ZONE_WAIT_IMAGE,
        "the operator's image entry leaves the init container's image alone"
    );
    assert_eq!(
        env_value(d, "RELATED_IMAGE_LOKI"),
        loki_zone_operator::render::DEFAULT_LOKI_IMAGE,
        "other env values are left alone"
    );
    assert!(
        !text.contains(&format!("{BASE_IMAGE}:")),
        "the old image is left somewhere:\n{text}"
    );

    // The init container's image by digest (a mirror), the operator's untouched.
    write_overlay(
        &dir,
        &[],
        &format!(
            "images:\n- name: {BASE_ZONE_WAIT}\n  newName: mirror.example/lzw\n  digest: sha256:{}\n",
            "ab".repeat(32)
        ),
    )
    .expect("overlay");
    let objects = kustomize(&dir).expect("kustomize");
    let d = deployment(&objects);
    assert_eq!(
        env_value(d, "RELATED_IMAGE_ZONE_WAIT"),
        format!("mirror.example/lzw@sha256:{}", "ab".repeat(32))
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("{BASE_IMAGE}:v{}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn make_deploy_sets_each_image() {
    for (img, wait, want_img, want_wait) in [
        (
            "registry.example.com:5000/me/lzo:v9",
            "registry.example.com:5000/me/lzw:v2",
            "registry.example.com:5000/me/lzo:v9",
            "registry.example.com:5000/me/lzw:v2",
        ),
        (
            "localhost:5000/lzo",
            "",
            "localhost:5000/lzo:latest",
            loki_zone_operator::render::DEFAULT_ZONE_WAIT_IMAGE,
        ),
    ] {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/deploy.sh"))
            .arg("manifests")
            .env("IMG", img)
            .env("ZONE_WAIT_IMG", wait)
            .output()
            .expect("hack/deploy.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let objects = bundle::parse_stream(&String::from_utf8_lossy(&out.stdout)).expect("yaml");
        let d = deployment(&objects);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            want_img
        );
        assert_eq!(env_value(d, "RELATED_IMAGE_ZONE_WAIT"), want_wait);
    }
}

/// `make install` and `make deploy` apply the committed CRDs (hack/deploy.sh, which needs
/// no build), CEL rules included: byte for byte what the binary prints.
#[test]
fn deploy_applies_the_committed_crds_as_the_binary_prints_them() {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/deploy.sh"))
        .arg("crds")
        .output()
        .expect("hack/deploy.sh crds");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = loki_zone_operator::cli::crds_yaml().expect("crds");
    assert!(
        String::from_utf8_lossy(&out.stdout) == want,
        "hack/deploy.sh crds differs from `loki-zone-operator crd`"
    );
    assert!(want.contains("x-kubernetes-validations"));
}

/// A kubectl that answers `version -o json` with the server version in `FAKE_SERVER`
/// ("MAJOR MINOR GITVERSION"), runs the real kubectl (`REAL_KUBECTL`) for `kustomize`,
/// says every CRD is Established, and otherwise logs its arguments to `FAKE_LOG`.
const FAKE_KUBECTL: &str = r#"#!/bin/sh
case "$1" in
  version)
    set -- $FAKE_SERVER
    printf '{\n  "clientVersion": {\n    "major": "1",\n    "minor": "35",\n    "gitVersion": "v1.35.4"\n  },\n  "serverVersion": {\n    "major": "%s",\n    "minor": "%s",\n    "emulationMajor": "%s",\n    "gitVersion": "%s",\n    "platform": "linux/amd64"\n  }\n}\n' "$1" "$2" "$1" "$3" ;;
  kustomize) exec "$REAL_KUBECTL" "$@" ;;
  *)
    echo "$*" >>"$FAKE_LOG"
    case "$*" in *jsonpath=*Established*) printf True ;; esac
    [ -t 0 ] || cat >/dev/null ;;
esac
"#;

/// Runs `hack/deploy.sh ACTION` against [`FAKE_KUBECTL`] in `dir`, the server reporting
/// `server`: its exit status, its stderr, and the kubectl calls it made.
fn deploy_against(dir: &Path, action: &str, server: &str) -> (Option<i32>, String, String) {
    let kubectl = dir.join("kubectl");
    std::fs::write(&kubectl, FAKE_KUBECTL).expect("fake kubectl");
    std::fs::set_permissions(
        &kubectl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let real = loki_zone_operator_tests::harness::which("kubectl").expect("kubectl on PATH");
    let log = dir.join("calls.log");
    let _ = std::fs::remove_file(&log);
    let out = Command::new("bash")
        .arg(repo_root().join("hack/deploy.sh"))
        .arg(action)
        .env("KUBECTL", &kubectl)
        .env("REAL_KUBECTL", &real)
        .env("FAKE_SERVER", server)
        .env("FAKE_LOG", &log)
        .output()
        .expect("hack/deploy.sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

/// `make install`, `make deploy` and `replace-crd` read the server's version first and
/// refuse one older than the oldest the operator supports, naming both versions, before
/// anything is applied; on a supported server they apply. The minimum is the operator's.
#[test]
fn deploy_refuses_a_server_older_than_the_oldest_supported() {
    let script = std::fs::read_to_string(repo_root().join("hack/deploy.sh")).expect("deploy.sh");
    assert!(
        script.contains(&format!("\nMIN_KUBE_VERSION={MIN_KUBE_VERSION}\n")),
        "hack/deploy.sh's MIN_KUBE_VERSION is not the operator's {MIN_KUBE_VERSION}"
    );
    let dir = scratch("deploy-server-version");
    let servers = [
        ("1 20 v1.20.2", Some("v1.20.2")),
        ("1 30+ v1.30.9-eks-1234", Some("v1.30.9-eks-1234")),
        ("1 31+ v1.31.0-gke.1200", None),
        ("1 35 v1.35.4", None),
    ];
    for action in ["install", "replace-crd", "deploy"] {
        for (server, refused) in servers {
            let (status, stderr, calls) = deploy_against(&dir, action, server);
            if let Some(found) = refused {
                assert_eq!(status, Some(1), "{action} on {server}: {stderr}");
                assert_eq!(
                    stderr.trim(),
                    format!("Kubernetes 1.31 or later is required; this API server is {found}"),
                    "{action} on {server}"
                );
                assert_eq!(calls, "", "{action} on {server} applied something");
            } else {
                assert_eq!(status, Some(0), "{action} on {server}: {stderr}");
                let verb = match action {
                    "replace-crd" => "replace -f",
                    _ => "apply --server-side",
                };
                assert!(calls.contains(verb), "{action} on {server}: {calls}");
            }
        }
    }
}

/// Every object of `objects` is in `ns` (or cluster-scoped), and so is every subject.
fn assert_all_in_namespace(objects: &[Value], ns: &str) {
    let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        if kind == "Namespace" {
            assert_eq!(o["metadata"]["name"], ns);
        } else if !cluster_scoped.contains(&kind) {
            assert_eq!(
                o["metadata"]["namespace"], ns,
                "{kind} {}",
                o["metadata"]["name"]
            );
        }
        for s in o["subjects"].as_array().into_iter().flatten() {
            assert_eq!(
                s["namespace"], ns,
                "subject of {kind} {}",
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
fn a_namespace_overlay_moves_every_object_and_subject() {
    let base = kustomize_operator().expect("kustomize");
    assert_all_in_namespace(&base, BASE_NAMESPACE);
    let dir = scratch("namespace");
    write_overlay(
        &dir,
        &["zone-outage-recovery", "high-availability"],
        "namespace: logging-ops\n",
    )
    .expect("overlay");
    let text = kustomize_text(&dir).expect("kustomize");
    assert!(
        !text.contains(BASE_NAMESPACE),
        "the old namespace is left somewhere:\n{text}"
    );
    let objects = bundle::parse_stream(&text).expect("yaml");
    assert_all_in_namespace(&objects, "logging-ops");
    let bindings = objects.iter().filter(|o| o["subjects"].is_array()).count();
    assert_eq!(
        bindings, 6,
        "the five base bindings and the recovery binding"
    );
}

/// A `namePrefix` (with a namespace) renames every object, and the operator is told the
/// new names of those it refers to: the webhook Service it registers its webhooks behind,
/// and the ClusterRole that owns the webhook configurations (which grants `get` on itself
/// by name). A Service name left behind would make the fail-closed eviction webhook
/// refuse every drain of a zone-aware stack's ingesters.
#[test]
fn a_name_prefix_renames_the_objects_the_operator_is_told_about() {
    let dir = scratch("prefix");
    write_overlay(
        &dir,
        &[],
        "namePrefix: acme-
namespace: observability
",
    )
    .expect("overlay");
    let objects = kustomize(&dir).expect("kustomize");
    assert_all_in_namespace(&objects, "observability");
    let d = deployment(&objects);
    let service = env_value(d, "WEBHOOK_SERVICE");
    let webhook_service = objects
        .iter()
        .filter(|o| o["kind"] == "Service")
        .find(|o| o["spec"]["ports"][0]["targetPort"] == "webhook")
        .expect("the webhook Service");
    assert_eq!(service, "acme-loki-zone-operator-webhook");
    assert_eq!(webhook_service["metadata"]["name"], service);
    let owner = env_value(d, "WEBHOOK_OWNER_CLUSTER_ROLE");
    assert_eq!(owner, "acme-loki-zone-operator-webhook-configuration");
    let role = bundle::named(&objects, "ClusterRole", owner).expect("the owner ClusterRole");
    let on_itself = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| strs(&r["resources"]) == ["clusterroles"])
        .expect("a rule on clusterroles");
    assert_eq!(
        strs(&on_itself["resourceNames"]),
        [owner],
        "get on itself, by its new name"
    );
    // Names the operator creates itself (its Lease, its certificate Secret, the webhook
    // configurations) are constants of the binary, and stay as the Roles name them.
    let text = kustomize_text(&dir).expect("kustomize");
    for constant in [
        names::WEBHOOK_CERT_SECRET,
        "loki-zone-operator-zone-at-bind",
        "loki-zone-operator-zone-disruptions",
    ] {
        assert!(
            text.contains(&format!("- {constant}\n")),
            "{constant} renamed:\n{text}"
        );
    }
    // Without the overlay the defaults of the binary are what the install says.
    let base = kustomize_operator().expect("kustomize");
    assert_eq!(
        env_value(deployment(&base), "WEBHOOK_SERVICE"),
        names::WEBHOOK_SERVICE
    );
    assert_eq!(
        env_value(deployment(&base), "WEBHOOK_OWNER_CLUSTER_ROLE"),
        names::WEBHOOK_CONFIGURATION_CLUSTER_ROLE
    );
}

#[test]
fn optional_pieces_are_components() {
    let dir = repo_root().join("manifests/components");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("manifests/components")
        .map(|e| file_name(&e.expect("entry").path()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "high-availability",
            "monitoring",
            "monitoring-loki-mixin",
            "namespaced",
            "single-replica",
            "webhook-network-policy",
            "zone-outage-recovery"
        ]
    );
    for name in &names {
        let k = yaml(&read(&format!(
            "manifests/components/{name}/kustomization.yaml"
        )));
        assert_eq!(k["kind"], "Component", "{name}");
        assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1alpha1");
    }
    let grants = |objects: &[Value], resource: &str, verb: &str| {
        objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
            .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
            .any(|r| strs(&r["resources"]).contains(&resource) && strs(&r["verbs"]).contains(&verb))
    };
    // The default install never deletes volumes, and deletes pods only for the
    // zone-by-zone rollout; the recovery component adds the claims, bound to the
    // operator's ServiceAccount.
    let base = kustomize_operator().expect("kustomize");
    assert!(
        !grants(&base, "persistentvolumeclaims", "delete"),
        "the default install deletes claims"
    );
    assert!(
        grants(&base, "pods", "delete"),
        "the default install cannot roll zone-aware stacks"
    );
    let out = scratch("recovery");
    write_overlay(&out, &["zone-outage-recovery"], "").expect("overlay");
    let objects = kustomize(&out).expect("kustomize");
    for r in ["pods", "persistentvolumeclaims"] {
        assert!(grants(&objects, r, "delete"), "recovery cannot delete {r}");
    }
    // It reads the claims it deletes by name: it needs no list or watch of them.
    assert!(grants(&objects, "persistentvolumeclaims", "get"));
    for verb in ["list", "watch"] {
        assert!(
            !grants(&objects, "persistentvolumeclaims", verb),
            "recovery grants {verb} on claims, which it never uses"
        );
    }
    let binding = objects
        .iter()
        .find(|o| {
            o["metadata"]["name"] == "loki-zone-operator-zone-outage-recovery"
                && o["kind"] == "ClusterRoleBinding"
        })
        .expect("recovery binding");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "loki-zone-operator", "namespace": BASE_NAMESPACE})
    );
}

/// The webhook's NetworkPolicy selects the operator's pods, lands in the operator's
/// namespace (with or without the overlay's `namespace:`), names ports the container
/// has, keeps the pod network off the webhook port and leaves metrics and health open.
#[test]
fn the_webhook_network_policy_fits_the_deployment() {
    for (case, body, ns) in [
        ("netpol", "", BASE_NAMESPACE),
        ("netpol-moved", "namespace: logging-ops\n", "logging-ops"),
    ] {
        let out = scratch(case);
        write_overlay(&out, &["webhook-network-policy"], body).expect("overlay");
        let objects = kustomize(&out).expect("kustomize");
        let d = deployment(&objects);
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .expect("NetworkPolicy");
        assert_eq!(policy["metadata"]["namespace"], ns, "{case}");
        assert_eq!(d["metadata"]["namespace"], ns, "{case}");
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in policy["spec"]["podSelector"]["matchLabels"]
            .as_object()
            .expect("matchLabels")
        {
            assert_eq!(
                &labels[k], v,
                "the policy selects pods the Deployment does not make"
            );
        }
        let ports: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        let rules = policy["spec"]["ingress"].as_array().expect("ingress");
        let named: Vec<&str> = rules
            .iter()
            .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["port"].as_str().map(str::to_string))
            .map(|p| {
                ports
                    .iter()
                    .copied()
                    .find(|q| *q == p)
                    .expect("a port the container has")
            })
            .collect();
        assert_eq!(named, vec!["webhook", "metrics", "health"]);
        let webhook_from = &rules[0]["from"];
        assert!(!webhook_from[0]["ipBlock"]["except"]
            .as_array()
            .expect("except")
            .is_empty());
        assert!(
            rules[1]["from"].is_null(),
            "metrics and health stay open to every source"
        );
    }
}

fn pod_disruption_budget(objects: &[Value]) -> Option<&Value> {
    objects.iter().find(|o| o["kind"] == "PodDisruptionBudget")
}

/// The default install runs two replicas, apart in zones and nodes where it can, and a
/// budget keeps one through drains; `single-replica` runs one and drops the budget
/// (which would then refuse every eviction of it); `high-availability`, the default
/// now, is kept empty so that overlays naming it still build.
#[test]
fn two_replicas_and_a_budget_by_default() {
    let base = kustomize_operator().expect("kustomize");
    let d = deployment(&base);
    assert_eq!(d["spec"]["replicas"], 2);
    let spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("spread");
    let keys: Vec<&str> = spread
        .iter()
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        vec!["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    );
    for c in spread {
        // A cluster of one zone, or one node, still runs both.
        assert_eq!(c["whenUnsatisfiable"], "ScheduleAnyway");
        assert_eq!(c["labelSelector"], d["spec"]["selector"]);
    }
    let pdb = pod_disruption_budget(&base).expect("PodDisruptionBudget");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["metadata"]["namespace"], BASE_NAMESPACE);
    assert_eq!(
        pdb["spec"]["selector"], d["spec"]["selector"],
        "the budget covers the operator's pods"
    );
    // One may go at a time, never both: a drain is never refused for good.
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(pdb["spec"]["maxUnavailable"].is_null());

    let out = scratch("single-replica");
    write_overlay(&out, &["single-replica"], "").expect("overlay");
    let objects = kustomize(&out).expect("kustomize");
    assert_eq!(deployment(&objects)["spec"]["replicas"], 1);
    assert!(pod_disruption_budget(&objects).is_none());
    assert_eq!(objects.len(), base.len() - 1, "only the budget goes");

    let out = scratch("high-availability");
    write_overlay(&out, &["high-availability"], "").expect("overlay");
    assert_eq!(kustomize(&out).expect("kustomize"), base);
}

// ---------------------------------------------------------------------------------
// On a real API server

fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn crd_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &api_resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    )
}

async fn install_crd(client: &kube::Client, crd: &Value) -> anyhow::Result<()> {
    let api = crd_api(client);
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.create(
        &PostParams::default(),
        &serde_json::from_value(crd.clone())?,
    )
    .await?;
    let start = Instant::now();
    loop {
        let got = api.get(&name).await?;
        let established = got.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if established {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(60),
            "{name} not Established"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn dry_run_create(
    client: &kube::Client,
    resource: &ApiResource,
    ns: &str,
    object: &Value,
) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let mut object = object.clone();
    object["metadata"]["namespace"] = json!(ns);
    let object: DynamicObject = serde_json::from_value(object).map_err(|e| e.to_string())?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&params, &object)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env(
            "KUBECACHEDIR",
            loki_zone_operator_tests::harness::kubectl_cache_for(kubeconfig),
        )
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One control plane for every check that needs an API server: starting one costs
/// seconds, the checks milliseconds.
#[test]
fn olm_and_kustomize_installs_are_accepted_by_the_api_server() {
    let cp = ControlPlane::start(&repo_root().join(".e2e/bundle")).expect("control plane");
    runtime()
        .expect("runtime")
        .block_on(api_server_checks(&cp))
        .expect("checks");
}

async fn api_server_checks(cp: &ControlPlane) -> anyhow::Result<()> {
    let client = client_for(&cp.admin_kubeconfig).await?;
    let olm_crd = yaml(&read(
        "tests/fixtures/operators.coreos.com_clusterserviceversions.yaml",
    ));
    // What is installed here is what the operator supports: no workaround for an older
    // control plane.
    let version = client.apiserver_version().await?;
    KubeVersion::parse(&version.git_version)
        .with_context(|| format!("the control plane's version {:?}", version.git_version))?
        .require_supported("the test's control plane", &version.git_version)?;
    install_crd(&client, &olm_crd).await?;
    for crd in bundle_crds() {
        install_crd(&client, &crd).await?;
    }
    kubectl(&cp.admin_kubeconfig, &["create", "namespace", "olm-bundle"]);

    // The CSV as OLM's API server would take it from the bundle.
    let csv_resource = api_resource(
        "operators.coreos.com",
        "v1alpha1",
        "ClusterServiceVersion",
        "clusterserviceversions",
    );
    let csv = csv();
    let created = dry_run_create(&client, &csv_resource, "olm-bundle", &csv).await;
    assert_eq!(created, Ok(()), "OLM's CSV schema rejects the bundle's CSV");
    // The schema is enforced here: the CSV without `name` on a resource is refused.
    let mut broken = csv.clone();
    if let Some(r) =
        broken["spec"]["customresourcedefinitions"]["owned"][0]["resources"][0].as_object_mut()
    {
        r.remove("name");
    }
    let refused = dry_run_create(&client, &csv_resource, "olm-bundle", &broken).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("name")),
        "a CSV without resources[].name was accepted: {refused:?}"
    );

    // The Deployment OLM makes of the CSV is valid, WATCH_NAMESPACES from the downward
    // API included; the server checks that field path (a wrong one is refused).
    let apps = api_resource("apps", "v1", "Deployment", "deployments");
    let mut olm_deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "loki-zone-operator"},
        "spec": csv["spec"]["install"]["spec"]["deployments"][0]["spec"],
    });
    let created = dry_run_create(&client, &apps, "olm-bundle", &olm_deployment).await;
    assert_eq!(created, Ok(()), "the CSV's Deployment is refused");
    let env = &mut olm_deployment["spec"]["template"]["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"], "WATCH_NAMESPACES");
    env["valueFrom"]["fieldRef"]["fieldPath"] = json!("metadata.annotations.olm");
    let refused = dry_run_create(&client, &apps, "olm-bundle", &olm_deployment).await;
    assert!(refused.is_err(), "a wrong fieldPath was accepted");

    // Every example is an object the API server accepts against our CRDs.
    let stack = api_resource("loki.grafana.com", "v1", "LokiStack", "lokistacks");
    for ex in examples(&csv) {
        let kind = ex["kind"].as_str().unwrap_or_default().to_string();
        let plural = format!("{}s", kind.to_lowercase());
        let resource = api_resource("loki.grafana.com", "v1", &kind, &plural);
        let created = dry_run_create(&client, &resource, "olm-bundle", &ex).await;
        assert_eq!(created, Ok(()), "example rejected: {ex}");
    }
    let mut bad = examples(&csv)[0].clone();
    bad["spec"]["size"] = json!("2x.huge");
    assert!(dry_run_create(&client, &stack, "olm-bundle", &bad)
        .await
        .is_err());

    // A user's overlay (another namespace, another image, the recovery component)
    // applies as it is; its bindings name the ServiceAccount that exists.
    let dir = scratch("apply");
    write_overlay(
        &dir,
        &["zone-outage-recovery"],
        &format!("namespace: logging-ops\nimages:\n- name: {BASE_IMAGE}\n  newName: registry.example.com/lzo\n  newTag: v2\n- name: {BASE_ZONE_WAIT}\n  newName: registry.example.com/lzw\n  newTag: v1\n"),
    )?;
    let stream = dir.join("stream.yaml");
    std::fs::write(&stream, kustomize_text(&dir)?)?;
    let stream_arg = stream.display().to_string();
    kubectl(
        &cp.admin_kubeconfig,
        &["apply", "--server-side", "-f", &stream_arg],
    );
    let min_available = kubectl(
        &cp.admin_kubeconfig,
        &[
            "get",
            "poddisruptionbudget",
            "-n",
            "logging-ops",
            "loki-zone-operator",
            "-o",
            "jsonpath={.spec.minAvailable}",
        ],
    );
    assert_eq!(min_available, "1");
    let sa = kubectl(
        &cp.admin_kubeconfig,
        &[
            "get",
            "serviceaccount",
            "-n",
            "logging-ops",
            "loki-zone-operator",
            "-o",
            "name",
        ],
    );
    assert_eq!(sa.trim(), "serviceaccount/loki-zone-operator");
    for binding in [
        "clusterrolebinding/loki-zone-operator",
        "clusterrolebinding/loki-zone-operator-cluster-reader",
        "clusterrolebinding/loki-zone-operator-zone-outage-recovery",
    ] {
        let ns = kubectl(
            &cp.admin_kubeconfig,
            &["get", binding, "-o", "jsonpath={.subjects[0].namespace}"],
        );
        assert_eq!(ns, "logging-ops", "{binding}");
    }
    let env = kubectl(
        &cp.admin_kubeconfig,
        &[
            "get",
            "deployment",
            "-n",
            "logging-ops",
            "loki-zone-operator",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].env[?(@.name==\"RELATED_IMAGE_ZONE_WAIT\")].value}",
        ],
    );
    assert_eq!(
        env,
        "registry.example.com/lzo:v2 registry.example.com/lzw:v1"
    );
    Ok(())
}

/// The CSV declares no webhook: OLM would set the zone-at-bind webhook's namespace
/// selector to every namespace in AllNamespaces mode, and nothing else can narrow it
/// (a Binding has no labels to select on). The operator runs with its webhooks off and
/// the pod annotator zones every pod; every install mode stays supported.
#[test]
fn the_csv_declares_no_webhook() {
    let csv = csv();
    assert!(
        csv["spec"].get("webhookdefinitions").is_none(),
        "the CSV declares a webhook"
    );
    let d = &csv["spec"]["install"]["spec"]["deployments"][0];
    let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(value("BIND_WEBHOOK"), Some(json!("false")));
    assert_eq!(value("WEBHOOK_CERT_DIR"), None);
    let supported: BTreeSet<&str> = csv["spec"]["installModes"]
        .as_array()
        .expect("installModes")
        .iter()
        .filter(|m| m["supported"] == true)
        .filter_map(|m| m["type"].as_str())
        .collect();
    assert!(supported.contains("AllNamespaces"));
    // Without webhooks a standby is ready with its caches: two replicas and the budget,
    // as the kustomize install.
    assert_eq!(d["spec"]["replicas"], bundle::OLM_REPLICAS);
    assert_eq!(bundle::OLM_REPLICAS, 2);
    let manifests = bundle_manifests();
    let budgets: Vec<&Value> = manifests
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == "PodDisruptionBudget")
        .collect();
    assert_eq!(budgets.len(), 1, "one budget in the bundle");
    assert_eq!(budgets[0]["spec"]["minAvailable"], 1);
    assert_eq!(budgets[0]["apiVersion"], "policy/v1");
}
