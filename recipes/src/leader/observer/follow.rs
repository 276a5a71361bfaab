//! The follower: the state machine behind [`LeaderObserver::changes`] (one
//! watch on the leader's node, one on the election path's data, a listing
//! again only when the leader's node goes), and the stream each caller
//! polls.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The state of one stream of [`LeaderObserver::changes`].
pub(super) enum Follow {
    /// Not polled yet: joins the follower at the first poll (which may
    /// start it, on the runtime polling).
    Start(LeaderObserver),
    /// Following.
    Joined {
        feed: Arc<Feed>,
        seen: watch::Receiver<Option<Observation>>,
        /// The last observation this stream handed out.
        last: Option<Observation>,
    },
}

impl Follow {
    /// The next observation that differs from the last one this stream
    /// handed out, and the state after it; `None` once the framework is
    /// closed.
    pub(super) async fn next(self) -> Option<(Observation, Follow)> {
        let (feed, mut seen, mut last) = match self {
            Follow::Start(observer) => {
                if observer.framework.is_closed() {
                    return None;
                }
                let feed = observer.feed();
                let mut seen = feed.seen.clone();
                // The state already read counts as new to this stream.
                seen.mark_changed();
                (feed, seen, None)
            }
            Follow::Joined { feed, seen, last } => (feed, seen, last),
        };
        loop {
            // Fails once the follower has ended: the framework is closed.
            seen.changed().await.ok()?;
            let now = seen.borrow_and_update().clone();
            if let Some(now) = now.filter(|now| last.as_ref() != Some(now)) {
                last = Some(now.clone());
                return Some((now, Follow::Joined { feed, seen, last }));
            }
        }
    }
}

/// The pause after a failed look: doubling from 100 ms to 5 s.
pub(super) const PAUSES: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// The follower of an election: what [`Feed`]'s task runs.
pub(super) struct Observing {
    observer: LeaderObserver,
    states: StateWatcher,
    /// The last observation handed out.
    last: Option<Observation>,
    /// The proclaimed value last read, with the watch on the election
    /// path's data that says when it changes: read again only then (or on
    /// another session), so a change of leader costs no extra read.
    value: Option<ValueWatch>,
    /// The last leader's value were it to proclaim none: its node's data.
    fallback: Vec<u8>,
    /// What the next wait is for.
    pending: Pending,
    /// Whether to look again before waiting.
    needs_look: bool,
    pauses: Pauses,
    /// The generation of the session whose server was last synced with
    /// the ensemble's leader: a new session is synced before its first
    /// look (see [`Observing::look`]).
    synced: Option<u64>,
    done: bool,
}

/// What a wait waits for, besides the connection state and the close.
pub(super) enum Pending {
    /// The watch the last look left: on the leader's node, or (no leader)
    /// on the election path's children or its creation.
    Watch(Watch),
    /// A pause after a failed look.
    Pause(Duration),
    /// A connection.
    Reconnection,
}

/// The election path's data as last read, and its watch.
pub(super) struct ValueWatch {
    /// The generation of the session the watch lives on.
    generation: u64,
    proclaimed: Option<Proclaimed>,
    /// Completes when the watch fires (the data changed, the path was
    /// created or deleted) or its session ends.
    fired: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// Waits for the value watch to fire, and forgets it then; never completes
/// without one.
pub(super) async fn value_changed(value: &mut Option<ValueWatch>) {
    match value {
        Some(watch) => (&mut watch.fired).await,
        None => std::future::pending().await,
    }
    tracing::debug!("the value watch fired");
    *value = None;
}

/// A watch left by a look, and the session it lives on (by generation
/// only: a stream nobody polls must not keep a session open after the
/// framework's close, so the session is held for each request alone).
pub(super) struct Watch {
    generation: u64,
    /// Completes when that session is no longer the framework's.
    gone: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Completes when the watch fires: kept across waits woken by a new
    /// value only (so a new value does not cost the leader's watch).
    changed: Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>,
}

impl Watch {
    fn new(framework: &Framework, session: &Session, watcher: zk::OneshotWatcher) -> Self {
        Watch {
            generation: session.generation(),
            gone: Box::pin(framework.session_gone(session)),
            changed: Box::pin(watcher.changed()),
        }
    }
}

/// What one look found.
pub(super) enum Look {
    /// Who leads, with the watch that reports the next change (boxed: the
    /// other variants are small).
    Seen(Box<(Observation, Watch)>),
    /// Not connected: nothing can be known now.
    Disconnected,
    /// The look failed for another reason; try again after a pause.
    Failed(Error),
    /// The framework is closed.
    Closed,
}

/// What woke a wait.
pub(super) enum Wake {
    /// Something may have changed: look again.
    Look,
    /// The election path's data changed (a new value, perhaps): read it
    /// again; the leader's watch still stands.
    Value,
    /// The connection is down.
    Disconnected,
    /// The framework is closed.
    Closed,
}

pub(super) fn connected(state: Option<ConnectionState>) -> bool {
    state.is_some_and(ConnectionState::is_connected)
}

impl Observing {
    /// A follower of `observer`'s election that has seen nothing yet: it
    /// looks first, once connected.
    pub(super) fn new(observer: LeaderObserver) -> Self {
        Observing {
            states: observer.framework.state_watcher(),
            observer,
            last: None,
            value: None,
            fallback: Vec::new(),
            pending: Pending::Reconnection,
            needs_look: true,
            pauses: PAUSES.start(),
            synced: None,
            done: false,
        }
    }

