//! The zone-at-bind webhook on the real API server: pods of zone-aware stacks carry their
//! zone in the event that binds them; a namespace without a zone-aware stack never
//! reaches the webhook; a webhook with a wrong CA, or no server at its address, never
//! blocks scheduling, and the annotator zones the pods meanwhile.
//!
//! Whether the API server called the webhook, and whether it changed the Binding, is
//! read from its audit log: every `pods/binding` create is audited with the
//! `mutation.webhook.admission.k8s.io/round_0_index_0` annotation it adds for each
//! mutating webhook it calls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use loki_zone_operator::model::names;
use loki_zone_operator::webhook::certs;
use loki_zone_operator_tests::harness::free_port;
use loki_zone_operator_tests::nodesim::{eventually, ZONE};
use serde_json::{json, Value};

use super::{create_stack, namespace, stack_json, Env, WAIT};

const NS: &str = "e2e-bind";
const STACK: &str = "bind";
const AUDIT_KEY: &str = "mutation.webhook.admission.k8s.io/round_0_index_0";

/// For each pod: whether the first watch event that showed it bound already had its zone.
type FirstBound = Arc<Mutex<BTreeMap<String, bool>>>;

fn watch_first_bound(env: &Env, ns: &str, labels: &str) -> FirstBound {
    let seen: FirstBound = Arc::default();
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let (s, config) = (seen.clone(), watcher::Config::default().labels(labels));
    tokio::spawn(async move {
        let events = watcher(api, config).default_backoff().applied_objects();
        futures::pin_mut!(events);
        while let Some(Ok(p)) = events.next().await {
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                continue;
            }
            // Where the pod's Loki reads its zone: the annotation, or the label.
            let zoned = super::zone_as_read(&p).is_some();
            let mut map = s.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(p.name_any()).or_insert(zoned);
        }
    });
    seen
}

fn snapshot(seen: &FirstBound) -> BTreeMap<String, bool> {
    seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The audited `pods/binding` creates in `ns` since `from` bytes: (pod, what the webhook
/// did as the API server recorded it, or None when it was not called).
fn audited_bindings(env: &Env, ns: &str, from: usize) -> Vec<(String, Option<String>)> {
    binding_events(env, ns, from)
        .into_iter()
        .map(|ev| {
            let pod = ev["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (pod, ev["annotations"][AUDIT_KEY].as_str().map(String::from))
        })
        .collect()
}

/// The audit events of the `pods/binding` creates in `ns` since byte `from`.
fn binding_events(env: &Env, ns: &str, from: usize) -> Vec<Value> {
    let text = std::fs::read_to_string(env.cp.dir.join("audit.log")).unwrap_or_default();
    text[from.min(text.len())..]
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|ev| {
            ev["objectRef"]["subresource"] == "binding"
                && ev["objectRef"]["namespace"] == ns
                && ev["verb"] == "create"
        })
        .collect()
}

/// The pods of `ns` the operator patched since byte `from` of the audit log.
fn operator_pod_patches(env: &Env, ns: &str, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(env.cp.dir.join("audit.log")).unwrap_or_default();
    let user = super::operator::service_account_user();
    text[from.min(text.len())..]
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|ev| {
            ev["user"]["username"] == user.as_str()
                && ev["verb"] == "patch"
                && ev["objectRef"]["resource"] == "pods"
                && ev["objectRef"]["namespace"] == ns
        })
        .map(|ev| {
            ev["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// How long each audited `pods/binding` create in `ns` since byte `from` took in the
/// API server (received to response complete), by pod.
fn binding_durations(env: &Env, ns: &str, from: usize) -> BTreeMap<String, Duration> {
    let at = |v: &Value| v.as_str()?.parse::<k8s_openapi::jiff::Timestamp>().ok();
    binding_events(env, ns, from)
        .iter()
        .filter_map(|ev| {
            let received = at(&ev["requestReceivedTimestamp"])?;
            let took = at(&ev["stageTimestamp"])?.duration_since(received);
            let pod = ev["objectRef"]["name"].as_str()?.to_string();
            Some((pod, Duration::try_from(took).ok()?))
        })
        .collect()
}

fn median(mut d: Vec<Duration>) -> Option<Duration> {
    d.sort();
    d.get(d.len() / 2).copied()
}

fn audit_len(env: &Env) -> usize {
    std::fs::metadata(env.cp.dir.join("audit.log")).map_or(0, |m| m.len() as usize)
}

/// A bare zone-aware pod of stack `STACK`, named like its pods, as the webhook's match
/// conditions expect; only its stack's topology keys are ever copied onto it.
fn zone_aware_pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                names::LABEL_ZONE_AWARE: names::LABEL_ZONE_AWARE_VALUE,
                names::LABEL_INSTANCE: STACK,
                "e2e": "bind",
            },
            "annotations": {names::ANNOTATION_ZONE_LABELS: ZONE},
        },
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }))?)
}

