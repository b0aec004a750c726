//! The webhook configurations, kept by the leader (installs without OLM): the
//! MutatingWebhookConfiguration of the zone-at-bind webhook and the
//! ValidatingWebhookConfiguration of the zone-disruption webhook.
//!
//! The zone-at-bind one is narrow on purpose: only `pods/binding` CREATE, only in namespaces that hold a
//! zone-aware stack (so a cluster without one sends the webhook nothing), and by
//! `matchConditions` only for the stacks' pod names. It can never block scheduling:
//! `failurePolicy: Ignore`, a 2 s timeout, no side effects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use k8s_openapi::ByteString;
use k8s_openapi::ClusterResourceScope;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::caches::coverage::CoverageFeed;
use crate::caches::stacks::{is_zone_aware, topology_keys};
use crate::checks::validate::{stack_reads_zone_label, zone_aware_evictions};
use crate::model::defaults::Component;
use crate::model::names;
use crate::telemetry::metrics::Metrics;

/// The API server gives up on the webhook after this long and binds the pod anyway.
pub const TIMEOUT_SECONDS: i32 = 2;
/// The API server gives up on the disruption webhook after this long and refuses the
/// eviction with an error (a 500, which `kubectl drain` does not retry: it stops).
pub const DISRUPTION_TIMEOUT_SECONDS: i32 = 5;
/// How often the leader compares the configuration with the stacks it has (a reconcile
/// that needs its namespace covered wakes it at once, see
/// [`crate::caches::coverage::Coverage`]).
const EVERY: Duration = Duration::from_secs(2);
/// How often the live configuration is read back, so an edit by someone else (a wrong
/// caBundle, a webhook removed) is undone.
const REPAIR_EVERY: Duration = Duration::from_secs(20);
/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientTarget {
    /// The Service in front of the operator's pods (in-cluster installs).
    Service { namespace: String, name: String },
    /// A base URL such as `https://127.0.0.1:9443` (an operator run outside the cluster).
    Url(String),
}

impl ClientTarget {
    /// The names the serving certificate must carry for the API server to trust it.
    pub fn hosts(&self) -> Vec<String> {
        match self {
            ClientTarget::Service { namespace, name } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
            ClientTarget::Url(url) => vec![url_host(url).to_string()],
        }
    }

    fn client_config(&self, ca_bundle: &str, path: &str) -> WebhookClientConfig {
        let ca_bundle = Some(ByteString(ca_bundle.as_bytes().to_vec()));
        match self {
            ClientTarget::Service { namespace, name } => WebhookClientConfig {
                ca_bundle,
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.into()),
                    port: Some(names::WEBHOOK_SERVICE_PORT),
                }),
                url: None,
            },
            ClientTarget::Url(base) => WebhookClientConfig {
                ca_bundle,
                service: None,
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            },
        }
    }
}

/// The host of `https://host:port/path` (an IPv6 address keeps no brackets).
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// A zone-aware stack, as the configuration sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StackName {
    pub namespace: String,
    pub name: String,
    /// The zone-disruption webhook decides its ingesters' evictions (not switched off
    /// with [`names::ANNOTATION_ZONE_AWARE_EVICTIONS`]).
    pub zone_evictions: bool,
    /// The zone-at-bind webhook zones its pods: they read the operator's annotation, not
    /// the label the server copies at binding ([`stack_reads_zone_label`]).
    pub zone_at_bind: bool,
}

