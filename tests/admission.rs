//! The CRD admission table (`tests/support/admission.rs`) against a current API server:
//! the apiextensions-apiserver 1.36 that `hack/build-apiextensions.sh` builds and caches,
//! on its own etcd, with the CRD as the operator generates it for current servers (with
//! CEL). Every invalid stack must be rejected with its field named (and a CEL rule's
//! message where it breaks one), every valid stack accepted.
//!
//! First, without any server, it checks that the table has a rejecting case for every
//! bound and every CEL rule of the generated CRD.
//!
//! Without the binary (not built: no network, or `make apiextensions` not run) it says
//! loudly that the admission check did NOT run, and why; with
//! `LZO_REQUIRE_CURRENT_SERVER=1` that is a failure. A run prints one line: the server's
//! version and the counts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use loki_zone_operator::cli::crd_yaml;
use loki_zone_operator_tests::admission::{
    create, expect_rejected, invalid_cases, valid_cases, Invalid, CEL,
};
use loki_zone_operator_tests::harness::free_port;
use loki_zone_operator_tests::harness::which;
use loki_zone_operator_tests::{client_for, repo_root, runtime};
use serde_json::Value;

/// Set by `make test` to why the build did not produce the server; printed when it is
/// missing.
const UNAVAILABLE_ENV: &str = "LZO_APIEXTENSIONS_UNAVAILABLE";
/// `1`: a missing server fails the test instead of only saying so.
const REQUIRE_ENV: &str = "LZO_REQUIRE_CURRENT_SERVER";
const NAMESPACE: &str = "admission";

