//! A second tokio runtime, on a thread of its own, that a test can freeze:
//! the tasks it runs (a waiter, a hold's turn watcher) stay exactly where
//! they are while the test changes the world around them on its own
//! runtime, and move again when the test says so. This is how a test puts a
//! loss in a window on purpose (between a pass and its pickup, or before a
//! turn watcher has noticed), instead of hoping a race lands there.
//!
//! The framework must be built and started on the test's own runtime, so
//! that its session, its client's connection and its background tasks keep
//! running while the side is frozen.

use std::future::Future;
use std::sync::mpsc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A current-thread runtime on its own thread (see the module docs).
pub struct SideRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// While alive, the side runtime's thread is blocked: none of its tasks is
/// polled. Dropping it lets them run again.
#[must_use = "the side runtime thaws when this is dropped"]
pub struct Frozen {
    _thaw: mpsc::Sender<()>,
}

impl SideRuntime {
    /// Starts the runtime and its thread.
    pub fn start() -> SideRuntime {
        let (handle_tx, handle_rx) = mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("side-runtime".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                handle_tx.send(runtime.handle().clone()).unwrap();
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .unwrap();
        SideRuntime {
            handle: handle_rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Runs `task` on the side runtime.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    /// Blocks the side runtime's thread; returns once it is blocked (so a
    /// task woken from now on waits until the [`Frozen`] is dropped).
    pub async fn freeze(&self) -> Frozen {
        let (blocked_tx, blocked) = oneshot::channel();
        let (thaw, thawed) = mpsc::channel::<()>();
        self.handle.spawn(async move {
            let _ = blocked_tx.send(());
            // Returns when the `Frozen` is dropped (the channel disconnects).
            let _ = thawed.recv();
        });
        blocked.await.expect("the side runtime never blocked");
        Frozen { _thaw: thaw }
    }

    /// Blocks the calling thread until every task woken on the side runtime
    /// before this call has been polled (the side runs its tasks woken from
    /// other threads in the order they were woken): for a test whose own
    /// runtime must stay frozen meanwhile, as a paused process would be.
    pub fn settle_blocking(&self) {
        let (done_tx, done) = mpsc::channel();
        self.handle.spawn(async move {
            let _ = done_tx.send(());
        });
        done.recv_timeout(super::PATIENCE)
            .expect("the side runtime did not get round to its tasks");
    }
}

impl Drop for SideRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
