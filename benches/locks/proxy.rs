//! A loopback TCP proxy that delays every byte by a fixed time in each
//! direction, as a network would: data keeps flowing (a pipelined request is
//! not held back by the one before it), it just arrives `delay` later.
//!
//! Used to show where round trips cost: zk-curator's uncontended acquire is
//! one round trip (create and list sent back to back), Curator's two or more.
//! The proxy runs on this process's tokio timer, whose granularity is 1 ms,
//! so the bench measures the round trip the proxy really adds and prints it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::BoxError;

/// The proxy; its accept loop and every connection stop when it is dropped.
pub(crate) struct DelayProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    pub(crate) async fn start(upstream: SocketAddr, delay: Duration) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            // Dropping the set (when this task is aborted) aborts every pump.
            let mut connections = JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let mut pumps = JoinSet::new();
                    pumps.spawn(pump(client_read, server_write, delay));
                    pumps.spawn(pump(server_read, client_write, delay));
                    // One direction closing closes the connection.
                    let _ = pumps.join_next().await;
                });
                // Reap finished connections so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(DelayProxy { addr, task })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `reader` to `writer`, each chunk `delay` after it was read, in order.
async fn pump(
    mut reader: impl AsyncReadExt + Unpin + Send + 'static,
    mut writer: impl AsyncWriteExt + Unpin,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if writer.write_all(&chunk).await.is_err() {
            break;
        }
    }
    read.abort();
    let _ = writer.shutdown().await;
}
