//! Turning zones on or off for a running stack, in stages (the design's Drawbacks 1).
//!
//! Zone awareness changes both sides of the ingester ring. Distributors (the write path)
//! put the copies of a stream in distinct zones. Queriers and rulers (the read path) then
//! stop asking a zone's ingesters once the other zones have answered (Loki's
//! `DoUntilQuorum`), since each zone holds a copy. A stream written before the switch may
//! have every copy in one zone, so a zone-aware querier could miss it for as long as
//! queriers ask ingesters for recent data: `querier.query_ingesters_within`, Loki's
//! default 3h, which our config keeps. Older data is read from the object store.
//!
//! - Turning on: **Enabling**. The write path is rendered zone-aware, while queriers and
//!   rulers read [`names::CONFIG_READ_FILE`], the same config with the ring's zone
//!   awareness off, and so keep asking every ingester. Once every distributor and
//!   ingester runs zone-aware and is Ready, `readPathAt` is set to now plus that window
//!   (the stack's [`names::ANNOTATION_ZONE_READ_PATH_DELAY`] overrides it). At
//!   `readPathAt`: **Enabled**, and the read path reads `config.yaml` too.
//! - Turning off: **Disabling**. The read path leaves zone awareness first, while the
//!   write path keeps the zones recorded in the status. Once every querier and ruler runs
//!   the new config and is Ready, the zones are off everywhere. No wait: a querier that
//!   asks every ingester misses nothing.
//!
//! A new stack, or one whose ingesters already run zone-aware, is Enabled at once. The
//! stage lives in the stack's status, so an operator restart resumes where it stood.
//! Pure: a function of the stack (its spec, annotations and status) and the snapshot.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::model::api::{LokiStack, ZoneAwarenessStage, ZoneAwarenessStatus, ZoneSpec};
use crate::model::conditions::PodPhase;
use crate::model::conditions::{pod_phase, Happening};
use crate::model::defaults::{Component, EffectiveStack};
use crate::model::duration::parse_duration;
use crate::model::names;
use crate::model::pods::{component_of, is_zone_aware};
use crate::observe::Snapshot;
use crate::render::{config_hashes, RenderError, RenderInput};

/// Loki's default `querier.query_ingesters_within`: queriers ask ingesters for data
/// younger than this, and the store for the rest. `loki-config.yaml.tera` keeps it.
pub const QUERY_INGESTERS_WITHIN: Duration = Duration::from_secs(3 * 3600);

const WRITE_PATH: [Component; 2] = [Component::Distributor, Component::Ingester];
const READ_PATH: [Component; 2] = [Component::Querier, Component::Ruler];

/// The stage this reconcile renders, and what it changes of the render: the zones the
/// write path keeps while turning off, and whether the read path reads zone-aware.
#[derive(Debug)]
pub struct Stage {
    /// `None` for a stack whose zones are off.
    pub status: Option<ZoneAwarenessStatus>,
    /// The zones to render: the spec's, or while turning off the ones recorded.
    pub zones: Vec<ZoneSpec>,
    pub read_path_zone_aware: bool,
}

/// The stage of `eff` (the spec resolved, with what the plan read), decided from the
/// stack's status and what runs.
pub fn stage(
    stack: &LokiStack,
    snapshot: &Snapshot,
    eff: &EffectiveStack,
) -> Result<Stage, RenderError> {
    let previous = stack
        .status
        .as_ref()
        .and_then(|s| s.zone_awareness.as_ref());
    let (status, zones) = if eff.zone_aware() {
        let on = turning_on(stack, previous, snapshot, eff);
        (Some(on), eff.zones.clone())
    } else {
        match turning_off(stack, previous, snapshot, eff)? {
            Some((off, recorded)) => (Some(off), recorded),
            None => (None, eff.zones.clone()),
        }
    };
    let read_path_zone_aware = match &status {
        Some(n) => n.stage == ZoneAwarenessStage::Enabled,
        None => eff.read_path_zone_aware,
    };
    Ok(Stage {
        status,
        zones,
        read_path_zone_aware,
    })
}

