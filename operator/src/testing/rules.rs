//! The rule kinds' metadata caches for the glue's tests, fed by hand from what a fake
//! cluster stores (it feeds no rule cache itself). Kept here, not beside the caches, so
//! that no cache module imports the fake cluster, which imports the caches.

use std::collections::BTreeMap;

use kube::runtime::watcher::Event;

use crate::caches::rule_kinds::{strip_meta, RuleKind, RuleMeta};
use crate::caches::rules::RuleCaches;
use crate::caches::scope::ScopedWriter;
use crate::stores::index::unindexed;
use crate::testing::cluster::{key, FakeCluster};

/// The metadata caches of the rule kinds, fed by hand from what a fake cluster stores
/// (it feeds no rule cache itself).
pub(crate) struct RuleFeeds {
    writers: BTreeMap<RuleKind, ScopedWriter<RuleMeta>>,
}

impl RuleFeeds {
    /// Listed, empty caches of every kind, and the feeds that fill them.
    pub(crate) fn new() -> (RuleFeeds, RuleCaches) {
        let mut writers = BTreeMap::new();
        let mut caches = RuleCaches::default();
        for kind in RuleKind::ALL {
            let mut w = ScopedWriter::new(kind.resource(), [None], unindexed);
            w.apply(None, &Event::Init);
            w.apply(None, &Event::InitDone);
            caches.stores.insert(kind, w.reader());
            writers.insert(kind, w);
        }
        (RuleFeeds { writers }, caches)
    }

    /// The object's metadata as `fake` stores it now, stripped as the watch strips it.
    pub(crate) fn sync(&mut self, fake: &FakeCluster, kind: RuleKind, ns: &str, name: &str) {
        let w = self.writers.get_mut(&kind).expect("kind");
        let stored = fake.get(&key(&kind.resource(), Some(ns), name));
        match stored {
            Some(v) => {
                let mut m: RuleMeta = serde_json::from_value(v).expect("metadata");
                strip_meta(&mut m);
                w.apply(None, &Event::Apply(m));
            }
            None => {
                let m: RuleMeta = serde_json::from_value(
                    serde_json::json!({"metadata": {"name": name, "namespace": ns}}),
                )
                .expect("metadata");
                w.apply(None, &Event::Delete(m));
            }
        }
    }
}
