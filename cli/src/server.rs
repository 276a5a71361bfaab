//! `zk-curator server`: the embedded ZooKeeper-protocol server in the
//! foreground, for local work.

use zk_curator_server::EmbeddedServer;

use crate::exit::{Failure, OTHER};
use crate::ServerArgs;

/// Serves until SIGINT or SIGTERM, after printing the connect string.
pub(crate) async fn run(args: ServerArgs) -> Result<u8, Failure> {
    let server = EmbeddedServer::builder()
        .port(args.port)
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