fn turning_on(
    stack: &LokiStack,
    previous: Option<&ZoneAwarenessStatus>,
    snapshot: &Snapshot,
    eff: &EffectiveStack,
) -> ZoneAwarenessStatus {
    let now = snapshot.now;
    let enabled = || ZoneAwarenessStatus {
        stage: ZoneAwarenessStage::Enabled,
        read_path_at: None,
        zones: eff.zones.iter().map(Into::into).collect(),
        message: None,
    };
    // An invalid annotation is also a Warning condition (`plan::Findings::annotation`).
    let (delay, delay_note) = match read_path_delay(stack) {
        Ok(d) => (d, String::new()),
        Err(e) => (QUERY_INGESTERS_WITHIN, format!(". {e}")),
    };
    let enabling = |read_path_at: Option<Timestamp>, message: String| ZoneAwarenessStatus {
        stage: ZoneAwarenessStage::Enabling,
        read_path_at: read_path_at.map(Time),
        zones: eff.zones.iter().map(Into::into).collect(),
        message: Some(format!("{message}{delay_note}")),
    };
    let enabling_since = match previous {
        Some(p) if p.stage == ZoneAwarenessStage::Enabling => p.read_path_at.as_ref(),
        // Zones back on before they were off: the write path never left them.
        Some(_) => return enabled(),
        None if ingesters_zone_aware(snapshot) => return enabled(),
        None => None,
    };
    if let Some(at) = enabling_since {
        if now >= at.0 {
            return enabled();
        }
        return enabling(Some(at.0), read_path_message(at.0, delay));
    }
    let progress = write_path_progress(snapshot, eff);
    if progress.iter().all(|p| p.done()) {
        let at = now
            .checked_add(SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        return enabling(Some(at), read_path_message(at, delay));
    }
    let counts: Vec<String> = progress.iter().map(Progress::describe).collect();
    enabling(
        None,
        format!(
            "the write path turns zone-aware first ({}); queriers and rulers keep asking every ingester until {} after that",
            counts.join(", "),
            humanize(delay)
        ),
    )
}

fn read_path_message(at: Timestamp, delay: Duration) -> String {
    format!(
        "the write path runs zone-aware; queriers and rulers turn zone-aware at {at}, once every stream the ingesters serve queries from was written zone-aware ({} later)",
        humanize(delay)
    )
}

/// Turning zones off, while the read path has not left them yet: the Disabling status,
/// and the zones the write path keeps until then. `None` once it has (or from Enabling,
/// when the read path never turned zone-aware).
fn turning_off(
    stack: &LokiStack,
    previous: Option<&ZoneAwarenessStatus>,
    snapshot: &Snapshot,
    eff: &EffectiveStack,
) -> Result<Option<(ZoneAwarenessStatus, Vec<ZoneSpec>)>, RenderError> {
    let Some(p) =
        previous.filter(|p| p.stage != ZoneAwarenessStage::Enabling && !p.zones.is_empty())
    else {
        return Ok(None);
    };
    let recorded: Vec<ZoneSpec> = p.zones.iter().map(Into::into).collect();
    let staged = EffectiveStack {
        zones: recorded.clone(),
        read_path_zone_aware: false,
        ..eff.clone()
    };
    let hashes = config_hashes(&RenderInput::new(stack, staged.clone()))?;
    let progress: Vec<Progress> = READ_PATH
        .iter()
        .filter_map(|c| {
            let want = staged.component(*c)?.replicas;
            let (_, hash) = hashes.of(*c);
            Some(Progress::of(snapshot, *c, want, |pod| {
                config_hash(pod) == Some(hash)
            }))
        })
        .collect();
    if progress.iter().all(|p| p.done()) {
        return Ok(None);
    }
    let counts: Vec<String> = progress.iter().map(Progress::describe).collect();
    let keys: Vec<&str> = p.zones.iter().map(|z| z.topology_key.as_str()).collect();
    let status = ZoneAwarenessStatus {
        stage: ZoneAwarenessStage::Disabling,
        read_path_at: None,
        zones: p.zones.clone(),
        message: Some(format!(
            "queriers and rulers leave zone awareness first ({}); distributors and ingesters keep the zones of {} until they have",
            counts.join(", "),
            keys.join(", ")
        )),
    };
    Ok(Some((status, recorded)))
}

/// How long the read path waits after the write path: the stack's annotation, else
/// [`QUERY_INGESTERS_WITHIN`]; what to fix when the annotation is not a duration (the
/// default then applies).
pub fn read_path_delay(stack: &LokiStack) -> Result<Duration, String> {
    let set = stack
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_ZONE_READ_PATH_DELAY));
    match set.map(|v| parse_duration(v)) {
        None => Ok(QUERY_INGESTERS_WITHIN),
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(format!(
            "annotation {}: {e}; Loki's default {} applies until it is fixed or removed",
            names::ANNOTATION_ZONE_READ_PATH_DELAY,
            humanize(QUERY_INGESTERS_WITHIN)
        )),
    }
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s > 0 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s > 0 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn config_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(names::ANNOTATION_CONFIG_HASH)
        .map(String::as_str)
}

