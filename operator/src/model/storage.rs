//! Object storage: which Secret keys each storage type needs, and every piece of the Loki
//! pods and config that comes from them (config fragment, environment, volume).
//!
//! Credentials never enter the ConfigMap. S3 credentials reach Loki as the standard AWS
//! environment variables, which its S3 client reads with no expansion at all. Other
//! fields are environment variables read from the storage Secret (`secretKeyRef`) that
//! Loki expands into its config at start; a value containing a character that could
//! change the YAML it is expanded into is refused with a condition naming the key. The
//! S3 endpoint is an address, not a credential: the operator reads it and renders host,
//! port, TLS and addressing style from it. The GCS key file is mounted and found through
//! `GOOGLE_APPLICATION_CREDENTIALS`. The Secret keys are the Go Loki Operator's, so
//! existing Secrets keep working.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Secret;

use crate::model::api::{ObjectStorageSecretType, ObjectStorageTlsSpec};
use crate::model::conditions::Reason;
use crate::model::names;

/// One field of Loki's object store config and the Secret key that feeds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageField {
    /// The key under `common.storage.object_store.<block>`.
    pub config_key: &'static str,
    /// The key in the storage Secret.
    pub secret_key: &'static str,
    pub required: bool,
    /// `Some(var)`: the value reaches Loki as this environment variable, read by the
    /// store's client itself, and is not in the config.
    pub client_env: Option<&'static str>,
}

const fn req(config_key: &'static str, secret_key: &'static str) -> StorageField {
    StorageField {
        config_key,
        secret_key,
        required: true,
        client_env: None,
    }
}

const fn opt(config_key: &'static str, secret_key: &'static str) -> StorageField {
    StorageField {
        config_key,
        secret_key,
        required: false,
        client_env: None,
    }
}

const fn client_env(secret_key: &'static str, var: &'static str) -> StorageField {
    StorageField {
        config_key: "",
        secret_key,
        required: true,
        client_env: Some(var),
    }
}

const S3: &[StorageField] = &[
    req("endpoint", "endpoint"),
    req("bucket_name", "bucketnames"),
    client_env("access_key_id", "AWS_ACCESS_KEY_ID"),
    client_env("access_key_secret", "AWS_SECRET_ACCESS_KEY"),
    opt("region", "region"),
];

/// Secret keys whose values are addresses or settings, not credentials: the cache keeps
/// them, so the operator can render what Loki needs from them. The SSE keys name a KMS
/// key and its encryption context, which protect nothing by being secret (the Go Loki
/// Operator reads the same keys).
pub const PLAIN_KEYS: [&str; 6] = [
    "endpoint",
    "region",
    "forcepathstyle",
    SSE_TYPE,
    SSE_KMS_KEY_ID,
    SSE_KMS_CONTEXT,
];

pub const SSE_TYPE: &str = "sse_type";
pub const SSE_KMS_KEY_ID: &str = "sse_kms_key_id";
pub const SSE_KMS_CONTEXT: &str = "sse_kms_encryption_context";

/// A cached Secret value that could change the YAML it is expanded into (a quote, a
/// backslash, a line break) is replaced by this byte; any other by [`VALUE_SAFE`].
pub const VALUE_UNSAFE: u8 = 2;
pub const VALUE_SAFE: u8 = 1;

pub fn unsafe_in_yaml(value: &[u8]) -> bool {
    value
        .iter()
        .any(|b| matches!(b, b'"' | b'\\' | b'\n' | b'\r'))
}
const GCS: &[StorageField] = &[req("bucket_name", "bucketname")];
const AZURE: &[StorageField] = &[
    req("account_name", "account_name"),
    req("account_key", "account_key"),
    req("container_name", "container"),
    opt("endpoint_suffix", "endpoint_suffix"),
];
const SWIFT: &[StorageField] = &[
    req("auth_url", "auth_url"),
    req("username", "username"),
    req("password", "password"),
    req("container_name", "container_name"),
    opt("user_domain_name", "user_domain_name"),
    opt("user_domain_id", "user_domain_id"),
    opt("user_id", "user_id"),
    opt("domain_id", "domain_id"),
    opt("domain_name", "domain_name"),
    opt("project_id", "project_id"),
    opt("project_name", "project_name"),
    opt("project_domain_id", "project_domain_id"),
    opt("project_domain_name", "project_domain_name"),
    opt("region_name", "region"),
];
const ALIBABA: &[StorageField] = &[
    req("endpoint", "endpoint"),
    req("bucket", "bucket"),
    req("access_key_id", "access_key_id"),
    req("access_key_secret", "secret_access_key"),
];