    /// The next observation that differs from the last one handed out;
    /// `None` once the framework is closed.
    pub(super) async fn next(&mut self) -> Option<Observation> {
        while !self.done {
            if self.needs_look {
                self.needs_look = false;
                let seen = match self.look().await {
                    Look::Seen(seen) => {
                        let (seen, watch) = *seen;
                        self.pauses.reset();
                        self.pending = Pending::Watch(watch);
                        seen
                    }
                    Look::Disconnected => {
                        self.pending = Pending::Reconnection;
                        Observation::Unknown
                    }
                    Look::Failed(err) => {
                        if err.is_transient() {
                            tracing::debug!(%err, "cannot read the election now; trying again");
                        } else {
                            tracing::warn!(%err, "cannot read the election; trying again");
                        }
                        self.pending = Pending::Pause(self.pauses.next_pause());
                        Observation::Unknown
                    }
                    Look::Closed => {
                        self.done = true;
                        continue;
                    }
                };
                if let Some(seen) = self.hand_out(seen) {
                    return Some(seen);
                }
            }
            match self.wait().await {
                Wake::Look => self.needs_look = true,
                Wake::Value => match self.revalue().await {
                    Some(seen) => {
                        if let Some(seen) = self.hand_out(seen) {
                            return Some(seen);
                        }
                    }
                    None => self.needs_look = true,
                },
                Wake::Disconnected => {
                    self.pending = Pending::Reconnection;
                    if let Some(seen) = self.hand_out(Observation::Unknown) {
                        return Some(seen);
                    }
                }
                Wake::Closed => self.done = true,
            }
        }
        tracing::debug!("the framework is closed; the observation ends");
        None
    }

    /// `seen`, recorded as the last observation, if it differs from it.
    fn hand_out(&mut self, seen: Observation) -> Option<Observation> {
        if self.last.as_ref() == Some(&seen) {
            return None;
        }
        let span = tracing::info_span!("leader.observed", path = %self.observer.path);
        let _entered = span.enter();
        match &seen {
            Observation::Leader(leader) => tracing::info!(
                node = %leader.node_path,
                token = %leader.token,
                id = %leader.id,
                "a leader"
            ),
            Observation::NoLeader => tracing::info!("no leader: no participants"),
            Observation::Unknown => tracing::info!("the leader is unknown"),
        }
        self.last = Some(seen.clone());
        Some(seen)
    }

