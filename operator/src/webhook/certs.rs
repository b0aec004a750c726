//! The webhook's own CA and serving certificate, for installs without OLM: pure, when
//! to issue or rotate them and how they are kept in a Secret; `serve.rs` carries it out.
//!
//! Both live in one Secret in the operator's namespace, so every replica serves the same
//! certificate and the leader can publish the CA as the webhook's `caBundle`. What to do
//! with the Secret is decided by [`plan`], a pure function of the time, the Secret's
//! contents and the host names the API server reaches the webhook by.
//!
//! Rotation never breaks the API server's trust: a new CA is first only added to the
//! bundle (the serving certificate, signed by the old CA, stays), and the serving
//! certificate is re-issued from the new CA only when it nears its own end, long after
//! the bundle with both CAs has been published. The old CA leaves the bundle once it has
//! expired.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;

use crate::model::names;

const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const PREVIOUS_CA_CRT: &str = "previous-ca.crt";
/// The CAs the API server is told to trust: the current one and, after a rotation, the
/// previous one until it expires.
pub const CA_BUNDLE: &str = "ca-bundle.crt";
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

const CA_COMMON_NAME: &str = "loki-zone-operator-webhook-ca";
const DAY: i64 = 24 * 3600;
/// Certificates start an hour early, so a node whose clock is a little behind trusts them.
const BACKDATE: i64 = 3600;

#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    pub ca_secs: i64,
    pub serving_secs: i64,
}

/// A CA lasts five years and a serving certificate one; each is replaced once less than a
/// third of its life is left, so a rotation that fails has months to be retried.
pub const LIFETIMES: Lifetimes = Lifetimes {
    ca_secs: 5 * 365 * DAY,
    serving_secs: 365 * DAY,
};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Secret {secret}: {what}; delete the Secret and the operator issues a new CA and certificate")]
    Unreadable { secret: String, what: String },
}

/// What the Secret holds, with the validity the operator wrote beside it (so nothing has
/// to parse X.509 to know when to rotate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certs {
    pub ca_crt: String,
    pub ca_key: String,
    pub previous_ca_crt: Option<String>,
    pub tls_crt: String,
    pub tls_key: String,
    pub ca_not_after: i64,
    pub previous_ca_not_after: Option<i64>,
    pub serving_not_after: i64,
    pub hosts: Vec<String>,
}

