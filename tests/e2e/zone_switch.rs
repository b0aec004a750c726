//! Turning zones on for a running stack, then off, in stages (issue 15, item 5).
//!
//! A poller records, a few times a second, the stack's stage and every workload's pod
//! template: whether it is zone-aware and which config file Loki reads. From that
//! timeline the scenario checks the order the design asks for:
//! - on: distributors and ingesters turn zone-aware first; queriers and rulers read
//!   every ingester (`config-read.yaml`) until `readPathAt`, which is set only once the
//!   write path runs zone-aware and Ready, plus the stack's read-path delay;
//! - off: queriers and rulers leave zone awareness first; distributors and ingesters
//!   keep their zones until then.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use loki_zone_operator::model::api::{LokiStack, ZoneAwarenessStage};
use loki_zone_operator::model::names;
use serde_json::json;

use super::{
    create_stack, eventually, namespace, operator_metrics, stack_json, wait_condition, workloads,
    Env, WAIT, ZONE,
};

const NS: &str = "e2e-zone-switch";
const STACK: &str = "switch";
/// The read path's wait once the write path is zone-aware (Loki's default is 3h).
const DELAY_SECS: i64 = 15;

/// One component's pod template: zone-aware, and the config file it reads.
#[derive(Clone, Debug, PartialEq)]
struct Template {
    zoned: bool,
    file: String,
}

impl Template {
    fn of(t: &PodTemplateSpec) -> Template {
        let zoned = t
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(names::LABEL_ZONE_AWARE))
            .is_some();
        let file = t
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.args.iter().flatten())
            .find_map(|a| a.strip_prefix("-config.file="))
            .and_then(|f| f.rsplit('/').next())
            .unwrap_or_default()
            .to_string();
        Template { zoned, file }
    }

    /// Reads the ingester ring zone-aware: a zone-aware pod on `config.yaml`.
    fn reads_zone_aware(&self) -> bool {
        self.zoned && self.file == names::CONFIG_FILE
    }
}

#[derive(Debug)]
struct Seen {
    at: Timestamp,
    stage: Option<ZoneAwarenessStage>,
    read_path_at: Option<Timestamp>,
    /// By component (the workload name without the stack's prefix).
    templates: BTreeMap<String, Template>,
}

impl Seen {
    fn template(&self, component: &str) -> Result<&Template> {
        self.templates
            .get(component)
            .with_context(|| format!("no {component} workload at {}", self.at))
    }
}

async fn observe(env: &Env) -> Result<Seen> {
    let s = Api::<LokiStack>::namespaced(env.admin.clone(), NS)
        .get(STACK)
        .await?;
    let z = s.status.and_then(|st| st.zone_awareness);
    let mut templates = BTreeMap::new();
    for (name, t, _) in workloads(env, NS).await? {
        if let Some(c) = name.strip_prefix(&format!("{STACK}-")) {
            templates.insert(c.to_string(), Template::of(&t));
        }
    }
    Ok(Seen {
        at: Timestamp::now(),
        stage: z.as_ref().map(|z| z.stage),
        read_path_at: z.and_then(|z| z.read_path_at).map(|t| t.0),
        templates,
    })
}

/// Polls until `done` holds for an observation, keeping every observation.
async fn record(env: &Env, done: impl Fn(&Seen) -> bool) -> Result<Vec<Seen>> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let s = observe(env).await?;
        let finished = done(&s);
        seen.push(s);
        if finished {
            return Ok(seen);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "not done after {WAIT:?}; last seen {:?}",
            seen.last()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The stack's write-path pods, all zone-aware and Ready.
async fn write_path_zoned_and_ready(env: &Env) -> Result<bool> {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), NS);
    let mut all = true;
    for c in ["distributor", "ingester"] {
        let selector =
            format!("app.kubernetes.io/instance={STACK},app.kubernetes.io/component={c}");
        for p in pods.list(&ListParams::default().labels(&selector)).await? {
            let zoned = p
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(names::LABEL_ZONE_AWARE));
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            all &= zoned && ready && p.metadata.deletion_timestamp.is_none();
        }
    }
    Ok(all)
}