    /// Lists the election and reads its first node with a watch (or, with
    /// no participants, watches for the first to come), on the current
    /// session.
    async fn look(&mut self) -> Look {
        // A handle of its own (cheap): the look also borrows `self` mutably.
        let framework = &self.observer.framework.clone();
        if framework.is_closed() {
            return Look::Closed;
        }
        // Marked seen: a later change wakes the next wait.
        if !connected(self.states.get_and_update()) {
            return Look::Disconnected;
        }
        let Some(session) = framework.current_session() else {
            return Look::Disconnected;
        };
        let failed = |err: Error| match err {
            Error::Closed => Look::Closed,
            err => Look::Failed(err),
        };
        let path = self.observer.path.to_string();
        // A new session may be on a server that is behind what the last
        // one showed (a follower that lags, a local session made there):
        // its server catches up with the ensemble's leader before the
        // first look, so nothing older than a report already made is
        // reported. Once per session: ZooKeeper keeps a session's own
        // reads in order, on whichever server it reconnects to.
        if self.synced != Some(session.generation()) {
            if let Err(err) = crate::fresh::sync_server(framework, &session, &path).await {
                return failed(err);
            }
            self.synced = Some(session.generation());
        }
        loop {
            let children = match self.observer.list(Some(&session)).await {
                Ok(children) => children,
                Err(err) => return failed(err),
            };
            let Some((recipe, first)) = self.observer.first_of(&children) else {
                // Nobody leads: any newcomer will, so the children are
                // watched (or the path's creation, if it is not there).
                let leads = |children: &[String]| self.observer.first_of(children).is_some();
                match watch_for_participants(framework, &session, &path, leads).await {
                    Ok(Some(watcher)) => {
                        return Look::Seen(Box::new((
                            Observation::NoLeader,
                            Watch::new(framework, &session, watcher),
                        )))
                    }
                    // Somebody came meanwhile.
                    Ok(None) => continue,
                    Err(err) => return failed(err),
                }
            };
            let node = join(&path, &first);
            let read = framework
                .call_on_session(&session, |client| {
                    let node = node.clone();
                    async move { client.get_and_watch_data(&node).await }
                })
                .await;
            match read {
                Ok((data, stat, watcher)) => {
                    let mut watch = Watch::new(framework, &session, watcher);
                    let proclaimed = match self.proclaimed_on(&session).await {
                        Ok(proclaimed) => proclaimed,
                        Err(err) => return failed(err),
                    };
                    // The leader's node changed or went before the value
                    // was read (its notification precedes that reply): what
                    // was read of it is out of date, so look again.
                    if (&mut watch.changed).now_or_never().is_some() {
                        continue;
                    }
                    let asked = data == REVOKE_MESSAGE;
                    let fallback = data.clone();
                    let mut leader =
                        ObservedLeader::from_node(node, data, &stat, recipe, proclaimed.as_ref());
                    // A leader asked to step down has `__REVOKE__` in its
                    // node until the node goes: it keeps the id it had.
                    if let (true, Some(Observation::Leader(last))) = (asked, &self.last) {
                        if last.same_term(&leader) {
                            leader.id.clone_from(&last.id);
                            leader.identity.clone_from(&last.identity);
                            if !leader.proclaimed {
                                leader.value.clone_from(&last.value);
                            }
                        }
                    }
                    if !asked {
                        self.fallback = fallback;
                    }
                    return Look::Seen(Box::new((Observation::Leader(leader), watch)));
                }
                // It went between the listing and the read: list again.
                Err(Error::NoNode { .. }) => continue,
                Err(err) => return failed(err),
            }
        }
    }

    /// The last leader reported, with the value the election path's data
    /// holds now (read again, with a watch), its own watch still standing:
    /// `None` when there is no such leader or the read fails (a full look
    /// follows then).
    async fn revalue(&mut self) -> Option<Observation> {
        let Pending::Watch(watch) = &self.pending else {
            return None;
        };
        if !matches!(self.last, Some(Observation::Leader(_))) {
            return None;
        }
        // The session the watch lives on, if it is still the framework's.
        let session = self
            .observer
            .framework
            .current_session()
            .filter(|session| session.generation() == watch.generation)?;
        let proclaimed = match self.proclaimed_on(&session).await {
            Ok(proclaimed) => proclaimed,
            Err(err) => {
                tracing::debug!(%err, "cannot read the value; looking again");
                return None;
            }
        };
        // The server sends a watch's notification before the reply to any
        // read it handles later: if the leader's node went before this
        // read, its watch has fired by now, and the leader is not reported
        // again (a full look follows).
        if let Pending::Watch(watch) = &mut self.pending {
            if (&mut watch.changed).now_or_never().is_some() {
                tracing::debug!("the leader's watch fired meanwhile; looking again");
                return None;
            }
        }
        let Some(Observation::Leader(last)) = &self.last else {
            return None;
        };
        let mut leader = last.clone();
        let name = zk_curator_framework::path::split(&leader.node_path).1;
        match Proclaimed::of(proclaimed.as_ref(), name) {
            Some((pass, value)) => {
                leader.value = value;
                leader.proclaimed = true;
                leader.token = FencingToken::passed(leader.token.get(), pass);
            }
            None => {
                leader.value.clone_from(&self.fallback);
                leader.proclaimed = false;
                leader.token = FencingToken::new(leader.token.get());
            }
        }
        Some(Observation::Leader(leader))
    }

