//! The OLM bundle matches manifests/ (no drift) and carries what OLM and OperatorHub
//! need from a ClusterServiceVersion.

use loki_zone_operator_tests::bundle::{
    self, annotations, kustomize_operator, MIN_KUBE_VERSION, PACKAGE, VERSION,
};
use loki_zone_operator_tests::repo_root;
use serde_json::Value;

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

fn csv() -> Value {
    let (_, text) = bundle::files()
        .expect("bundle")
        .into_iter()
        .find(|(p, _)| p.ends_with(".clusterserviceversion.yaml"))
        .expect("csv");
    serde_yaml::from_str(&text).expect("csv yaml")
}

#[test]
fn csv_has_the_required_fields() {
    let csv = csv();
    assert_eq!(csv["metadata"]["name"], format!("{PACKAGE}.v{VERSION}"));
    let spec = &csv["spec"];
    assert_eq!(spec["version"], VERSION);
    assert_eq!(spec["minKubeVersion"], MIN_KUBE_VERSION);
    for field in [
        "displayName",
        "description",
        "provider",
        "maintainers",
        "keywords",
        "maturity",
    ] {
        assert!(!spec[field].is_null(), "spec.{field} missing");
    }
    let modes = spec["installModes"].as_array().expect("installModes");
    assert!(modes
        .iter()
        .any(|m| m["type"] == "AllNamespaces" && m["supported"] == true));

    let owned = &spec["customresourcedefinitions"]["owned"][0];
    assert_eq!(
        (
            owned["name"].as_str(),
            owned["version"].as_str(),
            owned["kind"].as_str()
        ),
        (
            Some("lokistacks.loki.grafana.com"),
            Some("v1"),
            Some("LokiStack")
        )
    );
    let paths = |key: &str| -> Vec<String> {
        owned[key]
            .as_array()
            .expect(key)
            .iter()
            .map(|d| d["path"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    for p in [
        "replication.factor",
        "replication.zones",
        "replication.zones[0].topologyKey",
    ] {
        assert!(
            paths("specDescriptors").contains(&p.to_string()),
            "spec descriptor {p}"
        );
    }
    for p in [
        "replication.zones",
        "replication.writeQuorum",
        "replication.zoneFailuresTolerated",
        "conditions",
    ] {
        assert!(
            paths("statusDescriptors").contains(&p.to_string()),
            "status descriptor {p}"
        );
    }

    let examples: Value = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .expect("alm-examples"),
    )
    .expect("alm-examples JSON");
    let zones = &examples[0]["spec"]["replication"]["zones"];
    assert_eq!(examples[0]["kind"], "LokiStack");
    assert_eq!(
        zones[0]["topologyKey"], "topology.kubernetes.io/zone",
        "the zone-aware sample"
    );

    let images: Vec<&str> = spec["relatedImages"]
        .as_array()
        .expect("relatedImages")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(images, vec!["loki-zone-operator", "loki"]);
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
    assert_eq!(
        install["clusterPermissions"][0]["rules"],
        get("ClusterRole")["rules"]
    );
    assert_eq!(install["permissions"][0]["rules"], get("Role")["rules"]);
    assert_eq!(install["deployments"][0]["spec"], get("Deployment")["spec"]);
    assert_eq!(
        install["clusterPermissions"][0]["serviceAccountName"],
        get("ServiceAccount")["metadata"]["name"]
    );
    // The CRD of the bundle is the committed one.
    let crd =
        std::fs::read_to_string(repo_root().join("manifests/crd/loki.grafana.com_lokistacks.yaml"))
            .expect("crd");
    let bundled = std::fs::read_to_string(
        repo_root().join("bundle/manifests/loki.grafana.com_lokistacks.yaml"),
    )
    .unwrap_or_default();
    assert_eq!(crd, bundled, "bundle CRD drifted: run `make bundle`");
}

#[test]
fn dockerfile_labels_match_annotations() {
    let docker = std::fs::read_to_string(repo_root().join("bundle.Dockerfile")).unwrap_or_default();
    let meta: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("bundle/metadata/annotations.yaml"))
            .unwrap_or_default(),
    )
    .unwrap_or(Value::Null);
    for (k, v) in annotations() {
        assert!(
            docker.contains(&format!("LABEL {k}={v}")),
            "bundle.Dockerfile lacks {k}"
        );
        assert_eq!(meta["annotations"][k], v.as_str(), "annotations.yaml {k}");
    }
}
