//! The connection settings: the command line's connection options (`--zk`,
//! `--tls-*`, `--namespace`, the timeouts) and the credentials in the
//! environment (`ZK_AUTH`, `ZK_SASL`), turned into checked [`Settings`].
//!
//! This is where the promise is kept that every setting is checked before
//! anything is sent: [`Settings::from_args`] refuses a missing or malformed
//! ensemble, a malformed `ZK_AUTH` or `ZK_SASL`, or a TLS file that cannot
//! be found, as a usage error at once, not as a connection timeout later.
//! Nothing here touches the network; what is read is the environment, the
//! metadata of the TLS files and the file `ZK_SASL` may name.
//!
//! The passwords read here go to the framework and nowhere else: the `Debug`
//! output of [`Settings`] and of [`Sasl`] names users, never passwords; no
//! error quotes a password (only the path, when `ZK_SASL` names a file); and
//! [`without_credentials`] keeps both variables from the processes
//! zk-curator starts.

use std::fmt;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use zk_curator::TlsConfig;

use crate::acl::{Identity, NodeAcl};
use crate::duration::parse_duration;
use crate::exit::{shown, Failure};

/// Where and how to connect (every command but `server`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnectArgs {
    /// The ensemble, `host[:port][,host[:port]...]` (port 2181 if left
    /// out; IPv6 as `[addr]:port`); an entry written `tcp+tls://host:port`
    /// uses TLS, `tcp://host:port` plaintext. Credentials come from the
    /// environment only: ZK_AUTH=user:password (digest), ZK_SASL (SASL);
    /// neither is passed on to a command zk-curator runs.
    #[arg(long = "zk", value_name = "HOSTS", env = "ZK_CONNECT")]
    pub(crate) zk: Option<String>,
    /// Connect over TLS (ZooKeeper's secureClientPort), trusting the CA
    /// certificates of this PEM file. Every host uses TLS unless written
    /// `tcp://host:port`.
    #[arg(long, value_name = "FILE", env = "ZK_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// With --tls-ca: present this certificate (PEM) to the servers, for
    /// mutual TLS (ssl.clientAuth=need). Needs --tls-key.
    #[arg(long, value_name = "FILE", env = "ZK_TLS_CERT")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", env = "ZK_TLS_KEY")]
    pub(crate) tls_key: Option<PathBuf>,
    /// A namespace (chroot) every path is relative to.
    #[arg(long, value_name = "PATH")]
    pub(crate) namespace: Option<String>,
    /// The ZooKeeper session timeout asked for. The server keeps it within
    /// its own bounds (by default 2 to 20 ticks: 4s to 40s); when it gives
    /// another, zk-curator says so on stderr.
    #[arg(long, value_name = "D", default_value = "20s", value_parser = parse_duration)]
    pub(crate) session_timeout: Duration,
    /// How long to wait for a connection before giving up (exit 69).
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_duration)]
    pub(crate) connection_timeout: Duration,
}

/// The environment variable holding digest credentials, `user:password`.
/// Never a flag: a flag would show in `ps` and shell history.
pub(crate) const AUTH_ENV: &str = "ZK_AUTH";

/// The environment variable naming the SASL mechanism and its settings:
/// `digest:USER:PASSWORD`, `kerberos[:SERVICE[:HOST]]`, or the path of a
/// file holding one of these (so that the password is in no environment).
pub(crate) const SASL_ENV: &str = "ZK_SASL";

/// The environment variables that may hold credentials zk-curator reads.
/// None of them reaches a process zk-curator starts (the command, its
/// guard): a command that needs a credential is given it by its own means,
/// never by inheriting zk-curator's (it would show in the command's
/// `/proc/PID/environ`, and in everything the command starts).
const CREDENTIAL_ENVS: [&str; 2] = [AUTH_ENV, SASL_ENV];

/// Leaves the credentials zk-curator read out of `command`'s environment
/// (see [`CREDENTIAL_ENVS`]): every process zk-curator starts goes through
/// this.
pub(crate) fn without_credentials(command: &mut std::process::Command) {
    for name in CREDENTIAL_ENVS {
        command.env_remove(name);
    }
}

/// Connection settings, checked; made by [`Settings::from_args`] only. The
/// parent module, which builds and starts the framework, reads the fields it
/// needs; the rest of the CLI sees the methods.
pub(crate) struct Settings {
    pub(super) hosts: String,
    pub(super) auth: Option<(String, String)>,
    pub(super) tls: Option<TlsConfig>,
    pub(super) sasl: Option<Sasl>,
    /// The client certificate's file, named in messages (`--tls-cert`).
    client_cert: Option<PathBuf>,
    /// The ACL of created nodes (`lock`, `elect`); the framework's default
    /// when `None`.
    pub(super) node_acl: Option<NodeAcl>,
    pub(super) namespace: Option<String>,
    pub(super) session_timeout: Duration,
    pub(super) connection_timeout: Duration,
}