fn main() -> ExitCode {
    let result = table_covers_the_crd().and_then(|()| match server_bin() {
        Ok(bin) => runtime()?.block_on(run_table(&bin)).map(Some),
        Err(reason) => {
            not_run(&reason);
            Ok(None)
        }
    });
    match result {
        Ok(Some(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(None) if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") => {
            eprintln!("admission: {REQUIRE_ENV}=1, so a missing current server is a failure");
            ExitCode::FAILURE
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("admission: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn not_run(reason: &str) {
    let bar = "!".repeat(78);
    eprintln!("{bar}\n!! admission: the CRD admission check against a current API server did NOT run.\n!! Why: {reason}\n!! Build the server with `make apiextensions` (hack/build-apiextensions.sh).\n{bar}");
}

/// The cached server binary, or why there is none.
fn server_bin() -> std::result::Result<PathBuf, String> {
    let script = repo_root().join("hack/build-apiextensions.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--cached")
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let why = std::env::var(UNAVAILABLE_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        return Err(why.unwrap_or(said));
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let bin = PathBuf::from(dir).join("apiextensions-apiserver");
    if which("etcd").is_none() {
        return Err("etcd not found on PATH (Debian's etcd-server; hack/build-control-plane.sh installs it)".into());
    }
    Ok(bin)
}

async fn run_table(bin: &Path) -> Result<String> {
    let dir = repo_root().join(".e2e/admission");
    let server = CurrentServer::start(bin, &dir)?;
    let client = client_for(&server.kubeconfig).await?;
    let version = client.apiserver_version().await?;
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    if minor < CEL {
        bail!("{} is not a current server (no CEL)", version.git_version);
    }
    install_crd(&client).await?;

    let invalid = invalid_cases();
    let mut failures = Vec::new();
    let mut rejected = 0;
    for case in &invalid {
        match expect_rejected(
            case,
            minor,
            create(&client, NAMESPACE, &case.body, false).await,
        ) {
            Ok(()) => rejected += 1,
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    let valid = valid_cases()?;
    let mut accepted = 0;
    for case in &valid {
        match create(&client, NAMESPACE, &case.body, false).await {
            Ok(()) => accepted += 1,
            Err(e) => failures.push(format!("{}: a valid spec was rejected: {e}", case.name)),
        }
    }
    let (rule_counts, rule_failures) = rule_table(&client).await?;
    failures.extend(rule_failures);
    let counts = format!(
        "{rejected}/{} invalid specs rejected with the field named, {accepted}/{} valid specs accepted; {rule_counts}",
        invalid.len(),
        valid.len()
    );
    if !failures.is_empty() {
        bail!(
            "against apiextensions-apiserver {}: {counts}\n  {}",
            version.git_version,
            failures.join("\n  ")
        );
    }
    Ok(format!(
        "admission: ran against apiextensions-apiserver {} (current server, CEL): {counts}",
        version.git_version
    ))
}

/// The ruler's kinds against the same server: their CRDs install (within the CEL cost
/// budget), the samples are accepted, and what the schema can refuse is refused with
/// the field named (and a CEL rule's message where one breaks).
async fn rule_table(client: &kube::Client) -> Result<(String, Vec<String>)> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::json;
    let files = loki_zone_operator::cli::crd_files_for(
        &loki_zone_operator::render::ServerCapabilities::MODERN,
    )?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (file, yaml) in files.iter().skip(1) {
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(yaml)?;
        api.create(&PostParams::default(), &crd)
            .await
            .with_context(|| format!("the API server rejected the CRD of {file}"))?;
    }
    let post = |kind: &str, body: Value| {
        let gvk = GroupVersionKind::gvk("loki.grafana.com", "v1", kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &ar);
        async move {
            let obj: DynamicObject =
                serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
            api.create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &obj,
            )
            .await
            .map(|_| ())
        }
    };
    let sample = |f: &str| -> Result<Value> {
        Ok(serde_yaml_ng::from_str(&fs::read_to_string(
            repo_root().join("manifests/samples").join(f),
        )?)?)
    };
    let mut failures = Vec::new();
    let mut accepted = 0;
    let samples = [
        ("AlertingRule", "alertingrule.yaml"),
        ("RecordingRule", "recordingrule.yaml"),
        ("RulerConfig", "rulerconfig.yaml"),
    ];
    for (kind, f) in samples {
        // The CRD may take a moment to serve after it is created.
        let start = Instant::now();
        loop {
            match post(kind, sample(f)?).await {
                Ok(()) => {
                    accepted += 1;
                    break;
                }
                Err(_) if start.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(e) => {
                    failures.push(format!("{f}: the sample was rejected: {e}"));
                    break;
                }
            }
        }
    }
    let alerting = sample("alertingrule.yaml")?;
    // `pointer` set to `value`, its last key created if the sample lacks it.
    let with = |base: &Value, pointer: &str, value: Value| {
        let mut b = base.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
        match b.pointer_mut(parent) {
            Some(Value::Object(o)) => {
                o.insert(key.to_string(), value);
            }
            Some(Value::Array(a)) => {
                if let Some(slot) = key.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    *slot = value;
                }
            }
            _ => panic!("{pointer}: no such parent in the sample"),
        }
        b
    };
    let mut duplicate_groups = alerting.clone();
    let group = duplicate_groups["spec"]["groups"][0].clone();
    if let Some(groups) = duplicate_groups["spec"]["groups"].as_array_mut() {
        groups.push(group);
    }
    let ruler = sample("rulerconfig.yaml")?;
    let cases: Vec<(&str, &str, Value, &str, Option<&str>)> = vec![
        (
            "interval in words",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/interval", json!("1 minute")),
            "spec.groups[0].interval",
            None,
        ),
        (
            "for in words",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/rules/0/for", json!("5 minutes")),
            "spec.groups[0].rules[0].for",
            None,
        ),
        (
            "a group name twice",
            "AlertingRule",
            duplicate_groups,
            "spec.groups[1]",
            None,
        ),
        (
            "a tenant with a slash",
            "AlertingRule",
            with(&alerting, "/spec/tenantID", json!("../etc")),
            "spec.tenantID",
            None,
        ),
        (
            "the tenant ..",
            "AlertingRule",
            with(&alerting, "/spec/tenantID", json!("..")),
            "spec.tenantID",
            Some(loki_zone_operator::ruler::api::RULE_TENANT_NOT_DOTS_MSG),
        ),
        (
            "an empty alert name",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/rules/0/alert", json!("")),
            "spec.groups[0].rules[0].alert",
            None,
        ),
        (
            "a negative limit",
            "AlertingRule",
            with(&alerting, "/spec/groups/0/limit", json!(-1)),
            "spec.groups[0].limit",
            None,
        ),
        (
            "an empty record name",
            "RecordingRule",
            with(
                &sample("recordingrule.yaml")?,
                "/spec/groups/0/rules/0/record",
                json!(""),
            ),
            "spec.groups[0].rules[0].record",
            None,
        ),
        (
            "an evaluation interval in words",
            "RulerConfig",
            with(&ruler, "/spec/evaluationInterval", json!("often")),
            "spec.evaluationInterval",
            None,
        ),
        (
            "header credentials twice",
            "RulerConfig",
            with(
                &ruler,
                "/spec/alertmanager/client",
                json!({"headerAuth": {"credentials": "a", "credentialsFile": "/f"}}),
            ),
            "spec.alertmanager.client.headerAuth.credentials",
            Some(loki_zone_operator::ruler::api::RULE_HEADER_AUTH_EXCLUSIVE_MSG),
        ),
        (
            "an unknown relabel action",
            "RulerConfig",
            with(
                &ruler,
                "/spec/alertmanager/relabelConfigs",
                json!([{"sourceLabels": ["a"], "action": "rewrite"}]),
            ),
            "spec.alertmanager.relabelConfigs[0].action",
            None,
        ),
    ];
    let mut rejected = 0;
    for (name, kind, body, field, message) in &cases {
        match post(kind, body.clone()).await {
            Err(kube::Error::Api(e))
                if e.code == 422
                    && e.message.contains(field)
                    && message.is_none_or(|m| e.message.contains(m)) =>
            {
                rejected += 1
            }
            Err(e) => failures.push(format!(
                "{kind}, {name}: refused without naming {field}{}: {e}",
                message.map(|m| format!(" ({m})")).unwrap_or_default()
            )),
            Ok(()) => failures.push(format!("{kind}, {name}: accepted (want {field} refused)")),
        }
    }
    Ok((
        format!("ruler kinds: {accepted}/{} samples accepted, {rejected}/{} invalid objects rejected with the field named", samples.len(), cases.len()),
        failures,
    ))
}

/// The CRD exactly as `loki-zone-operator crd` prints it (for current servers, with CEL).
async fn install_crd(client: &kube::Client) -> Result<()> {
    let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&crd_yaml()?)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(&PostParams::default(), &crd)
        .await
        .context("the API server rejected the CRD")?;
    let name = crd.metadata.name.unwrap_or_default();
    let start = Instant::now();
    loop {
        let got = api.get(&name).await?;
        let established = got.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        // Established, and served: the first create can race the handler otherwise.
        let probe = loki_zone_operator_tests::admission::stack("probe");
        if established && create(client, NAMESPACE, &probe, true).await.is_ok() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("CRD {name} not established and served after 60s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd and the apiextensions-apiserver on free loopback ports, stopped when dropped.
///
/// The server authenticates clients by certificate (a throwaway CA, the admin in
/// `system:masters`, which the server authorizes without asking anyone). It is not a full
/// control plane: it has no core API to delegate token reviews, access reviews or
/// namespaces to, so those lookups point at itself and the admission plugins and flow
/// control that need core objects are off. Validation and CEL are the real code.
struct CurrentServer {
    procs: Vec<(&'static str, Child, PathBuf)>,
    kubeconfig: PathBuf,
}

impl CurrentServer {
    fn start(bin: &Path, dir: &Path) -> Result<CurrentServer> {
        if dir.exists() {
            fs::remove_dir_all(dir)?;
        }
        fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        certificates(&dir)?;
        let mut server = CurrentServer {
            procs: Vec::new(),
            kubeconfig: dir.join("admin.kubeconfig"),
        };
        let (client_port, peer_port, port) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let etcd = which("etcd").context("etcd not found")?;
        server.spawn(
            "etcd",
            &dir,
            &etcd,
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--log-level=warn".into(),
            ],
        )?;
        let url = format!("https://127.0.0.1:{port}");
        fs::write(&server.kubeconfig, kubeconfig(&url, &dir))?;
        let kc = server.kubeconfig.display().to_string();
        let file = |name: &str| dir.join(name).display().to_string();
        server.spawn("apiextensions-apiserver", &dir, bin, &[
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", file("server.crt")),
            format!("--tls-private-key-file={}", file("server.key")),
            format!("--client-ca-file={}", file("ca.crt")),
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--authentication-skip-lookup".into(),
            "--disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,MutatingAdmissionPolicy".into(),
            "--enable-priority-and-fairness=false".into(),
        ])?;
        server.wait_ready(&url, &dir, Duration::from_secs(60))?;
        Ok(server)
    }

    fn spawn(
        &mut self,
        name: &'static str,
        dir: &Path,
        program: &Path,
        args: &[String],
    ) -> Result<()> {
        let log = dir.join(format!("{name}.log"));
        let out = fs::File::create(&log)?;
        let child = Command::new(program)
            .args(args)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        self.procs.push((name, child, log));
        Ok(())
    }

    fn wait_ready(&mut self, url: &str, dir: &Path, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            for (name, child, log) in &mut self.procs {
                if let Some(status) = child.try_wait()? {
                    bail!("{name} exited with {status}:\n{}", tail(log, 20));
                }
            }
            let file = |name: &str| dir.join(name);
            let ok = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
                .arg(file("ca.crt"))
                .arg("--cert")
                .arg(file("admin.crt"))
                .arg("--key")
                .arg(file("admin.key"))
                // The Service informer (for conversion webhooks, unused here) never syncs
                // without a core API; every other check must pass.
                .arg(format!("{url}/readyz?exclude=informer-sync"))
                .output()
                .is_ok_and(|o| o.stdout == b"200");
            if ok {
                return Ok(());
            }
            if start.elapsed() > timeout {
                let log = self
                    .procs
                    .last()
                    .map(|p| tail(&p.2, 20))
                    .unwrap_or_default();
                bail!("apiextensions-apiserver not ready after {timeout:?}:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for CurrentServer {
    fn drop(&mut self) {
        // The server before etcd; by PID, each one this test started.
        for (_, child, _) in self.procs.iter_mut().rev() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A throwaway CA, the server's certificate for 127.0.0.1 and an admin client certificate
/// in `system:masters`.
fn certificates(dir: &Path) -> Result<()> {
    // Arguments without spaces, so each command reads as one line.
    let openssl = |args: &str| -> Result<()> {
        let out = Command::new("openssl")
            .args(args.split_whitespace())
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .context("running openssl")?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            bail!("openssl {args}: {err}");
        }
        Ok(())
    };
    let days = "-days 2";
    openssl(&format!(
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj /CN=admission-ca {days}"
    ))?;
    // Extensions make these version 3 certificates: rustls refuses version 1.
    let server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n";
    fs::write(dir.join("server.ext"), server_ext)?;
    fs::write(dir.join("admin.ext"), "extendedKeyUsage=clientAuth\n")?;
    for (name, subject) in [
        ("server", "/CN=127.0.0.1"),
        ("admin", "/O=system:masters/CN=admission-admin"),
    ] {
        openssl(&format!(
            "req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj {subject}"
        ))?;
        openssl(&format!(
            "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial {days} -out {name}.crt -extfile {name}.ext"
        ))?;
    }
    Ok(())
}

fn kubeconfig(url: &str, dir: &Path) -> String {
    let f = |name: &str| dir.join(name).display().to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: current\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: current\n  context:\n    cluster: current\n    user: admin\ncurrent-context: current\n",
        ca = f("ca.crt"),
        crt = f("admin.crt"),
        key = f("admin.key"),
    )
}

/// A constraint of the CRD schema: where (a dotted path, map keys as `*`, list items
/// without an index) and what (`minimum`, `required`, `rule: ...`, ...).
type Constraint = (String, String);

/// Every constraint of the generated CRD has a case in the table that breaks it.
fn table_covers_the_crd() -> Result<()> {
    let crd: Value = serde_yaml_ng::from_str(&crd_yaml()?)?;
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut wanted = BTreeSet::new();
    constraints(schema, "", &mut wanted);
    let cases = invalid_cases();
    let mut names = BTreeSet::new();
    let mut broken: BTreeMap<Constraint, Vec<String>> = BTreeMap::new();
    for case in &cases {
        if !names.insert(case.name.as_str()) {
            bail!("two invalid cases are named {}", case.name);
        }
        for c in breaks(schema, case)? {
            broken.entry(c).or_default().push(case.name.clone());
        }
    }
    let missing: Vec<String> = wanted
        .iter()
        .filter(|c| !broken.contains_key(*c))
        .map(|(path, what)| format!("{path}: {what}"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the admission table (tests/support/admission.rs) has no case breaking:\n  {}",
            missing.join("\n  ")
        );
    }
    Ok(())
}

fn join(path: &str, child: &str) -> String {
    if path.is_empty() {
        child.to_string()
    } else {
        format!("{path}.{child}")
    }
}

const BOUNDS: [&str; 8] = [
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "enum",
    "maxItems",
];

fn constraints(node: &Value, path: &str, out: &mut BTreeSet<Constraint>) {
    for b in BOUNDS {
        // An integer's format (int32) is its width, which the bounds already cover.
        let width = b == "format" && node["type"] != "string";
        if node.get(b).is_some() && !width {
            out.insert((path.to_string(), b.to_string()));
        }
    }
    if node["x-kubernetes-list-type"] == "map" {
        out.insert((path.to_string(), "list-map".into()));
    }
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.insert((
            path.to_string(),
            format!("rule: {}", rule["message"].as_str().unwrap_or_default()),
        ));
    }
    for r in node["required"].as_array().into_iter().flatten() {
        out.insert((
            join(path, r.as_str().unwrap_or_default()),
            "required".into(),
        ));
    }
    for (key, child) in node["properties"].as_object().into_iter().flatten() {
        // Status is the operator's, never admitted from a user's create.
        if !(path.is_empty() && key == "status") {
            constraints(child, &join(path, key), out);
        }
    }
    if node["items"].is_object() {
        constraints(&node["items"], path, out);
    }
    if node["additionalProperties"].is_object() {
        constraints(&node["additionalProperties"], &join(path, "*"), out);
    }
}

/// The constraints a case breaks: what its value at its field violates in the schema.
fn breaks(schema: &Value, case: &Invalid) -> Result<Vec<Constraint>> {
    let mut node = schema;
    let mut value = Some(&case.body);
    let mut path = String::new();
    // The list the field's last index points into, if any.
    let mut list = &Value::Null;
    for seg in case.field.split('.') {
        let (key, index) = match seg.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        let next = &node["properties"][key];
        node = if next.is_object() {
            path = join(&path, key);
            next
        } else if node["additionalProperties"].is_object() {
            path = join(&path, "*");
            &node["additionalProperties"]
        } else if (path.is_empty() && key == "metadata") || path == "metadata" {
            // The schema does not describe metadata; its name has the root's CEL rule.
            path = join(&path, key);
            &Value::Null
        } else {
            bail!("{}: {} is not in the schema", case.name, case.field);
        };
        value = value.and_then(|v| v.get(key));
        list = &Value::Null;
        if let Some(i) = index {
            list = node;
            node = &node["items"];
            value = value.and_then(|v| v.get(i));
        }
    }
    let mut out = Vec::new();
    let mut add = |what: &str| out.push((path.clone(), what.to_string()));
    let num = |k: &str| node[k].as_f64();
    match value {
        None => add("required"),
        Some(_) if list["x-kubernetes-list-type"] == "map" => add("list-map"),
        Some(v) => {
            if let Some(n) = v.as_f64() {
                if num("minimum").is_some_and(|m| n < m) {
                    add("minimum");
                }
                if num("maximum").is_some_and(|m| n > m) {
                    add("maximum");
                }
            }
            if let Some(s) = v.as_str() {
                let len = s.chars().count() as f64;
                if num("minLength").is_some_and(|m| len < m) {
                    add("minLength");
                } else if num("maxLength").is_some_and(|m| len > m) {
                    add("maxLength");
                } else if node.get("enum").is_some() {
                    add("enum");
                } else if node["format"] == "date" && date_shaped(s) {
                    add("format");
                } else if node.get("pattern").is_some() && case.cel_message.is_none() {
                    add("pattern");
                }
            }
            if num("maxItems").is_some_and(|m| v.as_array().is_some_and(|a| a.len() as f64 > m)) {
                add("maxItems");
            }
        }
    }
    if let Some(message) = case.cel_message {
        // The rule sits on the field itself or on an object above it (with a fieldPath).
        out.push((
            rule_owner(schema, message, &case.field).unwrap_or_default(),
            format!("rule: {message}"),
        ));
    }
    Ok(out)
}

/// `NNNN-NN-NN`: what the date pattern admits; a format error if it is no calendar day.
fn date_shaped(s: &str) -> bool {
    s.len() == 10
        && s.char_indices().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The path of the schema node that carries the CEL rule with this message, above
/// `field` (a rule may sit at several places: one schema inlined under `global` and under
/// every tenant, say).
fn rule_owner(schema: &Value, message: &str, field: &str) -> Option<String> {
    let mut all = BTreeSet::new();
    constraints(schema, "", &mut all);
    // `spec.limits.tenants.team-a.retention.streams[0].selector`, without indexes.
    let mut unindexed = String::new();
    let mut depth = 0;
    for c in field.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => unindexed.push(c),
            _ => {}
        }
    }
    let segments: Vec<&str> = unindexed.split('.').collect();
    let above = |owner: &str| {
        let owner: Vec<&str> = owner.split('.').filter(|s| !s.is_empty()).collect();
        owner.len() <= segments.len()
            && owner
                .iter()
                .zip(&segments)
                .all(|(o, f)| *o == "*" || o == f)
    };
    let owners: Vec<String> = all
        .into_iter()
        .filter(|(_, what)| what.strip_prefix("rule: ") == Some(message))
        .map(|(path, _)| path)
        .collect();
    owners.iter().find(|o| above(o)).or(owners.first()).cloned()
}