/// The GCS service-account key, mounted from the Secret rather than expanded into YAML.
pub const GCS_KEY_FILE: &str = "key.json";
pub const GCS_CREDENTIALS_ENV: &str = "GOOGLE_APPLICATION_CREDENTIALS";

pub fn fields(t: ObjectStorageSecretType) -> &'static [StorageField] {
    match t {
        ObjectStorageSecretType::S3 => S3,
        ObjectStorageSecretType::Gcs => GCS,
        ObjectStorageSecretType::Azure => AZURE,
        ObjectStorageSecretType::Swift => SWIFT,
        ObjectStorageSecretType::Alibabacloud => ALIBABA,
    }
}

/// The block name under `common.storage.object_store`; differs from the backend name only
/// for Alibaba Cloud OSS.
pub fn config_block(t: ObjectStorageSecretType) -> &'static str {
    match t {
        ObjectStorageSecretType::Alibabacloud => "alibaba",
        other => other.as_str(),
    }
}

/// The environment variable carrying one storage field into the Loki container.
pub fn env_name(f: &StorageField) -> String {
    match f.client_env {
        Some(var) => var.to_string(),
        None => format!("LOKI_STORAGE_{}", f.config_key.to_ascii_uppercase()),
    }
}

/// The environment of every Loki container: one variable per storage field, from the
/// Secret, and where the mounted key file is.
pub fn env(t: ObjectStorageSecretType, secret: &str) -> Vec<serde_json::Value> {
    let mut env: Vec<serde_json::Value> = fields(t)
        .iter()
        .map(|f| serde_json::json!({"name": env_name(f), "secret": secret, "key": f.secret_key, "optional": !f.required}))
        .collect();
    if let Some(dir) = secret_mount(t) {
        env.push(serde_json::json!({"name": GCS_CREDENTIALS_ENV, "value": format!("{dir}/{GCS_KEY_FILE}")}));
    }
    env
}

/// The S3 endpoint, resolved from what the Secret gives: a URL (`https://host:port`,
/// `http://host`) or `host[:port]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Endpoint {
    /// `host[:port]`, as Loki's S3 client wants it (no scheme, no path).
    pub host: String,
    /// Plain HTTP: an `http://` URL.
    pub insecure: bool,
    /// `path` for stores other than AWS (MinIO, Ceph RGW...), `virtual-hosted` for AWS,
    /// unless the Secret's `forcepathstyle` says otherwise.
    pub bucket_lookup: &'static str,
    /// The Secret's `region`, else the one an AWS regional endpoint names.
    pub region: Option<String>,
}

pub fn parse_s3_endpoint(
    endpoint: &str,
    region: Option<&str>,
    force_path_style: Option<&str>,
) -> Result<S3Endpoint, String> {
    let endpoint = endpoint.trim();
    let (insecure, rest) = if let Some(r) = endpoint.strip_prefix("https://") {
        (false, r)
    } else if let Some(r) = endpoint.strip_prefix("http://") {
        (true, r)
    } else if endpoint.contains("://") {
        return Err(format!(
            "{endpoint:?}: only http:// and https:// endpoints are supported"
        ));
    } else {
        (false, endpoint)
    };
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.is_empty() || host.contains('/') || host.contains('?') || host.contains('@') {
        return Err(format!(
            "{endpoint:?} is not an address: give host[:port] or a URL without a path, such as https://s3.eu-west-1.amazonaws.com or http://minio.storage.svc:9000"
        ));
    }
    let hostname = host.split(':').next().unwrap_or(host);
    let aws = hostname.ends_with(".amazonaws.com");
    let path_style = match force_path_style.map(str::trim) {
        Some("true") => true,
        Some("false") => false,
        _ => !aws,
    };
    let aws_region = || {
        let r = hostname.strip_suffix(".amazonaws.com")?;
        let r = r.strip_prefix("s3.").or_else(|| r.strip_prefix("s3-"))?;
        (!r.is_empty() && !r.contains('.')).then(|| r.to_string())
    };
    Ok(S3Endpoint {
        host: host.to_string(),
        insecure,
        bucket_lookup: if path_style { "path" } else { "virtual-hosted" },
        region: region
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .or_else(aws_region),
    })
}

