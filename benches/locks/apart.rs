//! A runtime of its own (one worker thread) for a party of a run that
//! would be another process in a deployment: its tasks and its connection
//! are not scheduled behind this runtime's, as another process's are not.
//! The cohort curve's outsider and the observed workload's detached
//! observer run on one.

use std::future::Future;

use super::limits::BoxError;

/// A one-worker runtime, shut down (in the background: a runtime may not
/// block inside another) when dropped.
pub(crate) struct Apart {
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl Apart {
    /// A runtime whose thread is named `name`.
    pub(crate) fn new(name: &str) -> Result<Apart, BoxError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        Ok(Apart {
            runtime: Some(runtime),
            handle,
        })
    }

    /// Runs `work` on this runtime, and waits for it from the caller's.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, BoxError> {
        Ok(self.handle.spawn(work).await?)
    }

    /// Its handle, to spawn a task that runs on while the caller goes on.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
