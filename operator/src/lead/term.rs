//! A term of leadership: everything only the leader does, started together and ended
//! together.
//!
//! A term owns the LokiStack controller (and with it every reconcile: applies, rollouts,
//! scale-downs, zone-outage recovery, status writes and Events), the pod annotator and
//! its writes, the storage Secret poll, the keepers of the webhook configurations and the
//! ledger of the evictions the zone-disruption webhook allowed. It starts on caches that
//! have synced (they belong to the process, not to the term) and [`Term::end`] stops all
//! of it by one cancellation, returning only once every task has stopped: nothing the
//! leader does outlives its term.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::act::apply::Applier;
use crate::act::report::Notifier;
use crate::annotator;
use crate::caches::coverage::{Coverage, WebhookCoverage};
use crate::caches::reflectors::Caches;
use crate::caches::secrets;
use crate::caches::stacks;
use crate::caches::taps::Taps;
use crate::reconcile::{self, Context};
use crate::render::Settings;
use crate::telemetry::metrics::Metrics;
use crate::webhook::eviction::Grants;
use crate::webhook::registration::{self, Keeper};
use crate::webhook::review::LeaderView;
use crate::webhook::{WebhookConfig, WebhookMode};

/// How long a term that ends on shutdown lets the reconciles under way finish. The Lease
/// is not renewed meanwhile: with the last renewal at most 2 s before, this stays below
/// the 15 s a standby waits before it takes the Lease.
const GRACE_ON_SHUTDOWN: Duration = Duration::from_secs(10);

/// What every term starts from: what the process built once.
pub struct Parts {
    pub client: Client,
    pub caches: Caches,
    pub taps: Taps,
    pub settings: Settings,
    /// How often a stack is looked at with nothing changed.
    pub resync: Duration,
    /// How often the storage Secrets that stacks name are read again.
    pub secret_poll: Duration,
    pub webhook: WebhookConfig,
    /// The CA bundle the webhook configurations carry (self-managed certificates).
    pub ca_bundle: watch::Receiver<Option<String>>,
    /// Where the webhook server learns that this replica leads, and its term's ledger.
    pub leader_view: LeaderView,
    /// The one Event publisher of the process (controller and annotator).
    pub notify: Notifier,
    pub metrics: Arc<Metrics>,
}

/// What every reconcile of one term shares. The applier is new with each term; what it
/// skips on a failover it learns from the caches, not from an earlier term.
fn reconcile_context(p: &Parts, webhook_coverage: WebhookCoverage) -> Arc<Context> {
    Arc::new(Context {
        client: p.client.clone(),
        caches: p.caches.clone(),
        applier: Applier::new(p.client.clone()),
        settings: p.settings.clone(),
        notify: p.notify.clone(),
        metrics: p.metrics.clone(),
        resync: p.resync,
        webhook_coverage,
        forgotten_at: Default::default(),
        backoff: Default::default(),
    })
}

pub struct Term {
    /// The one signal: the controller stops taking new work on it, and `end` follows it
    /// by aborting and awaiting every task.
    cancel: CancellationToken,
    /// `None` once it has been awaited to its end (a handle is awaited at most once).
    controller: Option<JoinHandle<()>>,
    tasks: JoinSet<()>,
    taps: Taps,
    leader_view: LeaderView,
    /// The per-stack series are the leader's: a replica that stepped down must not go on
    /// exporting the last it saw (both replicas are scraped, and a zone alert would stay
    /// firing after the zone returned).
    metrics: Arc<Metrics>,
}