/// Every ingester pod runs a zone-aware template: false while zones are being turned on
/// for a running stack. The plan also keeps the ingester budget at one pod until then,
/// since the zone-disruption webhook sees only zone-aware pods.
pub fn ingesters_zone_aware(snapshot: &Snapshot) -> bool {
    snapshot
        .pods
        .iter()
        .filter(|p| component_of(p) == Some(Component::Ingester))
        .all(|p| is_zone_aware(p))
}

fn write_path_progress(snapshot: &Snapshot, eff: &EffectiveStack) -> Vec<Progress> {
    WRITE_PATH
        .iter()
        .filter_map(|c| {
            let want = eff.component(*c)?.replicas;
            Some(Progress::of(snapshot, *c, want, is_zone_aware))
        })
        .collect()
}

/// How far one component is switched: its pods that run the wanted config and are
/// Ready, and whether any pod still runs another one.
struct Progress {
    component: Component,
    switched: i32,
    want: i32,
    others: bool,
}

impl Progress {
    fn of(snapshot: &Snapshot, c: Component, want: i32, runs: impl Fn(&Pod) -> bool) -> Self {
        let pods = snapshot.pods.iter().filter(|p| component_of(p) == Some(c));
        let (mut switched, mut others) = (0, false);
        for pod in pods {
            if !runs(pod) {
                // Even while terminating: it may still be serving.
                others = true;
            } else if pod_phase(pod) == PodPhase::Ready && pod.metadata.deletion_timestamp.is_none()
            {
                switched += 1;
            }
        }
        Progress {
            component: c,
            switched,
            want,
            others,
        }
    }

    fn done(&self) -> bool {
        !self.others && self.switched >= self.want
    }

    fn describe(&self) -> String {
        format!(
            "{} {}/{}",
            self.component.name(),
            self.switched.min(self.want),
            self.want
        )
    }
}

