//! A RulerConfig as Loki settings: the `ruler` block of `config.yaml`, each tenant's
//! `ruler_alertmanager_config` for the runtime config, the remote-write Secret to mount,
//! and the ports the ruler sends to. Pure; the plan puts the result in the stack's
//! [`RulerInput`], which render writes out.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::model::defaults::{RuleFile, RulerInput};
use crate::ruler::api::{
    AlertManagerSpec, RelabelConfig, RemoteWriteAuthType, RemoteWriteClientQueueSpec,
    RemoteWriteClientSpec, RemoteWriteSpec, RulerConfigSpec,
};
use crate::ruler::names;

/// What the ruler of a stack is given: its rule files, and its RulerConfig as settings.
pub fn input(files: Option<Vec<RuleFile>>, config: Option<&RulerConfigSpec>) -> RulerInput {
    RulerInput {
        files,
        settings: ruler_settings(config),
        tenant_overrides: tenant_overrides(config),
        remote_write_secret: remote_write_secret(config).map(str::to_string),
        egress_ports: egress_ports(config),
    }
}

/// A string of a RulerConfig as written into `config.yaml`, which Loki reads with
/// `-config.expand-env`: every `$` doubled, which Loki's expansion turns back into one,
/// so `$1` in a relabel replacement stays `$1` and nothing is read from the environment.
fn literal(s: &str) -> Value {
    Value::String(s.replace('$', "$$"))
}

/// A map of the user's keys and values, both written as [`literal`].
fn literal_map(map: &BTreeMap<String, String>) -> Value {
    map.iter()
        .map(|(k, v)| (k.replace('$', "$$"), literal(v)))
        .collect::<Map<String, Value>>()
        .into()
}

fn relabel(configs: &[RelabelConfig], text: fn(&str) -> Value) -> Value {
    configs
        .iter()
        .map(|c| {
            let mut o = Map::new();
            // Prometheus refuses source_labels on labeldrop and labelkeep, even empty.
            if !c.source_labels.is_empty() {
                o.insert(
                    "source_labels".into(),
                    c.source_labels.iter().map(|l| text(l)).collect(),
                );
            }
            o.insert("separator".into(), text(&c.separator));
            o.insert("regex".into(), text(&c.regex));
            o.insert("replacement".into(), text(&c.replacement));
            o.insert("action".into(), c.action.as_str().into());
            if let Some(t) = &c.target_label {
                o.insert("target_label".into(), text(t));
            }
            if let Some(m) = c.modulus {
                o.insert("modulus".into(), m.into());
            }
            Value::Object(o)
        })
        .collect()
}

/// The Alertmanager settings both the `ruler` block and a tenant's
/// `ruler_alertmanager_config` take.
fn alertmanager(am: &AlertManagerSpec, text: fn(&str) -> Value) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("alertmanager_url".into(), text(&am.endpoints.join(",")));
    if am.enable_v2 {
        o.insert("enable_alertmanager_v2".into(), true.into());
    }
    if let Some(d) = &am.discovery {
        o.insert("enable_alertmanager_discovery".into(), d.enable_srv.into());
        o.insert(
            "alertmanager_refresh_interval".into(),
            text(&d.refresh_interval),
        );
    }
    if let Some(q) = &am.notification_queue {
        if let Some(c) = q.capacity {
            o.insert("notification_queue_capacity".into(), c.into());
        }
        if let Some(t) = &q.timeout {
            o.insert("notification_timeout".into(), text(t));
        }
    }
    if !am.relabel_configs.is_empty() {
        o.insert(
            "alert_relabel_configs".into(),
            relabel(&am.relabel_configs, text),
        );
    }
    if let Some(c) = &am.client {
        let mut client = Map::new();
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                client.insert(k.into(), text(v));
            }
        };
        if let Some(t) = &c.tls {
            put("tls_ca_path", &t.ca_path);
            put("tls_server_name", &t.server_name);
            put("tls_cert_path", &t.cert_path);
            put("tls_key_path", &t.key_path);
        }
        if let Some(b) = &c.basic_auth {
            put("basic_auth_username", &b.username);
            put("basic_auth_password", &b.password);
        }
        if let Some(h) = &c.header_auth {
            put("type", &h.type_);
            put("credentials", &h.credentials);
            put("credentials_file", &h.credentials_file);
        }
        if let Some(true) = c.tls.as_ref().and_then(|t| t.insecure_skip_verify) {
            client.insert("tls_insecure_skip_verify".into(), true.into());
        }
        if !client.is_empty() {
            o.insert("alertmanager_client".into(), Value::Object(client));
        }
    }
    o
}

