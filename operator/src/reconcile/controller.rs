//! The LokiStack controller of a term: kube-runtime's `Controller` over the process's
//! shared LokiStack store, driven by the term's triggers only (the stacks' own changes
//! come through the same tap as every other trigger: see `caches/reflectors.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::caches::secrets::SecretReader;
use crate::caches::stacks::{self, StackRef};
use crate::reconcile::{error_policy, reconcile, Context};

/// Changes to one stack within this long are reconciled once.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Stacks reconciled at once. Unbounded, hundreds of new stacks (or every stack at the
/// start of a term) were reconciled together, each with up to `APPLY_IN_FLIGHT` applies:
/// the API server answered 429, and the leader's own Lease renewals were refused with
/// them (at 400 stacks the leader lost its Lease 25 times on the way to Ready, and each
/// new term triggered every stack again). 16 stacks keep at most 128 applies in flight,
/// under the API server's default limit of 200 mutating requests.
const RECONCILE_CONCURRENCY: u16 = 16;

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
    // No stream of its own: the store is filled by the caches, which outlive the term.
    let none = futures::stream::pending::<Result<DynamicObject, watcher::Error>>();
    Controller::for_stream_with(none, store, stacks::resource())
        .with_config(
            controller::Config::default()
                .debounce(DEBOUNCE)
                .concurrency(RECONCILE_CONCURRENCY),
        )
        .reconcile_on(triggers)
        .graceful_shutdown_on(stopping)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await
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