impl Settings {
    /// Checks the connection options, `ZK_AUTH` and `ZK_SASL`.
    ///
    /// # Errors
    /// A usage failure when no ensemble is given (naming both `--zk` and
    /// `ZK_CONNECT`), the ensemble is malformed, `ZK_AUTH` is not
    /// `user:password` with both parts non-empty, `ZK_SASL` is malformed,
    /// or the `--tls-*` options are incomplete or name a missing file.
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
                "malformed ZooKeeper ensemble {:?} (--zk / ZK_CONNECT): {why}; \
                 write host[:port][,host[:port]...], e.g. 127.0.0.1:2181",
                shown(hosts)
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
        let tls = tls_config(args)?;
        if tls.is_none() {
            if let Some(entry) = hosts
                .split(',')
                .find(|e| e.trim().starts_with("tcp+tls://"))
            {
                return Err(Failure::usage(format!(
                    "{} asks for TLS: give --tls-ca FILE (or ZK_TLS_CA), the CA certificates \
                     that signed the servers' certificates",
                    shown(entry.trim())
                )));
            }
        }
        let sasl = match std::env::var_os(SASL_ENV) {
            None => None,
            Some(value) => {
                let value = value
                    .into_string()
                    .map_err(|_| Failure::usage(format!("{SASL_ENV} is not valid UTF-8")))?;
                parse_sasl(&value)?
            }
        };
        Ok(Settings {
            hosts,
            auth,
            client_cert: tls.as_ref().and(args.tls_cert.clone()),
            tls,
            sasl,
            node_acl: None,
            namespace: args.namespace.clone(),
            session_timeout: args.session_timeout,
            connection_timeout: args.connection_timeout,
        })
    }

    /// The credentials this session presents, as messages name them.
    pub(crate) fn identity(&self) -> Identity {
        Identity {
            digest_user: self.auth.as_ref().map(|(user, _)| user.clone()),
            sasl_user: match &self.sasl {
                Some(Sasl::Digest { user, .. }) => Some(user.clone()),
                _ => None,
            },
            kerberos: matches!(self.sasl, Some(Sasl::Kerberos { .. })),
            certificate: self
                .client_cert
                .as_ref()
                .map(|file| file.display().to_string()),
        }
    }

    /// Gives every node the framework creates `acl`.
    pub(crate) fn set_node_acl(&mut self, acl: NodeAcl) {
        self.node_acl = Some(acl);
    }
}

impl fmt::Debug for Settings {
    /// Every field but the password of `ZK_AUTH` (the one of `ZK_SASL` is
    /// left out by [`Sasl`]'s own).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Taken apart whole, so that a new field cannot be forgotten here.
        let Settings {
            hosts,
            auth,
            tls,
            sasl,
            client_cert,
            node_acl,
            namespace,
            session_timeout,
            connection_timeout,
        } = self;
        f.debug_struct("Settings")
            .field("hosts", hosts)
            .field("auth_user", &auth.as_ref().map(|(user, _)| user))
            .field("tls", tls)
            .field("sasl", sasl)
            .field("client_cert", client_cert)
            .field("node_acl", node_acl)
            .field("namespace", namespace)
            .field("session_timeout", session_timeout)
            .field("connection_timeout", connection_timeout)
            .finish()
    }
}

/// The TLS settings of `--tls-*`, their files checked to be there now (the
/// framework reads them when it is built).
fn tls_config(args: &ConnectArgs) -> Result<Option<TlsConfig>, Failure> {
    let Some(ca) = &args.tls_ca else {
        if args.tls_cert.is_some() || args.tls_key.is_some() {
            return Err(Failure::usage(
                "--tls-cert and --tls-key (ZK_TLS_CERT, ZK_TLS_KEY) need --tls-ca (ZK_TLS_CA)",
            ));
        }
        return Ok(None);
    };
    let readable = |what: &str, path: &Path| {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|err| Failure::usage(format!("{what} {}: {err}", path.display())))
    };
    readable("--tls-ca", ca)?;
    let mut config = TlsConfig::new().ca_file(ca);
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            readable("--tls-cert", cert)?;
            readable("--tls-key", key)?;
            config = config.client_cert_files(cert, key);
        }
        (None, None) => {}
        _ => {
            return Err(Failure::usage(
                "--tls-cert and --tls-key (ZK_TLS_CERT, ZK_TLS_KEY) go together",
            ))
        }
    }
    Ok(Some(config))
}

/// A SASL mechanism named by `ZK_SASL`.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Sasl {
    Digest {
        user: String,
        password: String,
    },
    Kerberos {
        service: String,
        host: Option<String>,
    },
}

impl fmt::Debug for Sasl {
    /// The user, never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sasl::Digest { user, .. } => write!(f, "Digest {{ user: {user:?}, .. }}"),
            Sasl::Kerberos { service, host } => {
                write!(f, "Kerberos {{ service: {service:?}, host: {host:?} }}")
            }
        }
    }
}