/// S3 server-side encryption, as Loki's S3 client takes it (`sse` block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum S3Sse {
    /// SSE-S3: keys managed by S3.
    S3,
    /// SSE-KMS with this key, and an optional encryption context (a JSON object).
    Kms {
        key_id: String,
        context: Option<String>,
    },
}

impl S3Sse {
    /// Reads the Secret's `sse_*` values; `Ok(None)` when `sse_type` is unset.
    pub fn parse(
        sse_type: Option<&str>,
        key_id: Option<&str>,
        context: Option<&str>,
    ) -> Result<Option<S3Sse>, (&'static str, String)> {
        fn set(v: Option<&str>) -> Option<&str> {
            v.map(str::trim).filter(|v| !v.is_empty())
        }
        let (key_id, context) = (set(key_id), set(context));
        match set(sse_type) {
            None if key_id.is_some() || context.is_some() => Err((
                SSE_TYPE,
                format!("is not set, but {SSE_KMS_KEY_ID} or {SSE_KMS_CONTEXT} is: set it to SSE-KMS"),
            )),
            None => Ok(None),
            Some("SSE-S3") if key_id.is_some() || context.is_some() => Err((
                SSE_TYPE,
                format!("is SSE-S3, which takes no KMS key: remove {SSE_KMS_KEY_ID} and {SSE_KMS_CONTEXT}, or use SSE-KMS"),
            )),
            Some("SSE-S3") => Ok(Some(S3Sse::S3)),
            Some("SSE-KMS") => {
                let Some(key_id) = key_id else {
                    return Err((SSE_KMS_KEY_ID, "is required with sse_type SSE-KMS: set the KMS key's ID or ARN".into()));
                };
                if let Some(c) = context {
                    let object = serde_json::from_str::<serde_json::Value>(c)
                        .is_ok_and(|v| v.is_object());
                    if !object {
                        return Err((SSE_KMS_CONTEXT, "must be a JSON object, such as {\"team\":\"logs\"}".into()));
                    }
                }
                Ok(Some(S3Sse::Kms {
                    key_id: key_id.to_string(),
                    context: context.map(str::to_string),
                }))
            }
            Some(other) => Err((
                SSE_TYPE,
                format!("{other:?} is not supported: use SSE-S3 or SSE-KMS"),
            )),
        }
    }

    /// The `sse` block as a one-line YAML flow mapping.
    fn flow(&self) -> String {
        let v = match self {
            S3Sse::S3 => serde_json::json!({"type": "SSE-S3"}),
            S3Sse::Kms { key_id, context } => {
                let mut v = serde_json::json!({"type": "SSE-KMS", "kms_key_id": key_id});
                if let Some(c) = context {
                    v["kms_encryption_context"] = c.clone().into();
                }
                v
            }
        };
        v.to_string()
    }
}

/// What Loki's config needs from the store beyond the Secret's key names. Empty when
/// rendering offline (no Secret at hand): the endpoint is then expanded as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreParams {
    pub s3: Option<S3Endpoint>,
    pub sse: Option<S3Sse>,
}

fn plain_value<'a>(secret: &'a Secret, key: &str) -> Option<&'a str> {
    let from_data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| std::str::from_utf8(&v.0).ok());
    let from_string = secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(String::as_str);
    from_string.or(from_data)
}

/// Reads the plain values of the Secret (see [`PLAIN_KEYS`]).
pub fn store_params(
    t: ObjectStorageSecretType,
    name: &str,
    secret: &Secret,
) -> Result<StoreParams, StorageSecretError> {
    if t != ObjectStorageSecretType::S3 {
        return Ok(StoreParams::default());
    }
    let invalid = |key: &'static str, message: String| StorageSecretError::InvalidValue {
        name: name.to_string(),
        key,
        message,
    };
    let sse = S3Sse::parse(
        plain_value(secret, SSE_TYPE),
        plain_value(secret, SSE_KMS_KEY_ID),
        plain_value(secret, SSE_KMS_CONTEXT),
    )
    .map_err(|(key, message)| invalid(key, message))?;
    let s3 = match plain_value(secret, "endpoint") {
        Some(endpoint) => Some(
            parse_s3_endpoint(
                endpoint,
                plain_value(secret, "region"),
                plain_value(secret, "forcepathstyle"),
            )
            .map_err(|message| invalid("endpoint", message))?,
        ),
        None => None,
    };
    Ok(StoreParams { s3, sse })
}

