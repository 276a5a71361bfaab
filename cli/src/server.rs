//! `zk-curator server`: the embedded ZooKeeper-protocol server in the
//! foreground, for local work.

use std::time::Duration;

use clap::Args;
use zk_curator_server::EmbeddedServer;

use crate::duration::parse_duration;
use crate::exit::{Failure, OTHER};

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
}

/// Serves until SIGINT or SIGTERM, after printing the connect string.
pub(crate) async fn run(args: ServerArgs) -> Result<u8, Failure> {
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
    let server = builder
        .start()
        .await
        .map_err(|err| Failure::new(OTHER, format!("cannot start the server: {err}")))?;
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGTERM: {err}")))?;
    println!("{}", server.connect_string());
    eprintln!(
        "zk-curator: embedded ZooKeeper-protocol server on {} (in memory; Ctrl-C stops it)",
        server.connect_string()
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
