//! The client's socket on tokio (zk-curator's `tokio-runtime.patch`), and a
//! thread's own dialer (zk-curator's `thread-dialer.patch`).
//!
//! The connection code reads and writes through the `futures::io` traits;
//! this is a tokio `TcpStream` behind them, so that the socket is driven by
//! the tokio runtime the client runs on (its reactor and its clock) rather
//! than by a reactor thread of its own.
//!
//! A thread may instead dial through a [`Dialer`] of its own
//! ([`set_thread_dialer`]): every connection the client opens from that
//! thread is then the dialer's stream. This is for simulations (a simulated
//! network on one thread, such as turmoil's), where the client must reach
//! simulated hosts; a thread with no dialer (the default) uses tokio's TCP.

use std::cell::RefCell;
use std::fmt;
use std::io::{IoSlice, Result};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::future::BoxFuture;
use futures::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncRead as _, AsyncWrite as _, ReadBuf};

/// A byte stream a [`Dialer`] hands to the client: what it reads and writes
/// is the session's traffic, as over a TCP connection.
pub trait DialedStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> DialedStream for T {}

/// Opens the client's connections on the threads it is set for (see
/// [`set_thread_dialer`]).
pub trait Dialer: Send + Sync {
    /// Connects to `host:port` (as written in the connect string).
    fn dial(&self, host: &str, port: u16) -> BoxFuture<'static, Result<Box<dyn DialedStream>>>;
}

thread_local! {
    static DIALER: RefCell<Option<Arc<dyn Dialer>>> = const { RefCell::new(None) };
}

/// Sets (or, with `None`, removes) the dialer of the calling thread: every
/// connection dialed on this thread afterwards, plain or TLS, is dialed by
/// it instead of by tokio's TCP. Returns the dialer it replaces.
///
/// A client dials in its session's task, on whichever thread its runtime
/// runs that task: on a current-thread runtime, the runtime's thread. This
/// is for simulations that run clients and servers on one thread over a
/// simulated network; a program on real sockets never needs it.
pub fn set_thread_dialer(dialer: Option<Arc<dyn Dialer>>) -> Option<Arc<dyn Dialer>> {
    DIALER.with(|slot| std::mem::replace(&mut *slot.borrow_mut(), dialer))
}

fn thread_dialer() -> Option<Arc<dyn Dialer>> {
    DIALER.with(|slot| slot.borrow().clone())
}

/// Connects to `host:port` the way the client's own connections go from the
/// calling thread: through the thread's [`Dialer`] if it has one, else with
/// tokio's TCP (resolving `host`). For a connection a program makes beside
/// the client, to the same server (a probe of its port), so that it takes
/// the same way: under a simulation, the simulated network.
///
/// # Errors
/// The dialer's error, or tokio's: `host` not resolved, every address
/// refusing or unreachable.
///
/// # Cancel safety
/// Cancel safe: dropped before it returns, it leaves no connection behind
/// (a half-open attempt is dropped with it).
pub async fn dial(host: &str, port: u16) -> Result<Box<dyn DialedStream>> {
    if let Some(dialer) = thread_dialer() {
        return dialer.dial(host, port).await;
    }
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    Ok(Box::new(stream))
}

/// A tokio TCP stream (or a thread dialer's stream), readable and writable
/// through `futures::io`.
pub enum TcpStream {
    Tokio(tokio::net::TcpStream),
    Dialed(Box<dyn DialedStream>),
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpStream::Tokio(stream) => stream.fmt(f),
            TcpStream::Dialed(_) => f.write_str("TcpStream::Dialed"),
        }
    }
}

impl TcpStream {
    /// Resolves `host` and connects to the first address that accepts; or
    /// asks the thread's dialer, when it has one.
    pub async fn connect(addr: (&str, u16)) -> Result<TcpStream> {
        if let Some(dialer) = thread_dialer() {
            return dialer.dial(addr.0, addr.1).await.map(TcpStream::Dialed);
        }
        tokio::net::TcpStream::connect(addr).await.map(TcpStream::Tokio)
    }

    /// Sets `TCP_NODELAY` on a TCP socket; a dialer's stream has no such
    /// option (its dialer decides).
    pub fn set_nodelay(&self, nodelay: bool) -> Result<()> {
        match self {
            TcpStream::Tokio(stream) => stream.set_nodelay(nodelay),
            TcpStream::Dialed(_) => Ok(()),
        }
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        match self.get_mut() {
            TcpStream::Tokio(stream) => ready!(Pin::new(stream).poll_read(cx, &mut buf))?,
            TcpStream::Dialed(stream) => ready!(Pin::new(stream).poll_read(cx, &mut buf))?,
        }
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_write(cx, buf),
            TcpStream::Dialed(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<Result<usize>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            TcpStream::Dialed(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_flush(cx),
            TcpStream::Dialed(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_shutdown(cx),
            TcpStream::Dialed(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}
