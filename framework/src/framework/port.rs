//! The one narrow interface between the session layer and the lock engine
//! (`lock_internals`).
//!
//! The session layer knows nothing of locks. What the engine needs from it
//! is all here or public on [`Framework`]: the current session and a wait
//! for one ([`Framework::session`]), a call on a session under the retry
//! policy ([`Framework::call_on_session`]), the end of a session
//! ([`Framework::session_gone`]) or of the framework
//! ([`Framework::closed`]), a check that the framework is open, background
//! deletes, and a typed slot for state of the engine's own
//! ([`Framework::extension`]), which the session layer keeps without
//! knowing its type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use dashmap::DashMap;

use super::{CleanupJob, Framework, Inner, Session};
use crate::error::Result;

/// Values of types the session layer does not know, one per type: state and
/// options other layers keep per framework.
#[derive(Default)]
pub(crate) struct Extensions {
    values: DashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("values", &self.values.len())
            .finish()
    }
}

impl Extensions {
    /// The value of type `T`, made with `T::default()` on first use.
    pub(crate) fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let value = self
            .values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        match value.downcast::<T>() {
            Ok(value) => value,
            // Keyed by the type's id: a value is always of its key's type.
            Err(_) => Arc::new(T::default()),
        }
    }
}

impl From<BuilderExtensions> for Extensions {
    fn from(built: BuilderExtensions) -> Self {
        let values = DashMap::new();
        for (id, value) in built.values {
            values.insert(id, Arc::<dyn Any + Send + Sync>::from(value));
        }
        Extensions { values }
    }
}

/// The builder's side of [`Extensions`]: settings of other layers, changed
/// in place until the framework is built.
#[derive(Default)]
pub(crate) struct BuilderExtensions {
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for BuilderExtensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuilderExtensions")
            .field("values", &self.values.len())
            .finish()
    }
}

impl BuilderExtensions {
    /// The setting of type `T`, `T::default()` until changed.
    pub(crate) fn get_mut<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
        let value = self
            .values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        if !value.is::<T>() {
            *value = Box::new(T::default());
        }
        match value.downcast_mut::<T>() {
            Some(value) => value,
            None => unreachable_downcast(),
        }
    }
}

/// A box just replaced by a `T` holds a `T`.
fn unreachable_downcast() -> ! {
    panic!("a builder extension of the wrong type")
}

/// A handle on the session layer that does not keep the framework open
/// (the framework closes when its last [`Framework`] goes): for drop
/// guards and background watches of the engine.
#[derive(Clone, Debug)]
pub(crate) struct SessionPort {
    inner: Arc<Inner>,
}

impl SessionPort {
    /// The current session, if any and not terminated (no waiting).
    pub(crate) fn current_session(&self) -> Option<Session> {
        self.inner.current_session()
    }

    /// Hands a delete to the background cleaner.
    pub(crate) fn schedule_cleanup(&self, job: CleanupJob) {
        self.inner.schedule_cleanup(job);
    }
}

impl Framework {
    /// Refuses new work once the framework is closed (or before it starts).
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed) or
    /// [`Error::NotStarted`](crate::Error::NotStarted).
    pub(crate) fn check_open(&self) -> Result<()> {
        self.inner().check_open()
    }

    /// Counts one piece of background work until the value is dropped (see
    /// [`Framework::wait_for_background_cleanup`]).
    pub(crate) fn background_work(&self) -> BackgroundWork {
        let inner = self.inner();
        inner.pending_cleanups.send_modify(|n| *n += 1);
        BackgroundWork(Arc::downgrade(inner))
    }

    /// This framework's value of type `T`, made with `T::default()` on
    /// first use and the same `Arc` for every later call on any clone of
    /// the framework: per-framework state of a layer above the session
    /// (the lock engine's, a recipe's, a driver of your own), kept here
    /// without the session layer knowing its type.
    ///
    /// One value per type: use a type private to your crate as the key, so
    /// nothing else can reach or replace it. The value lives as long as the
    /// framework; hold `Weak` references in it to things that should not.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// # fn example(framework: &zk_curator::Framework) {
    /// #[derive(Default)]
    /// struct Acquires(AtomicU64);
    ///
    /// framework.extension::<Acquires>().0.fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(framework.clone().extension::<Acquires>().0.load(Ordering::Relaxed), 1);
    /// # }
    /// ```
    pub fn extension<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.inner().extensions.get::<T>()
    }

    /// A handle that does not keep the framework open.
    pub(crate) fn port(&self) -> SessionPort {
        SessionPort {
            inner: self.inner().clone(),
        }
    }
}

/// One piece of background work counted among the pending cleanups (see
/// [`Framework::background_work`]); dropping it gives the count back.
pub(crate) struct BackgroundWork(Weak<Inner>);

impl Drop for BackgroundWork {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner
                .pending_cleanups
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}
