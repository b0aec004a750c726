//! Object storage: which Secret keys each storage type needs, and how they reach Loki.
//!
//! Credentials never enter the ConfigMap. Each config field is an environment variable
//! read from the storage Secret (`secretKeyRef`), which Loki expands at start; the GCS key
//! file is mounted and found through `GOOGLE_APPLICATION_CREDENTIALS`. The Secret keys are
//! the Go Loki Operator's, so existing Secrets keep working.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use crate::api::ObjectStorageSecretType;
use crate::conditions::Reason;
use crate::names;

/// One field of Loki's object store config and the Secret key that feeds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageField {
    /// The key under `common.storage.object_store.<block>`.
    pub config_key: &'static str,
    /// The key in the storage Secret.
    pub secret_key: &'static str,
    pub required: bool,
}

const fn req(config_key: &'static str, secret_key: &'static str) -> StorageField {
    StorageField {
        config_key,
        secret_key,
        required: true,
    }
}

const fn opt(config_key: &'static str, secret_key: &'static str) -> StorageField {
    StorageField {
        config_key,
        secret_key,
        required: false,
    }
}

const S3: &[StorageField] = &[
    req("endpoint", "endpoint"),
    req("bucket_name", "bucketnames"),
    req("access_key_id", "access_key_id"),
    req("secret_access_key", "access_key_secret"),
    opt("region", "region"),
];
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
    format!("LOKI_STORAGE_{}", f.config_key.to_ascii_uppercase())
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
    #[error("storage secret {name:?} lacks keys required for type {type_}: {missing} (present: {present})")]
    InvalidKeys {
        name: String,
        type_: &'static str,
        missing: String,
        present: String,
    },
}

impl StorageSecretError {
    /// The Degraded condition's reason, as the Go Loki Operator names it.
    pub fn reason(&self) -> Reason {
        match self {
            StorageSecretError::Missing { .. } => Reason::MissingObjectStorageSecret,
            StorageSecretError::InvalidKeys { .. } => Reason::InvalidObjectStorageSecret,
        }
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
}