/// The Event for a change of stage, if any: (reason, note).
pub fn transition(
    previous: Option<&ZoneAwarenessStatus>,
    next: Option<&ZoneAwarenessStatus>,
) -> Option<(Happening, String)> {
    use ZoneAwarenessStage::{Disabling, Enabled, Enabling};
    let stage = |s: Option<&ZoneAwarenessStatus>| s.map(|s| s.stage);
    let at = |s: Option<&ZoneAwarenessStatus>| s.and_then(|s| s.read_path_at.clone());
    match (stage(previous), stage(next)) {
        (p, Some(Enabling)) if p != Some(Enabling) => Some((
            Happening::ZonesEnabling,
            "turning zones on: distributors and ingesters first; queriers and rulers keep asking every ingester".into(),
        )),
        (Some(Enabling), Some(Enabling)) if at(previous).is_none() => at(next).map(|t| {
            (
                Happening::ZonesWritePathReady,
                format!("distributors and ingesters run zone-aware; queriers and rulers follow at {}", t.0),
            )
        }),
        (Some(Enabling), Some(Enabled)) => Some((
            Happening::ZonesEnabled,
            "queriers and rulers now read zone-aware: zone-aware replication is complete".into(),
        )),
        (p, Some(Disabling)) if p != Some(Disabling) => Some((
            Happening::ZonesDisabling,
            "turning zones off: queriers and rulers first; distributors and ingesters keep their zones until then".into(),
        )),
        (Some(Disabling), None) => Some((
            Happening::ZonesDisabled,
            "queriers and rulers read every ingester: zones are now turned off on distributors and ingesters".into(),
        )),
        _ => None,
    }
}

/// How soon the stack must be looked at again for its stage to move on by itself:
/// at `readPathAt`, since no cluster change announces it.
pub fn wake_after(status: Option<&ZoneAwarenessStatus>, now: Timestamp) -> Option<Duration> {
    let at = status?.read_path_at.as_ref()?.0;
    let left = at.duration_since(now);
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO) + Duration::from_secs(1))
}