    /// The value proclaimed in the election path's data, from the last read
    /// if its watch (on `session`) has not fired since, else read again
    /// with a watch.
    async fn proclaimed_on(&mut self, session: &Session) -> Result<Option<Proclaimed>> {
        if let Some(watch) = &mut self.value {
            let fired = (&mut watch.fired).now_or_never().is_some();
            if !fired && watch.generation == session.generation() {
                return Ok(watch.proclaimed.clone());
            }
            self.value = None;
        }
        let framework = &self.observer.framework;
        let path = &*self.observer.path;
        for _ in 0..3 {
            let read = framework
                .call_on_session(session, |client| async move {
                    client.get_and_watch_data(path).await
                })
                .await;
            let (proclaimed, watcher) = match read {
                Ok((data, _, watcher)) => (Proclaimed::decode(&data), watcher),
                Err(Error::NoNode { .. }) => {
                    // Gone meanwhile: watched for its creation.
                    let (stat, watcher) = framework
                        .call_on_session(session, |client| async move {
                            client.check_and_watch_stat(path).await
                        })
                        .await?;
                    if stat.is_some() {
                        continue;
                    }
                    (None, watcher)
                }
                Err(err) => return Err(err),
            };
            self.value = Some(ValueWatch {
                generation: session.generation(),
                proclaimed: proclaimed.clone(),
                fired: Box::pin(watcher.changed().map(|_| ())),
            });
            return Ok(proclaimed);
        }
        Err(Error::ConnectionLoss)
    }

    /// Waits for what the last look left to wait for, a change of the
    /// connection state, or the framework's close.
    async fn wait(&mut self) -> Wake {
        let closed = self.observer.framework.closed();
        if let Pending::Watch(watch) = &mut self.pending {
            let wake = tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.changed() => match state {
                    Err(_) => Wake::Closed,
                    Ok(state) if connected(state) => Wake::Look,
                    Ok(_) => Wake::Disconnected,
                },
                event = &mut watch.changed => {
                    tracing::debug!(event = ?event.event_type, path = %event.path, "the watch fired");
                    Wake::Look
                }
                () = value_changed(&mut self.value) => Wake::Value,
                () = &mut watch.gone => Wake::Look,
            };
            if !matches!(wake, Wake::Value) {
                self.pending = Pending::Reconnection;
            }
            return wake;
        }
        let pending = std::mem::replace(&mut self.pending, Pending::Reconnection);
        match pending {
            // Handled above.
            Pending::Watch(_) => Wake::Look,
            Pending::Pause(pause) => tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.changed() => match state {
                    Err(_) => Wake::Closed,
                    Ok(state) if connected(state) => Wake::Look,
                    Ok(_) => Wake::Disconnected,
                },
                () = tokio::time::sleep(pause) => Wake::Look,
            },
            Pending::Reconnection => tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.wait_for(connected) => match state {
                    Err(_) => Wake::Closed,
                    Ok(_) => Wake::Look,
                },
            },
        }
    }
}

/// Watches the election at `path`, which had no participants, for its
/// first: its children, or its creation if it does not exist. `None` if
/// one is already there (`leads` says so of the children) or the path was
/// just created: nothing is left watching then.
pub(super) async fn watch_for_participants(
    framework: &Framework,
    session: &Session,
    path: &str,
    leads: impl Fn(&[String]) -> bool,
) -> Result<Option<zk::OneshotWatcher>> {
    let listed = framework
        .call_on_session(session, |client| async move {
            client.list_and_watch_children(path).await
        })
        .await;
    match listed {
        Ok((children, watcher)) => Ok((!leads(&children)).then_some(watcher)),
        Err(Error::NoNode { .. }) => {
            let (stat, watcher) = framework
                .call_on_session(session, |client| async move {
                    client.check_and_watch_stat(path).await
                })
                .await?;
            Ok(stat.is_none().then_some(watcher))
        }
        Err(err) => Err(err),
    }
}