async fn config_files(env: &Env) -> Result<Vec<String>> {
    let cm = Api::<ConfigMap>::namespaced(env.admin.clone(), NS)
        .get(&format!("{STACK}-config"))
        .await?;
    Ok(cm.data.unwrap_or_default().into_keys().collect())
}

async fn stage_events(env: &Env) -> Result<Vec<String>> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), NS);
    let mut out: Vec<(Option<String>, String)> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(STACK))
        .filter_map(|e| {
            let reason = e.reason?;
            let when = e
                .last_timestamp
                .or(e.first_timestamp)
                .map(|t| t.0.to_string());
            reason.starts_with("Zones").then_some((when, reason))
        })
        .collect();
    out.sort();
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// Issue 15, item 5: zones turned on for a running stack go write path first, read path
/// after the query window; turned off, read path first.
pub(super) async fn zones_turn_on_write_path_first_and_off_read_path_first(
    env: &mut Env,
) -> Result<()> {
    namespace(env, NS).await?;
    let mut body = stack_json(STACK, "1x.demo", serde_json::Value::Null);
    body["spec"]["rules"] = json!({"enabled": true});
    body["spec"]["template"] = json!({"ingester": {"replicas": 2}});
    create_stack(env, NS, body).await?;
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    let before = observe(env).await?;
    ensure!(
        before.stage.is_none(),
        "a stack without zones has a stage: {before:?}"
    );

    turn_on(env).await?;
    turn_off(env).await
}

async fn turn_on(env: &Env) -> Result<()> {
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), NS);
    let patch = json!({
        "metadata": {"annotations": {names::ANNOTATION_ZONE_READ_PATH_DELAY: format!("{DELAY_SECS}s")}},
        "spec": {"replication": {"factor": 2, "zones": [{"topologyKey": ZONE, "maxSkew": 1}]}},
    });
    stacks
        .patch(STACK, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    // The first observation with readPathAt: the write path must be zone-aware and Ready.
    let enabling = record(env, |s| {
        s.read_path_at.is_some() || s.stage == Some(ZoneAwarenessStage::Enabled)
    })
    .await?;
    let at = enabling
        .last()
        .and_then(|s| s.read_path_at)
        .context("readPathAt never set; Enabling skipped")?;
    ensure!(
        write_path_zoned_and_ready(env).await?,
        "readPathAt set while a distributor or ingester is not zone-aware and Ready"
    );
    ensure!(
        config_files(env)
            .await?
            .contains(&names::CONFIG_READ_FILE.to_string()),
        "no {} while Enabling",
        names::CONFIG_READ_FILE
    );
    let series = format!(
        "loki_zone_operator_zone_read_path_at_seconds{{stack_namespace=\"{NS}\",stack_name=\"{STACK}\"}} {}",
        at.as_second()
    );
    let metrics = operator_metrics(env).await?;
    ensure!(
        metrics.contains(&series),
        "no {series} in the operator's metrics"
    );
    let rest = record(env, |s| {
        s.stage == Some(ZoneAwarenessStage::Enabled)
            && ["querier", "ruler"]
                .iter()
                .all(|c| s.templates.get(*c).is_some_and(Template::reads_zone_aware))
    })
    .await?;
    let seen: Vec<&Seen> = enabling.iter().chain(&rest).collect();
    ensure!(
        seen.iter()
            .any(|s| s.stage == Some(ZoneAwarenessStage::Enabling)),
        "stage Enabling never shown"
    );
    let first_enabling = seen
        .iter()
        .find(|s| s.stage == Some(ZoneAwarenessStage::Enabling))
        .map(|s| s.at)
        .context("no Enabling")?;
    let waited = at.duration_since(first_enabling).as_secs();
    ensure!(
        waited >= DELAY_SECS,
        "readPathAt {at} only {waited}s after Enabling began"
    );
    for s in &seen {
        for c in ["querier", "ruler"] {
            if s.template(c)?.reads_zone_aware() {
                ensure!(
                    s.at >= at,
                    "{c} read zone-aware at {}, before readPathAt {at}",
                    s.at
                );
                for w in ["distributor", "ingester"] {
                    ensure!(
                        s.template(w)?.zoned,
                        "{c} read zone-aware while {w} was not zone-aware"
                    );
                }
            }
        }
        // Taken before readPathAt: the operator cannot have switched the read path yet.
        // (Past it, the templates may already have switched while the status that says
        // Enabled is still to be written.)
        let before_read_path = s.read_path_at.is_none_or(|at| s.at < at);
        if s.stage == Some(ZoneAwarenessStage::Enabling)
            && before_read_path
            && s.template("ingester")?.zoned
        {
            ensure!(
                s.template("querier")?.file == names::CONFIG_READ_FILE,
                "querier not on {} while Enabling: {s:?}",
                names::CONFIG_READ_FILE
            );
        }
    }
    let switched = seen
        .iter()
        .find(|s| s.template("querier").is_ok_and(Template::reads_zone_aware))
        .map(|s| s.at)
        .context("querier never read zone-aware")?;
    println!(
        "    zones on: Enabling {first_enabling}, readPathAt {at} ({waited}s later), queriers zone-aware {switched}"
    );
    ensure!(
        !config_files(env)
            .await?
            .contains(&names::CONFIG_READ_FILE.to_string()),
        "{} left after Enabled",
        names::CONFIG_READ_FILE
    );
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    Ok(())
}