/// A stage that moves on when pods change (which trigger a reconcile by themselves).
pub fn under_way(status: Option<&ZoneAwarenessStatus>) -> bool {
    status.is_some_and(|s| {
        s.stage == ZoneAwarenessStage::Disabling
            || (s.stage == ZoneAwarenessStage::Enabling && s.read_path_at.is_none())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::api::{LokiStackSize, LokiStackStatus};
    use crate::model::defaults::effective;
    use crate::render::{documents, Settings};
    use crate::testing;
    use crate::testing::{stack, stack_spec, zoned_spec, ZONE};

    const T0: i64 = 1_800_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn pod(name: &str, c: Component, zoned: bool, ready: bool, hash: &str) -> Arc<Pod> {
        let mut p = testing::pod(name)
            .component(c)
            .annotation(names::ANNOTATION_CONFIG_HASH, hash)
            .ready_is(ready);
        if zoned {
            p = p.zone_aware();
        }
        Arc::new(p.build())
    }

    /// The stack's write path and queriers, every replica, each zoned or not.
    fn pods(eff: &EffectiveStack, zoned: bool, ready: bool) -> Vec<Arc<Pod>> {
        let mut out = Vec::new();
        for c in [
            Component::Distributor,
            Component::Ingester,
            Component::Querier,
        ] {
            for i in 0..eff.component(c).map_or(0, |e| e.replicas) {
                out.push(pod(&format!("{}-{i}", c.name()), c, zoned, ready, "old"));
            }
        }
        out
    }

    fn snapshot(pods: Vec<Arc<Pod>>, now: i64) -> Snapshot {
        Snapshot {
            pods,
            now: at(now),
            ..Default::default()
        }
    }

    fn with_status(mut s: LokiStack, z: ZoneAwarenessStatus) -> LokiStack {
        s.status = Some(LokiStackStatus {
            zone_awareness: Some(z),
            ..Default::default()
        });
        s
    }

    fn recorded(eff: &EffectiveStack) -> Vec<crate::model::api::RecordedZone> {
        eff.zones.iter().map(Into::into).collect()
    }

    fn zoned_stack() -> LokiStack {
        stack("lokistack", zoned_spec(LokiStackSize::Small, 2, &[ZONE]))
    }

    /// The rendered config file of `component`'s pod template, and the ConfigMap's files.
    fn config_of(s: &LokiStack, eff: &EffectiveStack, component: &str) -> (String, Vec<String>) {
        let docs = documents(&RenderInput::new(s, eff.clone()), &Settings::default()).unwrap();
        let mut file = String::new();
        let mut files = Vec::new();
        for d in &docs {
            let v: serde_json::Value = serde_yaml_ng::from_str(&d.text).unwrap();
            if v["kind"] == "ConfigMap" {
                files = v["data"].as_object().unwrap().keys().cloned().collect();
            }
            let labels = &v["spec"]["template"]["metadata"]["labels"];
            if labels[names::LABEL_COMPONENT] == component {
                let args = v["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
                file = args
                    .split('"')
                    .find_map(|a| a.strip_prefix("-config.file="))
                    .unwrap()
                    .to_string();
            }
        }
        (file, files)
    }

    /// [`stage`], with what it decides of the render applied to `eff`, as the plan does.
    fn staged(
        s: &LokiStack,
        snap: &Snapshot,
        eff: &mut EffectiveStack,
    ) -> Result<Option<ZoneAwarenessStatus>, RenderError> {
        let st = stage(s, snap, eff)?;
        eff.zones = st.zones;
        eff.read_path_zone_aware = st.read_path_zone_aware;
        Ok(st.status)
    }

    #[test]
    fn a_new_zone_aware_stack_is_enabled_at_once() {
        let s = zoned_stack();
        let mut eff = effective(&s.spec);
        let z = staged(&s, &snapshot(vec![], T0), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Enabled);
        assert!(eff.read_path_zone_aware);
        let (file, files) = config_of(&s, &eff, "querier");
        assert!(file.ends_with(names::CONFIG_FILE), "{file}");
        assert!(
            !files.contains(&names::CONFIG_READ_FILE.to_string()),
            "{files:?}"
        );
    }

    #[test]
    fn a_stack_without_zones_has_no_stage() {
        let s = stack("lokistack", stack_spec(LokiStackSize::Small));
        let mut eff = effective(&s.spec);
        let pods = pods(&eff, false, true);
        assert_eq!(staged(&s, &snapshot(pods, T0), &mut eff).unwrap(), None);
    }

    #[test]
    fn turning_zones_on_starts_with_the_write_path() {
        let s = zoned_stack();
        let mut eff = effective(&s.spec);
        let pods = pods(&eff, false, true);
        let z = staged(&s, &snapshot(pods, T0), &mut eff).unwrap().unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Enabling);
        assert_eq!(z.read_path_at, None);
        assert_eq!(z.zones, recorded(&eff));
        let message = z.message.unwrap();
        assert!(
            message.contains("distributor 0/2, ingester 0/3"),
            "{message}"
        );
        assert!(message.contains("3h"), "{message}");
        assert!(!eff.read_path_zone_aware);
        assert!(eff.zone_aware());

        let (querier, files) = config_of(&s, &eff, "querier");
        assert!(querier.ends_with(names::CONFIG_READ_FILE), "{querier}");
        assert!(
            files.contains(&names::CONFIG_READ_FILE.to_string()),
            "{files:?}"
        );
        for write in ["distributor", "ingester", "compactor", "query-frontend"] {
            let (file, _) = config_of(&s, &eff, write);
            assert!(file.ends_with(names::CONFIG_FILE), "{write}: {file}");
        }
        let main = crate::render::loki_config(&RenderInput::new(&s, eff.clone())).unwrap();
        let read = crate::render::loki_read_config(&RenderInput::new(&s, eff.clone()))
            .unwrap()
            .unwrap();
        assert!(main.contains("zone_awareness_enabled: true"), "{main}");
        assert!(read.contains("zone_awareness_enabled: false"), "{read}");
        // Nothing else differs: the read path keeps every other setting.
        assert_eq!(
            main.replace("zone_awareness_enabled: true", ""),
            read.replace("zone_awareness_enabled: false", "")
        );
    }

    #[test]
    fn the_read_path_waits_the_query_window_after_the_write_path_is_ready() {
        let mut s = with_status(
            zoned_stack(),
            ZoneAwarenessStatus {
                stage: ZoneAwarenessStage::Enabling,
                ..Default::default()
            },
        );
        let eff0 = effective(&s.spec);
        // One ingester zoned but not Ready yet: still waiting for the write path.
        let mut not_yet = pods(&eff0, true, true);
        not_yet[2] = pod("ingester-0", Component::Ingester, true, false, "old");
        let mut eff = eff0.clone();
        let z = staged(&s, &snapshot(not_yet, T0), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(
            (z.stage, z.read_path_at),
            (ZoneAwarenessStage::Enabling, None)
        );
        assert!(z.message.unwrap().contains("ingester 2/3"));

        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ZONE_READ_PATH_DELAY.to_string(),
                "90s".to_string(),
            )]
            .into(),
        );
        let mut eff = eff0.clone();
        let ready = pods(&eff0, true, true);
        let z = staged(&s, &snapshot(ready.clone(), T0), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Enabling);
        assert_eq!(z.read_path_at, Some(Time(at(T0 + 90))));
        assert!(!eff.read_path_zone_aware);
        assert_eq!(
            wake_after(Some(&z), at(T0 + 30)),
            Some(Duration::from_secs(61))
        );
        assert!(!under_way(Some(&z)));

        let s = with_status(s, z);
        let mut eff = eff0.clone();
        let z = staged(&s, &snapshot(ready.clone(), T0 + 89), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(
            z.stage,
            ZoneAwarenessStage::Enabling,
            "not before readPathAt"
        );
        let mut eff = eff0.clone();
        let z = staged(&s, &snapshot(ready, T0 + 90), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Enabled);
        assert_eq!(z.read_path_at, None);
        assert!(eff.read_path_zone_aware);
    }

    #[test]
    fn an_invalid_delay_keeps_lokis_window_and_says_so() {
        let mut s = zoned_stack();
        s.metadata.annotations = Some(
            [(
                names::ANNOTATION_ZONE_READ_PATH_DELAY.to_string(),
                "soon".to_string(),
            )]
            .into(),
        );
        let note = read_path_delay(&s).unwrap_err();
        assert!(
            note.contains(names::ANNOTATION_ZONE_READ_PATH_DELAY),
            "{note}"
        );
        let mut eff = effective(&s.spec);
        let z = staged(&s, &snapshot(pods(&eff, false, true), T0), &mut eff)
            .unwrap()
            .unwrap();
        let message = z.message.unwrap();
        assert!(message.contains("invalid duration"), "{message}");
        // Loki's window applies meanwhile.
        assert!(message.contains("until 3h after that"), "{message}");
        // ... and the plan shows it as a Warning condition.
        let p = crate::plan::plan(&s, &snapshot(vec![], T0), &Settings::default()).unwrap();
        assert_eq!(p.findings.annotation.as_deref(), Some(note.as_str()));
    }

    #[test]
    fn turning_zones_off_takes_the_read_path_first() {
        let on = zoned_stack();
        let zones = recorded(&effective(&on.spec));
        let mut off = with_status(
            stack("lokistack", stack_spec(LokiStackSize::Small)),
            ZoneAwarenessStatus {
                stage: ZoneAwarenessStage::Enabled,
                zones: zones.clone(),
                ..Default::default()
            },
        );
        let eff0 = effective(&off.spec);
        let old = pods(&effective(&on.spec), true, true);
        let mut eff = eff0.clone();
        let z = staged(&off, &snapshot(old.clone(), T0), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Disabling);
        assert_eq!(z.zones, zones);
        assert!(z.message.as_deref().unwrap().contains("querier 0/2"));
        assert!(under_way(Some(&z)));
        // The write path keeps its zones; the read path reads every ingester.
        assert_eq!(recorded(&eff), zones);
        assert!(!eff.read_path_zone_aware);
        let (querier, _) = config_of(&off, &eff, "querier");
        assert!(querier.ends_with(names::CONFIG_READ_FILE), "{querier}");
        let ingester = crate::render::loki_config(&RenderInput::new(&off, eff.clone())).unwrap();
        assert!(ingester.contains("zone_awareness_enabled: true"));

        // Once every querier runs the read config and is Ready, zones are off.
        let hashes = config_hashes(&RenderInput::new(&off, eff.clone())).unwrap();
        let hash = hashes.of(Component::Querier).1.to_string();
        let switched: Vec<Arc<Pod>> = old
            .iter()
            .map(|p| match component_of(p) {
                Some(Component::Querier) => pod(
                    p.metadata.name.as_deref().unwrap(),
                    Component::Querier,
                    true,
                    true,
                    &hash,
                ),
                _ => p.clone(),
            })
            .collect();
        off = with_status(off, z);
        let mut eff = eff0.clone();
        assert_eq!(
            staged(&off, &snapshot(switched, T0), &mut eff).unwrap(),
            None
        );
        assert!(!eff.zone_aware(), "the write path leaves its zones now");
    }

    #[test]
    fn zones_off_while_enabling_or_back_on_while_disabling_need_no_wait() {
        let zones = recorded(&effective(&zoned_stack().spec));
        let enabling = with_status(
            stack("lokistack", stack_spec(LokiStackSize::Small)),
            ZoneAwarenessStatus {
                stage: ZoneAwarenessStage::Enabling,
                zones: zones.clone(),
                ..Default::default()
            },
        );
        let mut eff = effective(&enabling.spec);
        let p = pods(&effective(&zoned_stack().spec), true, true);
        assert_eq!(
            staged(&enabling, &snapshot(p.clone(), T0), &mut eff).unwrap(),
            None
        );

        let disabling = with_status(
            zoned_stack(),
            ZoneAwarenessStatus {
                stage: ZoneAwarenessStage::Disabling,
                zones,
                ..Default::default()
            },
        );
        let mut eff = effective(&disabling.spec);
        let z = staged(&disabling, &snapshot(p, T0), &mut eff)
            .unwrap()
            .unwrap();
        assert_eq!(z.stage, ZoneAwarenessStage::Enabled);
    }

    #[test]
    fn each_change_of_stage_has_one_event() {
        let z = |stage, at: Option<i64>| ZoneAwarenessStatus {
            stage,
            read_path_at: at.map(|t| Time(self::at(t))),
            ..Default::default()
        };
        use ZoneAwarenessStage::*;
        let reason = |p: Option<ZoneAwarenessStatus>, n: Option<ZoneAwarenessStatus>| {
            transition(p.as_ref(), n.as_ref()).map(|(r, _)| r.as_str())
        };
        assert_eq!(reason(None, Some(z(Enabling, None))), Some("ZonesEnabling"));
        assert_eq!(
            reason(Some(z(Enabling, None)), Some(z(Enabling, None))),
            None
        );
        assert_eq!(
            reason(Some(z(Enabling, None)), Some(z(Enabling, Some(T0)))),
            Some("ZonesWritePathReady")
        );
        assert_eq!(
            reason(Some(z(Enabling, Some(T0))), Some(z(Enabling, Some(T0)))),
            None
        );
        assert_eq!(
            reason(Some(z(Enabling, Some(T0))), Some(z(Enabled, None))),
            Some("ZonesEnabled")
        );
        assert_eq!(reason(None, Some(z(Enabled, None))), None);
        assert_eq!(
            reason(Some(z(Enabled, None)), Some(z(Disabling, None))),
            Some("ZonesDisabling")
        );
        assert_eq!(
            reason(Some(z(Disabling, None)), None),
            Some("ZonesDisabled")
        );
    }
}