async fn create_pods(env: &Env, ns: &str, prefix: &str, n: usize) -> Result<Vec<String>> {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        api.create(&PostParams::default(), &zone_aware_pod(&name)?)
            .await?;
        names.push(name);
    }
    Ok(names)
}

/// Waits until every named pod is bound and zoned; returns how each got its zone.
async fn wait_zoned(
    seen: &FirstBound,
    env: &Env,
    ns: &str,
    pods: &[String],
) -> Result<BTreeMap<String, bool>> {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    eventually("pods bound and zoned", WAIT, || async {
        let list = api.list(&ListParams::default()).await?;
        let zoned = pods.iter().all(|name| {
            list.items
                .iter()
                .any(|p| p.name_any() == *name && super::zone_as_read(p).is_some())
        });
        let first = snapshot(seen);
        Ok((zoned && pods.iter().all(|p| first.contains_key(p))).then_some(()))
    })
    .await?;
    let first = snapshot(seen);
    Ok(pods.iter().map(|p| (p.clone(), first[p])).collect())
}

async fn covered(env: &Env, ns: &str) -> Result<MutatingWebhookConfiguration> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(env.admin.clone());
    eventually(
        "the webhook configuration covers the namespace",
        WAIT,
        || async {
            let c = api.get_opt(names::WEBHOOK_CONFIGURATION).await?;
            let values = c.as_ref().and_then(|c| {
                c.webhooks.as_ref()?[0]
                    .namespace_selector
                    .as_ref()?
                    .match_expressions
                    .as_ref()?[0]
                    .values
                    .clone()
            });
            Ok(values
                .is_some_and(|v| v.iter().any(|n| n == ns))
                .then_some(c)
                .flatten())
        },
    )
    .await
}

