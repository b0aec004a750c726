//! `render --secret`: the storage Secret of a stack, read from a manifest, turned into the
//! same object store parameters the operator derives from the Secret it reads.
//!
//! The operator sees a Secret as the API server stores it (`stringData` merged into
//! `data`) and as its cache keeps it (`stores::keep::strip_secret`: plain values such as
//! the endpoint kept, credentials replaced by markers), then checks the keys and reads
//! the plain values with `model::storage::{check_secret, store_params}`, as
//! `plan::secret_params` does. This module does exactly that to the file, so the config
//! rendered offline is the one the operator applies.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;

use crate::model::api::{LokiStack, ObjectStorageSecretType};
use crate::model::storage::{env_name, fields, secret_params};
use crate::stores::keep::strip_secret;

/// Parses a Secret manifest (`kubectl get secret NAME -o yaml`): `data` in base64,
/// `stringData` in plain text, or both. The error says what to fix in the file.
pub fn parse_secret(text: &str) -> Result<Secret, String> {
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let field = |k: &str| {
        value
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version != "v1" || kind != "Secret" {
        return Err(format!("expected a Secret (apiVersion v1, kind Secret), got apiVersion {api_version:?} and kind {kind:?}; give the output of `kubectl get secret NAME -o yaml`"));
    }
    let mut secret: Secret = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    stored_form(&mut secret);
    Ok(secret)
}

/// What the API server stores: `stringData` written over `data`.
fn stored_form(secret: &mut Secret) {
    let Some(plain) = secret.string_data.take() else {
        return;
    };
    let data = secret.data.get_or_insert_with(Default::default);
    for (k, v) in plain {
        data.insert(k, ByteString(v.into_bytes()));
    }
}

/// `secret` as the operator's cache would hold it for `stack` rendered into `namespace`
/// (values that shape no config stripped), once it is checked as the operator checks
/// it; or what to fix in the Secret.
pub fn stack_secret(
    stack: &LokiStack,
    namespace: &str,
    mut secret: Secret,
) -> Result<Secret, String> {
    let spec = &stack.spec.storage.secret;
    let name = secret.metadata.name.clone().unwrap_or_default();
    if name != spec.name {
        return Err(format!("metadata.name is {name:?}, but the stack's spec.storage.secret.name is {:?}: give that Secret, or fix the name", spec.name));
    }
    if let Some(ns) = secret.metadata.namespace.as_deref() {
        if ns != namespace {
            return Err(format!("metadata.namespace is {ns:?}, but the stack renders into {namespace:?}, where the operator reads its Secret: give that namespace's Secret, or set -n"));
        }
    }
    strip_secret(&mut secret);
    let fix = |e: crate::model::storage::StorageSecretError| e.to_string();
    secret_params(spec.type_, &spec.name, namespace, Some(&secret)).map_err(fix)?;
    Ok(secret)
}

/// The object store parameters the operator would derive from `secret`.
#[cfg(test)]
fn store_for(
    stack: &LokiStack,
    namespace: &str,
    secret: Secret,
) -> Result<crate::model::storage::StoreParams, String> {
    let s = stack_secret(stack, namespace, secret)?;
    let spec = &stack.spec.storage.secret;
    secret_params(spec.type_, &spec.name, namespace, Some(&s)).map_err(|e| e.to_string())
}

/// What a render without `--secret` leaves to Loki's expansion at start and the operator
/// would have resolved: for S3, the endpoint (Loki takes only `host[:port]`, while the
/// Secret may hold a URL), region, addressing style, plain HTTP and encryption.
pub fn unresolved(stack: &LokiStack) -> Option<String> {
    let spec = &stack.spec.storage.secret;
    if spec.type_ != ObjectStorageSecretType::S3 {
        return None;
    }
    let endpoint = fields(spec.type_)
        .iter()
        .find(|f| f.config_key == "endpoint")
        .map(env_name)
        .unwrap_or_default();
    Some(format!(
        "without --secret, the S3 endpoint, region, addressing style (bucket_lookup_type), plain HTTP (insecure) and server-side encryption are not resolved: the config expands \"${{{endpoint}}}\" from Secret {:?} at start, and Loki refuses it (every pod crash-loops) unless the Secret's endpoint is a bare host[:port]; the operator renders a URL such as https://s3.eu-west-1.amazonaws.com as the host Loki wants. Render with --secret FILE (`kubectl get secret {} -o yaml`) to get what the operator applies",
        spec.name, spec.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::storage::VALUE_UNSAFE;
    use crate::testing;

    fn stack(secret: &str, type_: &str) -> LokiStack {
        let mut spec = testing::stack_spec(crate::model::api::LokiStackSize::Demo);
        spec.storage.secret.name = secret.into();
        spec.storage.secret.type_ =
            serde_json::from_value(serde_json::json!(type_)).expect("a storage type");
        let mut s = testing::stack("s", spec);
        s.metadata.namespace = Some("ns".into());
        s
    }

    const S3: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s3\nstringData:\n  bucketnames: b\n  endpoint: https://s3.eu-west-1.amazonaws.com\n  access_key_id: a\n";

    #[test]
    fn string_data_and_base64_data_give_the_same_parameters() {
        let plain =
            parse_secret(&format!("{S3}  access_key_secret: \"x\\\"y\"\n")).expect("stringData");
        // `kubectl get secret -o yaml` prints base64 data only.
        let b64 = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s3\n  namespace: ns\ndata:\n  bucketnames: Yg==\n  endpoint: aHR0cHM6Ly9zMy5ldS13ZXN0LTEuYW1hem9uYXdzLmNvbQ==\n  access_key_id: YQ==\n  access_key_secret: eCJ5\n";
        let encoded = parse_secret(b64).expect("data");
        let s = stack("s3", "s3");
        let a = store_for(&s, "ns", plain).expect("plain");
        let b = store_for(&s, "ns", encoded).expect("base64");
        assert_eq!(a, b);
        let s3 = a.s3.expect("endpoint resolved");
        assert_eq!(s3.host, "s3.eu-west-1.amazonaws.com");
        assert_eq!(s3.region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn a_credential_the_operator_refuses_is_refused_here() {
        // The cache marks a value with a quote; a bucket name is expanded into the YAML.
        let text = S3.replace("bucketnames: b", "bucketnames: 'b\"c'") + "  access_key_secret: x\n";
        let secret = parse_secret(&text).expect("parses");
        let mut stripped = secret.clone();
        strip_secret(&mut stripped);
        assert_eq!(
            stripped.data.as_ref().and_then(|d| d.get("bucketnames")),
            Some(&ByteString(vec![VALUE_UNSAFE]))
        );
        let e = store_for(&stack("s3", "s3"), "ns", secret).expect_err("unsafe");
        assert!(e.contains("key bucketnames"), "{e}");
    }

    #[test]
    fn bad_secrets_name_what_to_fix() {
        let not_secret = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s3\n";
        let e = parse_secret(not_secret).expect_err("kind");
        assert!(e.contains("expected a Secret"), "{e}");
        let e = parse_secret("a: [").expect_err("yaml");
        assert!(e.starts_with("not YAML"), "{e}");
        let cases = [
            (
                stack("other", "s3"),
                "ns",
                "spec.storage.secret.name is \"other\"",
            ),
            (stack("s3", "s3"), "ns2", "metadata.namespace is \"ns\""),
            (
                stack("s3", "s3"),
                "ns",
                "lacks keys required for type s3: access_key_secret",
            ),
            (
                stack("s3", "azure"),
                "ns",
                "account_name, account_key, container",
            ),
        ];
        for (s, ns, want) in cases {
            let text = S3.replace("name: s3\n", "name: s3\n  namespace: ns\n");
            let secret = parse_secret(&text).expect("parses");
            let e = store_for(&s, ns, secret).expect_err(want);
            assert!(e.contains(want), "{want}: {e}");
        }
        let bad_endpoint =
            S3.replace("eu-west-1.amazonaws.com", "example.com/loki") + "  access_key_secret: x\n";
        let secret = parse_secret(&bad_endpoint).expect("parses");
        let e = store_for(&stack("s3", "s3"), "ns", secret).expect_err("path");
        assert!(e.contains("key endpoint"), "{e}");
    }

    #[test]
    fn only_s3_leaves_something_unresolved_without_a_secret() {
        let note = unresolved(&stack("s3", "s3")).expect("s3");
        assert!(
            note.contains("${LOKI_STORAGE_ENDPOINT}") && note.contains("--secret"),
            "{note}"
        );
        assert_eq!(unresolved(&stack("g", "gcs")), None);
    }
}
