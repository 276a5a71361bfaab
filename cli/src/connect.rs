//! Building, connecting and closing the [`Framework`] from the command
//! line's connection options and the environment.
//!
//! Every setting is checked before anything is sent: a malformed ensemble or
//! `ZK_AUTH` is a usage error at once, not a connection timeout later.

use std::net::Ipv6Addr;
use std::time::Duration;

use clap::Args;
use zk_curator::{ConnectionState, Framework};

use crate::duration::parse_duration;
use crate::exit::{Failure, UNAVAILABLE};

/// Where and how to connect (every command but `server`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnectArgs {
    /// The ensemble, `host[:port][,host[:port]...]` (port 2181 if left
    /// out; IPv6 as `[addr]:port`). Digest credentials come from the
    /// environment only: ZK_AUTH=user:password.
    #[arg(long = "zk", value_name = "HOSTS", env = "ZK_CONNECT")]
    pub(crate) zk: Option<String>,
    /// A namespace (chroot) every path is relative to.
    #[arg(long, value_name = "PATH")]
    pub(crate) namespace: Option<String>,
    /// The ZooKeeper session timeout asked for.
    #[arg(long, value_name = "D", default_value = "20s", value_parser = parse_duration)]
    pub(crate) session_timeout: Duration,
    /// How long to wait for a connection before giving up (exit 69).
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_duration)]
    pub(crate) connection_timeout: Duration,
}

/// The environment variable holding digest credentials, `user:password`.
/// Never a flag: a flag would show in `ps` and shell history.
pub(crate) const AUTH_ENV: &str = "ZK_AUTH";

/// How long closing may wait for the server to confirm the session's end
/// while connected (it normally takes a round trip).
const CLOSE_LIMIT: Duration = Duration::from_secs(2);
/// How long closing may wait while not connected: only long enough to start
/// it (nobody is there to confirm; the session ends on the server by timing
/// out).
const CLOSE_DISCONNECTED_LIMIT: Duration = Duration::from_millis(100);

/// Connection settings, checked.
#[derive(Debug)]
pub(crate) struct Settings {
    hosts: String,
    auth: Option<(String, String)>,
    namespace: Option<String>,
    session_timeout: Duration,
    connection_timeout: Duration,
}

impl Settings {
    /// Checks the connection options and `ZK_AUTH`.
    ///
    /// # Errors
    /// A usage failure when no ensemble is given (naming both `--zk` and
    /// `ZK_CONNECT`), the ensemble is malformed, or `ZK_AUTH` is not
    /// `user:password` with both parts non-empty.
    pub(crate) fn from_args(args: &ConnectArgs) -> Result<Settings, Failure> {
        let Some(hosts) = args
            .zk
            .as_deref()
            .map(str::trim)
            .filter(|hosts| !hosts.is_empty())
        else {
            return Err(Failure::usage(
                "no ZooKeeper ensemble given: pass --zk HOST:PORT[,HOST:PORT...] or set ZK_CONNECT",
            ));
        };
        let hosts = check_hosts(hosts).map_err(|why| {
            Failure::usage(format!(
                "malformed ZooKeeper ensemble {hosts:?} (--zk / ZK_CONNECT): {why}; \
                 write host[:port][,host[:port]...], e.g. 127.0.0.1:2181"
            ))
        })?;
        let auth = match std::env::var_os(AUTH_ENV) {
            None => None,
            Some(auth) => {
                let auth = auth
                    .into_string()
                    .map_err(|_| Failure::usage(format!("{AUTH_ENV} is not valid UTF-8")))?;
                parse_auth(&auth)?
            }
        };
        Ok(Settings {
            hosts,
            auth,
            namespace: args.namespace.clone(),
            session_timeout: args.session_timeout,
            connection_timeout: args.connection_timeout,
        })
    }
}