/// Where the pods find the CA bundle of `spec.storage.tls`.
pub fn ca_file(tls: &ObjectStorageTlsSpec) -> String {
    format!("{}/{}", names::STORAGE_CA_MOUNT_DIR, tls.ca_key())
}

/// `common.storage.object_store.<block>`, as (key, YAML value) pairs: literal values the
/// operator resolved, else `"${VAR}"` expansions of the Secret's values.
pub fn config_fields(
    t: ObjectStorageSecretType,
    params: &StoreParams,
    tls: Option<&ObjectStorageTlsSpec>,
) -> Vec<(String, String)> {
    let quote = |v: &str| serde_json::Value::String(v.to_string()).to_string();
    let mut out: Vec<(String, String)> = Vec::new();
    for f in fields(t).iter().filter(|f| f.client_env.is_none()) {
        let literal = match (f.config_key, &params.s3) {
            ("endpoint", Some(s3)) => Some(Some(quote(&s3.host))),
            // Known to be unset: the client's default (no region, as MinIO wants).
            ("region", Some(s3)) => Some(s3.region.as_deref().map(quote)),
            _ => None,
        };
        let value = match literal {
            Some(Some(v)) => v,
            Some(None) => continue,
            None => format!("\"${{{}}}\"", env_name(f)),
        };
        out.push((f.config_key.to_string(), value));
    }
    if let Some(s3) = &params.s3 {
        out.push(("insecure".into(), s3.insecure.to_string()));
        out.push(("bucket_lookup_type".into(), quote(s3.bucket_lookup)));
    }
    if let Some(sse) = params
        .sse
        .as_ref()
        .filter(|_| t == ObjectStorageSecretType::S3)
    {
        out.push(("sse".into(), sse.flow()));
    }
    if let Some(tls) = tls.filter(|_| t == ObjectStorageSecretType::S3) {
        let http = serde_json::json!({"tls_ca_path": ca_file(tls)});
        out.push(("http".into(), http.to_string()));
    }
    out
}

/// Every Secret key the storage type needs.
pub fn required_keys(t: ObjectStorageSecretType) -> Vec<&'static str> {
    let mut keys: Vec<&str> = fields(t)
        .iter()
        .filter(|f| f.required)
        .map(|f| f.secret_key)
        .collect();
    if t == ObjectStorageSecretType::Gcs {
        keys.push(GCS_KEY_FILE);
    }
    keys
}

/// Where the Secret is mounted, for types that read a file from it.
pub fn secret_mount(t: ObjectStorageSecretType) -> Option<&'static str> {
    (t == ObjectStorageSecretType::Gcs).then_some(names::STORAGE_SECRET_MOUNT_DIR)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StorageSecretError {
    #[error("storage secret {name:?} does not exist in namespace {namespace:?}; create it with the keys for type {type_}: {keys}")]
    Missing {
        name: String,
        namespace: String,
        type_: &'static str,
        keys: String,
    },
    #[error("storage secret {name:?} in namespace {namespace:?} cannot be read: {error}; the operator needs get on Secrets in this namespace (in the namespaced mode, the Role of manifests/watched-namespace), and tries again every 10 s")]
    Unreadable {
        name: String,
        namespace: String,
        error: String,
    },
    #[error("storage secret {name:?} lacks keys required for type {type_}: {missing} (present: {present})")]
    InvalidKeys {
        name: String,
        type_: &'static str,
        missing: String,
        present: String,
    },
    #[error("storage secret {name:?}: key {key}: {message}")]
    InvalidValue {
        name: String,
        key: &'static str,
        message: String,
    },
}

