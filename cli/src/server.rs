//! `zk-curator server`: the embedded ZooKeeper-protocol server in the
//! foreground, for local work.

use zk_curator_server::EmbeddedServer;

use crate::exit::{Failure, OTHER};
use crate::ServerArgs;

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
