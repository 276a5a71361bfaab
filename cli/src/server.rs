//! `zk-curator server`: the embedded ZooKeeper-protocol server in the
//! foreground, for local work.
//!
//! With `--tls-cert` and `--tls-key` it also speaks TLS, as ZooKeeper's
//! `secureClientPort`: on a second port (`--secure-port`, a free one by
//! default) or, with `--tls-only`, on its only port. `--tls-client-ca`
//! requires client certificates signed by that CA (mutual TLS). The files
//! are read and checked before anything is bound; a bad one is a usage error.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use zk_curator_server::{EmbeddedServer, TlsConfig};

use crate::duration::parse_duration;
use crate::exit::{out, Failure, OTHER};

/// Options of `server`.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The 127.0.0.1 port to listen on; 0 picks a free one.
    #[arg(long, short, default_value_t = 2181)]
    pub(crate) port: u16,
    /// How often sessions are checked for expiry, e.g. 100ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) tick: Option<Duration>,
    /// Smallest session timeout granted, e.g. 400ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) min_session_timeout: Option<Duration>,
    /// Largest session timeout granted, e.g. 60s.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) max_session_timeout: Option<Duration>,
    /// How often empty containers and expired TTL nodes are looked for, e.g. 100ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) container_check_interval: Option<Duration>,
    /// Allow TTL nodes (ZooKeeper's extendedTypesEnabled; off by default, as in ZooKeeper).
    #[arg(long)]
    pub(crate) extended_types: bool,
    /// List children sorted by name (by default in no particular order, as ZooKeeper).
    #[arg(long)]
    pub(crate) sorted_children: bool,
    /// Serve at most this many connections at once.
    #[arg(long, value_name = "N")]
    pub(crate) max_connections: Option<usize>,
    /// Stop reading a connection's requests while more than this many bytes of its
    /// replies are unsent.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_outstanding_bytes: Option<usize>,
    /// Make clients authenticating with digest USER:PASSWORD super users.
    #[arg(long, value_name = "USER:PASSWORD")]
    pub(crate) super_user: Option<String>,
    /// Also serve TLS, with this certificate chain (PEM, the server's
    /// certificate first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by this CA (PEM):
    /// mutual TLS, like ZooKeeper's ssl.clientAuth=need.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// The 127.0.0.1 port serving TLS beside --port (ZooKeeper's
    /// secureClientPort); 0, the default, picks a free one.
    #[arg(
        long,
        value_name = "PORT",
        requires = "tls_cert",
        conflicts_with = "tls_only"
    )]
    pub(crate) secure_port: Option<u16>,
    /// Serve only TLS, on --port, instead of TLS on a second port.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_only: bool,
}

/// The TLS configuration the options ask for, read and checked now: an
/// unreadable or unusable file is a usage error naming it.
fn tls_config(args: &ServerArgs) -> Result<Option<TlsConfig>, Failure> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let mut tls = TlsConfig::from_pem_files(cert, key).map_err(Failure::usage)?;
    if let Some(ca) = &args.tls_client_ca {
        tls = tls.with_client_ca_pem_file(ca).map_err(Failure::usage)?;
    }
    Ok(Some(tls))
}

/// Serves until SIGINT or SIGTERM, after printing the connect string (and,
/// with TLS, the TLS address as `tcp+tls://127.0.0.1:PORT` on the next line).
pub(crate) async fn run(args: ServerArgs) -> Result<u8, Failure> {
    let tls = tls_config(&args)?;
    let mut builder = EmbeddedServer::builder()
        .port(args.port)
        .extended_types(args.extended_types)
        .sorted_children(args.sorted_children);
    if let Some(tick) = args.tick {
        builder = builder.tick_time(tick);
    }
    if let Some(timeout) = args.min_session_timeout {
        builder = builder.min_session_timeout(timeout);
    }
    if let Some(timeout) = args.max_session_timeout {
        builder = builder.max_session_timeout(timeout);
    }
    if let Some(interval) = args.container_check_interval {
        builder = builder.container_check_interval(interval);
    }
    if let Some(max) = args.max_connections {
        builder = builder.max_connections(max);
    }
    if let Some(bytes) = args.max_outstanding_bytes {
        builder = builder.max_outstanding_bytes(bytes);
    }
    if let Some(credentials) = &args.super_user {
        builder = builder.super_user(credentials);
    }
    if let Some(tls) = tls {
        builder = if args.tls_only {
            builder.tls_only(tls)
        } else {
            builder.secure_client_port(args.secure_port.unwrap_or(0), tls)
        };
    }
    let server = builder
        .start()
        .await
        .map_err(|err| Failure::new(OTHER, format!("cannot start the server: {err}")))?;
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGTERM: {err}")))?;
    // A reader that stopped reading (`| head -1`) does not stop the server.
    // The first line is always a connect string that works: the TLS one
    // alone when only TLS is served; else the plaintext one, and the TLS
    // one on a second line when TLS is served beside it.
    let tls_only = server.secure_address() == Some(server.address());
    if !tls_only {
        let _ = out(server.connect_string());
    }
    if let Some(secure) = server.tls_connect_string() {
        let _ = out(secure);
    }
    let serving = match server.secure_address() {
        None => server.connect_string(),
        Some(secure) if secure == server.address() => format!("{secure} (TLS only)"),
        Some(secure) => format!("{} and TLS on {secure}", server.connect_string()),
    };
    eprintln!(
        "zk-curator: embedded ZooKeeper-protocol server on {serving} (in memory; Ctrl-C stops it)"
    );
    tokio::select! {
        result = tokio::signal::ctrl_c() => {
            result.map_err(|err| Failure::new(OTHER, format!("cannot handle SIGINT: {err}")))?;
        }
        _ = terminate.recv() => {}
    }
    server.stop();
    eprintln!("zk-curator: server stopped");
    Ok(0)
}
