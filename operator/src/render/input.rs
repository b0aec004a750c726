//! The one input of rendering.

use crate::model::api::LokiStack;
use crate::model::defaults::{effective, EffectiveStack};

/// Everything one stack's objects are rendered from: the stack (its name, namespace, UID
/// and spec) and its spec with every default resolved and everything the plan read into
/// it (the storage Secret's parameters, the ruler's files and settings, the zones of the
/// current stage, what a disrupted zone changes). The plan builds it once per reconcile
/// (`plan/`); the CLI from the spec alone. Nothing changes it after: every
/// rendering function reads it, and only it.
pub struct RenderInput<'a> {
    pub(super) stack: &'a LokiStack,
    pub(super) eff: EffectiveStack,
}

impl<'a> RenderInput<'a> {
    pub fn new(stack: &'a LokiStack, eff: EffectiveStack) -> RenderInput<'a> {
        RenderInput { stack, eff }
    }

    /// Rendered offline from the spec alone: every default, nothing observed.
    pub fn of_spec(stack: &'a LokiStack) -> RenderInput<'a> {
        RenderInput::new(stack, effective(&stack.spec))
    }

    pub fn eff(&self) -> &EffectiveStack {
        &self.eff
    }

    pub fn into_eff(self) -> EffectiveStack {
        self.eff
    }
}