/// The remote-write client, with the credentials read from the mounted Secret's files.
fn remote_write(rw: &RemoteWriteSpec) -> Value {
    let mut o = Map::new();
    o.insert("enabled".into(), rw.enabled.into());
    o.insert("config_refresh_period".into(), literal(&rw.refresh_period));
    if let Some(c) = &rw.client {
        let mut client = remote_write_client(c);
        if let Some(q) = rw.queue.as_ref().map(queue).filter(|q| !q.is_empty()) {
            client.insert("queue_config".into(), Value::Object(q));
        }
        o.insert(
            "clients".into(),
            json!({ c.name.replace('$', "$$"): Value::Object(client) }),
        );
    }
    Value::Object(o)
}

/// One remote-write client (Prometheus's `remote_write` entry), with the credentials
/// read from the files of the mounted Secret.
fn remote_write_client(c: &RemoteWriteClientSpec) -> Map<String, Value> {
    let mut client = Map::new();
    client.insert("name".into(), literal(&c.name));
    client.insert("url".into(), literal(&c.url));
    client.insert("remote_timeout".into(), literal(&c.timeout));
    client.insert("follow_redirects".into(), c.follow_redirects.into());
    if let Some(p) = &c.proxy_url {
        client.insert("proxy_url".into(), literal(p));
    }
    if !c.additional_headers.is_empty() {
        client.insert("headers".into(), literal_map(&c.additional_headers));
    }
    let dir = names::REMOTE_WRITE_SECRET_DIR;
    match c.authorization_type {
        RemoteWriteAuthType::Basic => client.insert(
            "basic_auth".into(),
            json!({"username_file": format!("{dir}/username"), "password_file": format!("{dir}/password")}),
        ),
        RemoteWriteAuthType::Bearer => client.insert(
            "authorization".into(),
            json!({"type": "Bearer", "credentials_file": format!("{dir}/bearer_token")}),
        ),
    };
    if !c.relabel_configs.is_empty() {
        client.insert(
            "write_relabel_configs".into(),
            relabel(&c.relabel_configs, literal),
        );
    }
    client
}

fn queue(q: &RemoteWriteClientQueueSpec) -> Map<String, Value> {
    let mut queue = Map::new();
    for (k, v) in [
        ("capacity", q.capacity),
        ("max_shards", q.max_shards),
        ("min_shards", q.min_shards),
        ("max_samples_per_send", q.max_samples_per_send),
    ] {
        if let Some(v) = v {
            queue.insert(k.into(), v.into());
        }
    }
    for (k, v) in [
        ("batch_send_deadline", &q.batch_send_deadline),
        ("min_backoff", &q.min_back_off_period),
        ("max_backoff", &q.max_back_off_period),
    ] {
        if let Some(v) = v {
            queue.insert(k.into(), literal(v));
        }
    }
    queue
}

/// The `ruler` block's settings that come from the RulerConfig (key → value), beside
/// those the template always sets.
pub fn ruler_settings(config: Option<&RulerConfigSpec>) -> Map<String, Value> {
    let mut o = Map::new();
    let Some(c) = config else {
        return o;
    };
    o.insert(
        "evaluation_interval".into(),
        literal(&c.evaluation_interval),
    );
    o.insert("poll_interval".into(), literal(&c.poll_interval));
    if let Some(am) = &c.alertmanager {
        if let Some(u) = &am.external_url {
            o.insert("external_url".into(), literal(u));
        }
        if !am.external_labels.is_empty() {
            o.insert("external_labels".into(), literal_map(&am.external_labels));
        }
        o.extend(alertmanager(am, literal));
        if let Some(q) = &am.notification_queue {
            for (k, v) in [
                ("for_outage_tolerance", &q.for_outage_tolerance),
                ("for_grace_period", &q.for_grace_period),
                ("resend_delay", &q.resend_delay),
            ] {
                if let Some(v) = v {
                    o.insert(k.into(), literal(v));
                }
            }
        }
    }
    if let Some(rw) = &c.remote_write {
        o.insert("remote_write".into(), remote_write(rw));
    }
    o
}