/// `digest:USER:PASSWORD`, `kerberos[:SERVICE[:HOST]]`, or the path of a
/// file (absolute, or starting with `./`) holding one of these on its first
/// line; an empty variable means none.
fn parse_sasl(value: &str) -> Result<Option<Sasl>, Failure> {
    let malformed = || {
        Failure::usage(format!(
            "{SASL_ENV} must be digest:USER:PASSWORD, kerberos[:SERVICE[:HOST]], \
             or the path of a file holding one of these"
        ))
    };
    if value.is_empty() {
        return Ok(None);
    }
    let spec = if value.starts_with('/') || value.starts_with("./") {
        let text = std::fs::read_to_string(value)
            .map_err(|err| Failure::usage(format!("{SASL_ENV} file {value}: {err}")))?;
        text.lines()
            .next()
            .unwrap_or_default()
            .trim_end()
            .to_owned()
    } else {
        value.to_owned()
    };
    let (mechanism, rest) = spec.split_once(':').unwrap_or((spec.as_str(), ""));
    match mechanism {
        "digest" => match rest.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                Ok(Some(Sasl::Digest {
                    user: user.to_owned(),
                    password: password.to_owned(),
                }))
            }
            _ => Err(malformed()),
        },
        "kerberos" | "gssapi" => {
            let mut parts = rest.splitn(2, ':');
            let service = parts
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("zookeeper");
            let host = parts.next().filter(|h| !h.is_empty()).map(str::to_owned);
            if !cfg!(feature = "kerberos") {
                return Err(Failure::usage(format!(
                    "{SASL_ENV} asks for Kerberos, but this zk-curator was built without \
                     its `kerberos` feature (cargo install zk-curator-cli --features kerberos)"
                )));
            }
            Ok(Some(Sasl::Kerberos {
                service: service.to_owned(),
                host,
            }))
        }
        _ => Err(malformed()),
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
    for entry in hosts.split(',') {
        let entry = entry.trim();
        let entry = entry
            .strip_prefix("tcp+tls://")
            .or_else(|| entry.strip_prefix("tcp://"))
            .unwrap_or(entry);
        if let Some((scheme, _)) = entry.split_once("://") {
            return Err(format!(
                "{}:// is not a scheme zk-curator knows: an entry is host:port, \
                 tcp://host:port (plaintext) or tcp+tls://host:port (TLS)",
                shown(scheme)
            ));
        }
        if entry.contains('/') {
            return Err("a chroot does not go in the ensemble: use --namespace".into());
        }
        if entry.is_empty() {
            return Err("an empty entry".into());
        }
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let Some((address, after)) = rest.split_once(']') else {
                return Err(format!("{:?} has no closing `]`", shown(entry)));
            };
            if address.parse::<Ipv6Addr>().is_err() {
                return Err(format!("{:?} is not an IPv6 address", shown(address)));
            }
            match after {
                "" => (address, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (address, Some(port)),
                    None => return Err(format!("{:?}: expected `:port` after `]`", shown(entry))),
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
                _ => return Err(format!("{:?} is not a port (1 to 65535)", shown(port))),
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
            "{:?} is not a host name or address (an IPv6 address goes in brackets)",
            shown(host)
        ));
    }
    Ok(())
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
            "tcp+tls://a:2281,tcp://b:2181",
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
            "tcp://a:1/x",
            "http://a:1",
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

    #[test]
    fn sasl_specs_are_checked() {
        assert_eq!(parse_sasl("").unwrap(), None);
        assert_eq!(
            parse_sasl("digest:u:p:q").unwrap(),
            Some(Sasl::Digest {
                user: "u".into(),
                password: "p:q".into()
            })
        );
        for bad in [
            "digest",
            "digest:u",
            "digest::p",
            "digest:u:",
            "plain:u:p",
            "/no/such/file",
        ] {
            assert!(parse_sasl(bad).is_err(), "{bad} was taken");
        }
        let printed = format!("{:?}", parse_sasl("digest:u:secret").unwrap());
        assert!(!printed.contains("secret"), "{printed}");
    }

    #[test]
    fn sasl_can_come_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sasl");
        std::fs::write(&file, "digest:alice:pw\n").unwrap();
        assert_eq!(
            parse_sasl(file.to_str().unwrap()).unwrap(),
            Some(Sasl::Digest {
                user: "alice".into(),
                password: "pw".into()
            })
        );
    }

    #[test]
    fn debug_output_names_no_password() {
        let settings = Settings {
            hosts: "a:2181".into(),
            auth: Some(("alice".into(), "digest-secret".into())),
            tls: None,
            sasl: Some(Sasl::Digest {
                user: "bob".into(),
                password: "sasl-secret".into(),
            }),
            client_cert: None,
            node_acl: None,
            namespace: None,
            session_timeout: Duration::from_secs(20),
            connection_timeout: Duration::from_secs(15),
        };
        let printed = format!("{settings:?}");
        assert!(
            printed.contains("alice") && printed.contains("bob"),
            "{printed}"
        );
        assert!(!printed.contains("secret"), "{printed}");
    }
}
