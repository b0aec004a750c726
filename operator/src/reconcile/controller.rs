//! The LokiStack controller of a term: kube-runtime's `Controller` over the process's
//! shared LokiStack store, driven by the term's triggers only (the stacks' own changes
//! come through the same tap as every other trigger: see `caches/reflectors.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::caches::secrets::SecretReader;
use crate::caches::stacks::{self, StackRef};
use crate::reconcile::{error_policy, reconcile, Context, ReconcileError};

/// Changes to one stack within this long are reconciled once.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Stacks reconciled at once. Unbounded, hundreds of new stacks (or every stack at the
/// start of a term) were reconciled together, each with up to `APPLY_IN_FLIGHT` applies:
/// the API server answered 429, and the leader's own Lease renewals were refused with
/// them (at 400 stacks the leader lost its Lease 25 times on the way to Ready, and each
/// new term triggered every stack again). 16 stacks keep at most 128 applies in flight,
/// under the API server's default limit of 200 mutating requests.
///
/// The limit is a FIFO semaphore ([`Lanes`]), not kube-runtime's own `concurrency`:
/// with its slots full, kube's runner parks every stack that falls due in a hash set
/// and takes the first it finds there whenever a slot frees, so under a steady stream
/// of triggers the same stacks are picked again and again while others wait. In a zone
/// outage at 1,000 stacks, 446 stacks got no status write for more than 7 minutes while
/// others got up to 33 (docs/performance.md).
const RECONCILE_CONCURRENCY: usize = 16;

/// Of those, how many may be stacks with a spec not applied yet (new or edited: each
/// applies its children). The others are kept for stacks whose spec is applied, whose
/// reconciles mostly read the caches and write a status: with one queue for both, while
/// 1,000 new stacks took their first turns (6.5 minutes), a running stack's status
/// waited behind all of them (docs/performance.md).
const CHANGES_AT_ONCE: usize = 12;