/// Per tenant, its `ruler_alertmanager_config` for the runtime config, which Loki reads
/// as written (no expansion there).
pub fn tenant_overrides(config: Option<&RulerConfigSpec>) -> BTreeMap<String, Value> {
    config
        .into_iter()
        .flat_map(|c| &c.overrides)
        .filter_map(|(tenant, o)| {
            let am = o.alertmanager.as_ref()?;
            Some((
                tenant.clone(),
                Value::Object(alertmanager(am, |s| Value::String(s.to_string()))),
            ))
        })
        .collect()
}

/// The remote-write Secret the ruler pods mount, when the RulerConfig names one.
pub fn remote_write_secret(config: Option<&RulerConfigSpec>) -> Option<&str> {
    let rw = config?.remote_write.as_ref()?;
    Some(rw.client.as_ref()?.authorization_secret_name.as_str())
}

/// The port a URL connects to: the one it names, else its scheme's (80 for `http`, 443
/// otherwise).
pub fn url_port(url: &str) -> i32 {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let port = match host.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => host.rsplit_once(':').map(|(_, p)| p),
    };
    match (port.and_then(|p| p.parse().ok()), scheme) {
        (Some(p), _) => p,
        (None, "http") => 80,
        (None, _) => 443,
    }
}

/// Where the ruler sends alerts and series: the ports of its RulerConfig's URLs.
fn egress_ports(config: Option<&RulerConfigSpec>) -> Vec<i32> {
    let Some(c) = config else {
        return Vec::new();
    };
    let mut ports: Vec<i32> = c
        .alertmanager
        .iter()
        .chain(c.overrides.values().filter_map(|o| o.alertmanager.as_ref()))
        .flat_map(|am| am.endpoints.iter().map(|e| url_port(e)))
        .chain(
            c.remote_write
                .iter()
                .filter_map(|rw| rw.client.as_ref())
                .map(|client| url_port(&client.url)),
        )
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// A RulerConfig that sets every field, as `ruler` settings and tenant overrides.
#[cfg(test)]
pub(crate) fn full_ruler_config() -> RulerConfigSpec {
    let relabel = json!([
        {"sourceLabels": ["namespace"], "targetLabel": "ns", "regex": "(team)-(.*)", "replacement": "${2}$1"},
        {"sourceLabels": [], "action": "labeldrop", "regex": "tmp_.*"},
        {"sourceLabels": ["a", "b"], "separator": ",", "action": "hashmod", "targetLabel": "shard", "modulus": 4}
    ]);
    let am = json!({
        "externalUrl": "https://grafana.example.com",
        "externalLabels": {"cluster": "eu-1"},
        "enableV2": true,
        "endpoints": ["http://_web._tcp.alertmanager.monitoring.svc", "http://_web._tcp.am2.monitoring.svc"],
        "discovery": {"enableSRV": true, "refreshInterval": "2m"},
        "notificationQueue": {"capacity": 500, "timeout": "15s", "forOutageTolerance": "2h", "forGracePeriod": "5m", "resendDelay": "30s"},
        "relabelConfigs": relabel,
        "client": {
            "tls": {"caPath": "/ca.crt", "serverName": "am", "certPath": "/tls.crt", "keyPath": "/tls.key", "insecureSkipVerify": true},
            "basicAuth": {"username": "u", "password": "p$ss"},
            "headerAuth": {"type": "Bearer", "credentialsFile": "/token"}
        }
    });
    let mut tenant_am = am.clone();
    if let Some(o) = tenant_am.as_object_mut() {
        o.remove("externalUrl");
        o.remove("externalLabels");
    }
    serde_json::from_value(json!({
        "evaluationInterval": "30s",
        "pollInterval": "20s",
        "alertmanager": am,
        "remoteWrite": {"enabled": true, "refreshPeriod": "15s",
            "client": {"name": "mimir", "url": "https://mimir.example.com/api/v1/push", "timeout": "10s",
                "authorization": "basic", "authorizationSecretName": "rw", "additionalHeaders": {"X-Team": "logs"},
                "relabelConfigs": relabel, "proxyUrl": "http://proxy:3128", "followRedirects": false},
            "queue": {"capacity": 1000, "maxShards": 10, "minShards": 1, "maxSamplesPerSend": 100,
                "batchSendDeadline": "5s", "minBackOffPeriod": "30ms", "maxBackOffPeriod": "1s"}},
        "overrides": {"application": {"alertmanager": tenant_am}}
    }))
    .expect("ruler config")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_ports() {
        assert_eq!(url_port("http://am:9093/x"), 9093);
        assert_eq!(url_port("http://am.monitoring.svc"), 80);
        assert_eq!(url_port("https://am"), 443);
        assert_eq!(url_port("https://[fd00::1]:8443"), 8443);
        assert_eq!(url_port("https://[fd00::1]/x"), 443);
    }

    #[test]
    fn the_input_carries_what_render_needs() {
        assert_eq!(
            crate::ruler::check::check_ruler_config(&full_ruler_config()),
            [],
            "the RulerConfig of the tests is one Loki takes"
        );
        let input = input(Some(Vec::new()), Some(&full_ruler_config()));
        assert_eq!(input.remote_write_secret.as_deref(), Some("rw"));
        assert_eq!(input.egress_ports, [80, 443]);
        assert!(input.settings.contains_key("remote_write"));
        assert!(input.tenant_overrides.contains_key("application"));
        assert_eq!(super::input(None, None), RulerInput::default());
    }
}

#[cfg(test)]
mod expansion_tests {
    use super::*;

    fn yaml(spec: &RulerConfigSpec) -> String {
        serde_yaml_ng::to_string(&Value::Object(ruler_settings(Some(spec)))).expect("yaml")
    }

    /// Every `${` of a config that Loki's `-config.expand-env` would expand: one not
    /// escaped by a `$` before it.
    fn expandable(config: &str) -> Vec<String> {
        let b = config.as_bytes();
        (0..b.len().saturating_sub(1))
            .filter(|&i| b[i] == b'$' && b[i + 1] == b'{')
            .filter(|&i| {
                // An odd run of `$` before `{` leaves one `$` to expand.
                let run = (0..=i).rev().take_while(|&j| b[j] == b'$').count();
                run % 2 == 1
            })
            .map(|i| config[i..].chars().take(40).collect())
            .collect()
    }

    /// Puts `${AWS_SECRET_ACCESS_KEY}` into the `target`-th string of `v`; counts them.
    fn set_nth(v: &mut Value, target: usize, n: &mut usize) {
        match v {
            Value::String(s) => {
                if *n == target {
                    *s = "${AWS_SECRET_ACCESS_KEY}".into();
                }
                *n += 1;
            }
            Value::Array(a) => a.iter_mut().for_each(|x| set_nth(x, target, n)),
            Value::Object(o) => o.values_mut().for_each(|x| set_nth(x, target, n)),
            _ => {}
        }
    }

    #[test]
    fn no_ruler_config_string_reaches_lokis_config_expandable() {
        let base = serde_json::to_value(full_ruler_config()).expect("json");
        let mut count = 0;
        set_nth(&mut base.clone(), usize::MAX, &mut count);
        assert!(count > 40, "the RulerConfig sets most strings: {count}");
        let mut checked = 0;
        for i in 0..count {
            let mut v = base.clone();
            set_nth(&mut v, i, &mut 0);
            let Ok(spec) = serde_json::from_value::<RulerConfigSpec>(v) else {
                continue; // an enum value: the schema refuses anything else
            };
            let main = yaml(&spec);
            let found = expandable(&main);
            assert!(
                found.is_empty(),
                "string #{i} is expandable in config.yaml: {found:?}"
            );
            checked += 1;
        }
        // The others are enum values, which the schema refuses anything else for: the
        // six relabel actions (three rules, in the Alertmanager and remote write), the
        // three of the tenant's Alertmanager, and the remote-write authorization.
        assert_eq!(checked + 10, count, "{checked} of {count}");
        // Map keys that reach config.yaml: external labels and headers.
        let mut spec = full_ruler_config();
        if let Some(am) = spec.alertmanager.as_mut() {
            am.external_labels
                .insert("${AWS_SECRET_ACCESS_KEY}".into(), "x".into());
        }
        if let Some(c) = spec.remote_write.as_mut().and_then(|r| r.client.as_mut()) {
            c.additional_headers
                .insert("${AWS_SECRET_ACCESS_KEY}".into(), "x".into());
            c.name = "${AWS_SECRET_ACCESS_KEY}".into();
        }
        let main = yaml(&spec);
        assert_eq!(expandable(&main), Vec::<String>::new());
        // The check itself finds an unescaped reference.
        assert_eq!(expandable("a: ${X} b: $${Y} c: $$${Z}").len(), 2);
    }
}