impl Term {
    /// Starts everything the leader does. The caches must have synced.
    pub fn start(p: &Parts) -> Term {
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        // Attach before looking at the caches' state: a change in between arrives twice,
        // which is harmless, rather than not at all.
        let stack_changes = p.taps.stacks.attach();
        let pod_changes = p.taps.zone_aware_pods.attach();
        let node_changes = p.taps.nodes.attach();
        let rule_changes = p.taps.rules.attach();
        // Secrets read in an earlier term are read again before they are relied on.
        p.caches.secret_reader.new_term();
        // Every stack once at the start of a term: changes while no term ran were dropped.
        for s in p.caches.stacks.state() {
            p.taps
                .stacks
                .send(ObjectRef::from_obj_with(s.as_ref(), stacks::resource()));
        }
        tasks.spawn(poll_secrets(
            p.caches.clone(),
            p.taps.clone(),
            p.secret_poll,
        ));
        if !p.caches.rules.stores.is_empty() {
            tasks.spawn(reconcile::rules::run(
                p.client.clone(),
                p.caches.clone(),
                p.metrics.clone(),
                rule_changes,
            ));
        }
        let coverage = register_webhooks(p, &mut tasks);
        let inputs = annotator::Inputs::from_caches(&p.caches, pod_changes, node_changes);
        tasks.spawn(annotator::run(
            p.client.clone(),
            inputs,
            p.notify.clone(),
            p.metrics.clone(),
        ));
        p.leader_view.lead(Arc::new(Grants::default()));
        let ctx = reconcile_context(p, coverage);
        let stopping = cancel.clone().cancelled_owned();
        let controller = tokio::spawn(reconcile::controller::run(ctx, stack_changes, stopping));
        info!("leadership term started: reconciling, annotating and deciding evictions");
        Term {
            cancel,
            controller: Some(controller),
            tasks,
            taps: p.taps.clone(),
            leader_view: p.leader_view.clone(),
            metrics: p.metrics.clone(),
        }
    }

    /// Resolves if the controller stops by itself (it does not, short of a bug): the
    /// term is then over.
    pub async fn finished(&mut self) {
        match self.controller.as_mut() {
            Some(c) => {
                let _ = c.await;
                self.controller = None;
            }
            None => std::future::pending().await,
        }
    }

    /// Ends the term now (leadership lost): stops deciding evictions, detaches from the
    /// caches, and aborts and awaits every task, reconciles under way included.
    pub async fn end(mut self) {
        self.cancel.cancel();
        self.leader_view.step_down();
        self.taps.detach_all();
        self.tasks.abort_all();
        if let Some(c) = self.controller.take() {
            c.abort();
            let _ = c.await;
        }
        while self.tasks.join_next().await.is_some() {}
        // Only now: a reconcile aborted above can no longer write them back.
        self.metrics.forget_stacks();
        info!("leadership term ended: every task of the leader has stopped");
    }

    /// Ends the term on shutdown: the reconciles under way may finish (for a while)
    /// before everything is stopped as by [`Term::end`].
    pub async fn finish(mut self) {
        self.cancel.cancel();
        self.leader_view.step_down();
        if let Some(c) = self.controller.as_mut() {
            match tokio::time::timeout(GRACE_ON_SHUTDOWN, c).await {
                Ok(_) => self.controller = None,
                Err(_) => {
                    warn!("reconciles still under way after {GRACE_ON_SHUTDOWN:?}; stopping them")
                }
            }
        }
        self.end().await
    }
}

/// Reads the named storage Secrets as they fall due (see `caches::secrets`).
async fn poll_secrets(caches: Caches, taps: Taps, every: Duration) {
    let schedule = secrets::Schedule::new(every);
    secrets::poll(
        caches.secret_reader.clone(),
        caches.stacks,
        taps.stacks,
        schedule,
    )
    .await
}