/// `user:password`, both non-empty; an empty variable means no credentials.
fn parse_auth(auth: &str) -> Result<Option<(String, String)>, Failure> {
    if auth.is_empty() {
        return Ok(None);
    }
    match auth.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => {
            Ok(Some((user.to_owned(), password.to_owned())))
        }
        Some(_) => Err(Failure::usage(format!(
            "{AUTH_ENV} must be user:password with neither part empty (digest credentials)"
        ))),
        None => Err(Failure::usage(format!(
            "{AUTH_ENV} must be user:password (digest credentials)"
        ))),
    }
}

/// Checks `host[:port][,host[:port]...]`: hosts are names (letters, digits,
/// `-`, `_`, `.`), IPv4 addresses or bracketed IPv6 addresses; ports are
/// 1 to 65535. Returns the entries without the blanks around them.
fn check_hosts(hosts: &str) -> Result<String, String> {
    if hosts.contains('/') {
        return Err("a chroot does not go in the ensemble: use --namespace".into());
    }
    for entry in hosts.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err("an empty entry".into());
        }
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let Some((address, after)) = rest.split_once(']') else {
                return Err(format!("{entry:?} has no closing `]`"));
            };
            if address.parse::<Ipv6Addr>().is_err() {
                return Err(format!("{address:?} is not an IPv6 address"));
            }
            match after {
                "" => (address, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (address, Some(port)),
                    None => return Err(format!("{entry:?}: expected `:port` after `]`")),
                },
            }
        } else {
            match entry.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (entry, None),
            }
        };
        if !entry.starts_with('[') {
            check_host_name(host)?;
        }
        if let Some(port) = port {
            match port.parse::<u16>() {
                Ok(port) if port > 0 => {}
                _ => return Err(format!("{port:?} is not a port (1 to 65535)")),
            }
        }
    }
    let entries: Vec<&str> = hosts.split(',').map(str::trim).collect();
    Ok(entries.join(","))
}

fn check_host_name(host: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if host.is_empty() {
        return Err("a host is empty".into());
    }
    if !host.chars().all(allowed) || host.starts_with(['-', '.']) || host.contains("..") {
        return Err(format!(
            "{host:?} is not a host name or address (an IPv6 address goes in brackets)"
        ));
    }
    Ok(())
}

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
    if let Err(err) = framework
        .block_until_connected(settings.connection_timeout)
        .await
    {
        // Not closed: closing would wait again for a server that is not
        // there; the process ends soon and takes the client with it.
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "cannot connect to ZooKeeper at {hosts} within {} ({err}); \
                 check --zk / ZK_CONNECT and --connection-timeout",
                humantime::format_duration(settings.connection_timeout)
            ),
        ));
    }
    Ok(())
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
    if tokio::time::timeout(limit, framework.close())
        .await
        .is_err()
    {
        tracing::info!(
            ?limit,
            connected,
            "the close was not confirmed in time; the session ends on the server by timing out"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_checked() {
        for good in [
            "127.0.0.1:2181",
            "localhost",
            "zk-1.example:2181,zk_2:2182, 10.0.0.3",
            "[::1]:2181",
            "[fe80::1]",
        ] {
            assert!(check_hosts(good).is_ok(), "{good}");
        }
        for bad in [
            "not a host",
            "127.0.0.1:notaport",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "a:2181,",
            ",a",
            ":2181",
            "[::1",
            "[nope]:1",
            "[::1]2181",
            "host:",
            "-x",
            "a..b",
            "tcp://a:1",
            "a:2181/chroot",
        ] {
            assert!(check_hosts(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn blanks_around_entries_are_dropped() {
        assert_eq!(check_hosts(" a:1 , b ").unwrap(), "a:1,b");
    }

    #[test]
    fn auth_needs_both_parts() {
        assert_eq!(parse_auth("").unwrap(), None);
        assert_eq!(
            parse_auth("u:p:q").unwrap(),
            Some(("u".into(), "p:q".into()))
        );
        for bad in [":", "user:", ":pw", "nocolon"] {
            assert!(parse_auth(bad).is_err(), "{bad} was taken");
        }
    }
}