/// Scenario 31: A zone-aware stack's pods carry their zone in the very watch event that binds
/// them: the webhook changed every Binding, and the annotator wrote nothing.
pub async fn pods_are_zoned_in_the_event_that_binds_them(env: &mut Env) -> Result<()> {
    namespace(env, NS).await?;
    let selector = format!("{}={}", names::LABEL_INSTANCE, STACK);
    let seen = watch_first_bound(env, NS, &selector);
    let from = audit_len(env);
    let replication = json!({"factor": 2, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]});
    // Zoned by the webhook even where Kubernetes would copy the label (1.35).
    let body = super::zoned_by_the_operator(stack_json(STACK, "1x.small", replication));
    create_stack(env, NS, body).await?;
    let config = covered(env, NS).await?;
    let hook = &config.webhooks.context("webhooks")?[0];
    ensure!(
        hook.failure_policy.as_deref() == Some("Ignore"),
        "failurePolicy {:?}",
        hook.failure_policy
    );
    // Owned by the install's ClusterRole: an uninstall takes the configuration along.
    let role = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(env.admin.clone())
        .get(names::WEBHOOK_CONFIGURATION_CLUSTER_ROLE)
        .await?;
    let owners = config.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        owners
            .iter()
            .any(|o| o.kind == "ClusterRole" && Some(&o.uid) == role.metadata.uid.as_ref()),
        "the configuration is not owned by ClusterRole {}: {owners:?}",
        names::WEBHOOK_CONFIGURATION_CLUSTER_ROLE
    );
    // The stack's pods: wait for the zone-aware ones to be bound and zoned.
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), NS);
    let zone_aware = format!(
        "{selector},{}={}",
        names::LABEL_ZONE_AWARE,
        names::LABEL_ZONE_AWARE_VALUE
    );
    let names_of = eventually("the stack's zone-aware pods exist", WAIT, || async {
        let l = pods
            .list(&ListParams::default().labels(&zone_aware))
            .await?;
        Ok((l.items.len() >= 3).then(|| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()))
    })
    .await?;
    let first = wait_zoned(&seen, env, NS, &names_of).await?;
    let late: Vec<_> = first.iter().filter(|(_, z)| !**z).map(|(p, _)| p).collect();
    ensure!(
        late.is_empty(),
        "bound without their zone in the binding event: {late:?} of {}",
        first.len()
    );
    let audited = audited_bindings(env, NS, from);
    for (pod, hook) in audited.iter().filter(|(p, _)| names_of.contains(p)) {
        let hook = hook.as_deref().unwrap_or("not called");
        ensure!(
            hook.contains("\"mutated\":true"),
            "binding of {pod}: webhook {hook}"
        );
    }
    // The annotator had nothing to write for them.
    let patched = operator_pod_patches(env, NS, from);
    ensure!(patched.is_empty(), "the operator patched pods: {patched:?}");
    let metrics = env.operator.as_ref().context("operator")?.metrics().await?;
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with("loki_zone_operator_pods_zoned_total{path=\"bind\"}")),
        "no pods_zoned{{path=bind}} in the metrics"
    );
    Ok(())
}

/// Scenario 31b: On a server that copies `topology.kubernetes.io/zone` onto pods at
/// binding (1.35), a stack whose only key it is reads its zone from that label: its pods
/// carry it in the event that binds them, their bindings never reach the webhook, and
/// the operator writes nothing to them. Side by side, a stack zoned by the webhook in the
/// same namespace; what each binding took in the API server is printed (a figure, not a
/// check). Before 1.35 both go through the webhook.
pub async fn pods_read_the_zone_label_kubernetes_copies_at_binding(env: &mut Env) -> Result<()> {
    let ns = "e2e-native";
    namespace(env, ns).await?;
    let native = env.minor >= 35;
    let zone_aware = format!(
        "{}={}",
        names::LABEL_ZONE_AWARE,
        names::LABEL_ZONE_AWARE_VALUE
    );
    let seen = watch_first_bound(env, ns, &zone_aware);
    let from = audit_len(env);
    let replication = json!({"factor": 1, "zones": [{"topologyKey": ZONE}]});
    create_stack(env, ns, stack_json("label", "1x.demo", replication.clone())).await?;
    let body = super::zoned_by_the_operator(stack_json("hook", "1x.demo", replication));
    create_stack(env, ns, body).await?;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let names_of = eventually("both stacks' zone-aware pods exist", WAIT, || async {
        let l = pods
            .list(&ListParams::default().labels(&zone_aware))
            .await?;
        let names: Vec<String> = l.items.iter().map(|p| p.name_any()).collect();
        let both = ["label-", "hook-"]
            .iter()
            .all(|s| names.iter().filter(|n| n.starts_with(s)).count() >= 3);
        Ok(both.then_some(names))
    })
    .await?;
    let first = wait_zoned(&seen, env, ns, &names_of).await?;
    let late: Vec<_> = first.iter().filter(|(_, z)| !**z).map(|(p, _)| p).collect();
    ensure!(
        late.is_empty(),
        "bound without their zone in the binding event: {late:?}"
    );
    let list = pods
        .list(&ListParams::default().labels(&zone_aware))
        .await?;
    for p in &list.items {
        let source = p.annotations().get(names::ANNOTATION_ZONE_SOURCE);
        let reads_label = p.name_any().starts_with("label-") && native;
        ensure!(
            source.is_some() == reads_label,
            "{}: zone-source {source:?} on Kubernetes 1.{}",
            p.name_any(),
            env.minor
        );
    }
    for (pod, hook) in audited_bindings(env, ns, from) {
        let called = hook
            .as_deref()
            .is_some_and(|h| h.contains("\"mutated\":true"));
        let want = !(pod.starts_with("label-") && native);
        ensure!(
            called == want,
            "binding of {pod}: webhook {hook:?}, expected called: {want}"
        );
    }
    let patched = operator_pod_patches(env, ns, from);
    ensure!(patched.is_empty(), "the operator patched pods: {patched:?}");
    let took = binding_durations(env, ns, from);
    let of = |prefix: &str| {
        took.iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(_, d)| *d)
            .collect::<Vec<_>>()
    };
    let (label, hook) = (of("label-"), of("hook-"));
    let mode = if native {
        "zone label copied by Kubernetes"
    } else {
        "webhook, before 1.35"
    };
    println!(
        "    zone in the binding event for both; each pods/binding in the API server: stack label ({mode}) median {:?} of {}, stack hook (webhook) median {:?} of {}",
        median(label.clone()).unwrap_or_default(),
        label.len(),
        median(hook.clone()).unwrap_or_default(),
        hook.len()
    );
    Ok(())
}