/// CEL over the Binding: true only for pods whose name starts with a zone-aware stack's
/// name in that stack's namespace (every pod of a stack is `<stack>-<component>-...`).
/// Names are DNS labels, so they need no escaping inside single quotes.
pub fn match_expression(stacks: &[StackName]) -> String {
    stacks
        .iter()
        .map(|s| {
            format!(
                "(request.namespace == '{}' && object.metadata.name.startsWith('{}-'))",
                s.namespace, s.name
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// CEL over an Eviction (its request names the pod): true only for the ingesters of the
/// zone-aware stacks, `<stack>-ingester-<ordinal>` in the stack's namespace, that have
/// zone-aware evictions on; `false` when none has.
pub fn ingester_expression(stacks: &[StackName]) -> String {
    let decided: Vec<&StackName> = stacks.iter().filter(|s| s.zone_evictions).collect();
    if decided.is_empty() {
        return "false".into();
    }
    decided
        .iter()
        .map(|s| {
            format!(
                "(request.namespace == '{}' && request.name.matches('^{}-[0-9]+$'))",
                s.namespace,
                Component::Ingester.workload_name(&s.name)
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Only the namespaces that hold a zone-aware stack (by the name label every namespace
/// carries).
fn namespace_selector(stacks: &[StackName]) -> LabelSelector {
    let namespaces: BTreeSet<&str> = stacks.iter().map(|s| s.namespace.as_str()).collect();
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: names::LABEL_NAMESPACE_NAME.into(),
            operator: "In".into(),
            values: Some(namespaces.iter().map(|n| n.to_string()).collect()),
        }]),
        match_labels: None,
    }
}

fn metadata(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([(
            names::LABEL_MANAGED_BY.to_string(),
            names::CONTROLLER_NAME.to_string(),
        )])),
        ..Default::default()
    }
}

/// The whole zone-at-bind configuration, a pure function of where the webhook is, the
/// CA to trust and the zone-aware stacks: those whose pods read the operator's annotation
/// ([`StackName::zone_at_bind`]); the others' bindings never reach it.
pub fn configuration(
    target: &ClientTarget,
    ca_bundle: &str,
    stacks: &[StackName],
) -> MutatingWebhookConfiguration {
    let zoned: Vec<StackName> = stacks.iter().filter(|s| s.zone_at_bind).cloned().collect();
    let stacks = zoned.as_slice();
    let webhook = MutatingWebhook {
        name: names::WEBHOOK_ZONE_AT_BIND.into(),
        admission_review_versions: vec!["v1".into()],
        client_config: target.client_config(ca_bundle, names::WEBHOOK_PATH_ZONE_AT_BIND),
        failure_policy: Some("Ignore".into()),
        side_effects: "None".into(),
        timeout_seconds: Some(TIMEOUT_SECONDS),
        match_policy: Some("Equivalent".into()),
        reinvocation_policy: Some("Never".into()),
        rules: Some(vec![rule("pods/binding")]),
        namespace_selector: Some(namespace_selector(stacks)),
        match_conditions: Some(vec![MatchCondition {
            name: "zone-aware-stack-pods".into(),
            expression: match_expression(stacks),
        }]),
        object_selector: None,
    };
    MutatingWebhookConfiguration {
        metadata: metadata(names::WEBHOOK_CONFIGURATION),
        // No zone-aware stack: no webhook at all, so the API server calls nothing.
        webhooks: (!stacks.is_empty()).then(|| vec![webhook]),
    }
}

fn rule(resource: &str) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec!["".into()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into()]),
        resources: Some(vec![resource.into()]),
        scope: Some("Namespaced".into()),
    }
}

/// The zone-disruption configuration: `pods/eviction` of the zone-aware stacks'
/// ingesters, scoped by `matchConditions` to exactly those ingesters (an
/// `objectSelector` could not do it: it sees the Eviction's labels, not the pod's). It
/// fails closed (`failurePolicy: Fail`): while no replica of the operator answers, they
/// are refused rather than let a second zone go, and nothing else is touched.
pub fn disruption_configuration(
    target: &ClientTarget,
    ca_bundle: &str,
    stacks: &[StackName],
) -> ValidatingWebhookConfiguration {
    let webhook = ValidatingWebhook {
        name: names::WEBHOOK_ZONE_DISRUPTIONS.into(),
        admission_review_versions: vec!["v1".into()],
        client_config: target.client_config(ca_bundle, names::WEBHOOK_PATH_ZONE_DISRUPTIONS),
        failure_policy: Some("Fail".into()),
        // Decisions live in the leader's memory only; a dry run records none.
        side_effects: "None".into(),
        timeout_seconds: Some(DISRUPTION_TIMEOUT_SECONDS),
        match_policy: Some("Equivalent".into()),
        rules: Some(vec![rule("pods/eviction")]),
        namespace_selector: Some(namespace_selector(stacks)),
        match_conditions: Some(vec![MatchCondition {
            name: "zone-aware-stack-ingesters".into(),
            expression: ingester_expression(stacks),
        }]),
        object_selector: None,
    };
    ValidatingWebhookConfiguration {
        metadata: metadata(names::WEBHOOK_DISRUPTION_CONFIGURATION),
        webhooks: (!stacks.is_empty()).then(|| vec![webhook]),
    }
}