/// Runs until `stopping` resolves (then lets the reconciles under way finish) or the
/// task is aborted.
pub async fn run(
    ctx: Arc<Context>,
    triggers: UnboundedReceiver<StackRef>,
    stopping: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.caches.stacks.clone();
    let secrets = ctx.caches.secret_reader.clone();
    let triggers = read_secret_first(
        UnboundedReceiverStream::new(triggers),
        store.clone(),
        secrets,
    );
    let lanes = Lanes::new(RECONCILE_CONCURRENCY, CHANGES_AT_ONCE);
    // On shutdown, stacks still waiting for a slot give up at once: only the reconciles
    // under way are let finish.
    let closing = lanes.clone();
    let stopping = async move {
        stopping.await;
        closing.close();
    };
    // No stream of its own: the store is filled by the caches, which outlive the term.
    let none = futures::stream::pending::<Result<DynamicObject, watcher::Error>>();
    // kube's runner starts every stack that is due at once (one run per stack at a
    // time, as always); `in_turn` lets RECONCILE_CONCURRENCY of them run, in `Lanes`.
    Controller::for_stream_with(none, store.clone(), stacks::resource())
        .with_config(controller::Config::default().debounce(DEBOUNCE))
        .reconcile_on(triggers)
        .graceful_shutdown_on(stopping)
        .run(
            move |obj, ctx| in_turn(obj, ctx, lanes.clone(), store.clone()),
            error_policy,
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await
}

/// Waits for its turn in [`Lanes`], then reconciles the stack as the store holds it then
/// (it may have changed while it waited; a stack deleted meanwhile is not reconciled,
/// as kube does for a trigger of a stack not in the store). The reconcile's own state
/// is allocated only once it runs, so a long queue of waiting stacks stays small.
async fn in_turn(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
    lanes: Lanes,
    store: Store<DynamicObject>,
) -> Result<Action, ReconcileError> {
    let waiting = ctx.metrics.waiting(super::CONTROLLER);
    let Some(_turn) = lanes.turn(stacks::spec_applied(&obj)).await else {
        // Closed: the term is ending.
        return Ok(Action::await_change());
    };
    drop(waiting);
    let _running = ctx.metrics.worker(super::CONTROLLER);
    let Some(now) = store.get(&ObjectRef::from_obj_with(obj.as_ref(), stacks::resource())) else {
        return Ok(Action::await_change());
    };
    Box::pin(reconcile(now, ctx)).await
}

/// Turns to reconcile: `slots` in all, first come, first served (tokio's semaphores
/// are fair), of which at most `changes` for stacks whose spec is not applied yet. Such
/// a stack takes a `changes` permit before it queues for a slot, so a stack whose spec
/// is applied waits behind at most `changes` of them, however many new stacks wait.
#[derive(Clone)]
struct Lanes {
    slots: Arc<Semaphore>,
    changes: Arc<Semaphore>,
}

/// A turn to reconcile; dropping it lets the next stack in.
struct Turn {
    _slot: OwnedSemaphorePermit,
    _change: Option<OwnedSemaphorePermit>,
}

impl Lanes {
    fn new(slots: usize, changes: usize) -> Self {
        Lanes {
            slots: Arc::new(Semaphore::new(slots)),
            changes: Arc::new(Semaphore::new(changes.min(slots))),
        }
    }

    /// `None` once closed.
    async fn turn(&self, spec_applied: bool) -> Option<Turn> {
        let change = if spec_applied {
            None
        } else {
            Some(self.changes.clone().acquire_owned().await.ok()?)
        };
        let slot = self.slots.clone().acquire_owned().await.ok()?;
        Some(Turn {
            _slot: slot,
            _change: change,
        })
    }

    fn close(&self) {
        self.changes.close();
        self.slots.close();
    }
}

/// Passes each trigger on once the storage Secret its stack names has been read, so no
/// reconcile sees a Secret as missing only because it was not read yet.
fn read_secret_first(
    triggers: impl Stream<Item = StackRef> + Send + 'static,
    stacks: Store<DynamicObject>,
    secrets: SecretReader,
) -> impl Stream<Item = StackRef> + Send + 'static {
    triggers.then(move |r| {
        let (stacks, secrets) = (stacks.clone(), secrets.clone());
        async move {
            if let Some(stack) = stacks.get(&r) {
                secrets.ensure_for(&stack).await;
            }
            r
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    /// 40 new stacks fall due, then one running stack: it gets its turn as soon as the
    /// first reconciles end, not after the 40.
    #[tokio::test(start_paused = true)]
    async fn a_running_stack_waits_behind_a_few_new_ones_not_all() {
        let lanes = Lanes::new(4, 3);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let run = |name: String, applied: bool| {
            let (lanes, order) = (lanes.clone(), order.clone());
            tokio::spawn(async move {
                let _turn = lanes.turn(applied).await.expect("open");
                order.lock().expect("order").push(name);
                tokio::time::sleep(Duration::from_secs(10)).await;
            })
        };
        for i in 0..40 {
            tasks.push(run(format!("new-{i}"), false));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        tasks.push(run("running".into(), true));
        for t in tasks {
            t.await.expect("task");
        }
        let order = order.lock().expect("order").clone();
        let at = order.iter().position(|n| n == "running").expect("ran");
        // 3 new stacks hold the change permits and 1 slot is free: it runs at once.
        assert_eq!(at, 3, "{order:?}");
        // The new stacks keep their own order.
        let news: Vec<_> = order.iter().filter(|n| *n != "running").cloned().collect();
        let expected: Vec<_> = (0..40).map(|i| format!("new-{i}")).collect();
        assert_eq!(news, expected);
    }

    /// Closed lanes give no turn, to stacks of either kind.
    #[tokio::test]
    async fn closed_lanes_give_no_turn() {
        let lanes = Lanes::new(2, 1);
        lanes.close();
        assert!(lanes.turn(true).await.is_none());
        assert!(lanes.turn(false).await.is_none());
    }
}