/// The leader's part of the webhooks: keep their configurations current (and tell the
/// reconciler which namespaces they cover), or remove them when switched off. OLM keeps
/// the configuration it declares itself, and gets no disruption webhook.
fn register_webhooks(p: &Parts, tasks: &mut JoinSet<()>) -> WebhookCoverage {
    let target = match &p.webhook.mode {
        WebhookMode::SelfManaged { target } => target,
        WebhookMode::External { .. } => return WebhookCoverage::default(),
        WebhookMode::Off => {
            tasks.spawn(registration::remove::<MutatingWebhookConfiguration>(
                p.client.clone(),
            ));
            tasks.spawn(registration::remove::<ValidatingWebhookConfiguration>(
                p.client.clone(),
            ));
            return WebhookCoverage::default();
        }
    };
    let keeper = |feed| Keeper {
        client: p.client.clone(),
        stacks: p.caches.stacks.clone(),
        ca_bundle: p.ca_bundle.clone(),
        target: target.clone(),
        owner_role: p.webhook.owner_role.clone(),
        feed,
        metrics: p.metrics.clone(),
        zone_labels_at_binding: p.settings.zone_labels_at_binding,
    };
    let (bind, feed) = Coverage::new();
    tasks.spawn(registration::keep::<MutatingWebhookConfiguration>(keeper(
        feed,
    )));
    let disruptions = if p.webhook.disruptions {
        let (coverage, feed) = Coverage::new();
        tasks.spawn(registration::keep::<ValidatingWebhookConfiguration>(
            keeper(feed),
        ));
        Some(coverage)
    } else {
        tasks.spawn(registration::remove::<ValidatingWebhookConfiguration>(
            p.client.clone(),
        ));
        None
    };
    WebhookCoverage {
        bind: Some(bind),
        disruptions,
    }
}

#[cfg(test)]
mod tests {
    //! A term over a fake API server (`testing::cluster`), time paused: the runtime
    //! moves the clock only once every task waits.

    use super::*;
    use crate::model::api::LokiStackSize;
    use crate::model::names;
    use crate::testing::cluster::{Call, FakeCluster};
    use crate::testing::{self, ZONE};
    use crate::webhook::review::LeaderView;
    use serde_json::json;

    const NS: &str = "logging";