/// The zone-aware stacks in the store, sorted, so the configuration is stable; on a server
/// that copies the zone label at binding (`server_copies`), the stacks that read it are
/// not zoned at bind.
pub fn zone_aware_stacks(
    stacks: &Store<kube::api::DynamicObject>,
    server_copies: bool,
) -> Vec<StackName> {
    let mut v: Vec<StackName> = stacks
        .state()
        .iter()
        .filter(|s| is_zone_aware(s))
        .map(|s| {
            let annotations = s.metadata.annotations.as_ref();
            let keys = topology_keys(s);
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            StackName {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
                zone_evictions: zone_aware_evictions(annotations).unwrap_or(true),
                zone_at_bind: !stack_reads_zone_label(&keys, annotations, server_copies),
            }
        })
        .collect();
    v.sort();
    v
}

/// The parts of one webhook the operator sets, as the server returns them: what is
/// compared to tell whether someone else changed the configuration, and which
/// namespaces it covers.
#[derive(Serialize)]
pub struct Parts<'a> {
    name: &'a str,
    client_config: &'a WebhookClientConfig,
    namespace_selector: Option<&'a LabelSelector>,
    rules: Option<&'a Vec<RuleWithOperations>>,
    failure_policy: Option<&'a String>,
    timeout_seconds: Option<i32>,
    match_conditions: Option<&'a Vec<MatchCondition>>,
}

/// The [`Parts`] of either kind of webhook (their types differ, their fields do not).
macro_rules! parts {
    ($webhooks:expr) => {
        $webhooks
            .iter()
            .flatten()
            .map(|w| Parts {
                name: &w.name,
                client_config: &w.client_config,
                namespace_selector: w.namespace_selector.as_ref(),
                rules: w.rules.as_ref(),
                failure_policy: w.failure_policy.as_ref(),
                timeout_seconds: w.timeout_seconds,
                match_conditions: w.match_conditions.as_ref(),
            })
            .collect()
    };
}

/// A webhook configuration the leader keeps ([`keep`]) or removes ([`remove`]).
pub trait Registered:
    kube::Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Debug
    + PartialEq
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    const NAME: &'static str;
    /// For log lines: "zone-at-bind", "zone-disruption".
    const WHAT: &'static str;
    fn want(target: &ClientTarget, bundle: &str, stacks: &[StackName]) -> Self;
    fn parts(&self) -> Vec<Parts<'_>>;
}

impl Registered for MutatingWebhookConfiguration {
    const NAME: &'static str = names::WEBHOOK_CONFIGURATION;
    const WHAT: &'static str = "zone-at-bind";
    fn want(target: &ClientTarget, bundle: &str, stacks: &[StackName]) -> Self {
        configuration(target, bundle, stacks)
    }
    fn parts(&self) -> Vec<Parts<'_>> {
        parts!(self.webhooks)
    }
}

impl Registered for ValidatingWebhookConfiguration {
    const NAME: &'static str = names::WEBHOOK_DISRUPTION_CONFIGURATION;
    const WHAT: &'static str = "zone-disruption";
    fn want(target: &ClientTarget, bundle: &str, stacks: &[StackName]) -> Self {
        disruption_configuration(target, bundle, stacks)
    }
    fn parts(&self) -> Vec<Parts<'_>> {
        parts!(self.webhooks)
    }
}

fn owned_parts<C: Registered>(c: &C) -> Option<serde_json::Value> {
    serde_json::to_value(c.parts()).ok()
}

/// The namespaces a configuration sends to the webhook.
fn covered_by<C: Registered>(c: &C) -> BTreeSet<String> {
    c.parts()
        .iter()
        .filter_map(|w| w.namespace_selector?.match_expressions.as_ref())
        .flatten()
        .filter(|e| e.key == names::LABEL_NAMESPACE_NAME && e.operator == "In")
        .flat_map(|e| e.values.iter().flatten().cloned())
        .collect()
}

/// What the leader needs to keep a configuration.
pub struct Keeper {
    pub client: Client,
    pub stacks: Store<kube::api::DynamicObject>,
    pub ca_bundle: watch::Receiver<Option<String>>,
    pub target: ClientTarget,
    /// The install's ClusterRole that owns the configurations ([`install_owner`]).
    pub owner_role: String,
    pub feed: CoverageFeed,
    pub metrics: Arc<Metrics>,
    /// The server copies the zone label at binding (`Settings::zone_labels_at_binding`).
    pub zone_labels_at_binding: bool,
}

