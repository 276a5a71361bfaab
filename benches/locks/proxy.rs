//! A loopback TCP proxy that delays every byte by a fixed time in each
//! direction, as a network would: data keeps flowing (a pipelined request is
//! not held back by the one before it), it just arrives `delay` later.
//!
//! Used to show where round trips cost: zk-curator's uncontended acquire is
//! one round trip (create and list sent back to back), Curator's two.
//! It runs on plain OS threads (`std::thread::sleep` is precise to tens of
//! microseconds on Linux, tokio's timer only to a millisecond), and the
//! bench measures the round trip it really adds and prints it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::limits::BoxError;

/// The proxy; dropping it stops the accept loop and closes every connection.
pub(crate) struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Both ends of every connection, to shut them down on drop.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl DelayProxy {
    pub(crate) fn start(upstream: SocketAddr, delay: Duration) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let accept = {
            let (stop, sockets) = (stop.clone(), sockets.clone());
            thread::Builder::new()
                .name("delay-proxy".to_owned())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match listener.accept() {
                            Ok((client, _)) => {
                                if let Err(err) = connect(client, upstream, delay, &sockets) {
                                    eprintln!("delay proxy: {err}");
                                }
                            }
                            Err(_) => thread::sleep(Duration::from_millis(5)),
                        }
                    }
                })?
        };
        Ok(DelayProxy {
            addr,
            stop,
            sockets,
            accept: Some(accept),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for socket in self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn connect(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Duration,
    sockets: &Mutex<Vec<TcpStream>>,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut all = sockets.lock().unwrap_or_else(|e| e.into_inner());
        all.push(client.try_clone()?);
        all.push(server.try_clone()?);
    }
    pump(client.try_clone()?, server.try_clone()?, delay)?;
    pump(server, client, delay)?;
    Ok(())
}

/// Copies `from` to `to`, each chunk `delay` after it was read, in order:
/// one thread reads, one writes when a chunk is due.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::Builder::new()
        .name("delay-proxy-read".to_owned())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match from.read(&mut buf) {
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
        })?;
    thread::Builder::new()
        .name("delay-proxy-write".to_owned())
        .spawn(move || {
            // The channel closes when the reader stops.
            while let Ok((due, chunk)) = rx.recv() {
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}