impl StorageSecretError {
    /// The Degraded condition's reason, as the Go Loki Operator names it.
    pub fn reason(&self) -> Reason {
        match self {
            // The Go operator's reason for a Secret it cannot get; the message says why.
            StorageSecretError::Missing { .. } | StorageSecretError::Unreadable { .. } => {
                Reason::MissingObjectStorageSecret
            }
            StorageSecretError::InvalidKeys { .. } | StorageSecretError::InvalidValue { .. } => {
                Reason::InvalidObjectStorageSecret
            }
        }
    }
}

/// What is wrong with the CA bundle `spec.storage.tls` names. Without it every Loki pod
/// waits in ContainerCreating on a volume that cannot mount.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StorageCaError {
    #[error("the CA ConfigMap {name:?} (spec.storage.tls.caName) does not exist in namespace {namespace:?}; create it with the CA bundle under key {key:?}")]
    Missing {
        name: String,
        namespace: String,
        key: String,
    },
    #[error("the CA ConfigMap {name:?} has no key {key:?} (spec.storage.tls.caKey); its keys: {present}")]
    KeyMissing {
        name: String,
        key: String,
        present: String,
    },
}

impl StorageCaError {
    /// The Degraded condition's reason, as the Go Loki Operator names it.
    pub fn reason(&self) -> Reason {
        match self {
            StorageCaError::Missing { .. } => Reason::MissingObjectStorageCAConfigMap,
            StorageCaError::KeyMissing { .. } => Reason::InvalidObjectStorageCAConfigMap,
        }
    }
}

/// Checks the CA ConfigMap of `tls` from its key names (`None`: it does not exist).
pub fn check_ca(
    tls: &ObjectStorageTlsSpec,
    namespace: &str,
    keys: Option<&BTreeSet<String>>,
) -> Result<(), StorageCaError> {
    let key = tls.ca_key();
    match keys {
        None => Err(StorageCaError::Missing {
            name: tls.ca_name.clone(),
            namespace: namespace.to_string(),
            key: key.to_string(),
        }),
        Some(keys) if !keys.contains(key) => Err(StorageCaError::KeyMissing {
            name: tls.ca_name.clone(),
            key: key.to_string(),
            present: keys.iter().cloned().collect::<Vec<_>>().join(", "),
        }),
        Some(_) => Ok(()),
    }
}

/// The object store's parameters from the stack's Secret as the cache keeps it: checked
/// for every required key, then its plain values read. The reconciler and `render
/// --secret` both call this, so what is rendered offline is what is applied.
pub fn secret_params(
    t: ObjectStorageSecretType,
    name: &str,
    namespace: &str,
    secret: Option<&Secret>,
) -> Result<StoreParams, StorageSecretError> {
    check_secret(t, name, namespace, secret)?;
    match secret {
        Some(s) => store_params(t, name, s),
        None => Ok(StoreParams::default()),
    }
}