/// Keeps the configuration `C` equal to [`Registered::want`] while this replica leads:
/// puts it in place at the start of the term (unless it is already), whenever the stacks
/// or the CA bundle change, and when a read-back finds it changed by someone else; writes
/// nothing otherwise. Runs until its term's task is aborted.
pub async fn keep<C: Registered>(mut k: Keeper) {
    let api: Api<C> = Api::all(k.client.clone());
    let mut applied: Option<C> = None;
    let mut checked = Instant::now();
    // Until the stacks are listed the configuration would cover no namespace: applying it
    // then would send a new leader's first bindings past the webhook (and, for the
    // disruption webhook, drop its guard for a moment).
    if !crate::caches::reflectors::synced("stacks (webhook configuration)", &k.stacks).await {
        return;
    }
    let mut owner = install_owner(&k.client, &k.owner_role).await;
    loop {
        let bundle = k.ca_bundle.borrow_and_update().clone();
        if let Some(bundle) = bundle {
            let stacks = zone_aware_stacks(&k.stacks, k.zone_labels_at_binding);
            let mut want = C::want(&k.target, &bundle, &stacks);
            want.meta_mut().owner_references = owner.clone().map(|o| vec![o]);
            if let Some(last) = applied
                .as_ref()
                .filter(|_| checked.elapsed() >= REPAIR_EVERY)
            {
                checked = Instant::now();
                if changed_elsewhere(&api, last).await {
                    applied = None;
                    // Deleted with a replaced owner, perhaps: the next apply names the new one.
                    owner = install_owner(&k.client, &k.owner_role).await;
                }
            }
            if applied.as_ref() != Some(&want) && put(&api, &want, applied.is_none(), &k).await {
                applied = Some(want);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = k.ca_bundle.changed() => {}
            _ = k.feed.woken() => {}
        }
    }
}

/// The install's ClusterRole that grants the rights on the webhook configurations, as
/// their owner: removing the install (`kubectl delete -k`, an uninstall that forgets
/// `make undeploy`) then has the garbage collector remove them, so no fail-closed
/// configuration outlives the operator that answers it. `None` (logged) when it cannot
/// be read: the configurations are then kept without an owner. Its name comes from the
/// install (`WEBHOOK_OWNER_CLUSTER_ROLE`), which a kustomize `namePrefix` changes.
async fn install_owner(client: &Client, role: &str) -> Option<OwnerReference> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    match roles.get(role).await {
        Ok(role) => Some(OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: role.name_any(),
            uid: role.uid()?,
            controller: None,
            block_owner_deletion: None,
        }),
        Err(e) => {
            warn!(error = %e, role, "cannot read the install's ClusterRole: the webhook configurations get no owner, and outlive an uninstall that skips `make undeploy`");
            None
        }
    }
}

/// Puts `want` in place; true once it is. A new term (`first`) that finds it in place
/// already (a failover, nothing changed) writes nothing.
async fn put<C: Registered>(api: &Api<C>, want: &C, first: bool, k: &Keeper) -> bool {
    let live = if first {
        api.get_opt(C::NAME).await.ok().flatten()
    } else {
        None
    };
    let in_place = live.is_some_and(|live| {
        owned_parts(&live) == owned_parts(want)
            && live.meta().owner_references == want.meta().owner_references
    });
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    let result = match in_place {
        true => Ok(()),
        false => api
            .patch(C::NAME, &params, &Patch::Apply(want))
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => {
            let covered = covered_by(want);
            info!(namespaces = ?covered, sent = !in_place, "{} webhook configuration in place", C::WHAT);
            k.feed.applied(covered);
            k.metrics.webhook_configuration(C::WHAT, true);
            true
        }
        Err(e) => {
            k.feed.failed();
            k.metrics.webhook_configuration(C::WHAT, false);
            warn!(error = %e, "cannot apply the {} webhook configuration", C::WHAT);
            false
        }
    }
}

