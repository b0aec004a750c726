//! `render` prints what the operator applies: every sample stack, with every storage
//! Secret type and every combination of the switch annotations, rendered by the command
//! and planned as the reconcile plans it from the snapshot the operator would observe
//! (the Secret as its cache holds it, the sample nodes), compared document by document.

use super::*;
use crate::intent::Action;
use crate::stores::keep::strip_secret;

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/samples")
}

/// The switch annotations a stack may carry, each absent or `"false"`.
const SWITCHES: [&str; 4] = [
    names::ANNOTATION_ZONE_AWARE_GOSSIP,
    names::ANNOTATION_ZONE_LOCAL_SERVICES,
    names::ANNOTATION_ZONE_FAST_FAILOVER,
    names::ANNOTATION_ZONE_AWARE_EVICTIONS,
];

/// `stack` with its Secret named and typed as `secret`, and the switches of `mask` off.
fn variant(stack: &LokiStack, secret: &Secret, mask: usize) -> LokiStack {
    let mut s = stack.clone();
    s.metadata.namespace = Some("logs".into());
    s.spec.storage.secret.name = secret.metadata.name.clone().unwrap_or_default();
    let annotations = s.metadata.annotations.get_or_insert_with(Default::default);
    for (i, key) in SWITCHES.iter().enumerate() {
        if mask & (1 << i) != 0 {
            annotations.insert(key.to_string(), "false".into());
        }
    }
    s
}

/// The Secret as the operator's cache holds it.
fn held(secret: &Secret) -> Secret {
    let mut s = secret.clone();
    if let Some(plain) = s.string_data.take() {
        let data = s.data.get_or_insert_with(Default::default);
        for (k, v) in plain {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
    strip_secret(&mut s);
    s
}

/// What the reconcile's plan applies for `stack` given `secret` and `nodes`.
fn planned(stack: &LokiStack, secret: &Secret, nodes: &[Node], settings: &Settings) -> String {
    let snapshot = Snapshot {
        namespace: "logs".into(),
        name: stack.name_any(),
        secret: Some(Arc::new(held(secret))),
        // The class the stack names (else the default), binding in the pod's zone.
        storage_class: Some(Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": stack.spec.storage_class_name.clone().unwrap_or_else(|| "standard".into())},
                "provisioner": "example.com/zonal",
                "volumeBindingMode": "WaitForFirstConsumer",
            }))
            .expect("class"),
        )),
        nodes: nodes.iter().cloned().map(Arc::new).collect(),
        now: Timestamp::now(),
        ..Snapshot::default()
    };
    let intent = plan::plan(stack, &snapshot, settings).expect("plan");
    match intent.action {
        Action::Apply { children, .. } => to_yaml_stream(&children).expect("yaml"),
        Action::HoldBack => panic!("held back: {:?}", intent.findings.hold_back()),
    }
}

fn rendered(
    stack: &LokiStack,
    secret_file: &Path,
    nodes_file: &Path,
    settings: &Settings,
) -> String {
    let dir = std::env::temp_dir().join(format!("lzo-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("stack.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(stack).expect("yaml")).expect("write");
    let req = RenderRequest {
        stack_file: file,
        nodes_file: Some(nodes_file.to_path_buf()),
        secret_file: Some(secret_file.to_path_buf()),
        rules_files: Vec::new(),
        namespace: None,
        settings: settings.clone(),
    };
    render_files(&req).expect("render").yaml
}

#[test]
fn render_prints_what_the_plan_applies_for_every_sample_and_switch() {
    let nodes_file = samples().join("nodes-three-zones.yaml");
    let nodes = parse_nodes(&nodes_file, &read(&nodes_file).expect("nodes")).expect("nodes");
    let settings = Settings::default();
    let mut compared = 0;
    for stack_file in ["lokistack-demo.yaml", "lokistack-zone-aware.yaml"] {
        let path = samples().join(stack_file);
        let stack = parse_stack(&path, &read(&path).expect("read")).expect("stack");
        for type_ in ["s3", "gcs", "azure", "swift", "alibabacloud"] {
            let secret_file = samples().join(format!("secret-{type_}.yaml"));
            let secret = secret::parse_secret(&read(&secret_file).expect("read")).expect("secret");
            let mut stack = stack.clone();
            stack.spec.storage.secret.type_ =
                serde_json::from_value(serde_json::json!(type_)).expect("type");
            for mask in 0..(1 << SWITCHES.len()) {
                let s = variant(&stack, &secret, mask);
                let want = planned(&s, &secret, &nodes, &settings);
                let got = rendered(&s, &secret_file, &nodes_file, &settings);
                assert!(
                    got == want,
                    "{stack_file} with a {type_} Secret and switches {mask:#06b}: render differs from the plan"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 2 * 5 * 16);
}

#[test]
fn render_honours_the_gossip_switch_as_the_plan_does() {
    // The drift this guards: render printed the zone-aware gossip for a stack that
    // turned it off.
    let nodes_file = samples().join("nodes-three-zones.yaml");
    let secret_file = samples().join("secret-s3.yaml");
    let path = samples().join("lokistack-zone-aware.yaml");
    let stack = parse_stack(&path, &read(&path).expect("read")).expect("stack");
    let secret = secret::parse_secret(&read(&secret_file).expect("read")).expect("secret");
    let settings = Settings::default();
    let on = rendered(
        &variant(&stack, &secret, 0),
        &secret_file,
        &nodes_file,
        &settings,
    );
    let off = rendered(
        &variant(&stack, &secret, 1),
        &secret_file,
        &nodes_file,
        &settings,
    );
    assert!(
        on.contains("zone_aware_routing"),
        "gossip on renders the routing"
    );
    assert!(
        !off.contains("zone_aware_routing"),
        "gossip off renders none"
    );
}