/// Scenario 32: A namespace that holds no zone-aware stack never reaches the webhook, and pods
/// there that claim to be a stack's zone-aware pods get no node label copied: no
/// binding there was sent to us, and the annotator says why it leaves them.
pub async fn a_namespace_without_zone_aware_stacks_never_reaches_the_webhook(
    env: &mut Env,
) -> Result<()> {
    let ns = "e2e-nobind";
    namespace(env, ns).await?;
    let seen = watch_first_bound(env, ns, "e2e=bind");
    let from = audit_len(env);
    let pods = create_pods(env, ns, STACK, 3).await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    eventually("every pod bound and told it gets no zone", WAIT, || async {
        let told: Vec<String> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ZoneKeysNotAllowed"))
            .filter_map(|e| e.involved_object.name)
            .collect();
        let first = snapshot(&seen);
        Ok(pods
            .iter()
            .all(|p| first.contains_key(p) && told.contains(p))
            .then_some(()))
    })
    .await?;
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    for p in &pods {
        let zone = api
            .get(p)
            .await?
            .annotations()
            .get(names::ANNOTATION_ZONE)
            .cloned();
        ensure!(
            zone.is_none(),
            "{p} got zone {zone:?} without a zone-aware stack"
        );
    }
    let audited = audited_bindings(env, ns, from);
    ensure!(audited.len() >= pods.len(), "bindings audited: {audited:?}");
    let called: Vec<_> = audited.iter().filter(|(_, h)| h.is_some()).collect();
    ensure!(called.is_empty(), "the webhook was called for {called:?}");
    Ok(())
}

