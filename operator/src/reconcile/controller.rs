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
use tokio::sync::Semaphore;
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
/// The limit is a FIFO semaphore ([`in_turn`]), not kube-runtime's own `concurrency`:
/// with its slots full, kube's runner parks every stack that falls due in a hash set
/// and takes the first it finds there whenever a slot frees, so under a steady stream
/// of triggers the same stacks are picked again and again while others wait. In a zone
/// outage at 1,000 stacks, 446 stacks got no status write for more than 7 minutes while
/// others got up to 33 (docs/performance.md).
const RECONCILE_CONCURRENCY: usize = 16;

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
    let slots = Arc::new(Semaphore::new(RECONCILE_CONCURRENCY));
    // On shutdown, stacks still waiting for a slot give up at once: only the reconciles
    // under way are let finish.
    let closing = slots.clone();
    let stopping = async move {
        stopping.await;
        closing.close();
    };
    // No stream of its own: the store is filled by the caches, which outlive the term.
    let none = futures::stream::pending::<Result<DynamicObject, watcher::Error>>();
    // kube's runner starts every stack that is due at once (one run per stack at a
    // time, as always); `in_turn` lets RECONCILE_CONCURRENCY of them run, oldest first.
    Controller::for_stream_with(none, store.clone(), stacks::resource())
        .with_config(controller::Config::default().debounce(DEBOUNCE))
        .reconcile_on(triggers)
        .graceful_shutdown_on(stopping)
        .run(
            move |obj, ctx| in_turn(obj, ctx, slots.clone(), store.clone()),
            error_policy,
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await
}

/// Waits for one of the [`RECONCILE_CONCURRENCY`] slots, in the order the stacks fell
/// due (tokio's semaphore is first come, first served), then reconciles the stack as
/// the store holds it then (it may have changed while it waited; a stack deleted
/// meanwhile is not reconciled, as kube does for a trigger of a stack not in the store).
/// The reconcile's own state is allocated only once it runs, so a long queue of waiting
/// stacks stays small.
async fn in_turn(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
    slots: Arc<Semaphore>,
    store: Store<DynamicObject>,
) -> Result<Action, ReconcileError> {
    let Ok(_slot) = slots.acquire().await else {
        // Closed: the term is ending.
        return Ok(Action::await_change());
    };
    let Some(now) = store.get(&ObjectRef::from_obj_with(obj.as_ref(), stacks::resource())) else {
        return Ok(Action::await_change());
    };
    Box::pin(reconcile(now, ctx)).await
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
