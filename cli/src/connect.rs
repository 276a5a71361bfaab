//! Building and connecting the [`Framework`] from the command line's
//! connection options and the environment.

use zk_curator::Framework;

use crate::exit::{Failure, UNAVAILABLE};
use crate::ConnectArgs;

/// The environment variable holding digest credentials, `user:password`.
/// Never a flag: a flag would show in `ps` and shell history.
pub(crate) const AUTH_ENV: &str = "ZK_AUTH";

/// Starts a framework and waits for its first session, at most the
/// connection timeout.
///
/// # Errors
/// A usage failure when no ensemble is given (naming both `--zk` and
/// `ZK_CONNECT`) or a setting is malformed; [`UNAVAILABLE`] when no session
/// could be had in time.
pub(crate) async fn connect(args: &ConnectArgs, label: Option<&str>) -> Result<Framework, Failure> {
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
    let mut builder = Framework::builder()
        .connect_string(hosts)
        .session_timeout(args.session_timeout)
        .connection_timeout(args.connection_timeout);
    // Lock nodes carry host, pid and this label (the framework's holder
    // identity), which `locks` shows.
    if let Some(label) = label {
        builder = builder.identity_label(label);
    }
    if let Some(namespace) = &args.namespace {
        builder = builder.namespace(namespace.as_str());
    }
    if let Some(auth) = std::env::var_os(AUTH_ENV) {
        let auth = auth
            .into_string()
            .map_err(|_| Failure::usage(format!("{AUTH_ENV} is not valid UTF-8")))?;
        if !auth.is_empty() {
            let Some((user, password)) = auth.split_once(':') else {
                return Err(Failure::usage(format!(
                    "{AUTH_ENV} must be user:password (digest credentials)"
                )));
            };
            builder = builder.digest_auth(user, password);
        }
    }
    let framework = builder
        .build()
        .map_err(|err| Failure::usage(format!("invalid connection settings: {err}")))?;
    framework
        .start()
        .map_err(|err| Failure::zk("cannot start the ZooKeeper client", err))?;
    tracing::debug!(%hosts, "connecting");
    if let Err(err) = framework
        .block_until_connected(args.connection_timeout)
        .await
    {
        // Not closed: closing would wait again for a server that is not
        // there; the process ends soon and takes the client with it.
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "cannot connect to ZooKeeper at {hosts} within {} ({err}); \
                 check --zk / ZK_CONNECT and --connection-timeout",
                humantime::format_duration(args.connection_timeout)
            ),
        ));
    }
    Ok(framework)
}