/// kube-apiserver takes webhook configurations from its own informer: a moment for it to
/// see a change before the next pod is bound, or that pod still goes through the
/// configuration as it was.
async fn configuration_taken() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Scenario 33: A webhook the API server cannot trust, or cannot reach, never blocks scheduling:
/// the pods are bound at once and zoned by the annotator. A wrong caBundle is put back
/// by the operator, after which pods are zoned at bind again.
pub async fn a_broken_webhook_never_blocks_scheduling(env: &mut Env) -> Result<()> {
    let seen = watch_first_bound(env, NS, "e2e=bind");
    // A caBundle of another CA: the API server's TLS handshake fails.
    let stranger = certs::carry_out(
        &certs::CertAction::Create,
        now(),
        None,
        &["127.0.0.1".into()],
        &certs::LIFETIMES,
    )?
    .context("a stranger CA")?;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(env.admin.clone());
    let good = configs
        .get(names::WEBHOOK_CONFIGURATION)
        .await?
        .webhooks
        .as_ref()
        .context("webhooks")?[0]
        .client_config
        .ca_bundle
        .clone();
    let bad = k8s_openapi::ByteString(stranger.ca_crt.into_bytes());
    // The leader repairs the configuration every 20 s: a trial whose pods were bound after
    // it already had is inconclusive, and is made again.
    let mut conclusive = false;
    for trial in 0..3 {
        let mut c = configs.get(names::WEBHOOK_CONFIGURATION).await?;
        c.webhooks.as_mut().context("webhooks")?[0]
            .client_config
            .ca_bundle = Some(bad.clone());
        c.metadata.managed_fields = None;
        configs
            .replace(names::WEBHOOK_CONFIGURATION, &PostParams::default(), &c)
            .await?;
        configuration_taken().await;
        let from = audit_len(env);
        let pods = create_pods(env, NS, &format!("{STACK}-untrusted{trial}"), 3).await?;
        let first = wait_zoned(&seen, env, NS, &pods).await?;
        let c = configs.get(names::WEBHOOK_CONFIGURATION).await?;
        let still_bad = c
            .webhooks
            .as_ref()
            .map(|w| w[0].client_config.ca_bundle.clone())
            == Some(Some(bad.clone()));
        if !still_bad {
            println!("    trial {trial}: the operator repaired the caBundle before the pods were bound; again");
            continue;
        }
        ensure!(
            first.values().all(|z| !z),
            "zoned at bind through an untrusted webhook: {first:?}"
        );
        let changed: Vec<_> = audited_bindings(env, NS, from)
            .into_iter()
            // Only the scenario's own pods: the stack's own may be rescheduled meanwhile.
            .filter(|(p, h)| {
                pods.contains(p) && h.as_deref().is_some_and(|h| h.contains("\"mutated\":true"))
            })
            .collect();
        ensure!(
            changed.is_empty(),
            "bindings changed by an untrusted webhook: {changed:?}"
        );
        conclusive = true;
        break;
    }
    ensure!(conclusive, "every trial raced the operator's repair");
    // The leader reads the configuration back and applies it again.
    eventually(
        "the operator puts the caBundle back",
        Duration::from_secs(60),
        || async {
            let c = configs.get(names::WEBHOOK_CONFIGURATION).await?;
            Ok((c
                .webhooks
                .as_ref()
                .map(|w| w[0].client_config.ca_bundle.clone())
                == Some(good.clone()))
            .then_some(()))
        },
    )
    .await?;
    // A pod bound before the API server sees the repair still goes through the untrusted
    // configuration and is zoned by the annotator instead. A fresh set of pods zoned at
    // bind within three trials shows the repair took.
    configuration_taken().await;
    let mut zoned = Default::default();
    for trial in 0..3 {
        let pods = create_pods(env, NS, &format!("{STACK}-repaired{trial}"), 3).await?;
        zoned = wait_zoned(&seen, env, NS, &pods).await?;
        if zoned.values().all(|z| *z) {
            break;
        }
        println!("    trial {trial} after the repair, not all zoned at bind: {zoned:?}; again");
    }
    ensure!(
        zoned.values().all(|z| *z),
        "not zoned at bind after the repair, in three trials: {zoned:?}"
    );

    // Nothing listens where the configuration points: refused at once, bound anyway.
    let dead_url = format!("https://127.0.0.1:{}", free_port()?);
    env.stop_operator();
    env.start_operator_with(&["--resync", "2s", &format!("--webhook-url={dead_url}")])
        .await?;
    eventually(
        "the configuration points at the dead address",
        WAIT,
        || async {
            let c = configs.get(names::WEBHOOK_CONFIGURATION).await?;
            let url = c
                .webhooks
                .as_ref()
                .and_then(|w| w[0].client_config.url.clone());
            Ok(url.is_some_and(|u| u.starts_with(&dead_url)).then_some(()))
        },
    )
    .await?;
    configuration_taken().await;
    let pods = create_pods(env, NS, &format!("{STACK}-unreachable"), 3).await?;
    let first = wait_zoned(&seen, env, NS, &pods).await?;
    ensure!(
        first.values().all(|z| !z),
        "zoned at bind with no server: {first:?}"
    );
    env.stop_operator();
    env.start_operator().await?;
    let log = env.operator_log();
    ensure!(
        !log.contains("panicked"),
        "operator log:\n{}",
        super::tail(&log, 40)
    );
    Ok(())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