/// Checks that the Secret has a non-empty value for every required key. Only key names
/// are read; values stay in the Secret.
pub fn check_secret(
    t: ObjectStorageSecretType,
    name: &str,
    namespace: &str,
    secret: Option<&Secret>,
) -> Result<(), StorageSecretError> {
    let Some(secret) = secret else {
        return Err(StorageSecretError::Missing {
            name: name.to_string(),
            namespace: namespace.to_string(),
            type_: t.as_str(),
            keys: required_keys(t).join(", "),
        });
    };
    let mut present: BTreeMap<&str, bool> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        present.insert(k, !v.0.is_empty());
    }
    for (k, v) in secret.string_data.iter().flatten() {
        present.insert(k, !v.is_empty());
    }
    let missing: Vec<&str> = required_keys(t)
        .into_iter()
        .filter(|k| !present.get(k).copied().unwrap_or(false))
        .collect();
    // Values Loki expands into its YAML must not be able to change it (see the module doc).
    let expanded = fields(t).iter().filter(|f| f.client_env.is_none());
    for f in expanded {
        let marked = secret
            .data
            .as_ref()
            .and_then(|d| d.get(f.secret_key))
            .is_some_and(|v| v.0 == [VALUE_UNSAFE]);
        if marked {
            return Err(StorageSecretError::InvalidValue {
                name: name.to_string(),
                key: f.secret_key,
                message: "contains a quote, a backslash or a line break, which would change the Loki configuration it is expanded into; remove it".into(),
            });
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(StorageSecretError::InvalidKeys {
            name: name.to_string(),
            type_: t.as_str(),
            missing: missing.join(", "),
            present: present.keys().copied().collect::<Vec<_>>().join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(keys: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn missing_secret_names_the_keys_to_create() {
        let e = check_secret(ObjectStorageSecretType::S3, "s", "ns", None).unwrap_err();
        assert_eq!(e.reason(), Reason::MissingObjectStorageSecret);
        assert!(
            e.to_string()
                .contains("endpoint, bucketnames, access_key_id, access_key_secret"),
            "{e}"
        );
    }

    #[test]
    fn invalid_secret_names_missing_and_empty_keys() {
        let s = secret(&[
            ("endpoint", "http://minio"),
            ("bucketnames", ""),
            ("access_key_id", "a"),
        ]);
        let e = check_secret(ObjectStorageSecretType::S3, "s", "ns", Some(&s)).unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidObjectStorageSecret);
        assert!(
            e.to_string()
                .contains("lacks keys required for type s3: bucketnames, access_key_secret"),
            "{e}"
        );
    }

    #[test]
    fn complete_secrets_pass_for_every_type() {
        for t in ObjectStorageSecretType::ALL {
            let keys: Vec<(&str, &str)> = required_keys(t).into_iter().map(|k| (k, "x")).collect();
            assert_eq!(
                check_secret(t, "s", "ns", Some(&secret(&keys))),
                Ok(()),
                "{t:?}"
            );
        }
        let gcs = secret(&[("bucketname", "b")]);
        assert!(
            check_secret(ObjectStorageSecretType::Gcs, "s", "ns", Some(&gcs))
                .unwrap_err()
                .to_string()
                .contains("key.json")
        );
    }

    #[test]
    fn s3_endpoints_in_every_form() {
        let cases = [
            (
                "https://s3.eu-west-1.amazonaws.com",
                None,
                None,
                (
                    "s3.eu-west-1.amazonaws.com",
                    false,
                    "virtual-hosted",
                    Some("eu-west-1"),
                ),
            ),
            (
                "s3.amazonaws.com",
                Some("us-east-1"),
                None,
                (
                    "s3.amazonaws.com",
                    false,
                    "virtual-hosted",
                    Some("us-east-1"),
                ),
            ),
            (
                "http://minio.storage.svc:9000",
                None,
                None,
                ("minio.storage.svc:9000", true, "path", None),
            ),
            (
                "https://minio.example.com/",
                None,
                None,
                ("minio.example.com", false, "path", None),
            ),
            (
                "ceph.example.com:7480",
                Some("default"),
                None,
                ("ceph.example.com:7480", false, "path", Some("default")),
            ),
            (
                "minio.local",
                None,
                Some("false"),
                ("minio.local", false, "virtual-hosted", None),
            ),
        ];
        for (endpoint, region, force, (host, insecure, lookup, want_region)) in cases {
            let e = parse_s3_endpoint(endpoint, region, force).expect(endpoint);
            assert_eq!(
                (
                    e.host.as_str(),
                    e.insecure,
                    e.bucket_lookup,
                    e.region.as_deref()
                ),
                (host, insecure, lookup, want_region),
                "{endpoint}"
            );
        }
        for bad in ["https://minio/bucket", "ftp://x", "", "https://user@host"] {
            assert!(parse_s3_endpoint(bad, None, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn s3_config_lines_for_a_plain_http_store() {
        let secret = Secret {
            data: Some(
                [(
                    "endpoint".to_string(),
                    ByteString(b"http://minio.storage.svc:9000".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let params = store_params(ObjectStorageSecretType::S3, "s", &secret).expect("params");
        let lines: Vec<String> = config_fields(ObjectStorageSecretType::S3, &params, None)
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert_eq!(
            lines,
            [
                "endpoint: \"minio.storage.svc:9000\"",
                "bucket_name: \"${LOKI_STORAGE_BUCKET_NAME}\"",
                "insecure: true",
                "bucket_lookup_type: \"path\"",
            ]
        );
        let bad = Secret {
            data: Some(
                [(
                    "endpoint".to_string(),
                    ByteString(b"https://minio/loki".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let e = store_params(ObjectStorageSecretType::S3, "s", &bad).expect_err("path");
        assert_eq!(e.reason(), Reason::InvalidObjectStorageSecret);
        assert!(e.to_string().contains("key endpoint"), "{e}");
    }

    #[test]
    fn values_that_would_change_the_yaml_are_refused() {
        let s = secret(&[("bucketname", "b"), ("key.json", "{}")]);
        let mut s = s;
        s.data
            .as_mut()
            .expect("data")
            .insert("bucketname".into(), ByteString(vec![VALUE_UNSAFE]));
        let e = check_secret(ObjectStorageSecretType::Gcs, "s", "n", Some(&s)).expect_err("unsafe");
        assert!(e.to_string().contains("key bucketname"), "{e}");
    }

    fn s3_lines(keys: &[(&str, &str)], tls: Option<&ObjectStorageTlsSpec>) -> Vec<String> {
        let params = store_params(ObjectStorageSecretType::S3, "s", &secret(keys)).expect("params");
        config_fields(ObjectStorageSecretType::S3, &params, tls)
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    }

    #[test]
    fn s3_server_side_encryption_lines() {
        let endpoint = ("endpoint", "https://s3.eu-west-1.amazonaws.com");
        let lines = s3_lines(&[endpoint, (SSE_TYPE, "SSE-S3")], None);
        assert_eq!(
            lines.last().map(String::as_str),
            Some(r#"sse: {"type":"SSE-S3"}"#)
        );
        // The context is JSON: its quotes must survive as data, not end the YAML string.
        let lines = s3_lines(
            &[
                endpoint,
                (SSE_TYPE, "SSE-KMS"),
                (SSE_KMS_KEY_ID, "arn:aws:kms:eu-west-1:1:key/k"),
                (SSE_KMS_CONTEXT, r#"{"team":"logs"}"#),
            ],
            None,
        );
        let sse = lines.last().expect("sse line");
        assert_eq!(
            sse,
            r#"sse: {"kms_encryption_context":"{\"team\":\"logs\"}","kms_key_id":"arn:aws:kms:eu-west-1:1:key/k","type":"SSE-KMS"}"#
        );
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(sse).expect("valid YAML");
        assert_eq!(
            parsed["sse"]["kms_encryption_context"].as_str(),
            Some(r#"{"team":"logs"}"#)
        );
        // Without SSE keys, no sse block at all.
        assert!(!s3_lines(&[endpoint], None)
            .iter()
            .any(|l| l.starts_with("sse")));
    }

    #[test]
    fn bad_server_side_encryption_names_the_key() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[(SSE_TYPE, "AES256")], SSE_TYPE),
            (&[(SSE_TYPE, "SSE-KMS")], SSE_KMS_KEY_ID),
            (&[(SSE_TYPE, "SSE-S3"), (SSE_KMS_KEY_ID, "k")], SSE_TYPE),
            (&[(SSE_KMS_KEY_ID, "k")], SSE_TYPE),
            (
                &[
                    (SSE_TYPE, "SSE-KMS"),
                    (SSE_KMS_KEY_ID, "k"),
                    (SSE_KMS_CONTEXT, "team=logs"),
                ],
                SSE_KMS_CONTEXT,
            ),
        ];
        for (keys, named) in cases {
            let e = store_params(ObjectStorageSecretType::S3, "s", &secret(keys))
                .expect_err("invalid SSE");
            assert_eq!(e.reason(), Reason::InvalidObjectStorageSecret);
            assert!(
                e.to_string().contains(&format!("key {named}:")),
                "{keys:?}: {e}"
            );
        }
    }

    #[test]
    fn a_custom_ca_points_the_s3_client_at_the_mounted_bundle() {
        let tls = ObjectStorageTlsSpec {
            ca_name: "minio-ca".into(),
            ca_key: None,
        };
        let lines = s3_lines(
            &[("endpoint", "https://minio.storage.svc:9000")],
            Some(&tls),
        );
        assert_eq!(
            lines.last().map(String::as_str),
            Some(r#"http: {"tls_ca_path":"/var/run/tls/storage/ca/service-ca.crt"}"#)
        );
        let tls = ObjectStorageTlsSpec {
            ca_key: Some("ca.pem".into()),
            ..tls
        };
        assert_eq!(ca_file(&tls), "/var/run/tls/storage/ca/ca.pem");
    }
}