    /// A cluster with a zone-aware 1x.demo stack `s`, what it needs, a node in zone-a,
    /// and the zone-at-bind configuration an earlier run registered.
    fn cluster() -> FakeCluster {
        let cluster = FakeCluster::new();
        cluster.put_storage(NS);
        cluster.put(testing::node("n-a", &[(ZONE, "zone-a")]));
        cluster.put(testing::stack(
            "s",
            testing::zoned_spec(LokiStackSize::Demo, 1, &[ZONE]),
        ));
        cluster.put(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": names::WEBHOOK_CONFIGURATION,
                         "labels": {names::LABEL_MANAGED_BY: names::CONTROLLER_NAME}},
        }));
        cluster
    }

    /// What a term starts from, with the webhook switched off.
    fn parts(cluster: &FakeCluster) -> Parts {
        let client = cluster.client.clone();
        let notify = cluster.notifier();
        Parts {
            client,
            caches: cluster.caches.clone(),
            taps: cluster.taps.clone(),
            settings: Settings::default(),
            resync: Duration::from_secs(300),
            secret_poll: Duration::from_secs(120),
            webhook: WebhookConfig {
                mode: WebhookMode::Off,
                disruptions: false,
                addr: ([127, 0, 0, 1], 0).into(),
                namespace: "loki-zone-operator".into(),
                owner_role: "loki-zone-operator-webhook-configuration".into(),
            },
            ca_bundle: watch::channel(None).1,
            leader_view: LeaderView::default(),
            notify,
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// A zone-aware pod of `s`, bound to n-a.
    fn pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
        testing::pod(name)
            .namespace(NS)
            .stack("s")
            .zone_aware()
            .zone_keys(ZONE)
            .on("n-a")
            .build()
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }

    fn has(calls: &[Call], line: &str) -> bool {
        calls.iter().any(|c| c.line() == line)
    }

    /// A term reconciles every stack, zones the pods waiting, and removes the webhook
    /// configuration of a switched-off webhook; once ended, nothing of it runs: a stack
    /// triggered or a pod bound then sends no request.
    #[tokio::test(start_paused = true)]
    async fn a_term_does_the_leaders_work_and_nothing_after_it_ends() {
        let cluster = cluster();
        cluster.put(pod("early"));
        let parts = parts(&cluster);
        let term = Term::start(&parts);
        settle().await;
        let calls = cluster.take_calls();
        for line in [
            format!("apply {NS}/statefulsets/s-ingester"),
            format!("apply {NS}/lokistacks/s/status"),
            format!("merge {NS}/pods/early"),
            format!(
                "delete mutatingwebhookconfigurations/{}",
                names::WEBHOOK_CONFIGURATION
            ),
        ] {
            assert!(
                has(&calls, &line),
                "{line} in {:?}",
                calls.iter().map(Call::line).collect::<Vec<_>>()
            );
        }
        assert!(cluster.taps.stacks.is_attached() && cluster.taps.zone_aware_pods.is_attached());
        let stack_series = |m: &Metrics| {
            m.encode()
                .lines()
                .filter(|l| l.contains("stack_name=\"s\""))
                .count()
        };
        assert!(
            stack_series(&parts.metrics) > 0,
            "the leader exports the stack"
        );
        term.end().await;
        assert_eq!(
            stack_series(&parts.metrics),
            0,
            "a replica that stepped down exports no stack's series"
        );
        assert!(
            !cluster.taps.stacks.is_attached(),
            "the controller's tap is detached"
        );
        assert!(
            !cluster.taps.zone_aware_pods.is_attached(),
            "the annotator's tap is detached"
        );
        cluster.put(pod("late"));
        cluster.taps.stacks.send(stacks::stack_ref(NS, "s"));
        settle().await;
        assert_eq!(
            cluster
                .take_calls()
                .iter()
                .map(Call::line)
                .collect::<Vec<_>>(),
            Vec::<String>::new()
        );
    }

    /// A reconcile stalled on the API server (a connection that never answers) does not
    /// outlive its term: `end` aborts it and returns, and nothing it would have sent next
    /// is sent.
    #[tokio::test(start_paused = true)]
    async fn ending_a_term_stops_a_reconcile_stalled_on_the_api_server() {
        let cluster = cluster();
        cluster.stall_next("apply", &format!("{NS}/configmaps/s-config"));
        let term = Term::start(&parts(&cluster));
        settle().await;
        let calls = cluster.take_calls();
        assert!(has(&calls, &format!("apply {NS}/configmaps/s-config")));
        assert!(
            !has(&calls, &format!("apply {NS}/statefulsets/s-ingester")),
            "stalled before the second wave"
        );
        tokio::time::timeout(Duration::from_secs(1), term.end())
            .await
            .expect("the term ends at once");
        settle().await;
        let after: Vec<String> = cluster.take_calls().iter().map(Call::line).collect();
        assert!(!after.iter().any(|l| l.starts_with("apply")), "{after:?}");
    }

    /// On shutdown, a reconcile under way may finish (within the grace period): its
    /// status is written before the term ends.
    #[tokio::test(start_paused = true)]
    async fn finishing_a_term_lets_the_reconcile_under_way_finish() {
        let cluster = cluster();
        cluster.delay_next(
            "apply",
            &format!("{NS}/configmaps/s-config"),
            Duration::from_secs(3),
        );
        let term = Term::start(&parts(&cluster));
        // Long enough for the reconcile to reach the slow apply, not to get past it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!has(
            &cluster.take_calls(),
            &format!("apply {NS}/lokistacks/s/status")
        ));
        term.finish().await;
        let calls = cluster.take_calls();
        assert!(has(&calls, &format!("apply {NS}/statefulsets/s-ingester")));
        assert!(
            has(&calls, &format!("apply {NS}/lokistacks/s/status")),
            "the status of the reconcile under way is written"
        );
    }
}