async fn turn_off(env: &Env) -> Result<()> {
    let stacks: Api<LokiStack> = Api::namespaced(env.admin.clone(), NS);
    let patch = json!({"spec": {"replication": {"zones": null}}});
    stacks
        .patch(STACK, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let seen = record(env, |s| {
        s.stage.is_none() && s.templates.values().all(|t| !t.zoned)
    })
    .await?;
    ensure!(
        seen.iter()
            .any(|s| s.stage == Some(ZoneAwarenessStage::Disabling)),
        "stage Disabling never shown"
    );
    for s in &seen {
        let write_left = ["distributor", "ingester"]
            .iter()
            .map(|w| s.template(w).map(|t| !t.zoned))
            .collect::<Result<Vec<bool>>>()?
            .into_iter()
            .any(|left| left);
        for c in ["querier", "ruler"] {
            ensure!(
                !(write_left && s.template(c)?.reads_zone_aware()),
                "{c} still read zone-aware after the write path left its zones: {s:?}"
            );
        }
    }
    ensure!(
        !config_files(env)
            .await?
            .contains(&names::CONFIG_READ_FILE.to_string()),
        "{} left after zones were turned off",
        names::CONFIG_READ_FILE
    );
    wait_condition(env, NS, STACK, "Ready", Some("ReadyComponents")).await?;
    // The operator publishes a stage's Event after the status that shows it: a moment
    // after Ready, not with it.
    const STAGES: [&str; 5] = [
        "ZonesEnabling",
        "ZonesWritePathReady",
        "ZonesEnabled",
        "ZonesDisabling",
        "ZonesDisabled",
    ];
    let waited = eventually("every stage's Event", Duration::from_secs(30), || async {
        let events = stage_events(env).await?;
        let all = STAGES.iter().all(|r| events.iter().any(|e| e == r));
        Ok(all.then_some(events))
    })
    .await;
    let Ok(events) = waited else {
        let events = stage_events(env).await?;
        bail!("not every stage's Event ({STAGES:?}) within 30 s of Ready: {events:?}");
    };
    println!(
        "    zones off: Disabling seen over {} observations; Events {events:?}",
        seen.len()
    );
    Ok(())
}
