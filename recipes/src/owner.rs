//! [`Owner`]: who holds a reentrant lock inside this process.

use std::fmt;

/// The holder of a reentrant hold: the current tokio task, or, where there is
/// no task (a `block_on` body, a `#[tokio::main]` or `#[tokio::test]` body),
/// the current thread, which polls such bodies from start to end.
///
/// Futures polled by one task (`tokio::join!`, `select!` branches,
/// `FuturesUnordered`) share one owner: two of them acquiring the same mutex
/// would both count as the same holder. For concurrent holders inside one
/// task, use the guard API ([`InterProcessMutex::lock`]), whose ownership is
/// the guard itself.
///
/// [`InterProcessMutex::lock`]: crate::InterProcessMutex::lock
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A tokio task.
    Task(tokio::task::Id),
    /// A thread outside any tokio task.
    Thread(std::thread::ThreadId),
}

tokio::task_local! {
    /// Set while a task releases holds on behalf of their owner.
    static ACTING_FOR: Owner;
}

impl Owner {
    /// The owner of the code running now.
    pub fn current() -> Owner {
        if let Ok(owner) = ACTING_FOR.try_with(|owner| *owner) {
            return owner;
        }
        match tokio::task::try_id() {
            Some(id) => Owner::Task(id),
            None => Owner::Thread(std::thread::current().id()),
        }
    }

    /// Runs `future` as `owner`: every [`Owner::current`] inside it answers
    /// `owner`. Used by the multi-lock to give back, from a background task,
    /// the holds a cancelled acquire took for its caller.
    pub(crate) async fn act_for<F: std::future::Future>(owner: Owner, future: F) -> F::Output {
        ACTING_FOR.scope(owner, future).await
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Task(id) => write!(f, "task {id}"),
            Owner::Thread(id) => write!(f, "{id:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spawned_tasks_are_distinct_owners_and_the_test_body_is_a_thread() {
        let here = Owner::current();
        assert!(matches!(here, Owner::Thread(_)));
        let a = tokio::spawn(async { Owner::current() });
        let b = tokio::spawn(async { Owner::current() });
        let (a, b) = (a.await.ok(), b.await.ok());
        assert!(matches!(a, Some(Owner::Task(_))));
        assert_ne!(a, b);
        let (x, y) = tokio::join!(async { Owner::current() }, async { Owner::current() });
        assert_eq!(x, y, "join! siblings share an owner");
        // A background task acting for us is us, inside the scope only.
        let acting = tokio::spawn(async move {
            let inside = Owner::act_for(here, async { Owner::current() }).await;
            (inside, Owner::current())
        });
        let (inside, outside) = acting.await.ok().unzip();
        assert_eq!(inside, Some(here));
        assert_ne!(outside, Some(here));
    }
}
