//! The session supervisor: builds sessions, watches them, declares them lost
//! and replaces them.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client as zk;

use super::builder::check_transports;
use super::{Config, Inner, Session};
use crate::connect_failure::Refusals;
use crate::ensemble;
use crate::error::{Error, Result};
use crate::retry::{sleep_until_opt, Backoff};
use crate::state::StateEvent;

/// The pause between failed attempts to build a session: 100 ms, doubling
/// up to 2 s, and back to 100 ms once a session is built. Short, because
/// nothing of the framework works without a session; capped low, because a
/// server coming back should be found within a couple of seconds.
const RECONNECT_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

pub(super) async fn run(inner: Arc<Inner>) {
    let mut closed = inner.closed_tx.subscribe();
    let mut generation = 0u64;
    let mut pauses = RECONNECT_BACKOFF.start();
    loop {
        if *closed.borrow() {
            return;
        }
        let result = tokio::select! {
            result = connect(&inner) => result,
            _ = closed.wait_for(|c| *c) => return,
        };
        let client = match result {
            Ok(client) => client,
            Err(err) => {
                let delay = pauses.next_pause();
                tracing::warn!(%err, ?delay, "could not build a ZooKeeper session; retrying");
                let mut closed = inner.closed_tx.subscribe();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = closed.wait_for(|c| *c) => return,
                }
                continue;
            }
        };
        pauses.reset();
        inner.clear_connect_failure();
        generation += 1;
        let session = Session { client, generation };
        let span =
            tracing::info_span!("session", id = %format_args!("{:#x}", session.id()), generation);
        span.in_scope(
            || tracing::info!(timeout = ?session.client.session_timeout(), "session established"),
        );
        let first_state = session.client.state();
        if !inner.publish_session(session.clone()) {
            // Closed while connecting: dropping the client ends the session.
            tracing::debug!("framework closed while connecting; new session dropped");
            return;
        }
        if generation == 1 {
            inner.change_state(StateEvent::Session(first_state));
        } else {
            inner.change_state(StateEvent::NewSession);
        }
        let keep_going = watch_session(&inner, &session).instrument(span).await;
        retire(&inner, &session);
        if !keep_going {
            return;
        }
    }
}

/// Follows one session until it is lost (`true`) or the framework closes
/// (`false`).
/// The session is over (lost, or the framework closed): nobody may start new
/// work on it. Done before `Lost` is announced, so that a listener hearing
/// `Lost` never finds the old session still current.
fn retire(inner: &Inner, session: &Session) {
    inner.session_tx.send_if_modified(|current| {
        if current.as_ref().map(|s| s.generation) == Some(session.generation) {
            *current = None;
            true
        } else {
            false
        }
    });
}

async fn watch_session(inner: &Inner, session: &Session) -> bool {
    let mut closed = inner.closed_tx.subscribe();
    let mut states = session.client.state_watcher();
    let session_timeout = session.client.session_timeout();
    let mut suspended_since: Option<Instant> = None;
    loop {
        let lost_at = suspended_since.map(|since| since + session_timeout);
        tokio::select! {
            state = states.changed() => {
                if state.is_terminated() {
                    retire(inner, session);
                }
                inner.change_state(StateEvent::Session(state));
                match state {
                    zk::SessionState::Disconnected => {
                        suspended_since.get_or_insert_with(Instant::now);
                    }
                    s if s.is_terminated() => {
                        tracing::warn!(state = ?s, "session lost");
                        return true;
                    }
                    _ => {
                        suspended_since = None;
                        inner.clear_connect_failure();
                    }
                }
            }
            _ = sleep_until_opt(lost_at) => {
                tracing::warn!(?session_timeout, "suspended for the whole session timeout; declaring the session lost");
                retire(inner, session);
                inner.change_state(StateEvent::SuspendedTooLong);
                return true;
            }
            _ = closed.wait_for(|c| *c) => return false,
        }
    }
}

/// Builds one session (and the namespace node) within the connection timeout,
/// on the hosts the ensemble provider gives now.
async fn connect(inner: &Inner) -> Result<zk::Client> {
    let config = &inner.config;
    let (hosts, transports) = ensemble::check(&config.ensemble.connect_string()?)?;
    let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
    for (scheme, auth) in &config.auth {
        connector = connector.with_auth(scheme, auth);
    }
    let failures = inner.connect_failure.clone();
    let refusals = Arc::new(Refusals::new(hosts.split(',').count()));
    connector = connector.with_connect_failure_observer(Arc::new(move |endpoint, err| {
        Inner::note_connect_failure(&failures, &refusals, endpoint, err)
    }));
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    if let Some(sasl) = &config.sasl {
        connector = connector.with_sasl(sasl.options());
    }
    #[cfg(feature = "tls")]
    let secure = match &config.tls {
        Some(tls) => {
            crate::tls::check_tls_hosts(&hosts, &transports, tls.config().uses_tls_by_default())?;
            tls.reload();
            connector = connector.with_tls(tls.options());
            tls.config().uses_tls_by_default()
        }
        None => false,
    };
    check_transports(&hosts, &transports, has_tls(config))?;
    let timeout = config.connection_timeout;
    let connect = async {
        #[cfg(feature = "tls")]
        let root = if secure {
            connector.secure_connect(&hosts).await?
        } else {
            connector.connect(&hosts).await?
        };
        #[cfg(not(feature = "tls"))]
        let root = connector.connect(&hosts).await?;
        let Some(namespace) = &config.namespace else {
            return Ok(root);
        };
        let acl = config.acl_provider.acl_for_path(namespace);
        let acl = zk::Acls::new(&acl);
        match root
            .mkdir(namespace, &zk::CreateMode::Persistent.with_acls(acl))
            .await
        {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            // ZooKeeper checks CREATE on the parent before it looks for the
            // node: a session may use a namespace someone else made under a
            // parent it cannot write to (`exists` needs no permission).
            Err(zk::Error::NoAuth) if root.check_stat(namespace).await?.is_some() => {}
            Err(err) => return Err(err),
        }
        root.chroot(namespace.as_str())
            .map_err(|_| zk::Error::BadArguments(&"invalid namespace"))
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(Error::from_zk(err, zk::SessionState::Disconnected)),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

fn has_tls(config: &Config) -> bool {
    #[cfg(feature = "tls")]
    return config.tls.is_some();
    #[cfg(not(feature = "tls"))]
    {
        let _ = config;
        false
    }
}
