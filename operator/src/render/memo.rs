//! The last render of each stack, kept with what it was rendered from.
//!
//! Every reconcile renders all of its stack's children, and most reconciles render
//! exactly what the one before did: they run because a pod turned Ready or a
//! StatefulSet's status moved, not because the spec changed. While 300 new stacks were
//! being created, tera and the YAML parser took about half of the operator's CPU
//! (`perf`, docs/performance.md).
//!
//! [`render`] is a pure function of the stack's name, namespace, uid and spec, its
//! [`EffectiveStack`], the operator's [`Settings`] and the server's
//! [`ServerCapabilities`]. The memo keeps those inputs beside the children and compares
//! them whole (`PartialEq`), never by a hash that could collide. Equal inputs give the
//! children of the last render; any difference renders again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::ResourceExt;

use crate::model::api::{LokiStack, LokiStackSpec};
use crate::model::defaults::EffectiveStack;
use crate::render::{render, Child, RenderError, ServerCapabilities, Settings};

/// A stack by namespace and name.
pub type StackKey = (String, String);

/// What one render was made from, and what it made.
struct Entry {
    uid: Option<String>,
    spec: LokiStackSpec,
    eff: EffectiveStack,
    settings: Settings,
    caps: ServerCapabilities,
    children: Vec<Child>,
}

impl Entry {
    fn rendered_from(
        &self,
        stack: &LokiStack,
        eff: &EffectiveStack,
        settings: &Settings,
        caps: &ServerCapabilities,
    ) -> bool {
        self.uid == stack.metadata.uid
            && self.caps == *caps
            && self.spec == stack.spec
            && self.eff == *eff
            && self.settings == *settings
    }
}

/// The last render of each stack. One per term, beside the applier; it holds one
/// stack's children (a few tens of KiB) per stack.
#[derive(Default)]
pub struct RenderMemo {
    last: Mutex<HashMap<StackKey, Arc<Entry>>>,
}

impl RenderMemo {
    fn last(&self) -> MutexGuard<'_, HashMap<StackKey, Arc<Entry>>> {
        // Every write is one insert or remove, so a poisoned map is still consistent.
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What [`render`] gives for these inputs: the last render of the stack when it was
    /// made from equal inputs, else a new one, kept for next time. A failed render
    /// leaves the last good one in place.
    pub fn render(
        &self,
        stack: &LokiStack,
        eff: &EffectiveStack,
        settings: &Settings,
        caps: &ServerCapabilities,
    ) -> Result<Vec<Child>, RenderError> {
        let key = (stack.namespace().unwrap_or_default(), stack.name_any());
        // The lock is not held while rendering: reconciles of other stacks go on.
        let last = self.last().get(&key).cloned();
        if let Some(entry) = last.filter(|e| e.rendered_from(stack, eff, settings, caps)) {
            return Ok(entry.children.clone());
        }
        let children = render(stack, eff, settings, caps)?;
        let entry = Entry {
            uid: stack.metadata.uid.clone(),
            spec: stack.spec.clone(),
            eff: eff.clone(),
            settings: settings.clone(),
            caps: *caps,
            children: children.clone(),
        };
        self.last().insert(key, Arc::new(entry));
        Ok(children)
    }

    /// Drops the render of a stack that was deleted or set Unmanaged.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.last()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Drops the renders of stacks that no longer exist.
    pub fn retain(&self, live: &HashSet<StackKey>) {
        self.last().retain(|k, _| live.contains(k));
    }

    /// How many stacks have a render kept.
    pub fn len(&self) -> usize {
        self.last().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::LokiStackSize;
    use crate::model::defaults::effective;
    use crate::testing::{stack, stack_spec, zoned_spec, ZONE};

    fn zone_aware(name: &str) -> LokiStack {
        stack(name, zoned_spec(LokiStackSize::Demo, 2, &[ZONE]))
    }

    fn inputs(stack: &LokiStack) -> (EffectiveStack, Settings, ServerCapabilities) {
        (
            effective(&stack.spec),
            Settings::default(),
            ServerCapabilities::MODERN,
        )
    }

    /// Whatever the memo holds, it answers what a fresh render answers.
    #[test]
    fn answers_what_a_fresh_render_answers() {
        let memo = RenderMemo::default();
        let stack = zone_aware("s");
        let (eff, settings, caps) = inputs(&stack);
        let fresh = render(&stack, &eff, &settings, &caps).expect("render");
        assert_eq!(
            memo.render(&stack, &eff, &settings, &caps).expect("first"),
            fresh
        );
        assert_eq!(
            memo.render(&stack, &eff, &settings, &caps).expect("kept"),
            fresh
        );
        assert_eq!(memo.len(), 1);

        // Each input on its own renders again: what the memo answers is the fresh
        // render of the new inputs, which differs from the first.
        let again = |stack: &LokiStack, eff: &EffectiveStack, settings: &Settings, caps| {
            let kept = memo.render(stack, eff, settings, caps).expect("memo");
            assert_eq!(kept, render(stack, eff, settings, caps).expect("render"));
            assert_ne!(
                kept, fresh,
                "the input changed nothing: the check proves nothing"
            );
        };
        let mut bigger = stack.clone();
        bigger.spec.size = LokiStackSize::Small;
        again(&bigger, &effective(&bigger.spec), &settings, &caps);
        let mut one_at_a_time = eff.clone();
        one_at_a_time.ingester_disruptions += 1;
        again(&stack, &one_at_a_time, &settings, &caps);
        let other_image = Settings {
            loki_image: "example.org/loki:other".into(),
            ..settings.clone()
        };
        again(&stack, &eff, &other_image, &caps);
        let old_server = ServerCapabilities::parse("v1.20.2").expect("caps");
        again(&stack, &eff, &settings, &old_server);
        let mut recreated = stack.clone();
        recreated.metadata.uid = Some("another-uid".into());
        again(&recreated, &eff, &settings, &caps);
        // Back to the first inputs: the first render again, not the last one kept.
        assert_eq!(
            memo.render(&stack, &eff, &settings, &caps).expect("back"),
            fresh
        );
    }

    #[test]
    fn keeps_one_render_per_stack_and_forgets_deleted_stacks() {
        let memo = RenderMemo::default();
        let a = zone_aware("a");
        let mut b = stack("b", stack_spec(LokiStackSize::Demo));
        b.metadata.namespace = Some("other".into());
        for s in [&a, &b] {
            let (eff, settings, caps) = inputs(s);
            memo.render(s, &eff, &settings, &caps).expect("render");
        }
        assert_eq!(memo.len(), 2);
        memo.forget("other", "b");
        assert_eq!(memo.len(), 1);
        memo.retain(&HashSet::new());
        assert!(memo.is_empty());
    }
}