impl Certs {
    /// The PEM the webhook configuration's `caBundle` carries.
    pub fn ca_bundle(&self) -> String {
        let mut b = self.ca_crt.clone();
        if let Some(p) = &self.previous_ca_crt {
            b.push_str(p);
        }
        b
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertAction {
    Keep,
    /// No usable Secret: a new CA and serving certificate.
    Create,
    /// The CA nears its end: a new CA joins the bundle; the serving certificate stays.
    RotateCa,
    /// The serving certificate nears its end or names other hosts: a new one from the
    /// current CA (and an expired previous CA leaves the bundle).
    IssueServing,
}

fn nearly_over(now: i64, not_after: i64, life: i64) -> bool {
    not_after - now < life / 3
}

pub fn plan(now: i64, certs: Option<&Certs>, hosts: &[String], life: &Lifetimes) -> CertAction {
    let Some(c) = certs else {
        return CertAction::Create;
    };
    if c.ca_not_after <= now {
        return CertAction::Create;
    }
    if nearly_over(now, c.ca_not_after, life.ca_secs) {
        return CertAction::RotateCa;
    }
    if nearly_over(now, c.serving_not_after, life.serving_secs) || c.hosts != hosts {
        return CertAction::IssueServing;
    }
    CertAction::Keep
}

fn at(unix: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The CA's parameters: the same every time for the same validity, so that an issuer
/// rebuilt from the stored key signs with exactly the subject the CA certificate has.
fn ca_params(not_before: i64, not_after: i64) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = at(not_before);
    p.not_after = at(not_after);
    p
}

fn new_ca(now: i64, life: &Lifetimes) -> Result<(String, String, i64), CertError> {
    let key = KeyPair::generate()?;
    let not_after = now + life.ca_secs;
    let cert = ca_params(now - BACKDATE, not_after).self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

fn serving(
    now: i64,
    ca_key: &str,
    ca_not_after: i64,
    hosts: &[String],
    life: &Lifetimes,
) -> Result<(String, String, i64), CertError> {
    let ca_key = KeyPair::from_pem(ca_key)?;
    let issuer = Issuer::new(ca_params(now - BACKDATE, ca_not_after), ca_key);
    let mut p = CertificateParams::new(hosts.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        hosts.first().map_or("webhook", String::as_str),
    );
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let not_after = (now + life.serving_secs).min(ca_not_after);
    p.not_before = at(now - BACKDATE);
    p.not_after = at(not_after);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// Carries out `action` on `current`; `Keep` returns `current` as it is.
pub fn carry_out(
    action: &CertAction,
    now: i64,
    current: Option<Certs>,
    hosts: &[String],
    life: &Lifetimes,
) -> Result<Option<Certs>, CertError> {
    let c = match (action, current) {
        (CertAction::Keep, c) => return Ok(c),
        (CertAction::Create, _) | (_, None) => {
            let (ca_crt, ca_key, ca_not_after) = new_ca(now, life)?;
            let (tls_crt, tls_key, serving_not_after) =
                serving(now, &ca_key, ca_not_after, hosts, life)?;
            Certs {
                ca_crt,
                ca_key,
                previous_ca_crt: None,
                tls_crt,
                tls_key,
                ca_not_after,
                previous_ca_not_after: None,
                serving_not_after,
                hosts: hosts.to_vec(),
            }
        }
        (CertAction::RotateCa, Some(old)) => {
            let (ca_crt, ca_key, ca_not_after) = new_ca(now, life)?;
            Certs {
                previous_ca_crt: Some(old.ca_crt.clone()),
                previous_ca_not_after: Some(old.ca_not_after),
                ca_crt,
                ca_key,
                ca_not_after,
                ..old
            }
        }
        (CertAction::IssueServing, Some(old)) => {
            let (tls_crt, tls_key, serving_not_after) =
                serving(now, &old.ca_key, old.ca_not_after, hosts, life)?;
            let previous_valid = old.previous_ca_not_after.is_some_and(|t| t > now);
            Certs {
                tls_crt,
                tls_key,
                serving_not_after,
                hosts: hosts.to_vec(),
                previous_ca_crt: old.previous_ca_crt.filter(|_| previous_valid),
                previous_ca_not_after: old.previous_ca_not_after.filter(|_| previous_valid),
                ..old
            }
        }
    };
    Ok(Some(c))
}

fn annotation(secret: &str, ann: &BTreeMap<String, String>, key: &str) -> Result<i64, CertError> {
    ann.get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| CertError::Unreadable {
            secret: secret.to_string(),
            what: format!("annotation {key} is missing or not a number"),
        })
}

/// Reads the Secret the operator wrote; anything missing makes it unusable (and replaced).
pub fn from_secret(s: &Secret) -> Result<Certs, CertError> {
    let name = s.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let data = s.data.as_ref().unwrap_or(&BTreeMap::new()).clone();
    let text = |k: &str| -> Result<String, CertError> {
        data.get(k)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| CertError::Unreadable {
                secret: name.clone(),
                what: format!("key {k} is missing"),
            })
    };
    let ann = s.metadata.annotations.as_ref().unwrap_or(&empty);
    let previous_ca_crt = text(PREVIOUS_CA_CRT).ok();
    Ok(Certs {
        ca_crt: text(CA_CRT)?,
        ca_key: text(CA_KEY)?,
        tls_crt: text(TLS_CRT)?,
        tls_key: text(TLS_KEY)?,
        ca_not_after: annotation(&name, ann, names::ANNOTATION_WEBHOOK_CA_NOT_AFTER)?,
        previous_ca_not_after: previous_ca_crt.as_ref().and_then(|_| {
            annotation(&name, ann, names::ANNOTATION_WEBHOOK_PREVIOUS_CA_NOT_AFTER).ok()
        }),
        previous_ca_crt,
        serving_not_after: annotation(&name, ann, names::ANNOTATION_WEBHOOK_CERT_NOT_AFTER)?,
        hosts: ann
            .get(names::ANNOTATION_WEBHOOK_CERT_HOSTS)
            .map(|h| h.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
    })
}

/// The Secret's data and annotations for `c` (name, namespace and resourceVersion are the
/// caller's).
pub fn to_secret(c: &Certs) -> Secret {
    let mut data = BTreeMap::from([
        (CA_CRT.to_string(), c.ca_crt.clone()),
        (CA_KEY.to_string(), c.ca_key.clone()),
        (CA_BUNDLE.to_string(), c.ca_bundle()),
        (TLS_CRT.to_string(), c.tls_crt.clone()),
        (TLS_KEY.to_string(), c.tls_key.clone()),
    ]);
    let mut ann = BTreeMap::from([
        (
            names::ANNOTATION_WEBHOOK_CA_NOT_AFTER.to_string(),
            c.ca_not_after.to_string(),
        ),
        (
            names::ANNOTATION_WEBHOOK_CERT_NOT_AFTER.to_string(),
            c.serving_not_after.to_string(),
        ),
        (
            names::ANNOTATION_WEBHOOK_CERT_HOSTS.to_string(),
            c.hosts.join(","),
        ),
    ]);
    if let (Some(p), Some(t)) = (&c.previous_ca_crt, c.previous_ca_not_after) {
        data.insert(PREVIOUS_CA_CRT.to_string(), p.clone());
        ann.insert(
            names::ANNOTATION_WEBHOOK_PREVIOUS_CA_NOT_AFTER.to_string(),
            t.to_string(),
        );
    }
    let mut s = Secret {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    };
    s.metadata.annotations = Some(ann);
    s.metadata.labels = Some(BTreeMap::from([(
        names::LABEL_MANAGED_BY.to_string(),
        names::CONTROLLER_NAME.to_string(),
    )]));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn hosts() -> Vec<String> {
        vec!["svc.ns.svc".into(), "127.0.0.1".into()]
    }

    fn created() -> Certs {
        carry_out(&CertAction::Create, NOW, None, &hosts(), &LIFETIMES)
            .expect("generates")
            .expect("some")
    }

    #[test]
    fn plan_over_a_certificate_lifetime() {
        let h = hosts();
        let c = created();
        assert_eq!(plan(NOW, None, &h, &LIFETIMES), CertAction::Create);
        assert_eq!(plan(NOW, Some(&c), &h, &LIFETIMES), CertAction::Keep);
        let serving_due = c.serving_not_after - LIFETIMES.serving_secs / 3 + 1;
        assert_eq!(
            plan(serving_due, Some(&c), &h, &LIFETIMES),
            CertAction::IssueServing
        );
        let other_hosts = vec!["other.ns.svc".to_string()];
        assert_eq!(
            plan(NOW, Some(&c), &other_hosts, &LIFETIMES),
            CertAction::IssueServing
        );
        let ca_due = c.ca_not_after - LIFETIMES.ca_secs / 3 + 1;
        assert_eq!(plan(ca_due, Some(&c), &h, &LIFETIMES), CertAction::RotateCa);
        assert_eq!(
            plan(c.ca_not_after, Some(&c), &h, &LIFETIMES),
            CertAction::Create
        );
    }

    #[test]
    fn a_ca_rotation_keeps_the_serving_certificate_and_trusts_both_cas() {
        let c = created();
        let later = c.ca_not_after - LIFETIMES.ca_secs / 3 + 1;
        let rotated = carry_out(
            &CertAction::RotateCa,
            later,
            Some(c.clone()),
            &hosts(),
            &LIFETIMES,
        )
        .expect("rotates")
        .expect("some");
        assert_ne!(rotated.ca_crt, c.ca_crt);
        assert_eq!(rotated.tls_crt, c.tls_crt, "serving certificate kept");
        assert_eq!(
            rotated.ca_bundle(),
            format!("{}{}", rotated.ca_crt, c.ca_crt)
        );
        // Issued again after the old CA expired: the old CA leaves the bundle.
        let after = c.ca_not_after + 1;
        let reissued = carry_out(
            &CertAction::IssueServing,
            after,
            Some(rotated.clone()),
            &hosts(),
            &LIFETIMES,
        )
        .expect("issues")
        .expect("some");
        assert_eq!(reissued.ca_bundle(), rotated.ca_crt);
        assert!(reissued.serving_not_after <= reissued.ca_not_after);
    }

    #[test]
    fn the_secret_round_trips() {
        let c = created();
        assert_eq!(from_secret(&to_secret(&c)).expect("reads"), c);
        let mut broken = to_secret(&c);
        broken.data.as_mut().expect("data").remove(TLS_KEY);
        let e = from_secret(&broken)
            .expect_err("a key is missing")
            .to_string();
        assert!(
            e.contains("tls.key") && e.contains("delete the Secret"),
            "{e}"
        );
    }
}