/// Someone else changed the configuration when the live object differs from what was
/// last applied (a difference from `want` is the keeper's own change to make). A failed
/// read says nothing: the next check looks again.
async fn changed_elsewhere<C: Registered>(api: &Api<C>, last: &C) -> bool {
    let Ok(live) = api.get_opt(C::NAME).await else {
        return false;
    };
    let changed = live.as_ref().and_then(owned_parts) != owned_parts(last);
    if changed {
        warn!(
            "the {} webhook configuration was changed by someone else; applying it again",
            C::WHAT
        );
    }
    changed
}

/// With a webhook switched off: removes the configuration this operator registered (and
/// nothing of the same name it did not), so the API server stops calling a server that
/// is not there.
pub async fn remove<C: Registered>(client: Client) {
    let api: Api<C> = Api::all(client);
    match api.get_opt(C::NAME).await {
        Ok(Some(c))
            if c.labels().get(names::LABEL_MANAGED_BY).map(String::as_str)
                == Some(names::CONTROLLER_NAME) =>
        {
            match api.delete(C::NAME, &DeleteParams::default()).await {
                Ok(_) => info!("{} webhook is off: its configuration was removed", C::WHAT),
                Err(e) => warn!(error = %e, "cannot remove the {} webhook configuration", C::WHAT),
            }
        }
        Ok(_) => {}
        // An install that never let the operator register configurations (OLM's) has
        // none of the operator's to remove.
        Err(kube::Error::Api(e)) if e.code == 403 => {
            debug!(
                "no rights on the {} webhook configuration: none of ours to remove",
                C::WHAT
            )
        }
        Err(e) => warn!(error = %e, "cannot read the {} webhook configuration", C::WHAT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks() -> Vec<StackName> {
        vec![
            StackName {
                namespace: "logs".into(),
                name: "a".into(),
                zone_evictions: true,
                zone_at_bind: true,
            },
            StackName {
                namespace: "logs".into(),
                name: "b".into(),
                zone_evictions: false,
                zone_at_bind: true,
            },
            StackName {
                namespace: "team".into(),
                name: "c".into(),
                zone_evictions: true,
                zone_at_bind: true,
            },
        ]
    }

    #[test]
    fn narrow_and_never_blocking() {
        let target = ClientTarget::Service {
            namespace: "op".into(),
            name: names::WEBHOOK_SERVICE.into(),
        };
        let c = configuration(&target, "PEM", &stacks());
        let w = &c.webhooks.expect("one webhook")[0];
        assert_eq!(w.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(w.side_effects, "None");
        assert_eq!(w.timeout_seconds, Some(TIMEOUT_SECONDS));
        let rule = &w.rules.as_ref().expect("rules")[0];
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["pods/binding".to_string()][..])
        );
        assert_eq!(
            rule.operations.as_deref(),
            Some(&["CREATE".to_string()][..])
        );
        let sel = &w
            .namespace_selector
            .as_ref()
            .and_then(|s| s.match_expressions.clone())
            .expect("selector")[0];
        assert_eq!(sel.key, names::LABEL_NAMESPACE_NAME);
        assert_eq!(
            sel.values.as_deref(),
            Some(&["logs".to_string(), "team".to_string()][..])
        );
        let cond = &w.match_conditions.as_ref().expect("conditions")[0];
        assert_eq!(
            cond.expression,
            "(request.namespace == 'logs' && object.metadata.name.startsWith('a-')) || (request.namespace == 'logs' && object.metadata.name.startsWith('b-')) || (request.namespace == 'team' && object.metadata.name.startsWith('c-'))"
        );
        let svc = w.client_config.service.as_ref().expect("service");
        assert_eq!(
            (svc.namespace.as_str(), svc.port),
            ("op", Some(names::WEBHOOK_SERVICE_PORT))
        );
        assert_eq!(
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
            Some(&b"PEM"[..])
        );
    }

    /// A stack whose pods read the zone label Kubernetes copies at binding is left out of
    /// the zone-at-bind webhook (its namespace too, when nothing else there needs it), and
    /// stays under the disruption webhook.
    #[test]
    fn stacks_zoned_by_kubernetes_are_not_sent_to_the_zone_at_bind_webhook() {
        let target = ClientTarget::Url("https://127.0.0.1:9443/".into());
        let mut all = stacks();
        all[2].zone_at_bind = false;
        let c = configuration(&target, "PEM", &all);
        let w = &c.webhooks.expect("one webhook")[0];
        let cond = &w.match_conditions.as_ref().expect("conditions")[0].expression;
        assert!(!cond.contains("'c-'"), "{cond}");
        assert!(!covered_by(&configuration(&target, "PEM", &all)).contains("team"));
        let d = disruption_configuration(&target, "PEM", &all);
        let w = &d.webhooks.expect("one webhook")[0];
        assert!(w.match_conditions.as_ref().expect("conditions")[0]
            .expression
            .contains("c-ingester-"));
        for s in &mut all {
            s.zone_at_bind = false;
        }
        assert!(configuration(&target, "PEM", &all).webhooks.is_none());
    }

    #[test]
    fn a_url_target_is_called_by_url_and_no_stacks_no_webhook() {
        let target = ClientTarget::Url("https://127.0.0.1:9443/".into());
        let c = configuration(&target, "PEM", &stacks());
        let w = &c.webhooks.expect("one webhook")[0];
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/zone-at-bind")
        );
        assert!(configuration(&target, "PEM", &[]).webhooks.is_none());
    }

    /// The disruption webhook fails closed, and reaches nothing but the ingesters of
    /// zone-aware stacks with zone-aware evictions on (by pod name).
    #[test]
    fn the_disruption_webhook_fails_closed_on_ingester_evictions_only() {
        let target = ClientTarget::Url("https://127.0.0.1:9443".into());
        let c = disruption_configuration(&target, "PEM", &stacks());
        assert_eq!(
            c.metadata.name.as_deref(),
            Some(names::WEBHOOK_DISRUPTION_CONFIGURATION)
        );
        let w = &c.webhooks.as_ref().expect("one webhook")[0];
        assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(w.timeout_seconds, Some(DISRUPTION_TIMEOUT_SECONDS));
        let rule = &w.rules.as_ref().expect("rules")[0];
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["pods/eviction".to_string()][..])
        );
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/zone-disruptions")
        );
        assert_eq!(
            covered_by(&c),
            BTreeSet::from(["logs".to_string(), "team".to_string()])
        );
        let cond = &w.match_conditions.as_ref().expect("conditions")[0];
        assert_eq!(
            cond.expression,
            "(request.namespace == 'logs' && request.name.matches('^a-ingester-[0-9]+$')) || (request.namespace == 'team' && request.name.matches('^c-ingester-[0-9]+$'))",
            "stack b has zone-aware evictions off"
        );
        let mut off = stacks();
        off.iter_mut().for_each(|s| s.zone_evictions = false);
        let c = disruption_configuration(&target, "PEM", &off);
        let w = &c.webhooks.as_ref().expect("the namespaces stay covered")[0];
        assert_eq!(
            w.match_conditions.as_ref().expect("conditions")[0].expression,
            "false"
        );
        assert!(disruption_configuration(&target, "PEM", &[])
            .webhooks
            .is_none());
    }

    /// What the keeper compares with the live object: a change by someone else to any
    /// part the operator sets is seen, for both kinds.
    #[test]
    fn owned_parts_see_edits_by_others() {
        let target = ClientTarget::Url("https://127.0.0.1:9443".into());
        let want = disruption_configuration(&target, "PEM", &stacks());
        let mut live = want.clone();
        assert_eq!(owned_parts(&live), owned_parts(&want));
        live.webhooks.as_mut().expect("webhooks")[0].failure_policy = Some("Ignore".into());
        assert_ne!(owned_parts(&live), owned_parts(&want));
        let want = configuration(&target, "PEM", &stacks());
        let mut live = want.clone();
        live.webhooks.as_mut().expect("webhooks")[0]
            .client_config
            .ca_bundle = None;
        assert_ne!(owned_parts(&live), owned_parts(&want));
    }

    #[test]
    fn certificate_hosts() {
        assert_eq!(
            ClientTarget::Url("https://127.0.0.1:9443".into()).hosts(),
            ["127.0.0.1"]
        );
        assert_eq!(
            ClientTarget::Url("https://[::1]:9443/x".into()).hosts(),
            ["::1"]
        );
        assert_eq!(
            ClientTarget::Url("https://op.example".into()).hosts(),
            ["op.example"]
        );
        let svc = ClientTarget::Service {
            namespace: "op".into(),
            name: "wh".into(),
        };
        assert_eq!(svc.hosts(), ["wh.op.svc", "wh.op.svc.cluster.local"]);
    }
}
