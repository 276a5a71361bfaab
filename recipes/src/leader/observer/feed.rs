//! The sharing of followers: one per framework and election observed, kept
//! as the framework's extension and started by the first stream that joins;
//! every later stream of that election starts from its state.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The followers of a framework's streams, one per election observed
/// (kept as the framework's [extension](Framework::extension)).
#[derive(Default)]
pub(super) struct Feeds(pub(super) Mutex<HashMap<FeedKey, Weak<Feed>>>);

/// An election observed: its path, and the recipe asked for (if any).
pub(super) type FeedKey = (Arc<str>, Option<ElectionRecipe>);

/// One follower: a task that follows an election and publishes each
/// observation, shared by the streams that hold it; the last one to drop
/// it stops the task.
pub(super) struct Feed {
    /// The last observation (`None` until the first look).
    pub(super) seen: watch::Receiver<Option<Observation>>,
    pub(super) task: tokio::task::AbortHandle,
}

impl Feed {
    pub(super) fn start(observer: LeaderObserver) -> Self {
        let (publish, seen) = watch::channel(None);
        let span = tracing::debug_span!("leader.observe", path = %observer.path);
        let mut observing = Observing::new(observer);
        let task = tokio::spawn(
            async move {
                while let Some(seen) = observing.next().await {
                    publish.send_replace(Some(seen));
                }
                // The framework is closed: the streams end with `publish`.
            }
            .instrument(span),
        );
        Feed {
            seen,
            task: task.abort_handle(),
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}
