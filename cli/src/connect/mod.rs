//! The framework's life in a command: built from checked [`Settings`],
//! started (its first session waited for, at most the connection timeout),
//! and closed without waiting long for a server that may be gone.
//!
//! The command line and the environment are read and checked in
//! [`settings`], before anything here runs. [`build`] sends nothing either:
//! what the framework itself refuses (a namespace, the contents of a TLS
//! file) and what a command checks against the built framework are still
//! usage errors, found before [`start`] or [`connect`] reach the network.

mod settings;

use std::time::Duration;

use zk_curator::{ConnectionState, Framework};

use crate::duration::show_duration;
use crate::exit::{shown, Failure, UNAVAILABLE};
use settings::Sasl;
pub(crate) use settings::{without_credentials, ConnectArgs, Settings};

/// How long closing may wait for the server to confirm the session's end
/// while connected (it normally takes a round trip).
const CLOSE_LIMIT: Duration = Duration::from_secs(2);
/// How long closing may wait while not connected: only long enough to start
/// it (nobody is there to confirm; the session ends on the server by timing
/// out).
const CLOSE_DISCONNECTED_LIMIT: Duration = Duration::from_millis(100);

/// Starts a framework with `settings` and waits for its first session, at
/// most the connection timeout.
///
/// # Errors
/// A usage failure when a setting is refused by the framework (e.g. the
/// namespace); [`UNAVAILABLE`] when no session could be had in time.
pub(crate) async fn connect(
    settings: &Settings,
    label: Option<&str>,
) -> Result<Framework, Failure> {
    let framework = build(settings, label)?;
    start(&framework, settings).await?;
    Ok(framework)
}

/// Builds a framework with `settings`, without starting it: nothing is
/// sent yet, so what is checked against it (a recipe's path, its node
/// data) is still a usage error.
///
/// # Errors
/// A usage failure when a setting is refused by the framework (e.g. the
/// namespace).
pub(crate) fn build(settings: &Settings, label: Option<&str>) -> Result<Framework, Failure> {
    let mut builder = Framework::builder()
        .connect_string(settings.hosts.as_str())
        .session_timeout(settings.session_timeout)
        .connection_timeout(settings.connection_timeout);
    // Lock nodes carry host, pid and this label (the framework's holder
    // identity), which `locks` shows.
    if let Some(label) = label {
        builder = builder.identity_label(label);
    }
    if let Some(namespace) = &settings.namespace {
        builder = builder.namespace(namespace.as_str());
    }
    if let Some((user, password)) = &settings.auth {
        builder = builder.digest_auth(user, password);
    }
    if let Some(tls) = &settings.tls {
        builder = builder.tls(tls.clone());
    }
    if let Some(acl) = &settings.node_acl {
        builder = acl.apply(builder);
    }
    match &settings.sasl {
        None => {}
        Some(Sasl::Digest { user, password }) => {
            builder = builder.sasl_digest_md5(user.as_str(), password.as_str());
        }
        #[cfg(feature = "kerberos")]
        Some(Sasl::Kerberos { service, host }) => {
            builder = builder.sasl_gssapi(service.as_str(), host.clone());
        }
        #[cfg(not(feature = "kerberos"))]
        Some(Sasl::Kerberos { .. }) => {
            return Err(Failure::usage("Kerberos needs the `kerberos` feature"));
        }
    }
    builder
        .build()
        .map_err(|err| Failure::usage(format!("invalid connection settings: {err}")))
}

/// Starts a framework made by [`build`] and waits for its first session, at
/// most the connection timeout.
///
/// # Errors
/// [`UNAVAILABLE`] when no session could be had in time.
pub(crate) async fn start(framework: &Framework, settings: &Settings) -> Result<(), Failure> {
    let hosts = settings.hosts.as_str();
    framework
        .start()
        .map_err(|err| Failure::zk("cannot start the ZooKeeper client", err))?;
    tracing::debug!(%hosts, "connecting");
    let began = tokio::time::Instant::now();
    if let Err(err) = framework
        .block_until_connected(settings.connection_timeout)
        .await
    {
        // Not closed: closing would wait again for a server that is not
        // there; the process ends soon and takes the client with it.
        return Err(unavailable(settings, &err, began.elapsed()).await);
    }
    tell_session_timeout(framework, settings);
    Ok(())
}

/// How long a name's lookup may take when a failed connection is
/// explained (a name that has not resolved by then is not named).
const LOOKUP_LIMIT: Duration = Duration::from_secs(2);

/// The failure of a first session that could not be had (`err`, after
/// `waited`): what went wrong, with every host of the ensemble whose name
/// does not resolve named (at once when none resolves; otherwise among the
/// reasons at the timeout), and what to check.
async fn unavailable(settings: &Settings, err: &zk_curator::Error, waited: Duration) -> Failure {
    use zk_curator::ConnectFailure;
    let hosts = shown(&settings.hosts);
    let unresolved = unresolved_hosts(&settings.hosts).await;
    let every_host = settings.hosts.split(',').count();
    let do_not_resolve = |names: &[&str]| match names {
        [] => String::new(),
        [one] => format!("{one} does not resolve"),
        many => format!("{} do not resolve", many.join(", ")),
    };
    if !unresolved.is_empty() && unresolved.len() == every_host {
        let names: Vec<&str> = unresolved.iter().map(String::as_str).collect();
        return Failure::new(
            UNAVAILABLE,
            format!(
                "cannot connect to ZooKeeper at {hosts}: no host name of the ensemble \
                 resolves ({}); check --zk / ZK_CONNECT",
                do_not_resolve(&names)
            ),
        );
    }
    let (hint, named) = match err {
        zk_curator::Error::Connect {
            reason: ConnectFailure::ConnectionRefused,
            ..
        } => (" (is the server running there?)", None),
        zk_curator::Error::Connect {
            reason: ConnectFailure::UnresolvedHost(_),
            endpoint,
        } => ("", Some(endpoint.as_str())),
        zk_curator::Error::Connect { .. } => (", --tls-* / ZK_TLS_*, ZK_SASL", None),
        _ => ("", None),
    };
    // Names the error does not give already.
    let others: Vec<&str> = unresolved
        .iter()
        .map(String::as_str)
        .filter(|host| !named.is_some_and(|endpoint| endpoint.contains(host)))
        .collect();
    let also = match others.as_slice() {
        [] => String::new(),
        names => format!("; {}", do_not_resolve(names)),
    };
    // Given up before the connection timeout: a refusal retrying cannot
    // change, from every host.
    let when = if waited < settings.connection_timeout {
        String::new()
    } else {
        format!(
            " within {}",
            humantime::format_duration(settings.connection_timeout)
        )
    };
    Failure::new(
        UNAVAILABLE,
        format!(
            "cannot connect to ZooKeeper at {hosts}{when} ({err}{also}); \
             check --zk / ZK_CONNECT{hint} and --connection-timeout"
        ),
    )
}

/// The hosts of `hosts` (a checked ensemble) whose names do not resolve,
/// each shown as messages show input; addresses are never among them, nor
/// names whose lookup did not end within [`LOOKUP_LIMIT`].
async fn unresolved_hosts(hosts: &str) -> Vec<String> {
    let lookups = hosts.split(',').map(|entry| async move {
        let address = entry
            .trim()
            .trim_start_matches("tcp+tls://")
            .trim_start_matches("tcp://");
        if address.starts_with('[') {
            return None;
        }
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) => (host, port.parse::<u16>().unwrap_or(2181)),
            None => (address, 2181),
        };
        if host.parse::<std::net::IpAddr>().is_ok() {
            return None;
        }
        match tokio::time::timeout(LOOKUP_LIMIT, tokio::net::lookup_host((host, port))).await {
            Ok(Err(err)) => {
                tracing::debug!(%host, %err, "the name does not resolve");
                Some(shown(host).to_string())
            }
            Ok(Ok(_)) | Err(_) => None,
        }
    });
    futures::future::join_all(lookups)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Says on stderr, once, when the server gave the first session another
/// timeout than the one asked for (it keeps it between its own minimum and
/// maximum): how soon a lost connection ends a hold depends on it.
fn tell_session_timeout(framework: &Framework, settings: &Settings) {
    let Some(session) = framework.current_session() else {
        return;
    };
    let given = session.client().session_timeout();
    let asked = settings.session_timeout;
    if given.as_millis() != asked.as_millis() {
        eprintln!(
            "zk-curator: the server gave a session timeout of {}, not the {} asked for",
            show_duration(given),
            show_duration(asked)
        );
    }
}

/// Closes the framework without waiting long for a server that may be gone.
///
/// While connected (and `trusted`: the server answered so far), the close,
/// which ends the session so that its ephemeral nodes go at once, gets
/// [`CLOSE_LIMIT`]; otherwise it is only begun: nobody would confirm it, and
/// the server ends the session by timing out. The process exits right
/// after, taking the client with it.
pub(crate) async fn close(framework: &Framework, trusted: bool) {
    let connected = framework.state().is_some_and(ConnectionState::is_connected);
    let limit = if connected && trusted {
        CLOSE_LIMIT
    } else {
        CLOSE_DISCONNECTED_LIMIT
    };
    if !framework.close_within(limit).await {
        tracing::info!(
            ?limit,
            connected,
            "the close was not confirmed in time; the session ends on the server by timing out"
        );
    }
}
